"""The Jupyter Book build: staging executed notebooks, and a strict build of a tiny book."""

from __future__ import annotations

import pytest
from tinybook import make_book, write_executed

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
    assert (stage / "book" / "part" / "good.ipynb").read_text() == (executed / "part" / "good.ipynb").read_text()
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

    from kernelbook import cli

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


def test_a_kernel_source_changed_after_execution_is_refused(book, tmp_path, monkeypatch):
    """The page shows the .cu as it was when the notebook ran: a later edit makes it stale."""
    import nbformat

    from kernelbook import paths
    from kernelbook.report import show_source

    kernels = book / "kernels" / "toy"
    kernels.mkdir(parents=True)
    (kernels / "00_k.cu").write_text("__global__ void k() {}\n")
    monkeypatch.setattr(paths, "kernels_dir", lambda: book / "kernels")
    from IPython.core.interactiveshell import InteractiveShell

    data, metadata = InteractiveShell.instance().display_formatter.format(show_source("toy/00_k.cu"))
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "hello\n")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=metadata))
    nbformat.write(nb, path)
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
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    from kernelbook import paths
    from kernelbook.report import show_source

    kernels = book / "kernels" / "toy"
    kernels.mkdir(parents=True)
    (kernels / "shared.cuh").write_text("__device__ float twice(float v) { return 2 * v; }\n")
    (kernels / "00_k.cu").write_text('#include "shared.cuh"\n__global__ void k() {}\n')
    monkeypatch.setattr(paths, "kernels_dir", lambda: book / "kernels")
    block = show_source("toy/00_k.cu")
    assert "return 2 * v" in block.data and "kernels/toy/shared.cuh" in block.data
    data, metadata = InteractiveShell.instance().display_formatter.format(block)
    executed = tmp_path / "executed"
    path = write_executed(executed / "part" / "good.ipynb", "hello\n")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=metadata))
    nbformat.write(nb, path)
    _stage(book, executed)  # unchanged: fine
    (kernels / "shared.cuh").write_text("__device__ float twice(float v) { return v + v; }\n")
    with pytest.raises(BuildError, match="changed after it was executed.*kernels/toy/shared.cuh"):
        _stage(book, executed)
