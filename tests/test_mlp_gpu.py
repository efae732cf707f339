"""Every MLP step on the GPU against float64 (half-precision steps: the scaled absolute
difference against the CPU float32 benchmark), output poisoned with NaN before each launch."""

from __future__ import annotations

import numpy as np
import pytest

from kernelbook.mlp import STEPS, check_call, data, forward, reference

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
