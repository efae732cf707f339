"""A step's verdict names the targets it is eligible for, and a missed target says by how much
(read from the recorded VGG runs in data/results/; no GPU)."""

import pytest

from kernelbook import results, summary
from kernelbook.chapter import load_recorded
from kernelbook.vgg import STUDY


def _chapter(step):
    chapter = load_recorded(STUDY, step)
    if chapter is None:
        pytest.skip(f"{step} is not recorded")
    return chapter


def test_a_step_before_the_last_shows_only_its_own_targets():
    lines = summary.opening_lines(STUDY, _chapter("hopper-tf32"))
    assert len(lines) == 1 and lines[0].startswith("Target: TF32 on Hopper's path")
    lines = summary.opening_lines(STUDY, _chapter("hopper-3xtf32"))
    assert len(lines) == 1 and lines[0].startswith("Target: FP32-accurate on Hopper's path")


def test_the_last_step_shows_every_target():
    last = STUDY.steps.steps[-1].slug
    assert len(summary.opening_lines(STUDY, _chapter(last))) == len(STUDY.targets())


def test_a_missed_target_says_by_how_much():
    if not results.list_runs():
        pytest.skip("no recorded run")
    frame = summary.target_frame(STUDY)
    for _, row in frame.iterrows():
        if row["Verdict"].startswith("missed"):
            assert row["Verdict"].startswith("missed by ") and "× the limit" in row["Verdict"], row["Verdict"]


def test_the_final_step_is_set_beside_the_fastest_other_fp32_accurate_step_of_its_run():
    """vgg/10's verdict names the fastest of the other FP32-accurate steps of the same run (read
    here from the records) and says by how much the final step is slower or faster."""
    from kernelbook.report import find_record

    chapter = _chapter("final")
    op = find_record(chapter.records, "op_time_ms", "B1")
    run_id = chapter.session.run.run_id
    times = {}
    for step in STUDY.steps:
        if step.slug != "final" and getattr(step.impl, "tolerance", 1.0) <= 1e-5:
            other = load_recorded(STUDY, step.slug)
            if other is not None and other.session.run.run_id == run_id:
                times[step.slug] = find_record(other.records, "op_time_ms", "B1")["value"]
    (line,) = STUDY.against_fp32_accurate(chapter, op)
    best = min(times, key=times.get)
    assert f"({best})" in line and run_id in line
    assert "hopper-split" in times and "winograd" in times and "tf32" not in times
    if times[best] < op["min"] and op["value"] / times[best] > 1.001:
        assert f"{(op['value'] / times[best] - 1) * 100:.1f} % slower" in line or "overlap" in line
