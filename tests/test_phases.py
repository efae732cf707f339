"""Where a page's time goes: nested phases count once, and the batch reads what a kernel wrote."""

from __future__ import annotations

import json
import time

import pytest

from kernelbook import phases


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    phases.reset()
    monkeypatch.setenv(phases.PHASES_ENV, str(tmp_path / "phases.json"))
    yield tmp_path / "phases.json"
    phases.reset()


def test_a_nested_phase_is_taken_out_of_the_one_around_it(clean):
    with phases.phase("check"):
        time.sleep(0.02)
        with phases.phase("compile"):
            time.sleep(0.05)
        assert not clean.exists()   # written when the outermost phase ends, not before
    found = phases.totals()
    assert 0.05 <= found["compile"] < 0.5
    assert 0.02 <= found["check"] < found["compile"]   # its own 0.02 s, not the compile's 0.05 s
    assert phases.read(clean) == pytest.approx(found, abs=1e-3)


def test_a_failing_block_still_counts_and_decorated_calls_add_up(clean):
    @phases.timed("time")
    def timed_call(fail):
        time.sleep(0.01)
        if fail:
            raise RuntimeError("a kernel failed")

    timed_call(False)
    with pytest.raises(RuntimeError):
        timed_call(True)
    assert phases.totals()["time"] >= 0.02
    with pytest.raises(ValueError, match="unknown phase 'other'"):
        with phases.phase("other"):
            pass


def test_the_batch_reads_the_file_and_adds_the_time_no_phase_holds(clean):
    clean.write_text(json.dumps({"compile": 3.0, "time": 5.0, "bogus": 9, "check": "x"}))
    found = phases.read(clean)
    assert found == {"compile": 3.0, "time": 5.0}
    assert phases.with_other(found, 10.0)["other"] == 2.0
    assert phases.with_other(found, 6.0)["other"] == 0.0
    assert phases.line(phases.with_other(found, 10.0)) == "compile 3.0 s, time 5.0 s, other 2.0 s"
    clean.write_text("[1, 2")
    assert phases.read(clean) == {}


# Two notebooks on one GPU: a child process holds the GPU lock in a GPU phase while this test's
# process (or a second child) asks for it. File flags, not sleeps, order the two.
_HOLDER = """
import os, sys, time
from pathlib import Path
from kernelbook import phases
flags = Path(sys.argv[1])
def wait_for(name):
    end = time.time() + 20
    while not (flags / name).exists():
        if time.time() > end:
            sys.exit(f"no {name}")
        time.sleep(0.01)
with phases.phase("time"):
    (flags / "timing").touch()
    if sys.argv[2] == "compile":
        with phases.phase("compile"):
            (flags / "compiling").touch()
            wait_for("other-checked")
    else:
        time.sleep(0.5)
    (flags / "done").touch()
"""


def _holder(tmp_path, what, monkeypatch):
    import subprocess
    import sys

    lock = tmp_path / "gpu.lock"
    monkeypatch.setenv(phases.GPU_LOCK_ENV, str(lock))
    flags = tmp_path / "flags"
    flags.mkdir()
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(flags), what])
    end = time.time() + 30
    while not (flags / "timing").exists():
        assert child.poll() is None and time.time() < end, "the holder did not start timing"
        time.sleep(0.01)
    return child, flags


def test_a_gpu_phase_waits_while_another_notebook_times_on_the_gpu(clean, tmp_path, monkeypatch):
    child, flags = _holder(tmp_path, "sleep", monkeypatch)
    with phases.phase("check"):
        assert (flags / "done").exists()    # entered only after the other notebook's timing ended
    assert child.wait(timeout=30) == 0
    found = phases.totals()
    assert found["wait"] > 0.05             # the wait is its own phase ...
    assert found["check"] < found["wait"]   # ... not counted as checking
    with phases.phase("compile"):           # compiling never waits for the GPU
        pass
    assert phases.totals()["wait"] == found["wait"]


def test_a_compile_inside_a_gpu_phase_gives_the_gpu_back(clean, tmp_path, monkeypatch):
    child, flags = _holder(tmp_path, "compile", monkeypatch)
    end = time.time() + 30
    while not (flags / "compiling").exists():
        assert time.time() < end
        time.sleep(0.01)
    with phases.phase("time"):              # would wait for ever if the compiling holder kept the GPU
        assert not (flags / "done").exists()
        (flags / "other-checked").touch()
        time.sleep(0.2)
    assert child.wait(timeout=30) == 0      # the holder took the GPU back after its compile


def test_without_a_batch_lock_no_phase_waits(clean, monkeypatch):
    monkeypatch.delenv(phases.GPU_LOCK_ENV, raising=False)
    with phases.phase("time"):
        pass
    assert "wait" not in phases.totals()
    with pytest.raises(ValueError, match="unknown phase 'wait'"):
        with phases.phase("wait"):
            pass
