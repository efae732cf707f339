import json
import os

import pytest

from kernelbook import results
from kernelbook.errors import ResultsError
from kernelbook.measure import Measured

from conftest import DEVICE, fabricate_chapter


def test_run_id_starts_with_utc_timestamp_and_sorts_by_age():
    import datetime as dt

    early = results.new_run_id(dt.datetime(2026, 11, 22, 4, 30, tzinfo=dt.timezone.utc))
    late = results.new_run_id(dt.datetime(2026, 11, 22, 5, 1, tzinfo=dt.timezone.utc))
    assert early.startswith("20261122T0430Z-")
    assert sorted([late, early]) == [early, late]
    assert results.validate_run_id(early) == early
    with pytest.raises(ResultsError, match="Fix:"):
        results.validate_run_id("latest")


def test_round_trip_keeps_samples_and_provenance(results_root):
    run = results.create_run({"device": DEVICE, "commit": "c0ffee", "host": "h"})
    rec = results.record("lenet", "baseline", "C1", 100, "op_time_ms", Measured([3.0, 1.0, 2.0]))
    run.write_part("lenet-baseline", "lenet", [rec], parameters={"repeats": 3})

    again = results.load_run(run.run_id)
    assert again.device == "Test GPU 9000" and again.commit == "c0ffee"
    part = again.read_part("lenet-baseline")
    (stored,) = part["records"]
    assert stored["value"] == 2.0 and stored["min"] == 1.0 and stored["max"] == 3.0
    assert stored["samples"] == [3.0, 1.0, 2.0]
    flat = list(results.iter_records())
    assert flat[0]["run_id"] == run.run_id and flat[0]["device"] == "Test GPU 9000"
    assert flat[0]["n_samples"] == 3 and "samples" not in flat[0]


def test_newest_run_with_a_part_is_chosen(results_root):
    old = fabricate_chapter(results_root, run_id="20261101T0000Z-aaaaaa")
    new = fabricate_chapter(results_root, run_id="20261121T0000Z-bbbbbb")
    results.create_run({"device": DEVICE, "commit": "x", "host": "h"}, run_id="20261122T0000Z-cccccc")
    assert results.newest_run_with("lenet-baseline").run_id == new.run_id != old.run_id
    with pytest.raises(ResultsError, match="No recorded run"):
        results.newest_run_with("lenet-nonexistent")


def test_malformed_files_fail_clearly(results_root):
    run = fabricate_chapter(results_root)
    path = run.part_path("lenet-baseline")
    path.write_text("{ not json")
    with pytest.raises(ResultsError) as info:
        run.read_part("lenet-baseline")
    assert str(path) in str(info.value) and "Fix:" in str(info.value)

    payload = {"schema": 1, "run_id": run.run_id, "name": "x", "study": "lenet", "mode": "measure", "checks": [],
               "records": [{"study": "lenet", "variant": "baseline", "layer": "C1", "batch": -5,
                            "metric": "op_time_ms", "value": 1.0}]}
    path.write_text(json.dumps(payload))
    with pytest.raises(ResultsError, match="batch -5"):
        run.read_part("lenet-baseline")

    (run.root / "manifest.json").write_text(json.dumps({"schema": 1}))
    with pytest.raises(ResultsError, match="missing key"):
        results.load_run(run.run_id)


def test_atomic_write_leaves_old_file_when_serialisation_fails(tmp_path):
    target = tmp_path / "a.json"
    results.write_json_atomic(target, {"ok": 1})
    with pytest.raises(TypeError):
        results.write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary file left behind


def test_recorded_runs_in_the_repository_are_valid():
    """Every committed run must load: the book replays from them."""
    runs = results.list_runs()
    for run in runs:
        for name in run.part_names():
            run.read_part(name)
    if os.environ.get("CI"):
        assert runs, "data/results/ holds no recorded run; the book cannot replay"


def test_run_with_prefers_an_existing_run_and_falls_back_to_the_newest(results_root):
    old = fabricate_chapter(results_root, run_id="20261101T0000Z-aaaaaa")
    new = fabricate_chapter(results_root, run_id="20261121T0000Z-bbbbbb")
    assert results.run_with("lenet-baseline", old.run_id).run_id == old.run_id
    # a replayed batch's id names no folder: the newest recording is used, not "nothing"
    assert results.run_with("lenet-baseline", "20261122T0550Z-ffffff").run_id == new.run_id
    assert results.run_with("lenet-tiled", new.run_id) is None
