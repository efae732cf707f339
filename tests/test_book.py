"""The real book, replayed from the recorded runs in data/results/ and built strictly.

This is what `make book` does on a machine without a GPU; it takes minutes, so these tests are
marked ``book``: `make test` leaves them out and `make test-book` (which .ci/run calls after
`make test`) runs them, with one strict whole-book build (the ``built_book`` fixture of
tests/conftest.py, shared with tests/test_words.py).
"""

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.book]


def _text(path):
    page = path.read_text()
    page = re.sub(r"<(script|style).*?</\1>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_every_chapter_notebook_replays(built_book):
    _, report = built_book
    names = [nb.name for nb in report.notebooks]
    assert "lenet/00_baseline" in names and len(names) >= 6
    assert all(nb.status == "ok" for nb in report.notebooks)


def _shown_run(part: str):
    """The run a replaying page of LeNet reads ``part`` from (``bookrecording.replay_target``)."""
    from kernelbook.bookrecording import replay_target
    from kernelbook.lenet import STUDY
    from kernelbook.session import pinned_to, replayed

    with pinned_to(None):
        replay_target(STUDY, "replay", None, None)
        return replayed(part, "lenet").session.run


def test_baseline_page_shows_the_milestone_table_with_its_provenance(built_book):
    html, _ = built_book
    text = _text(html / "book" / "lenet" / "00_baseline.html")
    for column in ("Batch Size", "Op Time 1", "Op Time 2", "Layer Time 1", "Layer Time 2",
                   "Total Execution Time", "Accuracy"):
        assert column in text
    run = _shown_run("lenet-baseline")
    assert "Replayed (not measured now" in text
    assert run.device in text and run.commit in text and run.run_id in text
    assert "Measured now" not in text
    assert "000_5388518cb9c15bca.txt" in text  # the seeds' reported numbers, labelled
    # the milestone table's medians, then its min-max over the repeats in a table of its own
    assert re.search(r"10000 [\d.]+ (ms|µs|s) [\d.]+ (ms|µs|s)", text), "no 10000-image row of medians"
    assert re.search(r"10000 [\d.]+ (ms|µs|s)–[\d.]+ (ms|µs|s)", text), "no 10000-image row of spreads"


def test_every_chapter_page_is_labelled_replayed(built_book):
    html, report = built_book
    for nb in report.notebooks:
        text = _text(html / "book" / f"{nb.name}.html")
        # replayed, or (a step no run holds yet) saying so
        assert ("Replayed" in text or "replayed" in text or "not recorded yet" in text) and "Measured now" not in text, \
            nb.name


CHAPTERS = ("lenet", "mlp", "vgg")


def _pages(html):
    return [p for p in sorted((html / "book").rglob("*.html"))]


def test_no_page_shows_raw_exception_text(built_book):
    html, _ = built_book
    for page in _pages(html):
        text = _text(page)
        for marker in ("Traceback (most recent call last)", "CUDARuntimeError", "cudaError", "KernelbookError",
                       "PapermillExecutionError", "NotJSONError"):
            assert marker not in text, f"{page.name} shows {marker!r}"


def test_every_chapter_has_its_banner_once_and_its_tables(built_book):
    html, report = built_book
    for nb in report.notebooks:
        if not nb.name.split("/")[-1][:2].isdigit() or nb.name.endswith("90_profiles"):
            continue
        page = (html / "book" / f"{nb.name}.html").read_text()
        banners = page.count("Every number on this page comes from this recording") + page.count("Not recorded.")
        assert banners == 1, nb.name  # the recording's provenance, or (no run holds the step yet) that
        assert page.count('class="kernelbook-table') >= 3, nb.name  # tables of numbers, or of words (kernelbook-wrap)
        assert "OUTCOME" not in page and "CAPITALS" not in _text(html / "book" / f"{nb.name}.html"), nb.name


def test_every_internal_link_and_download_resolves(built_book):
    html, _ = built_book
    for page in [html / "index.html"] + _pages(html):
        for target in re.findall(r'(?:href|src)="([^"#?]+)', page.read_text()):
            if re.match(r"^(https?:|mailto:|data:|javascript:)", target):
                continue
            assert (page.parent / target).resolve().exists(), f"{page.relative_to(html)} links to missing {target}"


def test_no_launch_button_points_at_a_notebook_that_does_not_exist(built_book):
    html, _ = built_book
    for page in _pages(html):
        text = page.read_text()
        assert "mybinder.org" not in text and "colab.research.google.com" not in text, page.name
        for target in re.findall(r'href="([^"]+\.ipynb)"', text):
            assert (page.parent / target).resolve().exists(), f"{page.name}: download {target} is missing"


def test_the_parameters_cell_is_shown_once(built_book):
    html, report = built_book
    text = _text(html / "book" / "lenet" / "00_baseline.html")
    assert text.count("batch_sizes = ") == 1, "the parameters appear twice (papermill's injected cell shown)"


# ----------------------------------------------------------------------------- what a reader sees
# The rules are in tests/page_rules.py (each shown to fail on a fabricated page in
# tests/test_page_rules.py); here they read every built page of the real book.


def _chapters(html):
    return [p for p in _pages(html) if p.parent.name in CHAPTERS]


def _recorded(page) -> bool:
    """False for a chapter whose step no run holds yet: it has no tables that its prose could cite
    (the rules below compare a page's prose with its recorded tables)."""
    return "Not recorded." not in page.read_text()


def test_no_figure_carries_an_inline_size(built_book):
    from page_rules import inline_image_sizes, soup

    html, _ = built_book
    bad = {p.name: found for p in _pages(html) if (found := inline_image_sizes(soup(p.read_text())))}
    assert not bad, bad
    css = (html / "_static" / "kernelbook.css").read_text()
    assert "height: auto !important" in css  # and a rule that would win over one anyway


# Tables at 1280 and 400 px are measured in headless Chromium: tests/test_layout.py.


def test_every_metric_a_sentence_cites_is_on_its_page(built_book):
    from page_rules import cited_absent_metrics, soup

    html, _ = built_book
    bad = {p.relative_to(html).as_posix(): found for p in _chapters(html)
           if _recorded(p) and (found := cited_absent_metrics(soup(p.read_text())))}
    assert not bad, bad


def test_no_typed_number_in_prose(built_book):
    from page_rules import soup, typed_numbers

    html, _ = built_book
    pages = _chapters(html) + [html / "book" / "summary.html"]  # the intro and glossary define, they measure nothing
    bad = {p.relative_to(html).as_posix(): found for p in pages
           if _recorded(p) and (found := typed_numbers(soup(p.read_text())))}
    assert not bad, bad


def test_titles_name_their_study_and_the_banner_comes_first(built_book):
    html, report = built_book
    titles = {}
    for nb in report.notebooks:
        page = (html / "book" / f"{nb.name}.html").read_text()
        title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
        titles.setdefault(title, []).append(nb.name)
        if nb.name.split("/")[0] in CHAPTERS:
            assert title.split(",")[0].split(":")[0].strip() in ("LeNet", "MLP", "VGG layer"), (nb.name, title)
        if nb.name.split("/")[-1][:2].isdigit() and not nb.name.endswith("90_profiles"):
            body = page[page.index("<article"):]
            first = body.index("<h2")  # the provenance (the banner, or a sweep's recording) before any section
            head = body[:first].lower()
            assert "replayed" in head or "measured now" in head or "not recorded" in head, nb.name
    assert all(len(v) == 1 for v in titles.values()), {t: v for t, v in titles.items() if len(v) > 1}


def test_kernel_source_is_its_own_labelled_block(built_book):
    html, _ = built_book
    page = (html / "book" / "lenet" / "03_tiled.html").read_text()
    assert '<details class="kernelbook-source"><summary>Kernel source: <code>kernels/lenet/03_tiled.cu' in page
    assert "Show code cell output" not in page
