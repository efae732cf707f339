import json
import os

import pytest
from conftest import DEVICE, fabricate_chapter

from kernelbook import results
from kernelbook.errors import ResultsError
from kernelbook.measure import Measured


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
    assert results.run_with("lenet-baseline").run_id == new.run_id != old.run_id
    assert results.run_with("lenet-nonexistent") is None


def test_malformed_files_fail_clearly(results_root):
    run = fabricate_chapter(results_root)
    path = run.part_path("lenet-baseline")
    path.write_text("{ not json")
    with pytest.raises(ResultsError) as info:
        run.read_part("lenet-baseline")
    assert str(path) in str(info.value) and "Fix:" in str(info.value)

    payload = {"schema": 1, "run_id": run.run_id, "name": "lenet-baseline", "study": "lenet", "mode": "measure", "checks": [],
               "records": [{"study": "lenet", "variant": "baseline", "layer": "C1", "batch": -5,
                            "metric": "op_time_ms", "value": 1.0}]}
    path.write_text(json.dumps(payload))
    with pytest.raises(ResultsError, match="size -5"):  # an old run's batch is read as its size
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


# ----------------------------------------------------------------------------- one validator for damaged stores

def _damage(run, edit, name="lenet-baseline"):
    path = run.part_path(name)
    part = json.loads(path.read_text())
    edit(part)
    path.write_text(json.dumps(part))  # json.dumps writes NaN and Infinity as JavaScript does
    return path


def _first_time(part):
    return next(r for r in part["records"] if r["metric"] == "op_time_ms")


DAMAGES = {
    "value NaN": lambda p: _first_time(p).update(value=float("nan")),
    "value Infinity": lambda p: _first_time(p).update(value=float("inf")),
    "NaN samples": lambda p: _first_time(p).update(samples=[1.0, float("nan")]),
    "min text": lambda p: _first_time(p).update(min="abc"),
    "layer object": lambda p: _first_time(p).update(layer={}),
    "foreign run_id": lambda p: p.update(run_id="20200101T0000Z-000000"),
    "foreign study": lambda p: p.update(study="mlp"),
    "unit list": lambda p: _first_time(p).update(unit=["ms"]),
    "check without passed": lambda p: p["checks"][0].pop("passed"),
    "check shape text": lambda p: p["checks"][0].update(shape="3x4"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_part_is_refused_by_check_replay_and_compare_without_hiding_a_good_run(results_root, damage, capsys):
    from kernelbook import cli
    from kernelbook.compare import compare_runs

    good = fabricate_chapter(results_root, run_id="20261101T0000Z-aaaaaa")
    bad = fabricate_chapter(results_root, run_id="20261121T0000Z-bbbbbb")
    path = _damage(bad, DAMAGES[damage])
    problems = results.check_store()
    assert len(problems) == 1 and str(path) in problems[0] and "Fix:" in problems[0]
    with pytest.warns(results.StoreWarning, match="lenet-baseline"):
        assert results.run_with("lenet-baseline").run_id == good.run_id  # the good run is replayed
    with pytest.warns(results.StoreWarning):
        _, rows = compare_runs(good.run_id, bad.run_id)
    assert rows == []  # nothing of the damaged part is compared
    assert cli.main(["results", "--check"]) == 1
    assert str(path) in capsys.readouterr().out


def test_a_symlinked_run_folder_is_never_replayed(results_root, tmp_path):
    good = fabricate_chapter(results_root, run_id="20261101T0000Z-aaaaaa")
    outside = fabricate_chapter(tmp_path / "elsewhere", run_id="20261130T0000Z-cccccc")
    (results_root / outside.run_id).symlink_to(outside.root)
    with pytest.warns(results.StoreWarning, match="symbolic link"):
        assert results.run_with("lenet-baseline").run_id == good.run_id
    assert any("symbolic link" in p for p in results.check_store())


def test_a_part_file_name_with_spaces_is_reported_and_hides_nothing(results_root, capsys):
    from kernelbook import cli

    run = fabricate_chapter(results_root)
    (run.root / "parts" / "my copy.json").write_text("{}")
    with pytest.warns(results.StoreWarning, match="my copy.json"):
        assert [r["part"] for r in results.iter_records()][0] == "lenet-baseline"
    assert cli.main(["results"]) == 0
    captured = capsys.readouterr()
    assert "lenet-baseline" in captured.out and "my copy.json" in captured.err and "rename" in captured.err
    assert cli.main(["compare", run.run_id, run.run_id]) == 0
    problems = results.check_store()
    assert len(problems) == 1 and "my copy.json" in problems[0] and "rename" in problems[0]


def test_a_damaged_only_recording_says_damaged_not_missing(results_root, no_gpu):
    from kernelbook import session

    run = fabricate_chapter(results_root)
    path = _damage(run, DAMAGES["value NaN"])

    def never():
        raise AssertionError

    with pytest.raises(ResultsError) as info, pytest.warns(results.StoreWarning):
        session.recorded("lenet-baseline", "lenet", never, parameters={}, mode="replay")
    assert "damaged" in info.value.message and str(path) in info.value.message
    assert session.NOT_RECORDED not in info.value.message
    with pytest.warns(results.StoreWarning):
        optional = session.recorded("lenet-baseline", "lenet", never, parameters={}, mode="replay", required=False)
    assert "damaged" in optional.status


def test_missing_or_empty_store_is_reported_as_such(tmp_path, monkeypatch, capsys):
    from kernelbook import cli

    missing = tmp_path / "nowhere"
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(missing))
    assert cli.main(["results", "--check"]) == 1
    out = capsys.readouterr().out
    assert "does not exist" in out and "valid" not in out
    with pytest.raises(ResultsError, match="no results folder"):
        results.require_runs()
    missing.mkdir()
    with pytest.raises(ResultsError, match="holds no readable run"):
        results.require_runs()


def test_an_unreadable_file_is_skipped_like_a_damaged_one(results_root, monkeypatch):
    import errno
    from pathlib import Path

    good = fabricate_chapter(results_root, run_id="20261101T0000Z-aaaaaa")
    bad = fabricate_chapter(results_root, run_id="20261121T0000Z-bbbbbb")
    unreadable = bad.root / "manifest.json"
    real = os.open

    def open_(path, *args, **kwargs):
        if Path(path) == unreadable:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with pytest.warns(results.StoreWarning, match="cannot be read"):
        assert [r.run_id for r in results.list_runs()] == [good.run_id]
    assert any("cannot be read" in p and str(unreadable) in p for p in results.check_store())


def test_old_field_names_are_read_as_step_and_size_and_new_records_write_them(results_root):
    """A run recorded before the store's vocabulary was fixed (``variant``, ``batch``) reads as
    ``step`` and ``size``; a record written now has only the new names; a record with both an
    old name and its new one is refused."""
    run = fabricate_chapter(results_root)
    path = run.part_path("lenet-baseline")
    part = json.loads(path.read_text())
    assert all({"step", "size"} <= set(r) and not {"variant", "batch"} & set(r) for r in part["records"])
    old = {**part, "records": [{("variant" if k == "step" else "batch" if k == "size" else k): v
                                for k, v in r.items()} for r in part["records"]]}
    path.write_text(json.dumps(old))
    read = run.read_part("lenet-baseline")
    assert [(r["step"], r["layer"], r["size"], r["metric"]) for r in read["records"]] == \
        [(r["step"], r["layer"], r["size"], r["metric"]) for r in part["records"]]
    assert not any({"variant", "batch"} & set(r) for r in read["records"])
    assert json.loads(path.read_text()) == old  # reading never rewrites the recorded file

    both = {**part, "records": [{**part["records"][0], "batch": 100}]}
    path.write_text(json.dumps(both))
    with pytest.raises(ResultsError, match="both 'batch' and 'size'"):
        run.read_part("lenet-baseline")


def test_every_recorded_run_reads_under_the_new_names():
    """The committed store: every part's records read with ``step`` and ``size``, none with the
    old names, and the files on disk are as they were recorded."""
    runs = results.list_runs()
    if not runs:
        pytest.skip("no recorded run in data/results/")
    seen = 0
    for run in runs:
        for name in run.part_names():
            for r in run.read_part(name)["records"]:
                assert "step" in r and "size" in r and "variant" not in r and "batch" not in r, (run.run_id, name)
                seen += 1
    assert seen > 1000
