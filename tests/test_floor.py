"""A floor is a limit: no recorded step runs under it, and it stands on the datasheet's peaks
where the measured ceilings (one program's achieved rate) fall short of them."""

from __future__ import annotations

import importlib

import pytest

from kernelbook.evidence import datasheet, floor
from kernelbook.evidence.ceilings import ceilings_for
from kernelbook.stepdata import load_recorded

H100 = "NVIDIA H100 80GB HBM3"


class Shape:
    flops, min_bytes = 2e12, 1e9


def test_a_measured_rate_below_the_datasheet_gives_way_to_the_peak():
    measured = {"copy_gbs": 2900.0, "read_gbs": 3100.0, "fp32_gflops": 50_000.0, "tf32_tensor_gflops": 380_000.0,
                "fp16_tensor_gflops": 700_000.0}
    # no datasheet: the measured rates (bandwidth: the faster of copy and read)
    assert floor.floor_ms(Shape, measured, "tf32") == pytest.approx(max(1e9 / 3100e9, 2e12 / 380_000e9) * 1e3)
    # the H100's datasheet: 494.5 TFLOP/s TF32 dense and 3.35 TB/s, both above what was measured
    assert floor.floor_ms(Shape, measured, "tf32", device=H100) == pytest.approx(max(1e9 / 3350e9, 2e12 / 494_500e9) * 1e3)
    # a measured rate above the datasheet's (an unexpected clock) is the limit then
    fast = {**measured, "fp32_gflops": 70_000.0}
    assert floor.floor_ms(Shape, fast, "fp32", device={"name": H100}) == pytest.approx(2e12 / 70_000e9 * 1e3)
    assert datasheet.limit("copy_gbs", {"read_gbs": 3100.0}, None) == (3100.0, "measured read")


def test_every_device_the_book_is_recorded_on_has_its_datasheet():
    from kernelbook import results

    devices = {run.device for run in results.list_runs()}
    assert devices, "no recorded run"
    for name in devices:
        sheet = datasheet.datasheet_for(name)
        assert sheet is not None, f"{name}: add its datasheet peaks to kernelbook/evidence/datasheet.py"
        assert set(sheet.peaks) == set(datasheet.PEAK_TITLES) and sheet.source.startswith("NVIDIA")
    assert datasheet.datasheet_for("NVIDIA H200").model == "H200 SXM"
    assert datasheet.datasheet_for("NVIDIA GeForce RTX 4090") is None


def test_the_peaks_table_names_its_source_and_what_the_floor_uses():
    html = datasheet.peaks_table({"copy_gbs": 2900.0, "tf32_tensor_gflops": 380_000.0}, H100).to_html()
    assert "H100 SXM column" in html and "494,500 GFLOP/s" in html and "datasheet: H100 SXM" in html
    assert "2,900" in html and "77 %" in html   # measured / datasheet for the TF32 rate
    bare = datasheet.peaks_table({"copy_gbs": 900.0}, "NVIDIA GeForce RTX 4090").to_html()
    assert "No datasheet is held" in bare and "900 GB/s (measured copy)" in bare


def recorded_times():
    out = []
    for name in ("lenet", "mlp", "vgg"):
        study = importlib.import_module(f"kernelbook.{name}").STUDY
        for slug in study.steps.slugs():
            out.append(pytest.param(study, slug, id=f"{name}-{slug}"))
    return out


@pytest.mark.parametrize("study, slug", recorded_times())
def test_no_recorded_step_is_above_100_percent_of_its_floor(study, slug):
    """Every time of the step's newest recording, every case and size, against its floor from the
    ceilings of its run: a step above 100 % means a floor that is no limit (a wrong unit, a
    wrong operation count, or a rate that a kernel can beat)."""
    chapter = load_recorded(study, slug)
    if chapter is None or not chapter.correct:
        pytest.skip(f"{slug} is not recorded, or failed its checks")
    found = ceilings_for(chapter.session.run.run_id)
    checked = 0
    for r in chapter.records:
        if r["metric"] != study.time_metric or r["value"] is None or r["layer"] not in study.cases:
            continue
        limit = floor.floor_ms(study.problem(r["layer"], r["size"]), found, floor.step_math(chapter, r["layer"]))
        assert limit is not None, f"{slug}: no ceilings recorded for run {chapter.session.run.run_id}"
        assert r["value"] >= limit, (f"{study.name} {slug} {r['layer']} at size {r['size']}: {r['value']} ms is "
                                     f"{limit / r['value'] * 100:.1f} % of its floor {limit} ms")
        checked += 1
    assert checked, f"{slug}: no time recorded"


def test_a_step_above_the_measured_tensor_roof_is_told_apart_from_one_above_the_datasheet(monkeypatch):
    """The roofline's roofs are the measured ceilings; a tensor-core step above cuBLAS's measured
    rate but under the datasheet's peak is said to have beaten one program's rate, not the device."""
    import pandas as pd

    from kernelbook.evidence import roofline

    monkeypatch.setattr(roofline, "device_of", lambda ceilings: H100)
    row = {"layer": "B1", "batch": 1, "flops": 1.0, "op_time_ms": 1.0, "intensity": 500.0, "bytes": 1.0,
           "bytes_source": "dram (ncu)", "provenance": "", "replayed": True, "run_id": "r"}
    frame = pd.DataFrame([{**row, "number": "11", "step": "hopper-tf32", "gflops": 400_000.0},
                          {**row, "number": "12", "step": "other-tf32", "gflops": 600_000.0}])
    measured = {"copy_gbs": 3000.0, "tf32_tensor_gflops": 380_000.0, "fp16_tensor_gflops": 770_000.0,
                "fp32_gflops": 60_000.0}
    notes = roofline.above_roofs(frame, measured, {"hopper-tf32": "tf32", "other-tf32": "tf32"})
    assert len(notes) == 2
    assert "a rate a kernel can beat" in notes[0] and "494,500" in notes[0]
    assert "a rate a kernel can beat" not in notes[1]   # above the datasheet too: the FLOP count's note


def test_a_step_that_routes_by_gpu_is_judged_as_its_recording_ran(no_gpu):
    """VGG's final runs the faster of steps 13 and 14 (Hopper's path) on a Hopper GPU and Winograd
    elsewhere: a replayed chapter's unit (its floor, its precision) is the one its recording's
    device used, never this machine's."""
    import copy

    from kernelbook.bookrun import load_recorded
    from kernelbook.evidence.floor import step_math
    from kernelbook.vgg import STUDY

    chapter = load_recorded(STUDY, "final")
    assert chapter.session.run.manifest["device"]["compute_capability"] == "9.0"
    from kernelbook.vgg.final import recorded_faster

    taken = recorded_faster([STUDY.impl("hopper-3xtf32"), STUDY.impl("hopper-split")], chapter.session.run.device)
    assert step_math(chapter, "B1") == taken.math
    from kernelbook.evidence import compiler
    from kernelbook.session import replayed

    built = replayed(STUDY.part("final", "compiler"), "vgg", chapter.session.run.run_id).records
    assert compiler.launched(chapter, built)   # the compiler's table shows the kernels it launched there
    older = copy.copy(chapter)
    older.recording = copy.copy(chapter.recording)
    older.recording.session = copy.copy(chapter.session)
    older.recording.session.run = copy.copy(chapter.session.run)
    older.recording.session.run.manifest = {**chapter.session.run.manifest,
                                            "device": {"name": "NVIDIA RTX A6000", "compute_capability": "8.6"}}
    assert step_math(older, "B1").startswith("fp32*")   # Winograd's own count, as that GPU ran it


def test_the_profiles_page_reads_its_gpus_runs_only(no_gpu):
    """The store holds H100 runs and H200 runs of VGG: the profiles page, replaying the H200's
    recordings (the default), names no H100 run in its environment tables; asked for the H100,
    no H200 run."""
    from kernelbook.evidence.page import environment_tables, open_page
    from kernelbook.session import pinned_to
    from kernelbook.vgg import STUDY

    for device, absent in ((None, "H100"), ("H100", "H200")):
        with pinned_to(None):
            page = open_page(STUDY, mode="replay", device=device)
            html = "".join(t.to_html() for t in environment_tables(STUDY, page.prefer, page.found_ceilings,
                                                                     page.found_vendor))
        assert "Environment of run" in html and absent not in html, device


def test_a_split_unit_has_its_own_roof_drawn_and_is_judged_against_it(monkeypatch):
    """A 3xTF32 step spends three TF32 products per product: its roof, the TF32 roof over three, is
    drawn (grey, in the key) and a point above that measured roof but under the datasheet's peak
    over three gets the note that one program's rate is no limit."""
    import pandas as pd

    from kernelbook.evidence import roofline

    monkeypatch.setattr(roofline, "device_of", lambda ceilings: H100)
    measured = {"copy_gbs": 3000.0, "tf32_tensor_gflops": 390_000.0, "fp16_tensor_gflops": 770_000.0,
                "fp32_gflops": 60_000.0}
    row = {"layer": "B1", "size": 1, "flops": 1.0, "op_time_ms": 1.0, "intensity": 500.0, "bytes": 1.0,
           "bytes_source": "dram (ncu)", "provenance": "", "replayed": True, "run_id": "r"}
    frame = pd.DataFrame([{**row, "number": "13", "step": "hopper-3xtf32", "gflops": 140_000.0},
                          {**row, "number": "08", "step": "3xtf32", "gflops": 100_000.0}])
    maths = {"hopper-3xtf32": "3xtf32", "3xtf32": "3xtf32"}
    notes = roofline.above_roofs(frame, measured, maths)
    assert len(notes) == 1 and "13 (hopper-3xtf32" in notes[0] and "3xTF32 (TF32 tensor ÷ 3)" in notes[0]
    assert "130,000" in notes[0] and "164,833" in notes[0] and "a rate a kernel can beat" in notes[0]
    fig = roofline.roofline(frame, measured, maths=maths)
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "3xTF32 (TF32 tensor ÷ 3): 130,000 GFLOP/s" in labels
    assert not any("FP16 tensor ÷" in label for label in labels)   # no split unit on FP16 here: no such roof
