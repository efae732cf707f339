"""The command line: exit statuses, error format, and `kernelbook results` output."""

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
from kernelbook.measure import Measured

REQUIRED = ["run_id", "device", "study", "step", "layer", "size", "metric", "value"]


@pytest.fixture
def recorded(results_root):
    """One fabricated run with two records (one with samples) in a temporary results folder."""
    run = results.create_run({"device": {"name": "Fake GPU 1"}, "commit": "abc123", "host": "testhost"})
    run.write_part("lenet-baseline", "lenet", [
        results.record("lenet", "baseline", "C1", 100, "op_time_ms", Measured([1.0, 2.0, 4.0])),
        results.record("lenet", "baseline", None, 1000, "total_ms", 9.5, unit="ms", note="whole inference"),
    ])
    return run


def test_results_jsonl_has_the_required_columns(recorded, capsys):
    assert cli.main(["results"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2
    first, second = rows
    assert list(first)[: len(REQUIRED)] == REQUIRED
    assert first["run_id"] == recorded.run_id and first["device"] == "Fake GPU 1"
    assert (first["layer"], first["size"], first["metric"], first["value"]) == ("C1", 100, "op_time_ms", 2.0)
    assert (first["min"], first["max"], first["n_samples"], first["part"]) == (1.0, 4.0, 3, "lenet-baseline")
    assert "samples" not in first
    assert second["layer"] is None and second["note"] == "whole inference"
    assert second["min"] is None  # required-or-usual columns are always present


def test_results_csv_has_header_and_rows(recorded, capsys):
    assert cli.main(["results", "--format", "csv"]) == 0
    reader = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert reader.fieldnames[: len(REQUIRED)] == REQUIRED
    assert {"unit", "min", "max", "n_samples", "part", "note"} <= set(reader.fieldnames)
    rows = list(reader)
    assert len(rows) == 2
    assert rows[0]["value"] == "2.0" and rows[0]["n_samples"] == "3" and rows[0]["size"] == "100"
    assert rows[1]["layer"] == ""  # None is an empty cell


def test_results_runs_lists_run_device_date_commit_parts(recorded, capsys):
    assert cli.main(["results", "--runs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["run_id", "device", "created_utc", "commit", "parts"]
    line = out[1]
    for text in (recorded.run_id, "Fake GPU 1", recorded.created_utc, "abc123", "1 part (lenet 1)"):
        assert text in line  # the table counts parts per study; the machine formats list them

    assert cli.main(["results", "--runs", "--format", "jsonl"]) == 0
    (row,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert row == {"run_id": recorded.run_id, "device": "Fake GPU 1", "created_utc": recorded.created_utc,
                   "commit": "abc123", "parts": "lenet-baseline"}


def test_results_run_filter(recorded, results_root, capsys):
    other = results.create_run({"device": {"name": "Other"}, "commit": "def", "host": "h"},
                               run_id="20200101T0000Z-aaaaaa")
    other.write_part("lenet-x", "lenet", [results.record("lenet", "v", "C1", 1, "m", 1.0)])
    assert cli.main(["results", "--run", other.run_id]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["device"] for r in rows] == ["Other"]


def test_no_runs_is_not_an_error(results_root, capsys):
    assert cli.main(["results", "--runs"]) == 0
    assert "no recorded runs" in capsys.readouterr().err
    assert cli.main(["results"]) == 0
    assert capsys.readouterr().out == ""


def test_a_malformed_results_file_is_skipped_with_a_warning_naming_it(recorded, capsys):
    good = results.create_run({"device": {"name": "Fake GPU 1"}, "commit": "abc123", "host": "testhost"},
                               run_id="20300101T0000Z-aaaaaa")
    good.write_part("lenet-tiled", "lenet", [results.record("lenet", "tiled", "C1", 100, "op_time_ms", 1.5)])
    bad = recorded.part_path("lenet-baseline")
    bad.write_text("{ not json")
    assert cli.main(["results"]) == 0
    captured = capsys.readouterr()
    assert "tiled" in captured.out  # the good run is still listed
    assert captured.err.startswith("warning: ") and str(bad) in captured.err and "Fix:" in captured.err
    assert "Traceback" not in captured.err
    assert cli.main(["results", "--check"]) == 1
    out = capsys.readouterr().out
    assert str(bad) in out and "1 problem" in out


def test_unknown_run_id_exits_2(results_root, capsys):
    assert cli.main(["results", "--run", "20200101T0000Z-bbbbbb"]) == 2
    assert "Fix:" in capsys.readouterr().err


# ----------------------------------------------------------------------------- run


@pytest.fixture
def tiny_repo(tmp_path, monkeypatch):
    """Point the CLI at the tiny book as if it were the repository."""
    root = make_book(tmp_path / "repo")
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    monkeypatch.setenv("KERNELBOOK_BUILD_DIR", str(root / "_build"))
    results.create_run({"device": {"name": "Fake GPU 1"}, "commit": "abc123", "host": "h"},
                       root=root / "data" / "results")  # something to replay
    return root


def test_run_unknown_parameter_exits_2_naming_the_valid_ones(tiny_repo, capsys):
    assert cli.main(["run", "-p", "sise=5"]) == 2
    err = capsys.readouterr().err
    assert "sise" in err and "mode, run_id, size" in err and "Fix:" in err


def test_run_only_matching_nothing_exits_2(tiny_repo, capsys):
    assert cli.main(["run", "--only", "nothing/*"]) == 2
    assert "matches no notebook" in capsys.readouterr().err


def test_run_malformed_parameter_exits_2(tiny_repo, capsys):
    assert cli.main(["run", "-p", "size"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


def test_bad_mode_is_a_usage_error(tiny_repo):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--mode", "fast"])
    assert info.value.code == 2


def test_a_replay_batch_with_an_empty_store_refuses_at_once(tiny_repo, capsys, no_gpu):
    import shutil

    shutil.rmtree(tiny_repo / "data")
    assert cli.main(["run", "--mode", "replay"]) == 2
    err = capsys.readouterr().err
    assert "nothing to replay" in err and "git checkout -- data/results" in err
    (tiny_repo / "data" / "results").mkdir(parents=True)
    assert cli.main(["run"]) == 2  # auto without a GPU replays: the same refusal
    assert "holds no readable run" in capsys.readouterr().err
    assert not (tiny_repo / "_build" / "executed").exists()  # nothing ran


@pytest.mark.slow
def test_run_exits_1_when_a_notebook_fails(tiny_repo, capsys):
    assert cli.main(["run", "-p", "size=7", "--mode", "replay"]) == 1
    captured = capsys.readouterr()
    assert "[1/2] part/bad ... FAILED" in captured.out
    assert "[2/2] part/good ... ok" in captured.out
    assert "1 of 2 notebooks ok" in captured.out
    assert "FAILED part/bad" in captured.err
    executed = tiny_repo / "_build" / "executed"
    assert (executed / "part" / "good.ipynb").is_file() and (executed / "batch.json").is_file()

    assert cli.main(["run", "--only", "*good*", "--out", str(tiny_repo / "elsewhere")]) == 0
    assert (tiny_repo / "elsewhere" / "part" / "good.ipynb").is_file()


def test_python_dash_m_kernelbook_prints_error_without_traceback(results_root):
    (results_root / "20200101T0000Z-cccccc").mkdir()
    (results_root / "20200101T0000Z-cccccc" / "manifest.json").write_text("[]")
    env = {**os.environ, "KERNELBOOK_RESULTS_DIR": str(results_root)}
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "results", "--runs"],
                          capture_output=True, text=True, env=env, cwd=paths.REPO_ROOT, timeout=120)
    assert proc.returncode == 0  # the damaged run is skipped, with one plain line that names it
    assert proc.stderr.startswith("warning: ") and "malformed" in proc.stderr and "Fix:" in proc.stderr
    assert "20200101T0000Z-cccccc" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "results", "--check"],
                          capture_output=True, text=True, env=env, cwd=paths.REPO_ROOT, timeout=120)
    assert proc.returncode == 1 and "20200101T0000Z-cccccc" in proc.stdout
