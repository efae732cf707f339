"""Nothing a page shows that came from a parameter, a file or the store is live markup.

A hostile value (``<script>``, ``<img onerror>``, quotes, backticks) goes through every parameter
of a page and every string field of a manifest and a part; the book is built, and its HTML must
show the text and run none of it.
"""

from __future__ import annotations

import json
import re

import pytest
from markdown_it import MarkdownIt
from tinybook import FRONT_MATTER, make_book

from kernelbook import results
from kernelbook.escape import md_code, md_safe, md_text, shown_path, shown_value

HOSTILE = "x` <img src=x onerror=alert(1)> <script>alert(2)</script> \"q\" 'r' ``y & [l](javascript:alert(3))"
LIVE = re.compile(r"<script>alert|<img src=x|href=\"javascript", re.I)


def _render(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


@pytest.mark.parametrize("wrap", [md_text, md_code, md_safe])
def test_helpers_leave_no_live_markup(wrap):
    out = _render(f"Device **{wrap(HOSTILE)}** here.")
    assert not LIVE.search(out)
    assert "alert(2)" in out  # shown, not dropped


def test_code_span_keeps_backticks_and_quotes_whole():
    out = _render(md_code("a`b``c 'q' \"d\""))
    assert out.count("<code>") == 1
    assert "a`b``c 'q' &quot;d&quot;" in out


def test_text_is_one_line_and_starts_no_block():
    out = _render("x " + md_text("\n# heading\n- item\n<div>"))
    assert "<h1>" not in out and "<li>" not in out and "<div>" not in out


def test_paths_are_shown_relative_or_by_file_name():
    from kernelbook import paths

    assert shown_path(paths.REPO_ROOT / "data" / "models" / "lenet86.bin") == "data/models/lenet86.bin"
    assert shown_path("/home/someone/secret/weights-86.bin") == "weights-86.bin"
    assert shown_path("relative/w.bin") == "relative/w.bin"
    assert shown_value({"w": ["/home/a/b.bin", 3]}) == {"w": ["b.bin", 3]}


HOSTILE_PAGE = FRONT_MATTER + """
# Hostile chapter

```{code-cell} ipython3
:tags: [parameters]

label = "default"
variant = "baseline"
mode = "auto"
run_id = None
```

```{code-cell} ipython3
import pandas as pd
from IPython.display import display
from kernelbook import report, session
from kernelbook.chapter import run_chapter
from kernelbook.lenet import STUDY

def never():
    raise AssertionError("replay only")

rec = session.recorded("tiny-hostile", "tiny", never, parameters={"label": label, "variant": variant},
                       mode="replay")
display(report.banner(rec))
display(rec)
display(report.styled(pd.DataFrame(rec.records), rec.short_label + " " + label))
chapter = run_chapter(STUDY, "baseline", sizes=[100], mode="replay")
display(chapter.banner())
display(chapter.correctness())
display(chapter.milestone())
display(chapter.verdict())
```
"""


REFUSED_PAGE = FRONT_MATTER + """
# Refused chapter

```{code-cell} ipython3
:tags: [parameters]

label = "default"
mode = "auto"
run_id = None
```

```{code-cell} ipython3
from kernelbook.chapter import run_chapter
from kernelbook.lenet import STUDY

run_chapter(STUDY, "baseline", sizes=[100], mode="replay", weights_path=label)
```
"""


def _hostile_store(root):
    device = {"name": HOSTILE, "compute_capability": HOSTILE, "uuid": HOSTILE}
    run = results.create_run({"device": device, "commit": HOSTILE, "host": HOSTILE, "platform": HOSTILE},
                             root=root)
    # the study is the one its part's name starts with (the store refuses any other), the rest hostile
    rec = results.record("tiny", HOSTILE, HOSTILE, 1, HOSTILE, 1.5, unit=HOSTILE, kernel=HOSTILE)
    run.write_part("tiny-hostile", "tiny", [rec], [{"label": HOSTILE, "error": HOSTILE, "passed": False, "layer": HOSTILE,
                                                        "shape": {"B": 1}}],
                   extra={"note": HOSTILE}, parameters={"label": HOSTILE + "recorded", "variant": HOSTILE})
    # a LeNet chapter whose every string field a page shows is hostile
    from conftest import fabricate_chapter

    chapter_run = fabricate_chapter(root, batches=(100,))
    manifest = json.loads((chapter_run.root / "manifest.json").read_text())
    manifest["device"]["name"] = HOSTILE
    manifest["commit"] = HOSTILE
    (chapter_run.root / "manifest.json").write_text(json.dumps(manifest))
    part_path = chapter_run.root / "parts" / "lenet-baseline.json"
    part = json.loads(part_path.read_text())
    for check in part["checks"]:
        check["label"] = HOSTILE
        check["error"] = HOSTILE
    for record in part["records"]:
        record["unit"] = HOSTILE
    part_path.write_text(json.dumps(part))


@pytest.mark.slow
def test_no_hostile_string_is_live_in_the_built_book(tmp_path, monkeypatch, no_gpu):
    from kernelbook.batch import run_batch
    from kernelbook.build import build_book

    store = tmp_path / "results"
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(store))
    _hostile_store(store)
    book = make_book(tmp_path / "tiny", with_bad=False)
    (book / "book" / "part" / "hostile.md").write_text(HOSTILE_PAGE)
    # the probe: a hostile weights_path, refused, its error published by a --no-strict build
    (book / "book" / "part" / "refused.md").write_text(REFUSED_PAGE)
    toc = book / "_toc.yml"
    toc.write_text(toc.read_text() + "      - file: book/part/hostile\n      - file: book/part/refused\n")
    executed = tmp_path / "executed"
    report = run_batch(parameters={"label": HOSTILE}, mode="replay", out_dir=executed,
                       log=lambda _: None, toc=toc, book_root=book / "book", progress_bar=False)
    status = {e.name: e.status for e in report.notebooks}
    assert status == {"part/good": "ok", "part/hostile": "ok", "part/refused": "failed"}, report.notebooks
    html = build_book(executed, tmp_path / "site", strict=False, toc=toc, book_root=book / "book",
                      stage_dir=tmp_path / "stage", log=lambda _: None)
    page = (html / "book" / "part" / "hostile.html").read_text()
    assert "alert(2)" in page and "onerror" in page  # the values are shown ...
    assert page.count("alert(2)") >= 6
    assert not LIVE.search(page), LIVE.search(page)  # ... and none of them runs
    refused = (html / "book" / "part" / "refused.html").read_text()
    assert "weights_path" in refused and "alert(2)" in refused and not LIVE.search(refused)


def test_summary_and_recording_markdown_show_a_hostile_store_as_text(results_root, no_gpu):
    from kernelbook import session, summary
    from kernelbook.lenet import STUDY

    _hostile_store(results_root)
    outputs = [summary.banner(STUDY).data]

    def never():
        raise AssertionError

    rec = session.recorded("tiny-hostile", "tiny", never, parameters={"label": HOSTILE}, mode="replay")
    outputs += [rec._repr_markdown_(), rec.session._repr_markdown_(), rec.warning()]
    for markdown in outputs:
        out = _render(markdown)
        assert not LIVE.search(out) and "alert(2)" in out


def test_a_device_name_with_dollars_does_not_break_a_figure(results_root, no_gpu):
    import json

    import matplotlib

    matplotlib.use("Agg")
    from conftest import fabricate_chapter

    from kernelbook import plots
    from kernelbook.chapter import run_chapter
    from kernelbook.lenet import STUDY

    run = fabricate_chapter(results_root, batches=(100,))
    manifest = json.loads((run.root / "manifest.json").read_text())
    manifest["device"]["name"] = "GPU $\\frac{$ x"  # broken mathtext
    (run.root / "manifest.json").write_text(json.dumps(manifest))
    chapter = run_chapter(STUDY, "baseline", sizes=[100], mode="replay")
    fig = plots.step_deltas(chapter.comparison())
    fig.savefig(results_root / "f.png")  # draws: the label is text
