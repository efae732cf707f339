"""A page's "what was tried" table (``kernelbook.tried``), read from promoted candidate runs of the
toy study of tests/test_develop.py: one row per configuration, its check verdict and worst error,
its times with their spread, a ratio only against the step's own configuration of the same run,
and the book's target judged from the same records."""

from __future__ import annotations

import pytest

from kernelbook import develop, gpu
from kernelbook.errors import ResultsError
from tests.test_develop import (
    STEP_SOURCE,
    STUDY,
    _book_run,
    _try,
    toy,  # noqa: F401  (the fixture, used by name)
)


def _promoted(source, **kwargs):
    tried, _ = _try(source, **kwargs)
    develop.promote(tried.run.run_id, log=lambda line: None)
    return tried.run.run_id


def _rows(run_ids, study=STUDY, step="rows"):
    from kernelbook.tried import table

    return table(study, step, run_ids).data.to_dict("records")


def test_each_configuration_is_a_row_with_its_verdict_and_a_ratio_only_within_its_own_run(toy, monkeypatch):
    folder, _, _ = toy
    first = _promoted("kernels/toy/00_rows.cu", sweep={"threads": [64, 32]})
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Other GPU 1", "compute_capability": "9.0"})
    (folder / "rows_cheap.cu").write_text(STEP_SOURCE.replace("#define COST 4", "#define COST 1"))
    second = _promoted("kernels/toy/rows_cheap.cu", step="rows")
    rows = _rows([first, second])
    assert [r["Run (device)"].split()[0] for r in rows] == [first] * 3 + [second]
    assert rows[0]["Run (device)"] == f"{first} (Test GPU 9000)" and rows[-1]["Run (device)"] == f"{second} (Other GPU 1)"
    by = {r["Part: configuration"]: r for r in rows[:3]}
    own = by["sweep: threads=64 (the step's own)"]
    assert own["long"] == "size 2: 400.0 µs (400.0 µs–400.0 µs), 3 × cuda-graph"
    assert by["sweep: threads=32"]["long"].endswith("; 1.000× the step's own in this run")
    assert own["The book's target"] == "the study sets none for this step"
    assert rows[2]["Part: configuration"].startswith("chapter: ") and rows[2]["Check"].startswith("passed 3 of 3; worst")
    # the other run's file, kept in its run, on its own row: its time stands beside the first, never divided
    assert rows[-1]["Candidate"] == "candidate/toy/rows_cheap.cu"
    assert rows[-1]["long"] == "size 2: 100.0 µs (100.0 µs–100.0 µs), 3 × cuda-graph"


def test_the_books_target_is_met_or_missed_by_a_margin_computed_from_the_row(toy, monkeypatch):
    run = _promoted("kernels/toy/00_rows.cu", sweep={"COST": [1, 3], "SCALE": [2, 5]})
    monkeypatch.setattr(type(STUDY), "targets", lambda self: [
        {"what": "both", "case": "short", "cases": ("short", "long"), "size": 2, "limit_ms": 0.5, "steps": ["rows"]}])
    rows = _rows([run])
    assert rows[0]["The book's target"] == "short + long = 0.2000 ms ≤ 0.5 ms: met by 0.300 ms"
    assert rows[2]["The book's target"] == "short + long = 0.6000 ms ≤ 0.5 ms: missed by 0.100 ms"
    failed = rows[1]
    assert failed["Part: configuration"] == "sweep: COST=1, SCALE=5"
    assert failed["Check"].startswith("failed check") and failed["long"] == "–"
    assert failed["The book's target"] == "not judged: its checks failed"


def test_a_chapter_whose_checks_failed_shows_its_worst_error_and_no_time(toy):
    folder, _, _ = toy
    (folder / "rows_broken.cu").write_text(STEP_SOURCE.replace("#define COST 4", "#define COST 4\n#define BROKEN_BELOW 9"))
    run = _promoted("kernels/toy/rows_broken.cu", step="rows")
    (row,) = _rows([run])
    assert row["Check"].startswith("failed 1 of 3; worst rel_l2") and "(random" in row["Check"]
    assert row["short"] == row["long"] == "–"


def test_a_book_run_or_a_run_of_another_step_is_refused_naming_the_fix(toy):
    from kernelbook.chapter import run_chapter

    book_run = _book_run()
    with pytest.raises(ResultsError, match="names no candidate"):
        _rows([book_run])
    run = _promoted("kernels/toy/00_rows.cu")
    with pytest.raises(ResultsError, match="not tiled"):
        _rows([run], step="tiled")
    with pytest.raises(ResultsError, match="No candidate run"):
        _rows([])
    # the page's call: the chapter it replays is the book's run; the table reads the candidate's
    page = run_chapter(STUDY, "rows", mode="replay")
    assert page.session.run.run_id == book_run
    shown = page.tried([run]).data
    assert [r.split()[0] for r in shown["Run (device)"]] == [book_run, run]
    assert shown.iloc[0]["Candidate"] == "kernels/toy/00_rows.cu (the book's run)"
    assert shown.iloc[1]["Candidate"] == "candidate/toy/00_rows.cu" and "×" not in shown.iloc[1]["long"].split(", 3 ×")[1]
