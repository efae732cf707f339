"""Every MLP step on the GPU against float64 (half-precision steps: the scaled absolute
difference against the CPU float32 benchmark), output poisoned with NaN before each launch."""

from __future__ import annotations

import numpy as np
import pytest

from kernelbook.checks import claims_fp32_range
from kernelbook.mlp import STEPS, check_call, data, forget_weights, forward, pack, ranges, reference

pytestmark = pytest.mark.gpu

COLUMNS = (1, 31, 33, 12799, 12800, 2_097_152)


@pytest.fixture(scope="module")
def weights():
    import cupy as cp

    host = data.make_weights(11)
    return host, tuple(cp.asarray(w) for w in host)


@pytest.fixture(scope="module")
def signals():
    return {n: data.make_signals(n, 12 + n % 97) for n in COLUMNS}


@pytest.mark.parametrize("slug", STEPS.slugs())
@pytest.mark.parametrize("n", COLUMNS)
def test_step_matches_the_reference(slug, n, weights, signals):
    import cupy as cp

    host_w, dev_w = weights
    x_host = signals[n]
    x = cp.asarray(x_host)
    out = cp.full((4, n), cp.nan, dtype=cp.float32)
    forward(x, dev_w, step=slug, out=out)
    got = out.get()
    assert not np.isnan(got).any(), "some outputs were never written"
    impl = STEPS.impl(slug)
    if impl.measure == "scaled_abs_diff":
        assert reference.scaled_abs_diff(got, reference.forward32(x_host, host_w)) <= reference.HALF_THRESHOLD
    else:
        assert reference.rel_l2(got, reference.forward64(x_host, host_w)) <= impl.tolerance


def test_prepared_weights_are_reused_and_out_is_allocated(weights):
    import cupy as cp

    host_w, dev_w = weights
    impl = STEPS.impl("coalesced-weights")
    prepared = impl.prepare_weights(dev_w)
    x_host = data.make_signals(100, 3)
    y = forward(cp.asarray(x_host), prepared, step="coalesced-weights")
    assert y.shape == (4, 100)
    assert reference.scaled_abs_diff(y.get(), reference.forward32(x_host, host_w)) <= 0.15


def test_numpy_arrays_are_refused(weights):
    from kernelbook.errors import ShapeError

    with pytest.raises(ShapeError, match="CuPy"):
        forward(data.make_signals(4, 1), weights[1])


def test_check_call_runs_without_launching(weights):
    impl, shape, params, _ = check_call("final", data.make_signals(5, 1), weights[0])
    assert shape.N == 5 and "switch_columns" in params


# ----------------------------------------------------------------------------- the range test

RANGE_STEPS = [s for s in STEPS.slugs() if claims_fp32_range(STEPS.impl(s))]


@pytest.fixture(scope="module")
def range_grid():
    return list(ranges.cases(np.random.default_rng(19), grid=True))


def _range_errors(slug, grid):
    import cupy as cp

    impl = STEPS.impl(slug)
    errors = []
    for label, x_host, w_host in grid:
        x = cp.asarray(x_host)
        out = cp.full((4, x_host.shape[1]), cp.nan, dtype=cp.float32)
        forward(x, tuple(cp.asarray(w) for w in w_host), step=slug, out=out)
        errors.append((label, reference.rel_l2(out.get(), reference.forward64(x_host, w_host))))
    forget_weights()
    return impl, errors


@pytest.mark.parametrize("slug", RANGE_STEPS)
def test_fp32_steps_pass_the_range_test(slug, range_grid):
    """Inputs and each layer's weights from 1e-6 to 1e6 (630 scalings, 8 mixtures): relative L2
    error against float64 <= 1e-5 for every step that claims FP32 accuracy."""
    impl, errors = _range_errors(slug, range_grid)
    failed = [(label, e) for label, e in errors if not e <= impl.tolerance]
    assert failed == [], f"{len(failed)} of {len(errors)} range cases fail, e.g. {failed[:3]}"


# One weight of W1 (step 17) or of W2 (step 19) made 2^45 times smaller: a span wider than the step's scaling holds.
@pytest.mark.parametrize("slug, matrix", [("final-full-range", 0), ("wgmma-full-range", 2)])
def test_a_full_range_step_takes_the_exact_path_for_wide_weights(slug, matrix):
    import cupy as cp

    host = list(data.make_weights(5))
    host[matrix] = host[matrix].copy()
    host[matrix][3, 7] *= np.float32(2.0**-45)
    host = tuple(host)
    impl = STEPS.impl(slug)
    prepared = impl.prepare_weights(tuple(cp.asarray(w) for w in host))
    assert impl.exact_only(prepared)
    x_host = data.make_signals(1000, 6)
    out = forward(cp.asarray(x_host), prepared, step=slug)
    assert reference.rel_l2(out.get(), reference.forward64(x_host, host)) <= 1e-5


def test_forward_validates_a_weight_set_once(weights, monkeypatch):
    """The second call with the same arrays neither copies the weights to the host nor packs them."""
    import cupy as cp

    import kernelbook.mlp as mlp

    _, dev_w = weights
    forget_weights()
    calls = []
    real = mlp.check_call
    monkeypatch.setattr(mlp, "check_call", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = cp.asarray(data.make_signals(300, 3))
    first = forward(x, dev_w, step="final-full-range")
    second = forward(x, dev_w, step="final-full-range")
    assert len(calls) == 1 and cp.array_equal(first, second)
    forget_weights()
    forward(x, dev_w, step="final-full-range")
    assert len(calls) == 2


def _range15_cases():
    """(label, where the data leaves half's range, x, weights): x, only the first or the second
    hidden layer, weights (found when packing), some columns of each tile, the small end, and
    weights at 1e5 that stay inside (W3: the fast path)."""
    f = np.float32
    w = data.make_weights(37)
    x = data.make_signals(300, 37)
    scaled = ranges._scaled
    some = x.copy()
    some[:, ::3] *= f(1e5)                       # every third column: tiles mix both paths
    return [("x*1e5", "x", x * f(1e5), w),
            ("x*1e5, 33 columns", "x", x[:, :33] * f(1e5), w),
            ("every third column x*1e5", "x", some, w),
            ("x*1e5 W*1e5", "x", x * f(1e5), scaled(w, 1e5, (1e5, 1e5, 1e5))),
            ("W1*1e5", "h1", x, scaled(w, 1.0, (1e5, 1.0, 1.0))),
            ("x*10 W1*1e4", "h1", x * f(10), scaled(w, 10.0, (1e4, 1.0, 1.0))),
            ("W2*1e5", "h2", x, scaled(w, 1.0, (1.0, 1e5, 1.0))),
            ("W3*1e5", "inside", x, scaled(w, 1.0, (1.0, 1.0, 1e5))),
            ("W*1e6", "weights", x, scaled(w, 1.0, (1e6, 1e6, 1e6))),
            ("W3*1e6", "weights", x, scaled(w, 1.0, (1.0, 1.0, 1e6))),
            ("x*1e-6", "small", x * f(1e-6), scaled(w, 1e-6, (1.0, 1.0, 1.0)))]


def _where_outside(x_host, w_host) -> set[str]:
    """Where the data leaves half's range as step 15 splits it (float64 hidden values)."""
    x64, w64 = x_host.astype(np.float64), [a.astype(np.float64) for a in w_host]
    h1 = np.maximum(w64[0] @ x64 + w64[1][:, None], 0)
    h2 = np.maximum(w64[2] @ h1 + w64[3][:, None], 0)
    found = {name for name, a in (("x", x64), ("h1", h1), ("h2", h2)) if np.abs(a).max() >= 65520}
    if pack.f16_split_exact(w_host):
        found.add("weights")
    if 0 < np.abs(x64).max() < pack.SPLIT_SMALL:
        found.add("small")
    return found or {"inside"}


@pytest.mark.parametrize("label, where, x_host, w_host", _range15_cases(), ids=[c[0] for c in _range15_cases()])
def test_range15_data_outside_halfs_range_comes_back_within_tolerance(label, where, x_host, w_host):
    """Step 15 (3xFP16, no scaling) computes the columns whose x or hidden values leave half's range,
    and every column of weights outside it, in plain FP32: the result is within its tolerance of
    float64, never silently wrong (before, x * 1e5 gave a relative L2 error of 1.0)."""
    import cupy as cp

    found = _where_outside(x_host, w_host)
    assert where in found and (where not in ("h1", "h2") or found <= {"h1", "h2"}), f"{label}: {found}"
    impl = STEPS.impl("final")
    for params in ({}, {"small_warps": 8, "small_m_tiles": 1}):
        out = cp.full((4, x_host.shape[1]), cp.nan, dtype=cp.float32)
        forward(cp.asarray(x_host), tuple(cp.asarray(a) for a in w_host), step="final", out=out, **params)
        got = out.get()
        assert not np.isnan(got).any(), "some outputs were never written"
        error = reference.rel_l2(got, reference.forward64(x_host, w_host))
        assert error <= impl.tolerance, f"{label} {params}: relative L2 error {error:.3g}"
    forget_weights()


def test_a_repeated_call_still_checks_its_arrays(weights):
    """forward's fast path (a call like a validated one) re-checks type, dtype and layout of x and
    out, and the weights' shapes: wrong arrays of the right shape are refused, not launched."""
    import cupy as cp

    from kernelbook.errors import ShapeError

    _, dev_w = weights
    forget_weights()
    x = cp.asarray(data.make_signals(256, 4))
    out = cp.empty((4, 256), cp.float32)
    forward(x, dev_w, step="final-full-range", out=out)
    forward(x, dev_w, step="final-full-range", out=out)          # the fast path
    bad_inputs = [x.astype(cp.float64), cp.asfortranarray(x), x.get()]
    for bad in bad_inputs:
        with pytest.raises(ShapeError):
            forward(bad, dev_w, step="final-full-range", out=out)
    for bad_out in (out.astype(cp.float64), cp.empty((4, 255), cp.float32), cp.asfortranarray(out)):
        with pytest.raises(ShapeError):
            forward(x, dev_w, step="final-full-range", out=bad_out)
    reshaped = list(dev_w)
    reshaped[1] = dev_w[1].copy()
    forward(x, tuple(reshaped), step="final-full-range", out=out)
    reshaped[1].shape = (8, 8)                                      # in place, same identity
    with pytest.raises(ShapeError):
        forward(x, tuple(reshaped), step="final-full-range", out=out)
    forget_weights()


# ----------------------------------------------------------------------------- step 18 (TMA-fed FP16)

TMA_COLUMNS = (4, 36, 100, 12804, 65536, 65540, 131072 + 36)   # ragged last tiles and stages; both kernels


def _count_x_maps(monkeypatch, step: str) -> list:
    """Every call that takes ``step``'s own kernel asks for x's descriptor (cached or not): counted here."""
    impl = STEPS.impl(step)
    calls, real = [], impl.x_map
    monkeypatch.setattr(impl, "x_map", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    return calls


def _count_tma_calls(monkeypatch) -> list:
    return _count_x_maps(monkeypatch, "tensor-core-fp16-tma")


def _offset_forward(step: str, x_host, host_w, x_offset: int, y_offset: int, **params) -> np.ndarray:
    """``step`` on x and out that start ``x_offset`` / ``y_offset`` floats into their buffers, out
    poisoned with NaN; returns the output."""
    import cupy as cp

    n = x_host.shape[1]
    xbuf = cp.empty(71 * n + x_offset, dtype=cp.float32)
    x = xbuf[x_offset:].reshape(71, n)
    x[...] = cp.asarray(x_host)
    ybuf = cp.full(4 * n + y_offset, cp.nan, dtype=cp.float32)
    out = ybuf[y_offset:].reshape(4, n)
    forward(x, tuple(cp.asarray(w) for w in host_w), step=step, out=out, **params)
    return out.get()


def _tma_case(n, x_offset=0, y_offset=0, seed=5, **params):
    """Step 18 at offsets (``_offset_forward``); returns (output, CPU float32 reference)."""
    host_w = data.make_weights(seed)
    x_host = data.make_signals(n, seed + n % 89)
    got = _offset_forward("tensor-core-fp16-tma", x_host, host_w, x_offset, y_offset, **params)
    return got, reference.forward32(x_host, host_w)


@pytest.mark.parametrize("n", TMA_COLUMNS)
@pytest.mark.parametrize("switch_columns", (65536, 0, 2**31 - 1))   # default; stages everywhere; ring everywhere
def test_tma_step_on_ragged_shapes(n, switch_columns, monkeypatch):
    calls = _count_tma_calls(monkeypatch)
    got, ref = _tma_case(n, switch_columns=switch_columns)
    assert not np.isnan(got).any(), "some outputs were never written"
    assert reference.scaled_abs_diff(got, ref) <= reference.HALF_THRESHOLD
    assert calls == [n]                              # it took the TMA path


@pytest.mark.parametrize("n, x_offset, y_offset, tma", [
    (12800, 1, 0, False), (12800, 0, 1, False), (12800, 2, 2, False),   # not 16-byte aligned: step 14's kernel
    (12800, 4, 0, True), (12804, 4, 4, True), (2_097_152 + 4, 4, 0, True),  # 16 bytes off: the TMA still reads
    (12799, 0, 0, False), (65537, 0, 0, False),                          # N % 4 != 0: step 14's kernel
])
def test_tma_step_falls_back_where_the_tma_cannot_read(n, x_offset, y_offset, tma, monkeypatch):
    calls = _count_tma_calls(monkeypatch)
    got, ref = _tma_case(n, x_offset, y_offset)
    assert not np.isnan(got).any(), "some outputs were never written"
    assert reference.scaled_abs_diff(got, ref) <= reference.HALF_THRESHOLD
    assert calls == ([n] if tma else [])


def test_tma_step_reuses_its_descriptor_for_a_repeated_call(monkeypatch):
    """The driver is asked for x's tensor map once; a repeated call on the same x (new values)
    launches with the cached one and still reads the new values."""
    import cupy as cp

    from kernelbook.mlp import tensor

    asked = []
    real = tensor.x_descriptor
    monkeypatch.setattr(tensor, "x_descriptor", lambda *a: asked.append(a) or real(*a))
    host_w = data.make_weights(8)
    dev_w = tuple(cp.asarray(w) for w in host_w)
    x = cp.asarray(data.make_signals(12800, 1))
    out = cp.full((4, 12800), cp.nan, dtype=cp.float32)
    forward(x, dev_w, step="tensor-core-fp16-tma", out=out)
    x_host = data.make_signals(12800, 2)
    x[...] = cp.asarray(x_host)
    out[...] = cp.nan
    forward(x, dev_w, step="tensor-core-fp16-tma", out=out)
    assert len(asked) <= 1   # 0 when an earlier test left this address and size cached
    assert reference.scaled_abs_diff(out.get(), reference.forward32(x_host, host_w)) <= reference.HALF_THRESHOLD


# ----------------------------------------------------------------------------- step 19 (wgmma)

WGMMA_COLUMNS = (4, 36, 100, 12804, 65540, 131108)   # ragged last tiles; a tile's second box past n


def _count_wgmma_calls(monkeypatch) -> list:
    return _count_x_maps(monkeypatch, "wgmma-full-range")


def _wgmma_case(n, x_host=None, host_w=None, x_offset=0, y_offset=0, **params):
    """Step 19 at offsets (``_offset_forward``); returns (output, float64 reference)."""
    host_w = host_w if host_w is not None else data.make_weights(7)
    x_host = x_host if x_host is not None else data.make_signals(n, 9 + n % 83)
    got = _offset_forward("wgmma-full-range", x_host, host_w, x_offset, y_offset, **params)
    return got, reference.forward64(x_host, host_w)


@pytest.mark.parametrize("n", WGMMA_COLUMNS)
@pytest.mark.parametrize("switch_columns", (65536, 0, 2**31 - 1))   # default; 3 warpgroups everywhere; 2 everywhere
def test_wgmma_step_on_ragged_shapes(n, switch_columns, monkeypatch):
    calls = _count_wgmma_calls(monkeypatch)
    got, ref = _wgmma_case(n, switch_columns=switch_columns)
    assert not np.isnan(got).any(), "some outputs were never written"
    assert reference.rel_l2(got, ref) <= 1e-5
    assert calls == [n]                              # it took its own kernel


@pytest.mark.parametrize("n, x_offset, y_offset, own", [
    (12800, 1, 0, False), (12800, 0, 2, False),      # not 16-byte aligned: step 17's kernel
    (12800, 4, 4, True), (12799, 0, 0, False), (65537, 0, 0, False),
])
def test_wgmma_step_falls_back_where_the_tma_cannot_read(n, x_offset, y_offset, own, monkeypatch):
    calls = _count_wgmma_calls(monkeypatch)
    got, ref = _wgmma_case(n, x_offset=x_offset, y_offset=y_offset)
    assert not np.isnan(got).any()
    assert reference.rel_l2(got, ref) <= 1e-5
    assert calls == ([n] if own else [])


@pytest.mark.parametrize("where", ["x tiny", "x subnormal", "x huge column", "x zero columns", "x mixed"])
def test_wgmma_step_recomputes_the_pairs_its_scaling_cannot_hold(where):
    """Values the per-column scaling cannot hold send their column pair to the exact FP32 path; the
    cases are built so that a pair left on the fast path would be visibly wrong: the value that
    cannot be held carries the column's outputs (its weights are large, the column's largest
    input meets zero weights). A column of large values is simply scaled; zero columns stay exact.
    Every output is checked against float64."""
    n = 256
    x = data.make_signals(n, 21)
    W1, b1, W2, b2, W3, b3 = (w.copy() for w in data.make_weights(7))
    if where == "x tiny":                 # 1e-7 beside 1e4 in every column (2^36 apart), the rest zero
        tiny = np.float32(1e-7) * x[5, :]
        x[:] = 0.0
        x[3, :], x[5, :] = np.float32(1e4), tiny
        W1[:, 3] = 0.0
        b1[:], b2[:], b3[:] = 0.0, 0.0, 0.0
    elif where == "x subnormal":          # a column's largest is 2^-101, the rest subnormal
        x[:] = 0.0
        x[0, :] = np.float32(2.0**-101)
        x[1, :] = (np.abs(x[1:2, :]) + 0.5) * np.float32(2.0**-128) * data.make_signals(n, 4)[1]
        W1 *= np.float32(2.0**100)
        W1[:, 0] = 0.0
        b1[:], b2[:], b3[:] = 0.0, 0.0, 0.0
    elif where == "x huge column":
        x[:, 100] *= np.float32(3e4)
    elif where == "x zero columns":
        x[:, 64:128] = 0.0
    else:                                 # every element 1e-6 .. 1e6: every pair flagged
        rng = np.random.default_rng(3)
        x = (x * (10.0 ** rng.uniform(-6, 6, size=x.shape))).astype(np.float32)
    host_w = (W1, b1, W2, b2, W3, b3)
    assert not STEPS.impl("wgmma-full-range").exact_only(STEPS.impl("wgmma-full-range").prepare_weights(
        tuple(__import__("cupy").asarray(w) for w in host_w)))   # the fast path's own flags, not the weights'
    got, ref = _wgmma_case(n, x_host=x, host_w=host_w)
    assert reference.rel_l2(got, ref) <= 1e-5
