"""Where the book's prose compares two steps, the records must agree, degree included.

A sentence that compares two steps carries a machine-readable claim beside it in the page's
source::

    <!-- claim: STUDY STEP [DEGREE-]WORD OTHER METRIC CASE [SIZE] -->

STEP and OTHER are steps of the study or, for a time, a library row of its profiles page
(``torch-fp32``, ``cudnn-tf32-channels-last`` …), read from the recorded library run.

WORD is ``faster``/``slower`` (a time: smaller is faster) or ``higher``/``lower`` (any other
metric, e.g. the tensor pipe's share of peak or the instruction count); DEGREE, when the prose
says one, is ``slightly`` (the two differ by less than ``SLIGHTLY`` of the larger), ``much`` (by
``MUCH``× or more) or ``within`` (less than 5 % apart, whatever the direction). METRIC is read from
the step's timings, else from its Nsight Compute part, else from its compiler part (SASS counts). This test reads every claim of every page
and checks its direction and degree against the recordings the page replays; a second test finds
every degree word of the prose ("slightly faster", "much busier", "far fewer" …) and requires a
claim with that degree in the same paragraph, so no adjective goes unchecked.
"""

from __future__ import annotations

import importlib
import re

import pytest

from kernelbook import paths
from kernelbook.chapter import load_recorded
from kernelbook.evidence.ncu import load_ncu
from kernelbook.report import ANY_BATCH, find_record
from kernelbook.session import replayed

CLAIM = re.compile(r"<!-- claim: (\S+) (\S+) (?:(slightly|much|within)-)?(faster|slower|higher|lower|same) "
                   r"(\S+) (\S+) (\S+)(?: (\d+))? -->")
SLIGHTLY = 0.10   # "slightly": less than 10 % apart
MUCH = 1.5        # "much", "far": 1.5x or more apart
WITHIN = 0.05
#: Degree words of the prose and the claim degree each needs beside it.
DEGREE_WORDS = {"slightly": "slightly", "marginally": "slightly", "a little": "slightly", "barely": "slightly",
                "much": "much", "far": "much", "significantly": "much", "substantially": "much",
                "several times": "much", "sharply": "much"}
COMPARATIVES = ("faster", "slower", "busier", "higher", "lower", "better", "worse", "more", "less", "quicker",
                "larger", "smaller", "fewer", "greater")
PROSE_DEGREE = re.compile(r"\b(" + "|".join(DEGREE_WORDS) + r")\s+(" + "|".join(COMPARATIVES) + r")\b", re.I)


def _pages():
    return sorted(p for p in paths.book_dir().rglob("*.md") if "_templates" not in p.parts)


def claims():
    found = []
    for path in _pages():
        for match in CLAIM.finditer(path.read_text()):
            g = match.groups()
            found.append(pytest.param(*g, id=f"{path.stem}:{g[1]}-{g[2] or ''}{g[3]}-{g[4]}-{g[5]}-{g[6]}"))
    return found


def value(study, step: str, metric: str, case: str, at):
    if step not in study.steps.slugs():  # a library row of the profiles page (torch-fp32, cudnn-tf32 …)
        from kernelbook.evidence.vendor import vendor

        rows = [r for r in vendor(study, "replay").records if r.get("step") == step]
        assert rows, f"{step} is neither a step of {study.name} nor a recorded library row"
        found = find_record(rows, metric, case, at)
        assert found is not None and found["value"] is not None, f"no {metric} for {case} recorded for {step}"
        return found["value"]
    chapter = load_recorded(study, step)
    assert chapter is not None, f"{step} is not recorded"
    found = find_record(chapter.records, metric, case, at)
    if found is None:  # a profiler metric: the step's Nsight Compute part
        found = find_record(load_ncu(study, step).records, metric, case)
    if found is None:  # a compiler metric (ptxas, SASS counts): summed over the case's kernels
        compiled = replayed(f"{study.part(step)}-compiler", study.name).records
        values = [r["value"] for r in compiled if r["metric"] == metric and r["layer"] == case and r["value"] is not None]
        found = {"value": sum(values)} if values else None
    assert found is not None and found["value"] is not None, f"no {metric} for {case} recorded for {step}"
    return found["value"]


def judge(a: float, b: float, degree: str | None, word: str) -> str | None:
    """Why the claim "a is [degree] word than b" is false, or None when the numbers bear it out."""
    bigger = {"faster": a < b, "slower": a > b, "higher": a > b, "lower": a < b, "same": True}[word]
    if degree == "within" or word == "same":
        return None if abs(a - b) <= WITHIN * max(abs(a), abs(b)) else f"{a} and {b} are more than 5 % apart"
    if not bigger:
        return f"{a} is not {word} than {b}"
    ratio = max(abs(a), abs(b)) / max(min(abs(a), abs(b)), 1e-300)
    if degree == "slightly" and ratio - 1 >= SLIGHTLY:
        return f"{a} against {b} is {ratio:.2f}x apart, not 'slightly' (under {SLIGHTLY:.0%})"
    if degree == "much" and ratio < MUCH:
        return f"{a} against {b} is only {ratio:.2f}x apart, not 'much' ({MUCH}x or more)"
    return None


def test_a_library_row_is_read_and_a_wrong_name_refused():
    from kernelbook.mlp import STUDY

    assert value(STUDY, "torch-fp32", "op_time_ms", "100x100", ANY_BATCH) > 0
    with pytest.raises(AssertionError, match="neither a step"):
        value(STUDY, "torch-fp33", "op_time_ms", "100x100", ANY_BATCH)


def test_the_judge_rejects_wrong_degrees():
    assert judge(2.229, 2.293, "slightly", "faster") is None
    assert judge(2.229, 2.293, None, "slower") is not None          # the direction is wrong
    assert judge(4.0, 0.8, "much", "higher") is None
    assert judge(1.0, 1.3, "much", "faster") is not None            # 1.3x is not "much"
    assert judge(1.0, 1.5, "slightly", "faster") is not None        # 1.5x is not "slightly"
    assert judge(1.0, 1.04, "within", "faster") is None and judge(1.0, 1.2, "within", "faster") is not None


@pytest.mark.parametrize("study_name, step, degree, word, other, metric, case, size", claims())
def test_claim_agrees_with_the_records(study_name, step, degree, word, other, metric, case, size):
    study = importlib.import_module(f"kernelbook.{study_name}").STUDY
    at = int(size) if size else ANY_BATCH
    a, b = value(study, step, metric, case, at), value(study, other, metric, case, at)
    why = judge(a, b, degree, word)
    assert why is None, f"{study_name} {step} against {other}, {metric} {case} {size or ''}: {why}"


def degree_words():
    out = []
    for path in _pages():
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if paragraph.lstrip().startswith(("```", ":tags:")) or "*Prediction.*" in paragraph:
                continue  # code, and predictions (written before measuring; the outcome is judged below them)
            prose = re.sub(r"<!--.*?-->", " ", paragraph, flags=re.S)
            for match in PROSE_DEGREE.finditer(prose):
                out.append(pytest.param(path.relative_to(paths.book_dir()).as_posix(), match.group(0), paragraph,
                                        id=f"{path.stem}:{match.group(0)}"))
    return out


@pytest.mark.parametrize("page, words, paragraph", degree_words())
def test_every_degree_word_is_checked_by_a_claim(page, words, paragraph):
    needed = DEGREE_WORDS[re.split(r"\s+", words.lower())[0] if not words.lower().startswith(("a little", "several times"))
                          else " ".join(words.lower().split()[:2])]
    degrees = [m.group(3) for m in CLAIM.finditer(paragraph)]
    assert needed in degrees, (f"{page}: '{words}' has no '{needed}-' claim in its paragraph; add "
                               f"<!-- claim: STUDY STEP {needed}-WORD OTHER METRIC CASE [SIZE] --> beside it "
                               "or say it with a number the page shows")


def test_the_degree_finder_sees_adjectives():
    assert PROSE_DEGREE.search("the tensor pipe is much busier") and PROSE_DEGREE.search("slightly slower at 5x5")
    assert not PROSE_DEGREE.search("slower than the sweep")


NO_CLAIM = re.compile(r"<!-- no-claim: .+? -->")


def comparisons():
    """Every paragraph of prose that says one thing is faster or slower than another."""
    out = []
    for path in _pages():
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if paragraph.lstrip().startswith(("```", ":tags:")) or "*Prediction.*" in paragraph:
                continue
            prose = re.sub(r"<!--.*?-->", " ", paragraph, flags=re.S)
            if re.search(r"\b(faster|slower)\b", prose) and not re.search(r"\d{3}_[0-9a-f]{16}\.txt", prose):
                out.append(pytest.param(paragraph, id=f"{path.stem}:{prose.strip()[:30]}"))
    return out


@pytest.mark.parametrize("paragraph", comparisons())
def test_every_faster_or_slower_is_checked_or_says_why_not(paragraph):
    """A paragraph that compares speeds carries a claim the records check, or a ``no-claim`` note
    saying why no record can (a general fact, development runs that were not recorded…). Paragraphs
    quoting a write-up are checked by tests/test_quotes.py instead."""
    assert CLAIM.search(paragraph) or NO_CLAIM.search(paragraph), (
        "a speed comparison with no <!-- claim: … --> and no <!-- no-claim: why --> beside it: "
        + paragraph.strip()[:200])
