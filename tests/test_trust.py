"""A store, a batch and a build that a person can trust (each case reproduces a way results were
lost, hidden or published broken, and shows it is fixed)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings

import pytest
from conftest import DEVICE, fabricate_chapter

from kernelbook import cli, gpu, limits, paths, results
from kernelbook.batch import BatchError, run_batch
from kernelbook.chapter import run_chapter
from kernelbook.errors import GPUUnavailable, LaunchLimitError, ResultsError
from kernelbook.executed import LOCK_NAME
from kernelbook.lenet import STUDY, get_step, layer_shape

# ----------------------------------------------------------------------------- one bad file


def _damage(results_root):
    """Four kinds of damage beside one good run."""
    good = fabricate_chapter(results_root, run_id="20260101T0000Z-aaaaaa")
    (results_root / "20260102T0000Z-bbbbbb").mkdir()                        # a run without manifest
    broken = results_root / "20260103T0000Z-cccccc"
    broken.mkdir()
    (broken / "manifest.json").write_text("")                               # an empty manifest
    (results_root / "20260104T0000Z-dddddd").write_text("not a folder")     # a stray file named like a run
    newer = fabricate_chapter(results_root, run_id="20260105T0000Z-eeeeee")
    newer.part_path("lenet-baseline").write_text('{"schema": 1')             # a truncated part
    return good, newer


def test_damaged_runs_are_skipped_with_a_warning_and_good_ones_stay_replayable(results_root, no_gpu):
    good, newer = _damage(results_root)
    with pytest.warns(results.StoreWarning) as caught:
        runs = results.list_runs()
    assert [r.run_id for r in runs] == [good.run_id, newer.run_id]
    text = " ".join(str(w.message) for w in caught)
    for name in ("20260102T0000Z-bbbbbb", "20260103T0000Z-cccccc", "20260104T0000Z-dddddd"):
        assert name in text
    assert "Fix:" in text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    assert chapter.session.run.run_id == good.run_id  # the newer part is damaged: the good one is shown


def test_results_check_lists_every_problem(results_root, no_gpu, capsys):
    _damage(results_root)
    problems = results.check_store()
    assert len(problems) == 4
    assert cli.main(["results", "--check"]) == 1
    out = capsys.readouterr().out
    assert "4 problem(s)" in out and "lenet-baseline.json" in out


@pytest.mark.parametrize("edit, words", [
    (lambda p: p["records"][0].update(samples=5), "samples 5"),
    (lambda p: p.pop("checks"), "'checks'"),
    (lambda p: p["records"][0].update(metric=None), "metric None"),
])
def test_schema_gaps_are_errors_naming_the_file_and_folder(results_root, edit, words):
    run = fabricate_chapter(results_root)
    path = run.part_path("lenet-baseline")
    part = json.loads(path.read_text())
    edit(part)
    path.write_text(json.dumps(part))
    with pytest.raises(ResultsError) as info:
        run.read_part("lenet-baseline")
    assert words in info.value.message and str(path) in info.value.message
    assert str(run.root) in info.value.fix


def test_an_explicit_replay_run_never_swallows_a_store_error(results_root, no_gpu):
    older = fabricate_chapter(results_root, run_id="20260101T0000Z-aaaaaa")
    damaged = fabricate_chapter(results_root, run_id="20260102T0000Z-bbbbbb")
    (damaged.root / "manifest.json").write_text("{")
    with pytest.raises(ResultsError, match="manifest.json"):
        run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay", replay_run=damaged.run_id)
    other = results.create_run({"device": DEVICE, "commit": "x", "host": "h"}, run_id="20260103T0000Z-cccccc")
    with pytest.raises(ResultsError) as info:
        run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay", replay_run=other.run_id)
    assert older.run_id in info.value.message and "not recorded" not in info.value.message


# ----------------------------------------------------------------------------- whole or absent


WRITER = r"""
import sys
from kernelbook import results
i = 0
print("writing", flush=True)
while True:
    run = results.create_run({"device": {"name": "X"}, "commit": "c", "host": "h"})
    run.write_part("lenet-baseline", "lenet", [results.record("lenet", "baseline", "C1", 1, "op_time_ms", float(i))])
    i += 1
"""


def test_a_killed_writer_never_leaves_a_readable_run_without_its_manifest(results_root):
    env = {**os.environ, "KERNELBOOK_RESULTS_DIR": str(results_root), "PYTHONPATH": str(paths.REPO_ROOT)}
    deadline = time.monotonic() + 40
    for attempt in range(12):  # bounded in count and in time
        if time.monotonic() > deadline:
            break
        proc = subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "writing\n"  # imported: the kill lands among its writes
        time.sleep(0.005 + 0.02 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.stdout.close()
        proc.wait(timeout=10)
        for path in results_root.iterdir():
            if results.RUN_ID_PATTERN.match(path.name):
                assert (path / "manifest.json").is_file(), f"run {path.name} is visible without its manifest"
                results.load_run(path.name)
    runs = results.list_runs(strict=True)  # every visible run reads back
    assert runs
    for run in runs:
        for name in run.part_names():
            run.read_part(name)  # parts are whole, never half-written


def test_leftovers_of_killed_writes_are_ignored_and_files_are_world_readable(results_root):
    run = fabricate_chapter(results_root)
    part = run.part_path("lenet-baseline")
    assert stat.S_IMODE(part.stat().st_mode) == 0o644
    assert stat.S_IMODE((run.root / "manifest.json").stat().st_mode) == 0o644
    (part.parent / ".lenet-tiled.json.x1y2.tmp").write_text('{"half')
    (results_root / ".20260101T0000Z-ffffff.abc.tmp-run").mkdir()
    assert run.part_names() == ["lenet-baseline"]
    assert [r.run_id for r in results.list_runs()] == [run.run_id]
    assert sum("interrupted write" in p for p in results.check_store()) == 2


def test_a_second_batch_is_refused_while_one_runs_and_a_dead_one_leaves_no_lock(tmp_path, no_gpu):
    from tinybook import make_book

    from kernelbook.build import BuildError, stage_book
    from kernelbook.executed import batch_lock, held_by

    book = make_book(tmp_path / "tiny", with_bad=False)
    out = tmp_path / "out"
    out.mkdir()
    batch = dict(toc=book / "_toc.yml", book_root=book / "book", out_dir=out, mode="replay", progress_bar=False,
                 log=lambda line: None)
    with batch_lock(out):  # as if a batch were running in another process
        assert held_by(out)["pid"] == os.getpid()
        with pytest.raises(BatchError) as info:
            run_batch(**batch)
        assert f"process {os.getpid()}" in info.value.message and "--out" in info.value.fix
        with pytest.raises(BuildError, match="is writing to"):
            stage_book(out, tmp_path / "stage", toc=book / "_toc.yml", config=book / "_config.yml",
                       book_root=book / "book")
    # A batch process killed while holding the lock leaves the file but no lock.
    killed = subprocess.run([sys.executable, "-c", f"import os, sys; sys.path.insert(0, {str(paths.REPO_ROOT)!r}); "
                             f"from kernelbook.executed import batch_lock; batch_lock({str(out)!r}).__enter__(); "
                             "os.kill(os.getpid(), 9)"], capture_output=True)
    assert killed.returncode != 0 and (out / LOCK_NAME).exists() and held_by(out) is None
    report = run_batch(**batch)
    assert report.ok and held_by(out) is None


# ----------------------------------------------------------------------------- refuse early


def test_measure_without_a_gpu_is_refused_before_the_batch_starts(tmp_path, no_gpu, capsys):
    started = time.monotonic()
    assert cli.main(["run", "--mode", "measure", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "no CUDA GPU" in err and "--mode replay" in err
    assert time.monotonic() - started < 20 and not (tmp_path / "out").exists()


def test_an_output_folder_that_cannot_be_written_is_a_clear_error(tmp_path, no_gpu, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["run", "--mode", "replay", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and "is a file" in err and "Traceback" not in err


@pytest.mark.parametrize("step, params, words", [
    ("sweep", {"tile_w": 2, "tile_h": 2, "imgs_per_block": 128}, "z dimension of 128"),
    ("tiled", {"tile_width": 2, "imgs_per_block": 100}, "z dimension of 100"),
    ("specialised", {"threads": 512, "min_blocks": 8}, "__launch_bounds__"),
    ("hopper-final", {"c1_path": "tensor", "threads": 1024, "min_blocks": 4}, "registers per thread"),
    ("wgmma-final", {"threads": 1024, "min_blocks": 4}, "registers per thread"),
])
def test_launch_limits_are_checked_before_any_launch(step, params, words):
    impl = get_step(step)
    with pytest.raises(LaunchLimitError, match=words):
        impl.validate(layer_shape("C1", 10), impl.params(**params))


def test_tensor_core_steps_need_the_compute_capability(monkeypatch):
    old = limits.DeviceLimits(name="Old GPU", compute_capability=(7, 5))
    monkeypatch.setattr(limits, "current", lambda: old)
    impl = get_step("tensor-cores")
    with pytest.raises(LaunchLimitError, match="compute capability 8.0"):
        impl.validate(layer_shape("C3", 10), impl.params(precision="tf32"))


def test_dynamic_shared_memory_is_checked_against_the_opt_in_limit():
    small = limits.DeviceLimits(smem_per_block_optin=64 * 1024)
    with pytest.raises(LaunchLimitError, match="65536"):
        limits.check_launch((1,), (128,), dynamic_smem=100 * 1024, limits=small)
    limits.check_launch((1,), (128,), dynamic_smem=60 * 1024, limits=small)


def test_public_calls_without_a_gpu_say_a_gpu_is_needed_in_plain_words(no_gpu):
    import numpy as np

    from kernelbook.lenet import conv_forward

    with pytest.raises(GPUUnavailable) as info:
        conv_forward(np.zeros((1, 1, 8, 8), np.float32), np.zeros((1, 1, 3, 3), np.float32))
    assert "CUDA GPU is needed for conv_forward" in info.value.message and "Error" not in info.value.message
    ok, why = gpu.availability()
    assert not ok and "Error" not in why and "cuda" not in why.lower().replace("cuda gpu", "")


def test_the_reason_a_page_replays_is_plain_words(results_root, monkeypatch):
    monkeypatch.delenv("KERNELBOOK_NO_GPU", raising=False)
    gpu.availability.cache_clear()
    try:
        ok, why = gpu.availability()
        if ok:
            pytest.skip("this machine has a GPU")
        assert why in ("no CUDA GPU on this machine", "CuPy cannot be loaded on this machine")
    finally:
        gpu.availability.cache_clear()


class _Stream:
    def __init__(self, ptr, done):
        self.ptr, self.done = ptr, done
        self.recorded, self.waited = [], []

    def record(self):
        event = ("event", self.ptr, len(self.recorded))
        self.recorded.append(event)
        return event

    def wait_event(self, event):
        self.waited.append(event)


class _Array:
    def __init__(self, ptr):
        self.data = type("Memory", (), {"ptr": ptr})()


class _Module:
    def __init__(self):
        self.copies = []

    def get_global(self, name):
        module = self

        class Symbol:
            def copy_from_device_async(self, src, nbytes, stream):
                module.copies.append((name, src.ptr, stream.ptr))
        return Symbol()


def test_constant_memory_shared_by_streams_is_ordered_after_another_stream_that_may_read_it():
    from kernelbook.kernels import upload_constant

    module, a, b = _Module(), _Stream(1, done=False), _Stream(2, done=False)
    upload_constant(module, "k_const", _Array(100), 64, a)
    upload_constant(module, "k_const", _Array(100), 64, a)          # same stream: ordered, nothing to wait for
    upload_constant(module, "k_const", _Array(100), 64, b)          # same weights: nothing changes
    assert a.waited == [] and b.waited == []
    upload_constant(module, "k_const", _Array(200), 64, a)          # other weights while b is busy
    assert a.waited == b.recorded and len(b.recorded) == 1          # ... copied only after b's queued work
    b.done = True
    upload_constant(module, "k_const", _Array(300), 64, b)          # a is busy: b waits for a
    assert b.waited == a.recorded and len(a.recorded) == 1
    a.done = True
    upload_constant(module, "k_const", _Array(400), 64, a)          # b has finished: no wait
    assert len(a.waited) == 1
    assert len(module.copies) == 6


# ----------------------------------------------------------------------------- replay warnings


def test_replay_with_other_values_warns_on_the_page(results_root, no_gpu, tmp_path):
    import shutil

    from kernelbook import paths

    fabricate_chapter(results_root, batches=(100, 1000))
    weights = tmp_path / "my" / "weights.bin"  # a real weights file (a bad one is refused, replaying too)
    weights.parent.mkdir()
    shutil.copy(paths.REPO_ROOT / "data" / "models" / "lenet86.bin", weights)
    chapter = run_chapter(STUDY, "baseline", params={"tile_width": 8}, sizes=[100, 500], mode="replay",
                          weights_path=str(weights))
    names = {name for name, _, _ in chapter.recording.mismatches}
    assert {"params", "batch_sizes", "weights"} <= names
    text = chapter.banner().data
    assert "Warning" in text and "[100, 500]" in text and "[100, 1000]" in text and "weights.bin" in text
    assert str(tmp_path) not in text  # outside the project: the file name only
    same = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    assert same.recording.mismatches == [] and "Warning" not in same.banner().data


def test_replayed_values_that_differ_reach_the_batch_summary(tmp_path, results_root, no_gpu, monkeypatch, capsys):
    fabricate_chapter(results_root, batches=(100, 1000))
    book = tmp_path / "book1"
    (book / "book" / "part").mkdir(parents=True)
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - caption: P\n    chapters:\n"
                                   "      - file: book/part/page\n")
    (book / "book" / "intro.md").write_text("# Intro\n")
    (book / "book" / "part" / "page.md").write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n# Page\n\n"
        "```{code-cell} ipython3\n:tags: [parameters]\n\nbatch_sizes = [100, 1000]\nmode = 'auto'\nrun_id = None\n```\n\n"
        "```{code-cell} ipython3\nfrom kernelbook.chapter import run_chapter\nfrom kernelbook.lenet import STUDY\n\n"
        "chapter = run_chapter(STUDY, 'baseline', sizes=batch_sizes, mode=mode, run_id=run_id)\n```\n")
    monkeypatch.chdir(book)
    report = run_batch(parameters={"batch_sizes": [100, 500]}, mode="replay", toc=book / "_toc.yml",
                       book_root=book / "book", out_dir=tmp_path / "out", progress_bar=False, log=lambda line: None)
    assert report.ok
    assert report.notebooks[0].shown_instead == [["lenet-baseline", "batch_sizes", [100, 500], [100, 1000]]]


def test_a_newer_partial_sanitizer_run_never_hides_the_older_checks(results_root):
    from kernelbook.evidence import sanitizer

    def write(run_id, steps):
        run = results.create_run({"device": DEVICE, "commit": "c", "host": "h"}, run_id=run_id)
        recs = [sanitizer.sanitizer_record(STUDY, "memcheck", step, "C1", 4, {"errors": 0, "rc": 0, "passed": True})
                for step in steps]
        run.write_part(sanitizer.part(STUDY), "lenet", recs, parameters={"batch": 4})

    write("20260101T0000Z-aaaaaa", ["baseline", "tiled"])
    write("20260102T0000Z-bbbbbb", ["tiled"])
    html = sanitizer.sanitizer_table(STUDY).to_html()
    assert "baseline" in html and "20260101T0000Z-aaaaaa" in html and "20260102T0000Z-bbbbbb" in html


def test_a_sanitizer_check_that_did_not_run_its_target_is_no_pass(results_root):
    from kernelbook.evidence import sanitizer

    run = results.create_run({"device": DEVICE, "commit": "c", "host": "h"})
    refused = sanitizer.sanitizer_record(STUDY, "memcheck", "tiled", "C1", 4, {"errors": 0, "rc": 2, "passed": False})
    run.write_part(sanitizer.part(STUDY), "lenet", [refused], parameters={"batch": 4})
    html = sanitizer.sanitizer_table(STUDY).to_html()
    assert "FAIL (exit status 2)" in html and "pass" not in html


def test_the_sm_count_is_asked_of_the_driver_once_per_device(monkeypatch):
    """A persistent-grid launcher sizes its grid on every call: the driver is asked once per device."""
    import sys
    import types

    from kernelbook import gpu

    asked = []
    current = {"id": 0}
    runtime = types.SimpleNamespace(
        getDevice=lambda: current["id"],
        getDeviceProperties=lambda d: asked.append(d) or {"multiProcessorCount": 132 if d == 0 else 114})
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(gpu, "_SM_COUNTS", {})
    assert [gpu.multiprocessors() for _ in range(3)] == [132] * 3 and asked == [0]
    current["id"] = 1
    assert gpu.multiprocessors() == 114 and asked == [0, 1]


def test_a_kernel_attribute_is_set_once_per_kernel_and_value():
    """The shared-memory opt-in and the carveout are driver calls: a launch path that runs on every
    call sets them once per kernel and value (a new value is set again)."""
    from kernelbook.steps import set_once

    class Kernel:
        def __init__(self):
            self.calls = []

        def __setattr__(self, name, value):
            if name != "calls":
                self.calls.append((name, value))
            object.__setattr__(self, name, value)

    a, b = Kernel(), Kernel()
    for _ in range(3):
        set_once(a, "max_dynamic_shared_size_bytes", 100_000)
        set_once(b, "max_dynamic_shared_size_bytes", 100_000)
    set_once(a, "max_dynamic_shared_size_bytes", 150_000)
    set_once(a, "preferred_shared_memory_carveout", 100)
    assert a.calls == [("max_dynamic_shared_size_bytes", 100_000), ("max_dynamic_shared_size_bytes", 150_000),
                       ("preferred_shared_memory_carveout", 100)]
    assert b.calls == [("max_dynamic_shared_size_bytes", 100_000)]


def test_headers_that_include_each_other_are_shown_once_with_the_digest_the_build_checks(tmp_path, monkeypatch):
    """A kernel's included headers: each once even when two include each other, and the digest in
    the page's metadata is the one ``executed.stale_sources`` computes (of the file's bytes, which
    need not be UTF-8)."""
    from kernelbook import paths, report
    from kernelbook.batch_report import source_digest

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "00_step.cu").write_text('#include "a.cuh"\n__global__ void k() {}\n')
    (tmp_path / "s" / "a.cuh").write_bytes(b'#include "b.cuh"\n// caf\xe9 in latin-1\n')
    (tmp_path / "s" / "b.cuh").write_text('#include "a.cuh"\n')
    monkeypatch.setattr(paths, "kernels_dir", lambda: tmp_path)
    block = report.show_source("s/00_step.cu")
    assert [path for path, _ in block.headers] == ["s/b.cuh", "s/a.cuh"]
    shown = block._metadata()[report.SOURCE_METADATA]["headers"]
    assert shown == {f"kernels/s/{n}": source_digest(tmp_path / "s" / n) for n in ("a.cuh", "b.cuh")}
