"""What a user reads: --version, short run lines, plain CSV cells, PARAMS through make, and a
chapter written as a notebook that papermill runs as printed."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from tinybook import make_book

from kernelbook import cli, paths, results
from kernelbook.params import split_assignments


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("kernelbook ")


def test_runs_lines_stay_short_and_machine_formats_keep_every_part(results_root, capsys):
    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    for i in range(200):
        run.write_part(f"lenet-step-number-{i:03d}-compiler", "lenet", [])
    run.write_part("device-ceilings", "device", [])
    assert cli.main(["results", "--runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) < 120 and "201 parts (device 1, lenet 200)" in lines[1]
    assert cli.main(["results", "--runs", "--format", "csv"]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(row["parts"].split(",")) == 201


def test_csv_cells_are_never_python_reprs(results_root, capsys):
    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    run.write_part("lenet-sweep-grid", "lenet", [
        results.record("lenet", "sweep", "C1", 100, "op_time_ms", 1.0, config={"tile_width": 16}, passed=True)])
    assert cli.main(["results", "--format", "csv"]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert json.loads(row["config"]) == {"tile_width": 16} and row["passed"] == "true"


def test_results_runs_says_when_the_store_does_not_exist(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(tmp_path / "nowhere"))
    assert cli.main(["results", "--runs"]) == 0
    assert "does not exist" in capsys.readouterr().err


def test_build_and_run_out_are_told_apart_in_help(capsys):
    for command in ("run", "build"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "`build --executed DIR` reads them" in text and "Not `run --out`" in text


def test_compare_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0 when nothing regressed, 1 when something is slower or worse, 2 when compare refused" in text


@pytest.mark.parametrize("text, items", [
    ("batch_sizes=[100, 500]", ["batch_sizes=[100, 500]"]),
    ('repeats=3 label="a b" sizes=(1, 2)', ["repeats=3", 'label="a b"', "sizes=(1, 2)"]),
    ("label='it''s'  x=1", ["label='it''s'", "x=1"]),
    ("", []),
])
def test_assignments_keep_spaces_inside_brackets_and_quotes(text, items):
    assert split_assignments(text) == items


def test_make_params_reach_kernelbook_whole(tmp_path):
    """`make run PARAMS='batch_sizes=[100, 500] label="a b"'` hands kernelbook the two values unmangled."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kernelbook").write_text('#!/bin/sh\nprintf "%s\\n" "$KERNELBOOK_PARAMS" "$@" > "$DUMP"\n')
    (fake / "kernelbook").chmod(0o755)
    stamp = tmp_path / "stamp"
    stamp.write_text("")
    dump = tmp_path / "dump"
    subprocess.run(["make", "-s", "-C", str(paths.REPO_ROOT), "run", f"BIN={fake}", f"STAMP={stamp}",
                    """PARAMS=batch_sizes=[100, 500] label="a b" note='x y'"""],
                   check=True, env={**os.environ, "DUMP": str(dump)}, timeout=60)
    params_line, *args = dump.read_text().splitlines()
    from kernelbook.batch import parse_parameters

    assert parse_parameters(split_assignments(params_line)) == {"batch_sizes": [100, 500], "label": "a b",
                                                                  "note": "x y"}
    assert args == ["run", "--mode", "auto"]


def test_a_chapter_written_as_a_notebook_runs_with_papermill_as_printed(tmp_path, monkeypatch, capsys):
    root = make_book(tmp_path / "repo", with_bad=False)
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    assert cli.main(["notebook", "part/good"]) == 0
    out = capsys.readouterr().out
    notebook = root / "book" / "part" / "good.ipynb"
    assert f"wrote {notebook}" in out
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert "jupytext" not in nb.metadata and nb.metadata.kernelspec.name in ("kernelbook", "python3")
    command = out.strip().splitlines()[-1].split()
    assert command[:3] == ["papermill", str(notebook), "out.ipynb"]
    papermill = os.path.join(os.path.dirname(sys.executable), "papermill")
    proc = subprocess.run([papermill, str(notebook), str(tmp_path / "out.ipynb"), "-p", "size", "5",
                           "-y", "label: 'a b'", "-k", "python3"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert "size=5 label='a b'" in json.dumps(executed.cells[-1].outputs)


def test_unknown_chapter_names_the_chapters(tmp_path, monkeypatch, capsys):
    root = make_book(tmp_path / "repo", with_bad=False)
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    assert cli.main(["notebook", "part/nothing"]) == 2
    assert "part/good" in capsys.readouterr().err


def test_a_full_disk_is_one_line(monkeypatch, capsys, results_root):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/results/x.json")

    monkeypatch.setattr(cli, "_cmd_results", full)
    monkeypatch.setitem(cli.COMMANDS, "results", full)
    assert cli.main(["results"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err and "/data/results/x.json" in err


def test_an_unwritable_run_out_is_one_line(capsys, no_gpu):
    assert cli.main(["run", "--out", "/proc/x", "--only", "lenet/00_*", "--mode", "replay"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/proc/x" in err and "--out DIR" in err and "Traceback" not in err


def test_runs_table_writes_control_characters_out(results_root, capsys):
    results.create_run({"device": {"name": "GPU\x1b[2J\x07"}, "commit": "c", "host": "h"})
    assert cli.main(["results", "--runs"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J\\x07" in out


# ----------------------------------------------------------------------------- every mode checks every parameter


def test_a_step_parameter_out_of_range_is_refused_in_replay_as_when_measuring(results_root, no_gpu):
    """Measuring validates each timed problem before any launch (``StepImpl.validate``); a replay
    runs the same checks, without a GPU, instead of showing the recording with a warning."""
    from conftest import fabricate_chapter

    from kernelbook import harness
    from kernelbook.chapter import run_chapter
    from kernelbook.errors import ParameterError
    from kernelbook.lenet import STUDY

    fabricate_chapter(results_root)
    impl = STUDY.impl("baseline")
    (case, size), *_ = harness.problems(STUDY, list(STUDY.default_sizes))
    with pytest.raises(ParameterError) as measuring:
        impl.validate(STUDY.problem(case, size), impl.params(tile_width=-5))
    with pytest.raises(ParameterError) as replaying:
        run_chapter(STUDY, "baseline", params={"tile_width": -5}, mode="replay")
    assert replaying.value.message == measuring.value.message and "tile_width" in replaying.value.message


def test_a_huge_size_list_is_refused_in_one_short_line(results_root, no_gpu):
    from conftest import fabricate_chapter

    from kernelbook import params
    from kernelbook.chapter import run_chapter
    from kernelbook.errors import ParameterError
    from kernelbook.lenet import STUDY

    fabricate_chapter(results_root)
    for value in (list(range(1, 20_001)), "[" + "1," * 20_000 + "]", "x" * 100_000, [0] * 20_000):
        with pytest.raises(ParameterError) as info:
            params.sizes("batch_sizes", value)
        assert len(str(info.value)) < 400 and "batch_sizes" in str(info.value)
    with pytest.raises(ParameterError, match="at most") as info:
        run_chapter(STUDY, "baseline", sizes=list(range(1, 20_001)), mode="replay")
    assert len(str(info.value)) < 400


def test_size_errors_name_the_parameter_the_page_takes(results_root, no_gpu):
    """The profiles page's ``cudnn_batch_sizes`` and the sweep page's ``sweep_batch_sizes`` are
    named as such in their errors, not as the chapters' ``batch_sizes``."""
    from kernelbook import sweep
    from kernelbook.errors import ParameterError
    from kernelbook.evidence import vendor
    from kernelbook.lenet import STUDY
    from kernelbook.lenet.grid import SWEEP

    with pytest.raises(ParameterError, match=r"^cudnn_batch_sizes holds 0") as info:
        vendor.vendor(STUDY, mode="replay", sizes=[0])
    assert "pass e.g. cudnn_batch_sizes=" in info.value.fix
    with pytest.raises(ParameterError, match=r"^sweep_batch_sizes holds 0"):
        sweep.run_sweep(STUDY, SWEEP, mode="replay", sizes=[0], sizes_name="sweep_batch_sizes")
    page = (paths.REPO_ROOT / "book" / "lenet" / "02_sweep.md").read_text()
    assert 'sizes=sweep_batch_sizes, sizes_name="sweep_batch_sizes"' in " ".join(page.split())
    for study in ("lenet", "mlp", "vgg"):  # the profiles pages' parameter is the vendor's sizes
        import importlib

        found = importlib.import_module(f"kernelbook.{study}").STUDY
        page = (paths.REPO_ROOT / "book" / study / "90_profiles.md").read_text()
        assert f"\n{vendor.sizes_parameter(found)} = " in page and f"vendor_sizes={vendor.sizes_parameter(found)}" in page


def test_the_fix_for_a_malformed_p_is_itself_accepted():
    import re

    from kernelbook import batch
    from kernelbook.errors import KernelbookError

    with pytest.raises(KernelbookError) as info:
        batch.parse_parameter("batch sizes 100")
    examples = re.findall(r"-p (\S+?)[.,]?(?:\s|$)", info.value.fix)
    assert examples
    for example in examples:
        name, _ = batch.parse_parameter(example.strip("'"))
        assert name in batch.ALWAYS_PASSED  # a name every notebook takes


def test_a_damaged_only_recording_says_damaged_in_banner_and_verdict(results_root, no_gpu):
    import json as json_

    from conftest import fabricate_chapter

    from kernelbook.chapter import run_chapter
    from kernelbook.lenet import STUDY

    run = fabricate_chapter(results_root)
    path = run.part_path("lenet-baseline")
    part = json_.loads(path.read_text())
    part["records"][0]["value"] = float("nan")
    path.write_text(json_.dumps(part))
    with pytest.warns(results.StoreWarning):
        chapter = run_chapter(STUDY, "baseline", mode="replay")
    banner = chapter.banner().data
    verdict = " ".join(chapter.verdict_lines())
    assert "damaged" in banner.lower() and "Not recorded" not in banner
    assert "damaged" in verdict and "not recorded yet" not in verdict


def test_a_sweep_left_at_its_sizes_asks_for_nothing(results_root, no_gpu):
    """A replayed grid whose sizes the reader did not set warns of nothing (the study's default
    sizes may hold one more than the recording); sizes the reader set are compared."""
    import dataclasses

    from kernelbook import sweep
    from kernelbook.lenet import STUDY
    from kernelbook.lenet.grid import SWEEP, run_grid

    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    declared = dataclasses.replace(SWEEP, sizes=None)
    run.write_part(STUDY.part(SWEEP.step, "grid"), "lenet",
                   [results.record("lenet", SWEEP.step, "C1", 100, "op_time_ms", 1.0)],
                   parameters={"step": SWEEP.step, "batch_sizes": [100], "repeats": 5, "warmup": 1})
    assert list(STUDY.default_sizes) != [100]
    assert sweep.run_sweep(STUDY, declared, mode="replay", repeats=5, warmup=1).recording.mismatches == []
    asked = sweep.run_sweep(STUDY, declared, mode="replay", sizes=[1000], repeats=5, warmup=1).recording.mismatches
    assert [name for name, _, _ in asked] == ["batch_sizes"]
    grid = run_grid(SWEEP.step, list(SWEEP.configs), batch_sizes=None, mode="replay")
    assert "batch_sizes" not in [name for name, _, _ in grid.recording.mismatches]


def test_a_shown_instead_warning_stays_short(results_root, no_gpu):
    from kernelbook import session

    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    run.write_part("tiny-page", "tiny", [results.record("tiny", "s", "C1", 1, "m", 1.0)], parameters={"label": "y"})

    def never():
        raise AssertionError

    rec = session.recorded("tiny-page", "tiny", never, parameters={"label": "x" * 100_000}, mode="replay")
    assert rec.mismatches and len(rec.warning()) < 1000 and "100,002 characters" in rec.warning()


def test_store_text_never_reaches_the_terminal_raw(results_root, capsys):
    """Device names and file names in the store may hold escape sequences: `results --check`,
    `results --format csv` and every warning write them out."""
    run = results.create_run({"device": {"name": "GPU\x1b]0;owned\x07"}, "commit": "c", "host": "h"})
    run.write_part("lenet-x", "lenet", [results.record("lenet", "x\x1b[2J", "C1", 1, "m", 1.0)])
    (run.root / "parts" / "stray\x1b[2J.json").write_text("{}")
    for argv in (["results", "--check"], ["results", "--format", "csv"], ["results"], ["results", "--runs"],
                 ["results", "--runs", "--format", "csv"]):
        cli.main(argv)
        captured = capsys.readouterr()
        assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out + captured.err, argv


@pytest.mark.parametrize("page", ["vendor", "ceilings"])
def test_the_profiles_pages_check_repeats_when_replaying(results_root, no_gpu, page):
    from kernelbook.errors import ParameterError
    from kernelbook.evidence import ceilings, vendor
    from kernelbook.lenet import STUDY

    with pytest.raises(ParameterError, match="repeats=-5"):
        if page == "vendor":
            vendor.vendor(STUDY, mode="replay", repeats=-5)
        else:
            ceilings.ceilings(mode="replay", repeats=-5)


def test_a_damaged_sweep_says_damaged_not_not_recorded(results_root, no_gpu):
    from kernelbook import sweep
    from kernelbook.lenet import STUDY
    from kernelbook.lenet.grid import SWEEP

    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    run.write_part(STUDY.part(SWEEP.step, "grid"), "lenet", [results.record("lenet", SWEEP.step, "C1", 1, "m", 1.0)])
    path = run.part_path(STUDY.part(SWEEP.step, "grid"))
    path.write_text(path.read_text().replace('"value": 1.0', '"value": NaN'))
    with pytest.warns(results.StoreWarning):
        result = sweep.run_sweep(STUDY, SWEEP, mode="replay", required=False)
    html = sweep.table(result).to_html()
    assert "damaged" in html and "not recorded yet" not in html


def test_damaged_ceilings_say_damaged(results_root, no_gpu):
    from kernelbook.evidence import ceilings

    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    run.write_part(ceilings.PART, "device", [results.record("device", "ceilings", None, None, "copy_gbs", 1.0)])
    assert "not recorded" not in ceilings.ceilings(mode="replay").label
    path = run.part_path(ceilings.PART)
    path.write_text(path.read_text().replace('"value": 1.0', '"value": NaN'))
    with pytest.warns(results.StoreWarning):
        label = ceilings.ceilings(mode="replay").label
    assert "damaged" in label and "not recorded" not in label
