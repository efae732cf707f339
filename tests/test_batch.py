"""The papermill batch: notebook discovery, selection, parameters, and crash handling."""

from __future__ import annotations

import json

import nbformat
import pytest
from tinybook import make_book

from kernelbook import batch, results
from kernelbook.batch import BatchError, book_notebooks, parse_parameter, parse_parameters, run_batch
from kernelbook.errors import KernelbookError


@pytest.fixture
def book(tmp_path):
    return make_book(tmp_path / "tiny")


def _run(book, out, **kwargs):
    lines: list[str] = []
    report = run_batch(
        out_dir=out, log=lines.append, toc=book / "_toc.yml", book_root=book / "book",
        progress_bar=False, **kwargs,
    )
    return report, lines


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "text, expected",
    [
        ("batch_sizes=[100,1000]", ("batch_sizes", [100, 1000])),
        ("repeats=20", ("repeats", 20)),
        ("scale=0.5", ("scale", 0.5)),
        ("seed=None", ("seed", None)),
        ("flag=True", ("flag", True)),
        ("variant=tiled", ("variant", "tiled")),
        ("mode=replay", ("mode", "replay")),
        ("label='quoted'", ("label", "quoted")),
        ("expr=a=b", ("expr", "a=b")),
        ("empty=", ("empty", "")),
        ("path=data/models/x.bin", ("path", "data/models/x.bin")),
    ],
)
def test_parse_parameter_literal_else_string(text, expected):
    assert parse_parameter(text) == expected


@pytest.mark.parametrize("text", ["novalue", "=3", "1x=3", "a b=3"])
def test_parse_parameter_rejects_non_assignments(text):
    with pytest.raises(BatchError, match="NAME=VALUE"):
        parse_parameter(text)


def test_parse_parameters_last_one_wins():
    assert parse_parameters(["a=1", "b=x", "a=2"]) == {"a": 2, "b": "x"}
    assert parse_parameters(None) == {}


# ----------------------------------------------------------------------------- discovery


def test_book_notebooks_in_toc_order_without_plain_pages(book):
    found = book_notebooks(book / "_toc.yml")
    assert [p.relative_to(book).as_posix() for p in found] == ["book/part/bad.md", "book/part/good.md"]


def test_ipynb_entries_are_notebooks(book):
    nb = nbformat.v4.new_notebook()
    nbformat.write(nb, book / "book" / "part" / "extra.ipynb")
    toc = book / "_toc.yml"
    toc.write_text(toc.read_text() + "      - file: book/part/extra\n")
    assert [p.name for p in book_notebooks(toc)] == ["bad.md", "good.md", "extra.ipynb"]


def test_toc_entry_without_file_is_an_error(book):
    toc = book / "_toc.yml"
    toc.write_text(toc.read_text() + "      - file: book/part/missing\n")
    with pytest.raises(BatchError, match="book/part/missing") as info:
        book_notebooks(toc)
    assert info.value.fix


def test_missing_toc_is_an_error(tmp_path):
    with pytest.raises(BatchError, match="No table of contents"):
        book_notebooks(tmp_path / "_toc.yml")


@pytest.mark.parametrize(
    "pattern, names",
    [("part/*", ["part/bad", "part/good"]), ("*good*", ["part/good"]), ("part/bad.md", ["part/bad"])],
)
def test_only_selects_by_path_under_book(book, pattern, names):
    chosen = batch.select(book_notebooks(book / "_toc.yml"), pattern, book / "book")
    assert [batch.notebook_name(p, book / "book") for p in chosen] == names


def test_only_matching_nothing_is_an_error_that_lists_the_notebooks(book, tmp_path):
    with pytest.raises(BatchError) as info:
        _run(book, tmp_path / "out", only="lenet/*")
    assert isinstance(info.value, KernelbookError)
    assert "part/bad, part/good" in info.value.message
    assert "--only" in info.value.fix
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- checks before running


def test_unknown_parameter_is_rejected_before_anything_runs(book, tmp_path):
    with pytest.raises(BatchError) as info:
        _run(book, tmp_path / "out", parameters={"sise": 5})
    message = info.value.message
    assert "sise" in message
    # the valid names of the first notebook checked (bad: size, mode, run_id)
    assert "mode, run_id, size" in message
    assert not (tmp_path / "out").exists()  # checked before anything was executed or written


def test_parameter_defined_by_one_notebook_only_is_rejected_for_the_other(book, tmp_path):
    with pytest.raises(BatchError, match="part/bad does not define the parameter.*label"):
        _run(book, tmp_path / "out", parameters={"label": "x"})


def test_notebook_without_parameters_cell_is_rejected(book, tmp_path):
    good = book / "book" / "part" / "good.md"
    good.write_text(good.read_text().replace(":tags: [parameters]\n", ""))
    with pytest.raises(BatchError, match="no cell tagged 'parameters'"):
        _run(book, tmp_path / "out", only="*good*")


def test_bad_mode_and_conflicting_modes_are_rejected(book, tmp_path):
    with pytest.raises(BatchError, match="not one of"):
        _run(book, tmp_path / "out", mode="fast")
    with pytest.raises(BatchError, match="disagree"):
        _run(book, tmp_path / "out", mode="measure", parameters={"mode": "replay"})


def test_bad_run_id_is_rejected(book, tmp_path):
    with pytest.raises(KernelbookError, match="not a run id"):
        _run(book, tmp_path / "out", run_id="yesterday")


# ----------------------------------------------------------------------------- execution


@pytest.mark.slow
def test_failing_notebook_is_recorded_and_the_batch_goes_on(book, tmp_path):
    out = tmp_path / "out"
    report, lines = _run(book, out, parameters={"size": 5}, mode="replay")

    # progress: a start line and an end line per notebook, numbered
    assert lines[0] == "[1/2] part/bad ..."
    assert lines[1].startswith("[1/2] part/bad ... FAILED (PapermillExecutionError: ")
    assert "ValueError: boom on purpose" in lines[1]
    assert lines[2] == "[2/2] part/good ..."
    assert lines[3].startswith("[2/2] part/good ... ok (") and lines[3].endswith(" s)")

    assert [nb.name for nb in report.failed] == ["part/bad"]
    assert not report.ok

    # the crashed notebook is kept, marked by papermill, and the next one did run
    bad = nbformat.read(out / "part" / "bad.ipynb", as_version=4)
    assert bad.metadata.papermill.exception is True
    good = nbformat.read(out / "part" / "good.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in good.cells if c.cell_type == "code" for o in c.outputs)
    # a replaying notebook records nothing, so it is not handed the batch's (unused) run id
    assert "size=5 label='default' mode=replay run_id=None" in printed
    # the executed copy points back at its MyST source
    assert good.metadata.papermill.input_path.endswith("book/part/good.md")

    # one run id for the whole batch, injected into every notebook
    results.validate_run_id(report.run_id)
    for nb in (bad, good):
        assert nb.metadata.papermill.parameters == {"size": 5, "mode": "replay", "run_id": None}

    saved = json.loads((out / "batch.json").read_text())
    assert saved["run_id"] == report.run_id
    assert saved["mode"] == "replay"
    assert saved["parameters"] == {"size": 5}
    assert saved["started_utc"] and saved["finished_utc"]
    entries = {nb["name"]: nb for nb in saved["notebooks"]}
    assert entries["part/bad"]["status"] == "failed"
    assert "boom on purpose" in entries["part/bad"]["error"]
    assert entries["part/good"]["status"] == "ok" and entries["part/good"]["error"] is None
    assert all(nb["seconds"] > 0 for nb in saved["notebooks"])
    assert entries["part/good"]["path"].endswith("book/part/good.md")


@pytest.mark.slow
def test_given_run_id_is_used_and_stale_outputs_are_replaced(book, tmp_path):
    out = tmp_path / "out"
    stale = out / "part" / "good.ipynb"
    stale.parent.mkdir(parents=True)
    stale.write_text("not a notebook")
    run_id = results.new_run_id()
    report, _ = _run(book, out, only="*good*", run_id=run_id)
    assert report.run_id == run_id and report.ok
    assert nbformat.read(stale, as_version=4).metadata.papermill.parameters["run_id"] == run_id
