"""The page rules of tests/page_rules.py on fabricated pages: each rule finds what it should and
passes what it should (the real book is checked in tests/test_book.py)."""

import re

import pytest

# BeautifulSoup comes with the book's toolchain (jupyter-book); a GPU machine that runs only the GPU
# tests may lack it, and its collection must not fail there.
pytest.importorskip("bs4")

from page_rules import cited_absent_metrics, inline_image_sizes, soup, typed_numbers  # noqa: E402


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


def _measured(heads, client_width, scroll_width, sticky=True, page_width=1280, window=1280):
    """A page as tests/browser.py measures it: one table at x=100, header cells of the given widths."""
    cells, x = [], 100.0
    for text, width in heads:
        cells.append({"text": text, "left": x, "right": x + width})
        x += width
    table = {"caption": "t", "left": 100.0, "right": 100.0 + client_width, "client_width": client_width,
             "scroll_width": scroll_width, "heads": cells, "sticky": sticky}
    return {"window": window, "page_width": page_width, "article": {"left": 100.0, "right": 1000.0},
            "tables": [table]}


def test_layout_faults_find_a_key_column_out_of_view():
    from page_rules import layout_faults, scrolls

    fits = _measured([("Batch Size", 80), ("Op Time 1", 90), ("Total Execution Time", 120), ("Accuracy", 80)],
                     client_width=370, scroll_width=370)
    assert not layout_faults(fits) and not scrolls(fits["tables"][0])
    hidden = _measured([("Batch Size", 80), ("Op Time 1 (min–max)", 600), ("Total Execution Time", 120),
                        ("Accuracy", 80)], client_width=800, scroll_width=880)
    found = layout_faults(hidden)
    assert len(found) == 1 and "'Accuracy'" in found[0]
    # a table that scrolls only past its non-key columns is fine
    tail = _measured([("Test case", 80), ("Result", 60), ("Shape", 900)], client_width=800, scroll_width=1040)
    assert scrolls(tail["tables"][0]) and not layout_faults(tail)
    assert layout_faults(_measured([("a", 10)], 10, 10, page_width=1400))  # the page itself scrolls


def test_layout_faults_at_400_px_want_a_sticky_first_column():
    from page_rules import layout_faults

    scrolling = [("Layer", 60), ("Time", 500)]
    assert not layout_faults(_measured(scrolling, 368, 560, sticky=True, window=400, page_width=400), narrow=True)
    assert layout_faults(_measured(scrolling, 368, 560, sticky=False, window=400, page_width=400), narrow=True)


def test_each_script_is_kept_once():
    from kernelbook.sphinx_html import unique_scripts

    class Script:  # the shape of Sphinx's _JavaScript: a file (None or '' inline), attributes
        def __init__(self, filename, **attributes):
            self.filename, self.attributes = filename, attributes

    thebe = 'const THEBE_JS_URL = "x"'
    scripts = [Script("a.js"), Script(None, body=thebe), Script("b.js", **{"async": "async"}), Script("", body=thebe),
               Script("a.js"), Script("", body="let other = 1")]
    kept = unique_scripts(scripts)
    assert [s.filename for s in kept] == ["a.js", None, "b.js", ""]
    assert sum(s.attributes.get("body") == thebe for s in kept) == 1


def test_figure_faults_find_what_a_reader_cannot_tell_apart():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kernelbook.plots import figure_faults, footer

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([1, 2], [1, 2], "x--", color="C0", label="C1 reported, 001")
    ax.plot([1, 2], [2, 3], "x--", color="C0", label="C1 reported, 002")
    ax.legend(loc="center")  # over the data
    found = figure_faults(fig)
    assert any("share a colour, marker and line style" in f for f in found)
    assert any("covers the data" in f for f in found)
    assert any("no run footer" in f for f in found)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([1, 2], [1, 2], "x--", color="C0", label="C1 reported, 001")
    ax.plot([1, 2], [2, 3], "s--", color="C0", label="C1 reported, 002")
    fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.04), frameon=False)
    footer(fig, "replayed: Test GPU, run 1")
    fig.tight_layout(rect=(0, 0.3, 1, 1))
    assert figure_faults(fig) == []
    plt.close(fig)


def test_a_figure_is_published_and_an_image_from_elsewhere_is_not():
    from kernelbook.publish import html_problems

    png = "data:image/png;base64,iVBORw0KGgo="
    figure = (f'<picture class="kernelbook-figure"><source media="(max-width: 600px)" srcset="{png}">'
              f'<img src="{png}" alt="a title"></picture>')
    assert html_problems(figure) == []
    assert html_problems('<img src="https://evil.example/x.png">')
    assert html_problems('<img src="data:image/svg+xml;base64,PHN2Zz4=">')
    assert html_problems(f'<img src="{png}" onerror="alert(1)">')
    assert html_problems('<div media="print">x</div>')


def test_tick_labels_run_together_are_found_and_turned_upright_in_the_narrow_variant():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kernelbook.plots import colliding_tick_labels, figure_html, footer

    fig, ax = plt.subplots(figsize=(2.5, 2))
    ax.bar([f"{i:02d}" for i in range(17)], range(1, 18))
    footer(fig, "run x")
    assert colliding_tick_labels(fig)  # seventeen labels in 2.5 inches: "000102…"
    _, metadata = figure_html(fig)  # the narrow variant turns them upright: no collision left there
    assert not [f for f in metadata["kernelbook_figure"]["faults"] if "at 400 px" in f]
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.bar(["00", "01", "02"], [1, 2, 3])
    assert not colliding_tick_labels(fig)
    plt.close(fig)


def test_the_narrow_variant_puts_the_key_above_the_first_panel_larger_than_the_floor():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kernelbook.plots import KEY_TEXT_PX, MIN_TEXT_PX, NARROW_IN, NARROW_PX, footer, narrow

    fig, axes = plt.subplots(3, 2, figsize=(7, 8))
    for ax in axes.flat:
        for name in ("baseline", "previous", "this step"):
            ax.plot([1, 2, 3], [1, 2, 3], label=name)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center")
    fig.suptitle("a step against two others")
    footer(fig, "run 20261127T0000Z-abcdef")
    narrow(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (key,) = fig.legends
    first = min((ax for ax in fig.axes if ax.get_visible()), key=lambda ax: -ax.get_position().y1)
    assert key.get_window_extent(renderer).y0 >= first.get_tightbbox(renderer).y1 - 1   # the key, then the panels
    assert fig._suptitle.get_window_extent(renderer).y0 >= key.get_window_extent(renderer).y1 - 1
    px = 72.0 * NARROW_IN / NARROW_PX   # points per CSS px at the phone's width
    assert min(t.get_fontsize() for t in key.get_texts()) >= KEY_TEXT_PX * px - 0.01 > MIN_TEXT_PX * px
    assert min(t.get_fontsize() for t in fig.texts if "run 2026" in t.get_text()) > MIN_TEXT_PX * px
    plt.close(fig)
