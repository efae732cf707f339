"""Where the book's prose says "faster" or "slower", the records must agree.

A sentence that compares two steps carries a machine-readable claim beside it in the page's
source, ``<!-- claim: STUDY STEP faster|slower OTHER METRIC CASE [SIZE] -->``; this test reads
every claim of every page and checks its direction against the recordings the page replays.
"""

from __future__ import annotations

import importlib
import re

import pytest

from kernelbook import paths
from kernelbook.chapter import load_recorded
from kernelbook.report import ANY_BATCH, find_record

CLAIM = re.compile(r"<!-- claim: (\S+) (\S+) (faster|slower) (\S+) (\S+) (\S+)(?: (\d+))? -->")


def claims():
    found = []
    for path in sorted(paths.book_dir().rglob("*.md")):
        for match in CLAIM.finditer(path.read_text()):
            found.append(pytest.param(*match.groups(), id=f"{path.stem}:{match.group(2)}-{match.group(3)}-{match.group(4)}-{match.group(6)}"))
    return found


@pytest.mark.parametrize("study_name, step, direction, other, metric, case, size", claims())
def test_claim_agrees_with_the_records(study_name, step, direction, other, metric, case, size):
    study = importlib.import_module(f"kernelbook.{study_name}").STUDY
    at = int(size) if size else ANY_BATCH
    mine, theirs = load_recorded(study, step), load_recorded(study, other)
    assert mine is not None and theirs is not None, "a claimed step is not recorded"
    a, b = find_record(mine.records, metric, case, at), find_record(theirs.records, metric, case, at)
    assert a is not None and b is not None, f"no {metric} for {case} recorded"
    if direction == "faster":
        assert a["value"] < b["value"], f"{step} {a['value']} is not faster than {other} {b['value']}"
    else:
        assert a["value"] > b["value"], f"{step} {a['value']} is not slower than {other} {b['value']}"
