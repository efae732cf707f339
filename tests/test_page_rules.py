"""The page rules of tests/page_rules.py on fabricated pages: each rule finds what it should and
passes what it should (the real book is checked in tests/test_book.py)."""

import re

import pytest

# BeautifulSoup comes with the book's toolchain (jupyter-book); a GPU machine that runs only the GPU
# tests may lack it, and its collection must not fail there.
pytest.importorskip("bs4")

from page_rules import (cited_absent_metrics, inline_image_sizes, offscreen_key_columns, soup,  # noqa: E402
                        typed_numbers)


def page(body: str):
    return soup(f"<html><body><article>{body}</article></body></html>")


def table(headers, rows, caption="t"):
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return (f'<div class="cell_output"><table class="kernelbook-table"><caption>{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def test_an_inline_image_size_is_found():
    bad = page('<div class="cell_output"><img src="a.png" style="width: 688px; height: 705px;"/></div>')
    good = page('<div class="cell_output"><img src="a.png" alt=""/></div>')
    assert inline_image_sizes(bad) and not inline_image_sizes(good)


def test_a_key_column_past_the_reading_width_is_found():
    narrow = page(table(["Layer", "This step (x)", "vs previous"], [["C1", "1.0 ms", "+5.0 %"]]))
    assert not offscreen_key_columns(narrow)
    wide = page(table(["Layer", "Metric", "Baseline (a-very-long-step-name)", "Previous step (another-long-one)",
                       "This step (x)"], [["C1", "Achieved occupancy [%]", "1" * 60, "2" * 60, "3"]]))
    assert offscreen_key_columns(wide)
    # the same wide table with the key columns first fits: what follows them may scroll
    fixed = page(table(["Layer", "This step (x)", "vs previous", "Baseline (a-very-long-step-name)"],
                       [["C1", "3", "+1 %", "1" * 200]]))
    assert not offscreen_key_columns(fixed)


def test_a_metric_cited_but_not_shown_is_found():
    prose = "<p>Bank conflicts fall by half.</p>"
    assert cited_absent_metrics(page(prose + table(["Metric", "This step (x)"], [["SM [%]", "1"]])))
    assert not cited_absent_metrics(page(prose + table(["Metric", "This step (x)"], [["Shared bank conflicts", "1"]])))


def test_a_typed_number_is_found_unless_the_page_shows_it():
    shown = table(["Step", "Time"], [["tf32", "419,863"], ["x", "2.229 ms"]])
    assert typed_numbers(page("<p>It runs at 423 GFLOP/s.</p>" + shown))
    assert not typed_numbers(page("<p>It takes 2.229 ms.</p>" + shown))
    assert not typed_numbers(page("<p>It takes 2,229 µs.</p>" + shown))       # the same time, other unit
    assert not typed_numbers(page("<p>Seed 003_4c82151979bc1aa8.txt reports 28.4993 ms.</p>" + shown))


def test_dimensions_are_not_ratios():
    assert not typed_numbers(page("<p>A 5 × 5 window over a 71 × N matrix, tiles of 2×2.</p>"))
    assert typed_numbers(page("<p>It is 2.4× faster.</p>"))


def test_reported_best_names_wrap_and_numbers_do_not():
    """The summary's table of the write-ups' bests: the long step and source names wrap within the
    reading column (at 1280 px they ran off it), the times stay on one line."""
    from kernelbook import summary
    from kernelbook.lenet import STUDY

    html = summary.reported_best(STUDY).to_html()
    frame = STUDY.reported_best()
    wrapped = {frame.columns.get_loc(c) for c in ("Step", "Source")}
    for col in range(len(frame.columns)):
        rule = re.search(rf"#T_\w+_row0_col{col}[^{{]*\{{([^}}]*)\}}", html)
        assert (rule is not None and "white-space: normal" in rule.group(1)) == (col in wrapped), frame.columns[col]
