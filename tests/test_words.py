"""The product speaks only of its subject: no words about how it was made.

Pages, code, tests, scripts, the README and folder names name kernels, steps, runs and the book's
targets, never the way the work was organised: a numbered working sitting, a numbered attempt on
the GPU or a folder named for one, a numbered ticket, a ticket's limit or the tracker that holds
it, or the loan of a machine (the patterns below spell each). A development result is named by its
run id, like any other.

``session`` stays a word of the code: the module ``kernelbook.session``, its ``Session`` class and
``session.recorded`` are the measure-or-replay primitive, so the patterns below match only the
process sense (a number after it, or "this"/"a later"/"development" before it), and the one place
that may mention the word freely in prose, the book's pages, is checked strictly.

The first tests read the tracked tree (``git ls-files``); the last one, marked ``book``, reads the
built HTML of the whole book (tests/test_book.py's strict replay and build).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kernelbook import paths

#: Process words, anywhere in a tracked text file: (what it is, pattern).
PROCESS_WORDS = [
    ("a numbered session", re.compile(r"\b[Ss]essions? ?#?[0-9]+")),
    ("a session of work", re.compile(r"\b(?:[Tt]his|[Tt]hat|[Ll]ater|[Ee]arlier|[Nn]ext|[Pp]revious|[Ff]irst|[Ll]ast"
                                     r"|[Dd]evelopment|[Cc]oding|[Ww]ork(?:ing)?) sessions?\b|"
                                     r"\b[Tt]he session that\b")),
    ("a numbered call", re.compile(r"\b(?:[Dd]evice )?[Cc]alls? ?#?[0-9]+(?![0-9])")),
    ("a numbered issue", re.compile(r"\b[Ii]ssue(?: #?| ?#)[0-9]+\b")),
    ("a ticket's limit", re.compile(r"\b[Ii]ssue['’]s (?:\S+ )?(?:limit|target|goal)s?\b")),
    ("a ticket tracker", re.compile(r"\b[Ii]ssue[- ]tracker\b")),
    ("a device loan", re.compile(r"\b[Dd]evice loan\b")),
    ("a sitting-numbered path", re.compile(r"\bs[0-9]+-s[0-9]+\b")),
]

#: On the book's pages (book/**/*.md and the built HTML) the word itself is prose, never code.
PAGE_WORDS = PROCESS_WORDS + [("the word session", re.compile(r"\b[Ss]essions?\b"))]

#: A folder named for a numbered sitting or a numbered attempt (two numbered sittings joined by a
#: hyphen, or the attempt's word followed by its number).
PROCESS_FOLDER = re.compile(r"^(?:.*[Ss]ession.*|.*call[0-9].*|s[0-9]+-s[0-9]+.*)$")
#: A file named for a numbered call or sitting (a module named ``session`` is the code's word).
PROCESS_FILE = re.compile(r"call[0-9]|\bs[0-9]+-s[0-9]+\b")

THIS_FILE = "tests/test_words.py"


def find(text: str, words) -> list[tuple[int, str, str]]:
    """(line number, what, line) for every process word in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in words:
            if pattern.search(line):
                found.append((number, what, line.strip()[:160]))
    return found


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=paths.REPO_ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def text_of(path: str) -> str | None:
    """A tracked file's text, or None for a binary file (or one deleted but not yet committed)."""
    try:
        data = (paths.REPO_ROOT / path).read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def is_page(path: str) -> bool:
    return path.startswith("book/") and path.endswith(".md")


def report(hits: dict[str, list]) -> str:
    return "\n".join(f"{path}:{n}: {what}: {line}" for path, found in hits.items() for n, what, line in found)


# ------------------------------------------------------------------------------------ the patterns


def spelt(text: str) -> str:
    """A sample written so that this file itself holds no process phrase: ``~`` is a space, ``·``
    joins (``spelt("call·1")`` is the folder name the pattern must catch)."""
    return text.replace("~", " ").replace("·", "")



@pytest.mark.parametrize("line", [
    spelt("development runs (data/bench/mlp/NOTES.md, Session~3)"), "sessions 4-6", "in this session",
    "a later session measured it", "The session that built the engine", "device call 1, 11:15 UTC",
    "calls 1, 4, 7", "call5_final", spelt("asked by issue~20"), spelt("Issue~19's targets"), "see issue #7", "under the issue's TF32 limit",
    spelt("set in its issue~tracker"), "lost its device loan", "data/bench/mlp/s6-s19/"])
def test_each_process_phrase_is_caught(line):
    assert find(line, PROCESS_WORDS), line


@pytest.mark.parametrize("line", [
    "from kernelbook import session", "chapter.session.run.run_id", "session.recorded(name, ...)",
    "session.Session('lenet-baseline', 'measure', run, 'test')", "the session is made by hand",
    "the warps issue few instructions", "each issue four wgmma per k-block", "issues 64·K FMAs",
    "per call in a CUDA graph", "one call of the kernel", "the call is under the book's target",
    "run 20261123T2111Z-62269e", "a range of s0 to s1", "auto issue3 = [&](float (&part)[NACC])", "kernelbook/session.py"])
def test_code_words_and_ordinary_prose_pass(line):
    assert not find(line, PROCESS_WORDS), line


def test_pages_refuse_the_word_itself():
    assert find("the first version was timed in a development run (see the session notes)", PAGE_WORDS)
    assert not find("the first version was timed in development (run 20261123T2111Z-62269e)", PAGE_WORDS)


def test_folder_and_file_names():
    assert PROCESS_FOLDER.match(spelt("call·1")) and PROCESS_FOLDER.match("s6-s19") and PROCESS_FOLDER.match("session-3")
    assert not PROCESS_FOLDER.match("mlp") and not PROCESS_FOLDER.match("results")
    assert PROCESS_FILE.search("call2_vgg_hopper.json") and PROCESS_FILE.search("s4-s19.txt")
    assert not PROCESS_FILE.search("session.py") and not PROCESS_FILE.search("test_session_report.py")


# ------------------------------------------------------------------------------------ the tree


def test_the_tree_speaks_only_of_its_subject():
    hits = {}
    for path in tracked():
        if path == THIS_FILE:
            continue
        text = text_of(path)
        if text is None:
            continue
        found = find(text, PAGE_WORDS if is_page(path) else PROCESS_WORDS)
        if found:
            hits[path] = found
    assert not hits, "process words in tracked files (name the run, the step or the book's target):\n" + report(hits)


def test_no_folder_or_file_is_named_for_how_it_was_made():
    bad = set()
    for path in tracked():
        *folders, name = path.split("/")
        bad.update("/".join(folders[:i + 1]) for i, f in enumerate(folders) if PROCESS_FOLDER.match(f))
        if PROCESS_FILE.search(name):
            bad.add(path)
    assert not bad, "paths named for a sitting or a call:\n" + "\n".join(sorted(bad))


# ------------------------------------------------------------------------------------ the built book


def _page_text(path) -> str:
    page = path.read_text()
    page = re.sub(r"<(script|style).*?</\1>", " ", page, flags=re.S)
    return re.sub(r"[ \t]+", " ", re.sub(r"<[^>]+>", " ", page))


@pytest.mark.slow
@pytest.mark.book
def test_the_built_pages_speak_only_of_their_subject(built_book):
    html, _ = built_book
    pages = sorted(html.rglob("*.html"))
    assert any(p.name == "00_baseline.html" for p in pages)
    hits = {}
    for page in pages:
        found = find(_page_text(page), PAGE_WORDS)
        if found:
            hits[str(page.relative_to(html))] = found
    assert not hits, "process words on built pages:\n" + report(hits)
