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
from kernelbook.report import ANY_SIZE, find_record
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


def _found(pattern, name):
    """One test case per match of ``pattern`` in the book's pages, its groups the arguments and
    ``name(groups)`` its id after the page's stem."""
    return [pytest.param(*match.groups(), id=f"{path.stem}:{name(match.groups())}")
            for path in _pages() for match in pattern.finditer(path.read_text())]


def claims():
    return _found(CLAIM, lambda g: f"{g[1]}-{g[2] or ''}{g[3]}-{g[4]}-{g[5]}-{g[6]}")


def value(study, step: str, metric: str, case: str, at):
    """The recorded value a page of ``study`` shows: read as its pages read (``replay_target``: the
    book's whole recording on the default GPU, else that GPU's newest run holding each part)."""
    from kernelbook.bookrecording import replay_target
    from kernelbook.session import pinned_to

    with pinned_to(None):
        replay_target(study, "replay", None, None)
        return _value(study, step, metric, case, at)


def _value(study, step: str, metric: str, case: str, at):
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

    assert value(STUDY, "torch-fp32", "op_time_ms", "100x100", ANY_SIZE) > 0
    with pytest.raises(AssertionError, match="neither a step"):
        value(STUDY, "torch-fp33", "op_time_ms", "100x100", ANY_SIZE)


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
    at = int(size) if size else ANY_SIZE
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


# ---------------------------------------------------------------------------------------------
# Superlatives and rankings. A sentence that ranks ("the fastest FP32-accurate step", "the highest
# SM throughput of the study", "behind only cuDNN FP16") names the rows it ranks beside it:
#
#     <!-- rank: STUDY STEP WORD ROWS METRIC CASE [SIZE] -->
#
# WORD is ``fastest``/``slowest`` (a time: the smallest is the fastest), ``highest``/``lowest``, or
# ``behind-only:OTHER`` (OTHER and no other row is faster than STEP). ROWS is a comma-separated
# list of steps and library rows, where ``A..B`` stands for the steps from A to B in the study's
# order; STEP is ranked among ROWS and itself. CASE may join cases with "+" (LeNet's C1+C3: their
# op times summed).

RANK = re.compile(r"<!-- rank: (\S+) (\S+) (fastest|slowest|highest|lowest|behind-only:\S+) (\S+) (\S+) (\S+)"
                  r"(?: (\d+))? -->")
#: Ranking words of the prose: each needs a rank claim, a pairwise claim or a no-claim in its paragraph.
RANKING = re.compile(r"\b(fastest|slowest|highest|lowest|behind only|ahead of)\b", re.I)


def rank_rows(study, rows: str) -> list[str]:
    """The rows a rank claim names, with ``A..B`` spelled out from the study's step order."""
    slugs = study.steps.slugs()
    out: list[str] = []
    for item in rows.split(","):
        first, dots, last = item.partition("..")
        if dots:
            assert first in slugs and last in slugs, f"{item}: both ends of a range must be steps of {study.name}"
            out += slugs[slugs.index(first):slugs.index(last) + 1]
        else:
            out.append(item)
    return list(dict.fromkeys(out))


def rank_judge(step: str, word: str, values: dict) -> str | None:
    """Why "STEP is the WORD of ``values``" (row -> value) is false, or None when the numbers bear it out."""
    smaller_first = word in ("fastest", "lowest") or word.startswith("behind-only:")
    order = sorted(values, key=lambda r: values[r] if smaller_first else -values[r])
    if word.startswith("behind-only:"):
        other = word.partition(":")[2]
        ahead = order[:order.index(step)]
        return None if ahead == [other] else (f"ahead of {step} ({values[step]}): {', '.join(ahead) or 'nothing'}, "
                                              f"not {other} alone")
    first = order[0] if word in ("fastest", "highest", "lowest") else order[-1]
    if word == "slowest":
        first = max(values, key=values.get)
    return None if first == step else f"{first} ({values[first]}) is the {word}, not {step} ({values[step]})"


def rank_claims():
    return _found(RANK, lambda g: f"{g[1]}-{g[2]}-{g[4]}-{g[5]}")


@pytest.mark.parametrize("study_name, step, word, rows, metric, case, size", rank_claims())
def test_rank_claim_agrees_with_the_records(study_name, step, word, rows, metric, case, size):
    study = importlib.import_module(f"kernelbook.{study_name}").STUDY
    at = int(size) if size else ANY_SIZE
    ranked = rank_rows(study, rows)
    if word.startswith("behind-only:"):
        ranked.append(word.partition(":")[2])
    ranked = list(dict.fromkeys([step] + ranked))
    assert len(ranked) >= 2, "a ranking needs at least one other row"
    values = {row: sum(value(study, row, metric, c, at) for c in case.split("+")) for row in ranked}
    why = rank_judge(step, word, values)
    assert why is None, f"{study_name} {step} {word} among {rows}, {metric} {case} {size or ''}: {why}"


def test_the_rank_judge_reads_each_word():
    times = {"a": 1.0, "b": 2.0, "c": 3.0}
    assert rank_judge("a", "fastest", times) is None and rank_judge("b", "fastest", times) is not None
    assert rank_judge("c", "slowest", times) is None and rank_judge("c", "highest", times) is None
    assert rank_judge("a", "lowest", times) is None and rank_judge("a", "highest", times) is not None
    assert rank_judge("b", "behind-only:a", times) is None
    assert rank_judge("c", "behind-only:a", times) is not None      # b is ahead too
    assert rank_judge("a", "behind-only:b", times) is not None      # nothing is ahead of a


def test_a_rank_names_its_rows_from_the_step_order():
    from kernelbook.vgg import STUDY

    assert rank_rows(STUDY, "tf32..winograd,cudnn-fp32") == [
        "tf32", "3xtf32", "winograd", "cudnn-fp32"]
    with pytest.raises(AssertionError, match="both ends"):
        rank_rows(STUDY, "tf32-gemm..winograd")


def rankings():
    """Every paragraph of prose that ranks with a superlative or "behind only"/"ahead of"."""
    out = []
    for path in _pages():
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if paragraph.lstrip().startswith(("```", ":tags:", "#")) or "*Prediction.*" in paragraph:
                continue
            prose = re.sub(r"<!--.*?-->", " ", paragraph, flags=re.S)
            for match in RANKING.finditer(prose):
                out.append(pytest.param(paragraph, match.group(0).lower(),
                                        id=f"{path.stem}:{match.group(0)}:{prose.strip()[:24]}"))
    return out


@pytest.mark.parametrize("paragraph, word", rankings())
def test_every_ranking_is_checked_or_says_why_not(paragraph, word):
    """A superlative is checked by a rank claim naming the rows it ranks; "ahead of" and "behind"
    are checked by a rank claim or a pairwise ``faster``/``slower`` claim; a ranking no record can
    check (a write-up's, a definition, a development run) carries a no-claim saying why."""
    pairwise = word == "ahead of" and CLAIM.search(paragraph)
    assert RANK.search(paragraph) or pairwise or NO_CLAIM.search(paragraph), (
        f"'{word}' ranks rows with no <!-- rank: STUDY STEP WORD ROWS METRIC CASE [SIZE] --> (or no-claim) "
        "beside it: " + paragraph.strip()[:200])


# ---------------------------------------------------------------------------------------------
# Where a claim sits. An HTML comment that starts a line inside a paragraph ends the paragraph
# there (CommonMark lets an HTML block interrupt one), and text after it on its line is swallowed
# into that block; a comment between a word and its punctuation renders as "word , next". So a
# claim goes after the punctuation, never at the start of a line that text follows.

def placement_problems(text: str) -> list[str]:
    problems, lines, fence = [], text.split("\n"), False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or line.lstrip().startswith("```"):
            continue
        if line.lstrip().startswith("<!--"):
            end = line.find("-->")
            if end >= 0 and line[end + 3:].strip():
                problems.append(f"line {i + 1}: text after a comment that starts its line is not rendered: {line[:90]}")
            before = next((lines[j].strip() for j in range(i - 1, -1, -1) if not lines[j].lstrip().startswith("<!--")), "")
            after = next((lines[j].strip() for j in range(i + 1, len(lines)) if not lines[j].lstrip().startswith("<!--")), "")
            if before and after and not before.startswith(("#", "```", ":")):
                problems.append(f"line {i + 1}: a comment starting a line cuts its paragraph in two: {line[:90]}")
        for match in re.finditer(r"\s<!--(?:(?!-->).)*-->[ \t]*[,.;:)]", line):
            problems.append(f"line {i + 1}: a comment before punctuation renders as a space before it: "
                            f"…{match.group(0)[-60:]}")
    return problems


def test_the_placement_rule_sees_each_fault():
    assert placement_problems("images\n<!-- claim: x -->, C1 only\nmore") != []
    assert placement_problems("cores <!-- claim: x -->, though") != []
    assert placement_problems("cores, <!-- claim: x --> though\nnext line\n<!-- no-claim: y -->\n\nnew") == []
    assert placement_problems("<!-- no-claim: z -->\nA paragraph after its note.") == []


@pytest.mark.parametrize("page", [pytest.param(p, id=p.stem) for p in _pages()])
def test_claims_sit_where_they_break_no_sentence(page):
    problems = placement_problems(page.read_text())
    assert not problems, f"{page.relative_to(paths.book_dir())}: " + "; ".join(problems)


def test_a_computed_sentence_missing_a_value_fails_the_page():
    """The verdict's sentences are computed; one that lost a value raises (the notebook fails, and
    the strict build refuses it) instead of printing a blank where the number belongs."""
    from kernelbook.chapter import whole_sentence
    from kernelbook.errors import MissingValue

    fine = "C1 at images 10,000: 0.516 ms, 1.07× faster than the previous step (hopper-final, 0.550 ms)."
    assert whole_sentence(fine) == fine
    assert whole_sentence("steps 00–12 (run a), at 5 – 6 µs") is not None
    for broken in ("C1 at images 10,000: –, 1.07× faster", "at 10,000 images , C1 only slightly",
                   "takes None ms", "a ratio of nan×", "the library () is ahead"):
        with pytest.raises(MissingValue, match="lacks a value"):
            whole_sentence(broken)
