"""A results store edited by hand, by a broken tool or by someone who wants a forged run shown:
every command that reads it (``results --check``, ``results``, ``compare``, a replaying page)
goes through one validator, which reports the damaged file and replays the good runs."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from conftest import fabricate_chapter

from kernelbook import cli, results
from kernelbook.errors import ResultsError

GOOD, BAD = "20261101T0000Z-aaaaaa", "20261121T0000Z-bbbbbb"


def _stores(root):
    """A good run and a newer one of the same part, which each test damages."""
    return fabricate_chapter(root, run_id=GOOD), fabricate_chapter(root, run_id=BAD)


def _every_reader_skips(bad_path, capsys, good=GOOD, part="lenet-baseline"):
    """``results --check`` names the damaged file (exit 1); ``results``, ``compare`` and a replay
    skip it with a warning and go on with the good run."""
    problems = results.check_store()
    assert problems and any(str(bad_path) in p for p in problems), problems
    assert cli.main(["results", "--check"]) == 1
    out = capsys.readouterr().out
    assert str(bad_path) in out and "Traceback" not in out
    assert cli.main(["results"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert rows and {r["run_id"] for r in rows} == {good}
    assert "warning:" in captured.err
    with pytest.warns(results.StoreWarning):
        assert results.run_with(part).run_id == good


def _huge(text: str, digits: int) -> str:
    """The part's text with its first time's value replaced by an integer of ``digits`` digits."""
    part = json.loads(text)
    first = next(r for r in part["records"] if r["metric"] == "op_time_ms")
    first["value"] = 123456789
    return json.dumps(part).replace("123456789", "9" * digits, 1)


@pytest.mark.parametrize("digits", [401, 5001])
def test_a_huge_integer_is_a_damaged_file_not_a_crash(results_root, capsys, digits):
    _, bad = _stores(results_root)
    path = bad.part_path("lenet-baseline")
    path.write_text(_huge(path.read_text(), digits))
    with pytest.raises(ResultsError, match="digits|bound|large"):
        bad.read_part("lenet-baseline")
    _every_reader_skips(path, capsys)


def test_a_huge_integer_in_a_manifest_is_a_damaged_run(results_root, capsys):
    _, bad = _stores(results_root)
    path = bad.root / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["device"]["memory_bytes"] = 1
    path.write_text(json.dumps(manifest).replace('"memory_bytes": 1', '"memory_bytes": ' + "7" * 401))
    _every_reader_skips(path, capsys)


def test_deeply_nested_json_is_a_damaged_file(results_root, capsys):
    _, bad = _stores(results_root)
    path = bad.part_path("lenet-baseline")
    part = json.loads(path.read_text())
    path.write_text(json.dumps(part)[:-1] + ', "extra": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    _every_reader_skips(path, capsys)


def test_a_part_relabelled_to_another_study_is_damaged(results_root, capsys):
    _, bad = _stores(results_root)
    path = bad.part_path("lenet-baseline")
    part = json.loads(path.read_text())
    part["study"] = "mlp"
    for record in part["records"]:
        record["study"] = "mlp"
    path.write_text(json.dumps(part))
    with pytest.raises(ResultsError, match="study 'mlp'.*lenet"):
        bad.read_part("lenet-baseline")
    _every_reader_skips(path, capsys)


def _forged(tmp_path):
    """A newer run outside the store, from a forged device."""
    forged = fabricate_chapter(tmp_path / "outside", run_id="20261130T0000Z-ffffff")
    manifest = json.loads((forged.root / "manifest.json").read_text())
    manifest["device"]["name"] = "Forged GPU"
    (forged.root / "manifest.json").write_text(json.dumps(manifest))
    return forged


@pytest.mark.parametrize("link", ["manifest.json", "parts", "parts/lenet-baseline.json"])
def test_no_symbolic_link_anywhere_in_a_run(results_root, tmp_path, capsys, link):
    good = fabricate_chapter(results_root, run_id=GOOD)
    forged = _forged(tmp_path)
    newest = fabricate_chapter(results_root, run_id="20261130T0000Z-ffffff")
    target = newest.root / link
    if target.is_dir():
        import shutil

        shutil.rmtree(target)
    else:
        target.unlink()
    target.symlink_to(forged.root / link)
    _every_reader_skips(target, capsys, good=good.run_id)
    assert not any("Forged GPU" in line for line in results.check_store())
    assert cli.main(["results", "--runs"]) == 0
    assert "Forged GPU" not in capsys.readouterr().out


def test_parts_must_be_a_folder(results_root, capsys):
    good, bad = _stores(results_root)
    import shutil

    shutil.rmtree(bad.root / "parts")
    (bad.root / "parts").write_text("not a folder")
    problems = results.check_store()
    assert len(problems) == 1 and str(bad.root / "parts") in problems[0] and "folder" in problems[0]
    assert cli.main(["results", "--check"]) == 1
    capsys.readouterr()
    with pytest.warns(results.StoreWarning, match="parts"):
        assert [r.run_id for r in results.list_runs()] == [good.run_id]


@pytest.fixture
def deny(monkeypatch):
    """``deny(folder)``: the folder behaves as with mode 000 for a user who is not root (it can
    be seen, but nothing in it can be listed, looked at or opened)."""
    denied: list[str] = []

    def inside(path, listing=False):
        text = os.fsdecode(os.fspath(path)) if not isinstance(path, int) else ""
        return any(text == d if listing else text.startswith(d + os.sep) for d in denied)

    def guard(real, listing=False):
        def call(path=".", *args, **kwargs):
            if inside(path, listing) or (listing and inside(path)):
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)
        return call

    for name in ("stat", "lstat", "open"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    for name in ("scandir", "listdir"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), listing=True))
    return lambda folder: denied.append(str(folder))


@pytest.mark.parametrize("which", ["run folder", "parts folder"])
def test_an_unreadable_folder_is_skipped_with_a_warning_naming_it(results_root, capsys, deny, which):
    good, bad = _stores(results_root)
    folder = bad.root if which == "run folder" else bad.root / "parts"
    deny(folder)
    problems = results.check_store()
    assert len(problems) == 1 and str(folder) in problems[0] and "cannot be read" in problems[0]
    for argv in (["results"], ["results", "--runs"], ["compare", good.run_id, good.run_id]):
        assert cli.main(argv) == 0, argv
        err = capsys.readouterr().err
        assert "choose a folder you can write to" not in err
        if argv == ["results"]:
            assert str(folder) in err and "cannot be read" in err
    with pytest.warns(results.StoreWarning, match="cannot be read"):
        assert results.run_with("lenet-baseline").run_id == good.run_id


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder of mode 000")
def test_a_folder_of_mode_000_is_skipped(results_root, capsys):
    good, bad = _stores(results_root)
    os.chmod(bad.root, 0)
    try:
        assert any(str(bad.root) in p for p in results.check_store())
        assert cli.main(["results"]) == 0
        assert str(bad.root) in capsys.readouterr().err
    finally:
        os.chmod(bad.root, 0o755)


def test_a_part_over_the_size_cap_is_refused_without_reading_it(results_root, capsys, monkeypatch):
    _, bad = _stores(results_root)
    path = bad.part_path("lenet-baseline")
    with open(path, "r+b") as handle:  # sparse: 8 GB that take no room on the disk
        handle.truncate(8 << 30)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(Path(p)) or real_open(p, *a, **k))
    problems = results.check_store()
    assert len(problems) == 1 and str(path) in problems[0] and "8,589,934,592 bytes" in problems[0]
    assert path not in opened  # refused from its size alone
    _every_reader_skips(path, capsys)


def test_a_manifest_over_the_size_cap_is_refused(results_root, capsys):
    _, bad = _stores(results_root)
    path = bad.root / "manifest.json"
    with open(path, "r+b") as handle:
        handle.truncate(1 << 30)
    problems = results.check_store()
    assert len(problems) == 1 and str(path) in problems[0] and "bytes" in problems[0]


def test_numbers_written_into_a_part_are_bounded_too(results_root):
    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    with pytest.raises(ResultsError, match="bound|large"):
        run.write_part("lenet-x", "lenet", [results.record("lenet", "x", "C1", 1, "count", 0, huge=10 ** 400)])
    with pytest.raises(ResultsError, match="study"):
        run.write_part("lenet-x", "mlp", [results.record("mlp", "x", "C1", 1, "count", 0)])
    assert not run.has_part("lenet-x")


@pytest.mark.parametrize("where", ["device name", "record step"])
def test_a_name_too_long_to_show_is_damage(results_root, capsys, where):
    """A name a page shows in its banner or a table (a device, a step) is at most a line long."""
    _, bad = _stores(results_root)
    if where == "device name":
        path = bad.root / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["device"]["name"] = "GPU " * 25_000
        path.write_text(json.dumps(manifest))
    else:
        path = bad.part_path("lenet-baseline")
        part = json.loads(path.read_text())
        part["records"][0]["step"] = "s" * 100_000
        path.write_text(json.dumps(part))
    problems = results.check_store()
    assert len(problems) == 1 and str(path) in problems[0] and "characters" in problems[0]
    assert len(problems[0]) < 1500
    _every_reader_skips(path, capsys)


def test_only_a_failed_checks_error_may_be_nan_or_infinite(results_root, capsys):
    """A kernel that wrote NaN fails its check with a NaN or infinite error, which is recorded; a
    NaN or an infinity anywhere else in a part is damage."""
    run = results.create_run({"device": {"name": "GPU"}, "commit": "c", "host": "h"})
    failed = [{"label": "C1", "passed": False, "rel_l2_error": float("inf"), "max_abs_error": float("nan")}]
    run.write_part("lenet-x", "lenet", [results.record("lenet", "x", "C1", 1, "correct", 0.0)], failed)
    assert run.read_part("lenet-x")["checks"][0]["passed"] is False and results.check_store() == []
    for extra in ({"rows": [{"gflops": float("nan")}]}, {"peak": float("-inf")}):
        with pytest.raises(ResultsError, match="finite"):
            run.write_part("lenet-y", "lenet", [], extra=extra)
        path = run.part_path("lenet-y")
        part = {"schema": 1, "run_id": run.run_id, "name": "lenet-y", "study": "lenet", "mode": "measure",
                "records": [], "checks": [], "extra": extra}
        path.write_text(json.dumps(part))
        assert len(results.check_store()) == 1 and "finite" in results.check_store()[0]
