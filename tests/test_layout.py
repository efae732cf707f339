"""The built book as a browser lays it out: every page of the strict whole-book build, opened in
headless Chromium (tests/browser.py) at 1280 px and at 400 px.

- At 1280 px no page scrolls sideways, no table is wider than its article, and every key column
  of every table (its first, and those tests/page_rules.py's KEY_HEADER names: this step, the
  speed-ups, Total Execution Time, Accuracy, Result, …) is in view without scrolling.
- At 400 px a table may scroll sideways, but its first column stays in view while it does.
- No page's scripts raise an error while it loads.
- No cell output shows a warning or anything written to stderr.
- Every figure was checked when drawn (kernelbook.plots.figure_faults) and has no fault.

Chromium is required, not optional: `make test-book` installs it (`make browser`).
"""

import re

import pytest
from browser import INSTALL, Browser, book_pages, executable
from page_rules import layout_faults, scrolls, soup

pytestmark = [pytest.mark.slow, pytest.mark.book]

WARNING_TEXT = re.compile(r"\b\w*Warning:|Traceback \(most recent call last\)|^\s*warnings\.warn", re.M)


@pytest.fixture(scope="module")
def layout(built_book):
    """{page: {width: measurements}} of every page of the built book, and the script errors seen."""
    html, _ = built_book
    assert executable(), f"headless Chromium is not on PATH: {INSTALL}"
    measured, errors = {}, {}
    with Browser() as browser:
        for page in book_pages(html):
            name = page.relative_to(html).as_posix()
            for width in (1280, 400):
                browser.open(page, width)
                measured.setdefault(name, {})[width] = browser.measure_tables()
                if browser.errors:
                    errors.setdefault(name, set()).update(browser.errors)
    return measured, errors


def test_every_key_column_is_in_view_at_1280_px(layout):
    measured, _ = layout
    tables = sum(len(m[1280]["tables"]) for m in measured.values())
    scrolling = sorted((name, t["caption"][:60]) for name, m in measured.items()
                       for t in m[1280]["tables"] if scrolls(t))
    print(f"\n{len(scrolling)} of {tables} tables scroll sideways at 1280 px (their key columns in view)")
    assert tables > 100  # the whole book was measured
    bad = {name: found for name, m in measured.items() if (found := layout_faults(m[1280]))}
    assert not bad, bad


def test_a_scrolling_table_keeps_its_first_column_at_400_px(layout):
    measured, _ = layout
    bad = {name: found for name, m in measured.items() if (found := layout_faults(m[400], narrow=True))}
    assert not bad, bad


def test_no_page_raises_a_script_error(layout):
    _, errors = layout
    assert not errors, errors


def test_no_output_shows_a_warning(built_book):
    """Neither a page nor the executed notebook behind it (the reader's download, the batch's
    record) holds a warning: no stderr stream, no "…Warning:" in any output."""
    import json

    html, _ = built_book
    bad = {}
    for page in book_pages(html):
        for out in soup(page.read_text()).select(".cell_output"):
            stderr = out.select(".stderr")
            text = out.get_text("\n")
            if stderr or WARNING_TEXT.search(text):
                shown = stderr[0].get_text(" ", strip=True) if stderr else WARNING_TEXT.search(text).group(0)
                bad.setdefault(page.relative_to(html).as_posix(), []).append(shown[:160])
    for notebook in sorted((html.parents[1] / "executed").rglob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", "")) if out.get("output_type") == "stream" else ""
                if out.get("name") == "stderr" or WARNING_TEXT.search(text):
                    bad.setdefault(notebook.name, []).append(text.strip()[:160])
    assert not bad, bad


def test_every_figure_was_checked_and_passed(built_book):
    """Each figure is shown by kernelbook.plots.figure_html: a <picture> of its PNG at the reading
    width and of a narrow variant for a phone, its output metadata holding what figure_faults found
    in the drawn figure (a run footer; no two series of a panel alike in colour and marker; no
    legend over a panel's data or a tick label) and the smallest text at either width (at least
    9 CSS px). Every figure of the book was checked, and none has a fault."""
    import json

    from kernelbook.plots import FIGURE_METADATA

    html, _ = built_book
    executed = html.parents[1] / "executed"
    figures, bad = 0, {}
    for notebook in sorted(executed.rglob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "image/png" in data:  # a figure drawn around kernelbook.plots: no narrow variant, no checks
                    bad.setdefault(notebook.name, []).append("a figure shown as a bare PNG")
                if "kernelbook-figure" not in "".join(data.get("text/html", "")):
                    continue
                figures += 1
                checked = out.get("metadata", {}).get("text/html", {}).get(FIGURE_METADATA)
                if checked is None or checked["faults"]:
                    bad.setdefault(notebook.name, []).extend(checked["faults"] if checked else ["not checked"])
    assert figures >= 50, figures
    assert not bad, bad
