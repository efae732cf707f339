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
    assert str(path) in info.value.message and "kernelbook run" in info.value.fix
