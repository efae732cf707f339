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
