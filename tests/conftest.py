"""Shared fixtures. Tests never touch data/results/ unless they say so: results go to tmp."""

from __future__ import annotations

import os

# One BLAS thread per test process, set before NumPy loads: `make test` runs one worker per core
# (pytest -n), and BLAS threads of their own would only wait for a core, spinning.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import pytest

from kernelbook import gpu, results


def pytest_collection_modifyitems(config, items):
    # The long tests (marked slow) first, in their order: the workers of `make test` (pytest -n, two
    # tests handed out at a time) then share them out from the start and end together, rather than
    # one waiting on a long test at the end.
    items.sort(key=lambda item: "slow" not in item.keywords)
    if gpu.available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU ({gpu.availability()[1]})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """The whole book replayed from data/results/ and built strictly, once per test run: (html
    folder, batch report). Used by the tests marked ``book`` (tests/test_book.py, test_words.py)."""
    from kernelbook import batch, build

    if not results.list_runs():
        pytest.skip("no recorded run in data/results/")
    root = tmp_path_factory.mktemp("book")
    lines = []
    report = batch.run_batch(mode="replay", out_dir=root / "executed", log=lines.append, progress_bar=False)
    assert not report.failed, lines
    html = build.build_book(executed_dir=root / "executed", path_output=root, strict=True,
                            stage_dir=root / "stage", log=lambda *_: None)
    return html, report


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as a machine without a GPU, whatever this one has."""
    monkeypatch.setenv("KERNELBOOK_NO_GPU", "1")
    gpu.availability.cache_clear()
    yield
    gpu.availability.cache_clear()


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(root))
    return root


DEVICE = {"name": "Test GPU 9000", "compute_capability": "9.0"}


def fabricate_chapter(root, step="baseline", correct=True, run_id=None, batches=(100, 1000)):
    """A recorded run holding one LeNet chapter, as a GPU run would have written it."""
    run = results.create_run({"device": DEVICE, "commit": "abc123def456", "host": "test"},
                             run_id=run_id, root=root)
    recs = [results.record("lenet", step, layer, None, "correct", 1.0 if correct else 0.0)
            for layer in ("C1", "C3")]
    if correct:
        from kernelbook.lenet import layer_shape
        from kernelbook.measure import Measured

        for b in batches:
            for i, layer in enumerate(("C1", "C3")):
                s = layer_shape(layer, b)
                base = 0.01 * b * (i + 1)
                recs.append(results.record("lenet", step, layer, b, "op_time_ms",
                                           Measured([base, base * 1.1, base * 0.9]),
                                           flops=s.flops, min_bytes=s.min_bytes))
                recs.append(results.record("lenet", step, layer, b, "layer_time_ms",
                                           Measured([base * 3, base * 3.3]), flops=s.flops, min_bytes=s.min_bytes))
            recs.append(results.record("lenet", step, "network", b, "total_time_ms", Measured([b * 0.1])))
            recs.append(results.record("lenet", step, "network", b, "accuracy", 0.9))
    checks = [{"label": "C1", "layer": "C1", "shape": {"B": 3, "M": 4, "C": 1, "H": 86, "W": 86, "K": 7},
               "passed": correct, "rel_l2_error": 1e-7 if correct else 0.5, "max_abs_error": 1e-6,
               "unwritten": 0, "tolerance": 1e-5, "error": None}]
    params = {"step": step, "batch_sizes": list(batches), "params": {}, "weights": "data/models/lenet86.bin"}
    run.write_part(f"lenet-{step}", "lenet", recs, checks, parameters=params)
    return run
