"""The Jupyter Book build: staging executed notebooks, and a strict build of a tiny book."""

from __future__ import annotations

import nbformat
import pytest
from tinybook import make_book, record_digest, write_executed

from kernelbook.batch import run_batch
from kernelbook.build import BuildError, build_book, stage_book


@pytest.fixture
def book(tmp_path):
    return make_book(tmp_path / "tiny", with_bad=False)


def _stage(book, executed, strict=True, log=print):
    return stage_book(executed, book.parent / "stage", toc=book / "_toc.yml", config=book / "_config.yml",
                      book_root=book / "book", strict=strict, log=log)


def _build(book, executed, out, strict=True):
    lines: list[str] = []
    html = build_book(executed, out, strict, toc=book / "_toc.yml", book_root=book / "book",
                      stage_dir=book.parent / "stage", log=lines.append)
    return html, lines


def test_missing_executed_notebook_says_run_first(book, tmp_path):
    (tmp_path / "executed").mkdir()
    with pytest.raises(BuildError) as info:
        _stage(book, tmp_path / "executed")
    assert "part/good" in info.value.message
    assert "kernelbook run --only 'part/good'" in info.value.fix


def test_stage_replaces_sources_by_executed_notebooks(book, tmp_path):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "from the batch\n")
    (book / "book" / ".ipynb_checkpoints").mkdir()
    (book / "book" / ".ipynb_checkpoints" / "junk.ipynb").write_text("{}")
    stage = _stage(book, executed)
    assert (stage / "_config.yml").is_file() and (stage / "_toc.yml").is_file()
    assert (stage / "book" / "intro.md").is_file()  # plain pages stay as they are
    assert nbformat.read(stage / "book" / "part" / "good.ipynb", as_version=4) == \
        nbformat.read(executed / "part" / "good.ipynb", as_version=4)
    assert not (stage / "book" / "part" / "good.md").exists()  # one document per name
    assert not (stage / "book" / ".ipynb_checkpoints").exists()
    # staging again starts from scratch
    (stage / "leftover.md").write_text("old")
    assert not (_stage(book, executed) / "leftover.md").exists()


def test_strict_build_refuses_a_crashed_notebook(book, tmp_path):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "partial\n", crashed=True)
    with pytest.raises(BuildError, match="refuses 1 notebook.*part/good.*boom") as info:
        _stage(book, executed)
    assert "--only 'part/good'" in info.value.fix
    warnings: list[str] = []
    _stage(book, executed, strict=False, log=warnings.append)  # not strict: a warning, and it stages
    assert any("part/good" in w for w in warnings)


@pytest.mark.slow
def test_strict_build_of_executed_tiny_book_makes_html(book, tmp_path):
    executed = tmp_path / "executed"
    report = run_batch(parameters={"size": 11}, mode="replay", out_dir=executed, log=lambda _: None,
                       toc=book / "_toc.yml", book_root=book / "book", progress_bar=False)
    assert report.ok
    html, lines = _build(book, executed, tmp_path / "site")

    assert html == (tmp_path / "site" / "_build" / "html").resolve()
    assert (html / "index.html").is_file()
    page = (html / "book" / "part" / "good.html").read_text()
    assert "size=11" in page  # the output of the papermill batch, not a re-execution
    assert "btn-download-source-button" in page  # readers can download the executed notebook
    assert "mybinder.org" not in page and "colab.research" not in page  # no button that cannot work
    assert "kernelbook.css" in page
    assert any("-W --keep-going" in line for line in lines)
    assert not any("\x1b[" in line for line in lines)  # colour codes are stripped from the log


@pytest.mark.slow
def test_strict_build_fails_on_a_warning_and_no_strict_passes(book, tmp_path):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "hello\n")
    intro = book / "book" / "intro.md"
    intro.write_text(intro.read_text() + "\nSee {ref}`no-such-label`.\n")
    with pytest.raises(BuildError) as info:
        _build(book, executed, tmp_path / "site")
    assert "strict" in info.value.message and "no-such-label" in info.value.message
    assert "--no-strict" in info.value.fix

    html, lines = _build(book, executed, tmp_path / "site", strict=False)
    assert (html / "index.html").is_file()
    assert not any("-W" in line.split() for line in lines if line.startswith("$ jupyter-book"))


@pytest.mark.parametrize("status, words", [("running", "interrupted while it ran"), ("pending", "never ran")])
def test_strict_build_refuses_a_notebook_an_interrupted_batch_left(book, tmp_path, status, words):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "half\n", status=status)
    with pytest.raises(BuildError, match=words) as info:
        _stage(book, executed)
    assert "part/good" in info.value.message and "--only 'part/good'" in info.value.fix


def test_a_notebook_missing_from_the_batch_record_is_refused(book, tmp_path):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "hand-made\n", record=False)
    with pytest.raises(BuildError, match="no batch record"):
        _stage(book, executed)


def test_a_source_edited_after_execution_is_stale(book, tmp_path):
    executed = tmp_path / "executed"
    source = book / "book" / "part" / "good.md"
    write_executed(executed / "part" / "good.ipynb", "old\n", source=source)
    _stage(book, executed)  # unchanged source: fine
    source.write_text(source.read_text() + "\nA new paragraph.\n")
    with pytest.raises(BuildError, match="changed after it was executed"):
        _stage(book, executed)
    warnings: list[str] = []
    _stage(book, executed, strict=False, log=warnings.append)
    assert any("changed after it was executed" in w for w in warnings)


def test_a_truncated_executed_notebook_names_its_file(book, tmp_path):
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "fine\n")
    path.write_text(path.read_text()[:40])
    with pytest.raises(BuildError, match="cannot be read") as info:
        _stage(book, executed)
    assert str(path) in info.value.message and "kernelbook run --only 'part/good'" in info.value.fix
    assert "disk" not in info.value.message


def test_a_notebook_cut_short_by_a_full_disk_says_so(book, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "fine\n")
    path.write_text(path.read_text()[:40])
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9, 0))
    with pytest.raises(BuildError, match="disk holding it is full"):
        _stage(book, executed)


# ----------------------------------------------------------------------------- atomic publishing, plain errors


def _previous_book(out):
    html = out / "_build" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("the previous book")
    (html / "page.html").write_text("a previous page")
    return html


@pytest.mark.slow
def test_a_failed_strict_build_leaves_the_previous_book_whole(book, tmp_path):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "hello\n")
    html = _previous_book(tmp_path / "site")
    intro = book / "book" / "intro.md"
    intro.write_text(intro.read_text() + "\nSee {ref}`no-such-label`.\n")
    with pytest.raises(BuildError, match="previous book is left as it was"):
        _build(book, executed, tmp_path / "site")
    assert (html / "index.html").read_text() == "the previous book" and (html / "page.html").is_file()
    assert [p.name for p in (tmp_path / "site" / "_build").iterdir()] == ["html"]  # no temporary left


def test_a_killed_build_leaves_the_previous_book_whole(book, tmp_path, monkeypatch):
    from kernelbook import build

    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "hello\n")
    html = _previous_book(tmp_path / "site")

    def killed(stage, output, strict, log):
        (output / "_build" / "html").mkdir(parents=True)
        (output / "_build" / "html" / "half.html").write_text("half")
        raise KeyboardInterrupt  # as Ctrl-C or a kill in the middle of Sphinx

    monkeypatch.setattr(build, "_run_jupyter_book", killed)
    with pytest.raises(KeyboardInterrupt):
        _build(book, executed, tmp_path / "site")
    assert (html / "index.html").read_text() == "the previous book" and not (html / "half.html").exists()


def test_a_build_killed_during_its_swap_is_recovered_by_the_next(tmp_path):
    from kernelbook.build import _recover

    build_root = tmp_path / "_build"
    (build_root / ".html-previous").mkdir(parents=True)
    (build_root / ".html-previous" / "index.html").write_text("old")
    (build_root / ".building-x").mkdir()
    _recover(build_root)
    assert (build_root / "html" / "index.html").read_text() == "old"
    assert sorted(p.name for p in build_root.iterdir()) == ["html"]


def test_no_space_left_is_one_plain_error(book, tmp_path, monkeypatch, capsys):
    import errno
    import shutil


    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "hello\n")
    html = _previous_book(tmp_path / "site")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "stage" / "book"))

    monkeypatch.setattr(shutil, "copytree", full)
    with pytest.raises(BuildError, match="No space left") as info:
        _build(book, executed, tmp_path / "site")
    assert "make clean" in info.value.fix
    assert (html / "index.html").read_text() == "the previous book"


def test_an_unwritable_out_folder_is_one_line(tmp_path, capsys):
    from kernelbook import cli

    assert cli.main(["build", "--out", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Cannot write the book to /proc/x") and "--out" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _executed_showing(block, tmp_path):
    """A batch's folder of executed notebooks whose good page displays ``block`` (a kernel source),
    its digest recorded as the batch records it."""
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    data, metadata = InteractiveShell.instance().display_formatter.format(block)
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "hello\n")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=metadata))
    nbformat.write(nb, path)
    record_digest(path)
    return executed


def test_a_kernel_source_changed_after_execution_is_refused(book, tmp_path, monkeypatch):
    """The page shows the .cu as it was when the notebook ran: a later edit makes it stale."""
    from kernelbook import paths
    from kernelbook.report import show_source

    kernels = book / "kernels" / "toy"
    kernels.mkdir(parents=True)
    (kernels / "00_k.cu").write_text("__global__ void k() {}\n")
    monkeypatch.setattr(paths, "kernels_dir", lambda: book / "kernels")
    executed = _executed_showing(show_source("toy/00_k.cu"), tmp_path)
    _stage(book, executed)  # unchanged: fine
    (kernels / "00_k.cu").write_text("__global__ void k() { /* edited */ }\n")
    with pytest.raises(BuildError, match="changed after it was executed.*kernels/toy/00_k.cu") as info:
        _stage(book, executed)
    assert "--only 'part/good'" in info.value.fix
    warnings: list[str] = []
    _stage(book, executed, strict=False, log=warnings.append)
    assert any("kernels/toy/00_k.cu" in w for w in warnings)


def test_every_refused_notebook_is_in_the_fix(tmp_path):
    root = make_book(tmp_path / "tiny")
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "bad.ipynb", "x\n", status="running")
    write_executed(executed / "part" / "good.ipynb", "x\n", status="pending")
    with pytest.raises(BuildError) as info:
        stage_book(executed, tmp_path / "stage", toc=root / "_toc.yml", config=root / "_config.yml",
                   book_root=root / "book")
    assert "--only 'part/bad,part/good'" in info.value.fix
    (executed / "batch.json").write_text("{ damaged")
    with pytest.raises(BuildError) as info:
        stage_book(executed, tmp_path / "stage", toc=root / "_toc.yml", config=root / "_config.yml",
                   book_root=root / "book")
    assert "--only 'every'" not in info.value.fix and "`kernelbook run`" in info.value.fix


def test_a_kernel_header_changed_after_execution_is_refused(book, tmp_path, monkeypatch):
    """A step's page shows the headers its file includes; editing one makes the page stale."""
    from kernelbook import paths
    from kernelbook.report import show_source

    kernels = book / "kernels" / "toy"
    kernels.mkdir(parents=True)
    (kernels / "shared.cuh").write_text("__device__ float twice(float v) { return 2 * v; }\n")
    (kernels / "00_k.cu").write_text('#include "shared.cuh"\n__global__ void k() {}\n')
    monkeypatch.setattr(paths, "kernels_dir", lambda: book / "kernels")
    block = show_source("toy/00_k.cu")
    assert "return 2 * v" in block.data and "kernels/toy/shared.cuh" in block.data
    executed = _executed_showing(block, tmp_path)
    _stage(book, executed)  # unchanged: fine
    (kernels / "shared.cuh").write_text("__device__ float twice(float v) { return v + v; }\n")
    with pytest.raises(BuildError, match="changed after it was executed.*kernels/toy/shared.cuh"):
        _stage(book, executed)


# ----------------------------------------------------------------------------- what a build publishes


def _add_output(path, output, record=True):
    """Append ``output`` to the printing cell of a fabricated executed notebook."""
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs.append(output)
    nbformat.write(nb, path)
    if record:
        record_digest(path)


def test_an_executed_notebook_edited_after_the_batch_is_refused(book, tmp_path):
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "from the batch\n")
    _stage(book, executed)  # as the batch wrote it: fine
    _add_output(path, nbformat.v4.new_output("display_data", data={"text/html": "<script>alert(1)</script>"}),
                record=False)
    with pytest.raises(BuildError, match="part/good .its executed file is not the one the batch wrote") as info:
        _stage(book, executed)
    assert "--only 'part/good'" in info.value.fix


def test_a_foreign_executed_folder_with_a_copied_batch_record_is_refused(book, tmp_path):
    import shutil

    ours, foreign = tmp_path / "executed", tmp_path / "foreign"
    write_executed(ours / "part" / "good.ipynb", "ours\n")
    write_executed(foreign / "part" / "good.ipynb", "someone else's\n", record=False)
    shutil.copy(ours / "batch.json", foreign / "batch.json")
    with pytest.raises(BuildError, match="not the one the batch wrote"):
        _stage(book, foreign)


def test_a_batch_record_without_digests_is_refused_strictly(book, tmp_path):
    import json

    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "old\n")
    record = json.loads((executed / "batch.json").read_text())
    del record["notebooks"][0]["notebook_sha256"]
    (executed / "batch.json").write_text(json.dumps(record))
    with pytest.raises(BuildError, match="holds no digest of its executed file"):
        _stage(book, executed)
    warnings: list[str] = []
    _stage(book, executed, strict=False, log=warnings.append)
    assert any("no digest" in w for w in warnings)


HOSTILE_OUTPUTS = [
    {"text/html": "<script>alert(1)</script>", "text/plain": "x"},
    {"text/html": '<img src=x onerror="alert(1)">', "text/plain": "x"},
    {"text/html": '<table><tr><td onclick="alert(1)">1</td></tr></table>', "text/plain": "x"},
    {"text/html": "<style>@import url(//evil.example/x.css);</style>", "text/plain": "x"},
    {"text/html": "<iframe src=//evil.example></iframe>", "text/plain": "x"},
    {"application/javascript": "alert(1)", "text/plain": "x"},
    {"image/svg+xml": "<svg onload=alert(1)></svg>", "text/plain": "x"},
    {"text/markdown": "a <script>alert(1)</script>", "text/plain": "x"},
    {"text/markdown": "```{raw} html\n<script>alert(1)</script>\n```\n", "text/plain": "x"},
    {"text/markdown": "[x](javascript:alert(1))", "text/plain": "x"},
]


@pytest.mark.parametrize("data", HOSTILE_OUTPUTS, ids=lambda d: next(iter(d)) + ":" + next(iter(d.values()))[:12])
def test_an_output_the_book_does_not_make_is_refused_or_removed(book, tmp_path, data):
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "fine\n")
    _add_output(path, nbformat.v4.new_output("display_data", data=data))
    with pytest.raises(BuildError, match="hold what the book does not publish: part/good .cell 2") as info:
        _stage(book, executed)
    assert "--no-strict" in info.value.fix
    warnings: list[str] = []
    stage = _stage(book, executed, strict=False, log=warnings.append)
    staged = (stage / "book" / "part" / "good.ipynb").read_text()
    assert "alert(1)" not in staged and "evil.example" not in staged and any("removed" in w for w in warnings)
    shown = nbformat.read(stage / "book" / "part" / "good.ipynb", as_version=4).cells[1].outputs
    assert shown[-1]["data"] == {"text/plain": "x"}  # what is left of it: the plain text


def test_the_books_own_html_outputs_are_published():
    """The book's HTML comes from its tables (a pandas Styler) and its kernel sources (SourceBlock)."""
    import pandas as pd

    from kernelbook.publish import html_problems, markdown_problems
    from kernelbook.report import SourceBlock, styled

    table = styled(pd.DataFrame({"step": ["<b>x</b>"], "time [ms]": [1.5]}), "A caption <i>")
    assert html_problems(table.to_html()) == []
    source = SourceBlock("toy/00_k.cu", "template <int N> __global__ void k() {}\n", "0" * 64,
                         [("toy/h.cuh", "#include <cuda_fp16.h>\n")], {"toy/h.cuh": "1" * 64})
    html, _ = source._repr_html_()
    assert html_problems(html) == []
    markdown, _ = source._repr_markdown_()
    assert markdown_problems(markdown) == []
    assert markdown_problems("- `a <b>` and **bold** [link](https://example.org) <https://example.org>") == []


def test_stderr_and_machine_paths_never_reach_a_page(book, tmp_path):
    from kernelbook import paths

    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", f"read {paths.REPO_ROOT}/data/models/x.bin\n")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs.append(nbformat.v4.new_output(
        "stream", name="stderr", text=f"{paths.REPO_ROOT}/kernelbook/sweep.py:295: UserWarning: Tight layout\n"))
    nb.cells.insert(1, nbformat.v4.new_code_cell(
        "size = 3\nweights_path = '/home/someone/secret/weights-86.bin'  # the course's file\n"
        f"data = '{paths.REPO_ROOT}/data/models/lenet86.bin'", metadata={"tags": ["parameters"]}))
    nb.metadata["papermill"]["parameters"] = {"weights_path": "/home/someone/secret/weights-86.bin"}
    nbformat.write(nb, path)
    record_digest(path)
    staged = (_stage(book, executed) / "book" / "part" / "good.ipynb").read_text()
    assert str(paths.REPO_ROOT) not in staged and "/home/someone" not in staged and "UserWarning" not in staged
    shown = nbformat.read(_stage(book, executed) / "book" / "part" / "good.ipynb", as_version=4)
    assert shown.cells[1].source == ("size = 3\nweights_path = 'weights-86.bin'  # the course's file\n"
                                     "data = 'data/models/lenet86.bin'")
    assert "read data/models/x.bin" in shown.cells[2].outputs[0]["text"]
    assert shown.metadata.papermill.parameters == {"weights_path": "weights-86.bin"}


def _fake_jupyter_book(monkeypatch, calls):
    """Jupyter Book stood in for: it records the stage it was given and writes an index."""
    from kernelbook import build

    def fake(stage, output, strict, log):
        calls.append(stage)
        html = output / "_build" / "html"
        html.mkdir(parents=True)
        (html / "index.html").write_text(f"built from {len(calls)}")
        return html

    monkeypatch.setattr(build, "_run_jupyter_book", fake)


def test_each_build_stages_in_a_folder_of_its_own(book, tmp_path, monkeypatch):
    executed = tmp_path / "executed"
    write_executed(executed / "part" / "good.ipynb", "x\n")
    calls = []
    _fake_jupyter_book(monkeypatch, calls)
    for out in (tmp_path / "site-a", tmp_path / "site-b"):
        build_book(executed, out, toc=book / "_toc.yml", book_root=book / "book", log=lambda _: None)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert calls[0].is_relative_to(tmp_path / "site-a" / "_build") and calls[1].is_relative_to(tmp_path / "site-b")
    assert not calls[0].exists() and not calls[1].exists()  # removed with the build


def test_an_unchanged_book_is_not_built_again(book, tmp_path, monkeypatch):
    executed, out = tmp_path / "executed", tmp_path / "site"
    path = write_executed(executed / "part" / "good.ipynb", "x\n")
    calls, lines = [], []
    _fake_jupyter_book(monkeypatch, calls)

    def build(strict=True):
        return build_book(executed, out, strict, toc=book / "_toc.yml", book_root=book / "book", log=lines.append)

    html = build()
    assert build() == html and len(calls) == 1
    assert lines[-1] == f"the book is unchanged since its last build (its executed notebooks, sources and settings): {html} kept"
    build(strict=False)
    assert len(calls) == 2  # other settings
    import json

    record = json.loads((executed / "batch.json").read_text())
    record["started_utc"] = "another batch that kept every notebook"
    (executed / "batch.json").write_text(json.dumps(record))
    build(strict=False)
    assert len(calls) == 2  # a batch record that differs only in what the build does not check
    _add_output(path, nbformat.v4.new_output("stream", name="stdout", text="more\n"))
    build(strict=False)
    assert len(calls) == 3  # another executed notebook
    (book / "book" / "intro.md").write_text("# Tiny book\n\nEdited.\n")
    build(strict=False)
    assert len(calls) == 4  # another source
    (html / "index.html").unlink()
    build(strict=False)
    assert len(calls) == 5  # the book is gone


def test_a_missing_executed_folder_is_one_line(book, tmp_path, capsys):
    from kernelbook import cli

    status = cli.main(["build", "--executed", str(tmp_path / "missing"), "--out", str(tmp_path / "site")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert f"The folder of executed notebooks {tmp_path / 'missing'} does not exist." in err


def test_jupyter_books_closing_words_name_no_temporary_folder(tmp_path, monkeypatch):
    import sys

    from kernelbook import build

    output = tmp_path / ".building-x" / "out"
    box = (f"print('Writing pages'); print('=' * 40); print(); print('Finished generating HTML for book.');"
           f"print(\"Your book's HTML pages are here:\"); print('    _build/html/');"
           f"print('Or paste this line directly into your browser bar:'); print('    file://{output}/_build/html/index.html')")

    def fake_command():
        return [sys.executable, "-c", box + "; import os; os.makedirs('_build/html'); open('_build/html/index.html', 'w')"]

    monkeypatch.setattr(build, "_jupyter_book_command", fake_command)
    lines: list[str] = []
    build._run_jupyter_book(tmp_path, output, True, lines.append)
    assert lines[-1] == "Writing pages" or lines[-1] == ""
    assert not any("paste this line" in line or str(output) in line or "=" * 40 in line for line in lines)
