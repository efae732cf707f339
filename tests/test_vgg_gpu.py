"""Every VGG step against float64 on a GPU: random shapes with odd and even sizes, poisoned output."""

from __future__ import annotations

import numpy as np
import pytest

from kernelbook.errors import ShapeError
from kernelbook.vgg import STEPS, ConvPoolShape, forward, run, study
from kernelbook.vgg.reference import reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("slug", STEPS.slugs())
def test_step_matches_float64_on_random_shapes(slug):
    results = study.check_step(slug, n_random=8, seed=123, full_case=None)
    failed = [r for r in results if not r.passed]
    assert not failed, [(r.label, r.shape, r.rel_l2_error, r.unwritten, r.error) for r in failed]


@pytest.mark.parametrize("slug", ["baseline", "weights-on-the-fly", "register-tiled", "tf32", "final",
                                  "hopper-tf32", "hopper-fp16", "hopper-3xtf32", "hopper-split"])
def test_step_handles_edge_shapes(slug):
    import cupy as cp

    impl = STEPS.impl(slug)
    rng = np.random.default_rng(7)
    for shape in (ConvPoolShape(1, 1, 2, 2, 1, 1), ConvPoolShape(2, 9, 33, 3, 35, 3), ConvPoolShape(1, 16, 17, 40, 16, 9)):
        x, w, b = run.random_inputs(shape, rng)
        dx, dw, db = run.upload(x, w, b)
        y = cp.full(shape.y_shape, cp.nan, dtype=cp.float32)
        forward(dx, dw, db, step=slug, out=y)
        got = y.get()
        assert not np.isnan(got).any()
        ref = reference(x, w, b)
        assert np.linalg.norm(got - ref) <= impl.tolerance * np.linalg.norm(ref), shape


def test_forward_refuses_bad_arrays():
    import cupy as cp

    x = cp.zeros((1, 3, 8, 8), dtype=cp.float32)
    w = cp.zeros((4, 3, 3, 3), dtype=cp.float32)
    b = cp.zeros(4, dtype=cp.float32)
    with pytest.raises(ShapeError, match="float32"):
        forward(x.astype(cp.float64), w, b)
    with pytest.raises(ShapeError, match="C-contiguous"):
        forward(x[:, :, :, ::2], w, b)
    with pytest.raises(ShapeError, match="out has shape"):
        forward(x, w, b, out=cp.zeros((1, 4, 8, 8), dtype=cp.float32))
    assert forward(x, w, b).shape == (1, 4, 4, 4)


SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)


@pytest.mark.parametrize("slug", ["3xtf32", "winograd", "hopper-3xtf32", "hopper-split"])
def test_fp32_accurate_steps_keep_fp32_range(slug):
    """Inputs and weights scaled independently from 1e-6 to 1e6, and tensors that mix magnitudes
    (each element scaled by 10^U(-6, 6)): relative L2 <= 1e-5 against float64 in every case."""
    import cupy as cp

    impl = STEPS.impl(slug)
    rng = np.random.default_rng(11)
    shape = ConvPoolShape(1, 40, 24, 36, 48, 5)
    cases = [(sx, sw, False) for sx in SCALES for sw in SCALES] + [(1.0, 1.0, True), (1e-3, 1e3, True)]
    for sx, sw, mixed in cases:
        x, w, b = run.random_inputs(shape, rng)
        if mixed:
            x = (x * 10.0 ** rng.uniform(-6, 6, x.shape)).astype(np.float32)
            w = (w * 10.0 ** rng.uniform(-6, 6, w.shape)).astype(np.float32)
        x, w, b = (x * sx).astype(np.float32), (w * sw).astype(np.float32), (b * sx * sw).astype(np.float32)
        dx, dw, db = run.upload(x, w, b)
        y = cp.full(shape.y_shape, cp.nan, dtype=cp.float32)
        forward(dx, dw, db, step=slug, out=y)
        got, ref = y.get(), reference(x, w, b)
        assert not np.isnan(got).any(), (sx, sw, mixed)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err <= impl.tolerance, (sx, sw, mixed, err)
