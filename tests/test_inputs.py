"""Parameters are checked the same way whether a page measures or replays."""

from __future__ import annotations

import shutil

import pytest
from conftest import fabricate_chapter

from kernelbook import params as P
from kernelbook import paths
from kernelbook.chapter import run_chapter
from kernelbook.errors import DataError, ParameterError
from kernelbook.lenet import STUDY

WEIGHTS = paths.REPO_ROOT / "data" / "models" / "lenet86.bin"


@pytest.fixture
def replayable(results_root, no_gpu):
    return fabricate_chapter(results_root, batches=(100,))


@pytest.mark.parametrize("kind", ["system file", "truncated", "folder", "missing", "wrong header"])
def test_a_bad_weights_path_is_refused_when_replaying(replayable, tmp_path, kind):
    if kind == "system file":
        path = "/etc/passwd"
    elif kind == "truncated":
        path = tmp_path / "w.bin"
        path.write_bytes(WEIGHTS.read_bytes()[:1000])
    elif kind == "folder":
        path = tmp_path
    elif kind == "missing":
        path = tmp_path / "nothing.bin"
    else:
        path = tmp_path / "w.bin"
        path.write_bytes(b"\0" * len(WEIGHTS.read_bytes()))
    with pytest.raises((ParameterError, DataError)) as info:
        run_chapter(STUDY, "baseline", sizes=[100], mode="replay", weights_path=str(path))
    assert "weights" in str(info.value).lower() and "Fix:" in str(info.value)
    assert str(tmp_path) not in info.value.message  # a page shows no absolute path


def test_a_good_weights_file_outside_the_project_is_shown_by_its_name_only(replayable, tmp_path):
    copy = tmp_path / "private" / "weights-86.bin"
    copy.parent.mkdir()
    shutil.copy(WEIGHTS, copy)
    chapter = run_chapter(STUDY, "baseline", sizes=[100], mode="replay", weights_path=str(copy))
    assert chapter.recording.mismatches  # the recording used the shipped weights: shown instead
    shown = chapter.recording.warning()
    assert "weights-86.bin" in shown and str(tmp_path) not in shown


@pytest.mark.parametrize("repeats, warmup", [(10_000_000_000, 2), (10, 10_000_000)])
def test_huge_counts_are_refused(replayable, repeats, warmup):
    with pytest.raises(ParameterError, match="exceeds the largest allowed"):
        run_chapter(STUDY, "baseline", sizes=[100], mode="replay", repeats=repeats, warmup=warmup)
    with pytest.raises(ParameterError, match="exceeds the largest allowed"):
        run_chapter(STUDY, "baseline", sizes=[100], mode="replay", check_shapes=10**9)


def test_a_list_papermill_passed_as_text_is_read_as_the_list():
    assert P.sizes("batch_sizes", "[100,500]") == [100, 500]
    assert P.sizes("batch_sizes", " [100, 500] ") == [100, 500]
    assert STUDY.sizes("[100,500]") == [100, 500]
    with pytest.raises(ParameterError):
        P.sizes("batch_sizes", "100")


def test_the_fix_names_the_syntax_of_where_the_page_runs(monkeypatch):
    monkeypatch.delenv("KERNELBOOK_NOTES_FILE", raising=False)
    with pytest.raises(ParameterError) as info:
        P.sizes("batch_sizes", "abc")
    assert "batch_sizes=[100, 1000, 10000]" in info.value.fix  # plain Python here

    class Kernel:
        kernel = object()

    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    with pytest.raises(ParameterError) as info:
        P.sizes("batch_sizes", "abc")
    assert "papermill: -y 'batch_sizes: [100, 1000, 10000]'" in info.value.fix
    monkeypatch.setenv("KERNELBOOK_NOTES_FILE", "/tmp/notes")
    with pytest.raises(ParameterError) as info:
        P.sizes("batch_sizes", "abc")
    assert "kernelbook: -p 'batch_sizes=[100,1000,10000]'" in info.value.fix and "papermill" not in info.value.fix
