"""GPU checks (run on the device machine: `pytest -m gpu`; skipped where there is no GPU)."""

import numpy as np
import pytest

from kernelbook import harness, lenet
from kernelbook.checks import claims_fp32_range
from kernelbook.errors import ShapeError
from kernelbook.lenet import conv_forward
from kernelbook.lenet.study import STUDY, check_step

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("slug", lenet.step_names())
def test_step_matches_float64_on_random_shapes_with_poison(slug):
    impl = lenet.get_step(slug)
    found = check_step(impl, impl.params(), n_random=12, seed=None)
    failed = [c for c in found if not c.passed]
    assert len(found) >= 10
    assert not failed, failed


def test_poison_catches_an_unwritten_element(monkeypatch):
    impl = lenet.get_step("baseline")
    real_launch = impl.launch

    def lazy_launch(y, *operands_shape_params, **options):
        real_launch(y, *operands_shape_params, **options)
        y[-1, -1, -1, -1] = np.nan  # as if the last thread never wrote

    monkeypatch.setattr(impl, "launch", lazy_launch)
    found = harness.check_step(STUDY, impl, impl.params(), 0, 0)  # the network's two layers, at least
    assert {"C1", "C3"} <= {c.label for c in found}
    missed = [(c.label, c.passed, c.unwritten, c.error) for c in found if c.passed or c.unwritten != 1]
    assert not missed, missed


def test_conv_forward_rejects_host_arrays_and_wrong_out():
    import cupy as cp

    x = np.ones((1, 1, 8, 8), np.float32)
    with pytest.raises(ShapeError, match="CuPy"):
        conv_forward(x, cp.ones((1, 1, 3, 3), cp.float32))
    with pytest.raises(ShapeError, match="out has shape"):
        conv_forward(cp.asarray(x), cp.ones((1, 1, 3, 3), cp.float32), out=cp.empty((1, 1, 5, 5), cp.float32))


def test_gpu_network_agrees_with_cpu_reference():
    from kernelbook.lenet.data import load_test_set
    from kernelbook.lenet.network import GpuLeNet
    from kernelbook.lenet.reference import forward_reference
    from kernelbook.lenet.weights import default_weights_path, read_weights

    images, labels = load_test_set(n=256)
    weights = read_weights(default_weights_path())
    net = GpuLeNet(weights, "baseline")
    import cupy as cp

    gpu_logits = net.logits(cp.asarray(images)).get()
    cpu_logits = forward_reference(images, weights, dtype=np.float64)
    err = np.linalg.norm(gpu_logits - cpu_logits) / np.linalg.norm(cpu_logits)
    assert err < 1e-4
    assert (net.predict(images) == np.argmax(cpu_logits, axis=1)).mean() >= 0.995


def test_timing_returns_raw_samples():
    import cupy as cp

    from kernelbook.measure import time_gpu

    a = cp.random.random((1 << 20,), dtype=cp.float32)
    m = time_gpu(lambda: cp.sqrt(a), repeats=7, warmup=1)
    assert len(m.samples) == 7 and m.min <= m.median <= m.max and m.min > 0


def test_graph_timing_replays_many_calls_of_a_short_kernel():
    """A microsecond kernel is timed as a graph of R back-to-back calls, per call."""
    import cupy as cp

    from kernelbook.measure import MAX_CALLS, _capture, time_gpu

    a = cp.random.random((1024,), dtype=cp.float32)
    m = time_gpu(lambda: cp.sqrt(a), repeats=5, warmup=1, graph=True)
    assert m.extra["timing"] == "cuda-graph-calls" and 1 < m.extra["calls_per_replay"] <= MAX_CALLS
    replay, stream, _ = _capture(lambda: cp.sqrt(a), 1)        # the same call, one per replay
    alone = time_gpu(replay, repeats=5, warmup=1, stream=stream)
    assert 0 < m.median < 0.5 * alone.median   # per call: most of a lone replay is its launch latency


def test_constant_memory_steps_on_two_streams_use_their_own_weights():
    """Steps that keep the weights in module constant memory (k_const), launched on two streams
    with other weights while the first is still busy: the second upload is ordered after the
    first stream's launch, so each result is computed with its own weights."""
    import cupy as cp

    from kernelbook.lenet.reference import conv2d_reference

    rng = np.random.default_rng(1)
    shape = lenet.layer_shape("C3", 2000)
    x = cp.asarray(rng.uniform(-1, 1, shape.x_shape).astype(np.float32))
    ks = [cp.asarray(rng.uniform(-1, 1, shape.k_shape).astype(np.float32)) for _ in range(3)]
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    ys = [cp.full(shape.y_shape, cp.nan, dtype=cp.float32) for _ in range(3)]
    conv_forward(x, ks[0], "constant-memory", out=ys[0], stream=s1)
    conv_forward(x, ks[1], "constant-memory", out=ys[1], stream=s2)
    conv_forward(x, ks[2], "constant-memory", out=ys[2], stream=s1)
    s1.synchronize()
    s2.synchronize()
    xs = x[:4].get().astype(np.float64)
    for k, y in zip(ks, ys):
        ref = conv2d_reference(xs, k.get().astype(np.float64))
        assert np.allclose(y[:4].get(), ref, rtol=1e-4, atol=1e-4)


# ---- the range test: FP32-accurate means <= 1e-5 relative L2 for inputs and weights from 1e-6 to 1e6

FP32_STEPS = [s for s in lenet.step_names() if claims_fp32_range(lenet.get_step(s))]
RANGE_CASES = [(f"x{xs:g}-k{ks:g}", xs, ks) for xs in (1e-6, 1.0, 1e6) for ks in (1e-6, 1.0, 1e6)] + [
    ("x-mixed", "mixed", 1.0), ("k-mixed", 1.0, "mixed"), ("both-mixed", "mixed", "mixed")]


def _draw(rng, shape, scale):
    """Standard normal times the scale, or times 10^U(-6, 6) per element ('mixed')."""
    base = rng.standard_normal(shape)
    return (base * (10.0 ** rng.uniform(-6, 6, size=shape) if scale == "mixed" else scale)).astype(np.float32)


@pytest.mark.parametrize("slug", FP32_STEPS)
@pytest.mark.parametrize("layer", ["C1", "C3"])
def test_fp32_steps_pass_the_range_test(slug, layer):
    import cupy as cp

    from kernelbook.checks import poisoned
    from kernelbook.lenet.reference import conv2d_reference

    shape = lenet.layer_shape(layer, 2)
    rng = np.random.default_rng()
    errors = {}
    for name, xs, ks in RANGE_CASES:
        x, k = _draw(rng, shape.x_shape, xs), _draw(rng, shape.k_shape, ks)
        out = poisoned(shape.y_shape)
        conv_forward(cp.asarray(x), cp.asarray(k), slug, out=out)
        y = out.get().astype(np.float64)
        ref = conv2d_reference(x.astype(np.float64), k.astype(np.float64))
        errors[name] = float(np.linalg.norm(y - ref) / np.linalg.norm(ref)) if np.all(np.isfinite(y)) else float("inf")
    failed = {name: err for name, err in errors.items() if not err <= 1e-5}
    assert not failed, f"{slug} {layer}: relative L2 over 1e-5 in {failed}"
