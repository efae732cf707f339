"""The summary's verdict and targets, read from the recorded runs: ratios only within one run,
every target with its margin and the spread of its repeats, the datasheet beside the ceilings."""

from __future__ import annotations

import importlib
import re

import pytest

from kernelbook import summary

STUDIES = ["lenet", "mlp", "vgg"]


def study_of(name):
    return importlib.import_module(f"kernelbook.{name}").STUDY


@pytest.mark.parametrize("name", STUDIES)
def test_the_verdict_draws_a_ratio_only_within_the_run_that_timed_the_library(name):
    from kernelbook import results
    from kernelbook.evidence.vendor import part

    study = study_of(name)
    frame = summary.verdict_frame(study)
    assert not frame.empty
    timed_library = {run: results.load_run(run).has_part(part(study)) for run in set(frame["Run"])}
    for _, row in frame.iterrows():
        if not timed_library[row["Run"]]:   # the step's run never timed the library: no ratio
            assert row["Library / step"] == "–" and row["Library, same run"] == "not timed in this run", row.to_dict()
    ratios = frame[frame["Library / step"] != "–"]
    assert not ratios.empty, "no row compares a step with the library of its own run"
    assert all(timed_library[run] for run in ratios["Run"])
    for _, row in frame.iterrows():   # every row says how its repeats spread and how near its floor it is
        assert re.match(r"[\d.]+ (ms|µs) – [\d.]+ (ms|µs)", row["Spread of its repeats"]), row["Spread of its repeats"]
        percent = float(row["% of its floor"].split()[0])
        assert 0 < percent <= 100


def test_a_precision_is_compared_with_the_library_of_that_precision():
    frame = summary.verdict_frame(study_of("vgg"))
    mine = frame[frame["Library / step"] != "–"]
    for _, row in mine.iterrows():
        word = {"FP32-accurate": "fp32", "TF32": "tf32", "FP16": "fp16"}[row["Precision"]]
        assert row["Library, same run"].split()[0].startswith(f"cudnn-{word}"), row.to_dict()
    assert summary.precision_of("fp32*0.36") == summary.precision_of("3xtf32") == "fp32"
    assert summary.precision_of("fp16x2") == "fp16"


@pytest.mark.parametrize("name", STUDIES)
def test_every_target_has_its_margin_and_spread(name):
    frame = summary.target_frame(study_of(name))
    assert {"Margin", "Spread of its repeats", "Verdict"} <= set(frame.columns)
    for _, row in frame.iterrows():
        if row["Verdict"].startswith(("met", "missed")):
            assert re.match(r"[\d.]+ % (under|over|short)", row["Margin"]), row.to_dict()
            assert " – " in row["Spread of its repeats"]
    assert not any("another run: no ratio" in str(v) for v in frame.to_numpy().ravel())


def test_the_lenet_ratio_target_has_its_own_row_judged_in_one_run():
    frame = summary.target_frame(study_of("lenet"))
    row = frame[frame["Target"].str.contains("≥ 13× cudnn-fp32")]
    assert len(row) == 1
    row = row.iloc[0]
    assert row["Limit"] == "≥ 13×"
    ratio = float(row["Its time"].split("×")[0])
    assert row["Verdict"] == ("met" if ratio >= 13 else "missed")


def test_a_margin_and_a_limit_inside_the_spread():
    assert summary.target_margin(0.9, 1.0) == "10.0 % under" and summary.target_margin(1.1, 1.0) == "10.0 % over"
    recs = [{"min": 0.4, "max": 0.6}, {"min": 0.5, "max": 0.55}]
    assert summary.within_spread(recs, 1.0) and not summary.within_spread(recs, 1.2)
    assert summary.spread(recs[0], recs[1:]) == "900.0 µs – 1.150 ms"
    assert summary.spread({"min": None, "max": 1.0}) == "not recorded"


def test_the_device_limits_show_the_datasheet_beside_each_device_measured(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    summary.device_limits()
    assert shown
    html = shown[0].to_html()
    assert "H100 SXM column" in html and "Measured / datasheet" in html and "ceilings of run" in html


def test_the_device_limits_read_the_fullest_run_of_each_device_s_newest_commit(monkeypatch):
    """Two runs of one commit measured the H200's ceilings (one with profiles, one without): the
    table reads the fuller one, the run the book's H200 pages read, not merely the newest."""
    import re

    from kernelbook import results
    from kernelbook.verdict import ceilings_for

    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    summary.device_limits()
    named = [re.search(r"ceilings of run (\S+)\.", t.to_html()).group(1) for t in shown]
    runs = results.list_runs()
    for run_id in named:
        chosen = results.load_run(run_id)
        same = [r for r in runs if r.device == chosen.device and ceilings_for(r.run_id).session is not None
                and ceilings_for(r.run_id).session.run.run_id == r.run_id]
        assert chosen.commit == same[-1].commit
        assert all(len(r.part_names()) <= len(chosen.part_names()) for r in same if r.commit == chosen.commit)


def test_the_device_limits_of_the_summary_come_from_one_of_the_book_s_runs_of_that_device(monkeypatch):
    """Given the studies, each device's ceilings are those of a run its pages read (the fullest of
    those), not of another run of the same commit that no page shows."""
    import re

    from kernelbook.bookrecording import book_run
    from kernelbook.lenet import STUDY as LENET
    from kernelbook.mlp import STUDY as MLP
    from kernelbook.vgg import STUDY as VGG

    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    summary.device_limits(LENET, MLP, VGG)
    assert shown
    for table in shown:
        html = table.to_html()
        device, run_id = re.search(r"(NVIDIA [^,<]+), ceilings of run (\S+)\.", html).groups()
        books = {run.run_id for run in (book_run(study, device) for study in (LENET, MLP, VGG)) if run is not None}
        assert not books or run_id in books


def test_the_devices_table_reads_each_device_s_book_run_alone():
    from kernelbook import results
    from kernelbook.bookrecording import book_run
    from kernelbook.vgg import STUDY

    caption = summary.devices(STUDY).to_html().split("<caption>")[1].split("</caption>")[0]
    books = [book_run(STUDY, device) for device in ("H100", "H200")]
    assert None not in books and all(run.run_id in caption for run in books)
    ids = {run.run_id for run in books}
    others = [r.run_id for r in results.list_runs() if r.run_id not in ids and r.has_part(STUDY.part("hopper-split"))]
    assert others and not any(run_id in caption for run_id in others)   # newer or older, not read here


def test_the_summary_banner_names_every_run_its_tables_read_the_other_gpu_s_included():
    from kernelbook.bookrecording import book_run, recorded_devices
    from kernelbook.lenet import STUDY as LENET
    from kernelbook.mlp import STUDY as MLP
    from kernelbook.vgg import STUDY as VGG

    text = summary.banner(LENET, MLP, VGG).data
    for study in (LENET, MLP, VGG):
        for name in recorded_devices(study):
            run = book_run(study, name)
            if run is not None:
                assert run.run_id in text
