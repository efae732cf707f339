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
