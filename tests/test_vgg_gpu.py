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


from kernelbook.checks import claims_fp32_range  # noqa: E402  (the one rule: every FP32-accurate step)

SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)


@pytest.mark.parametrize("slug", [s for s in STEPS.slugs() if claims_fp32_range(STEPS.impl(s))])
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


HOPPER = ["hopper-tf32", "hopper-fp16", "hopper-3xtf32", "hopper-split"]


@pytest.mark.parametrize("slug", HOPPER)
def test_hopper_raw_weights_changed_in_place_are_repacked(slug):
    """A raw weight array is packed once and cached by address; changed in place (a few floats,
    then whole channels), the next call must compute with the new values, never the stale copy."""
    import cupy as cp

    impl = STEPS.impl(slug)
    rng = np.random.default_rng(21)
    shape = ConvPoolShape(1, 70, 20, 36, 100, 5)
    x, w, b = run.random_inputs(shape, rng)
    dx, dw, db = run.upload(x, w, b)
    for change in (None, "one", "channels"):
        if change == "one":
            w[7, 0, 2, 2] = 0.5
            dw[7, 0, 2, 2] = 0.5
        elif change == "channels":
            w[:, 3:40] *= -0.75
            dw[:, 3:40] *= -0.75
        y = cp.full(shape.y_shape, cp.nan, dtype=cp.float32)
        forward(dx, dw, db, step=slug, out=y)
        got, ref = y.get(), reference(x, w, b)
        assert np.linalg.norm(got - ref) <= impl.tolerance * np.linalg.norm(ref), change


@pytest.mark.parametrize("slug", HOPPER)
def test_hopper_prepared_weights_are_a_snapshot(slug):
    """vgg.prepare_weights packs once; the call with it matches float64, later changes to the
    array do not reach it (the documented contract), and another step refuses it."""

    from kernelbook.errors import ParameterError
    from kernelbook.vgg import prepare_weights

    impl = STEPS.impl(slug)
    rng = np.random.default_rng(22)
    shape = ConvPoolShape(2, 37, 17, 30, 35, 3)
    x, w, b = run.random_inputs(shape, rng)
    dx, dw, db = run.upload(x, w, b)
    prepared = prepare_weights(dw, slug)
    ref = reference(x, w, b)
    y = forward(dx, prepared, db, step=slug)
    assert np.linalg.norm(y.get() - ref) <= impl.tolerance * np.linalg.norm(ref)
    dw *= 2.0
    again = forward(dx, prepared, db, step=slug)
    assert np.array_equal(again.get(), y.get())
    other = next(s for s in HOPPER if s != slug)
    with pytest.raises(ParameterError, match="prepared for step"):
        forward(dx, prepared, db, step=other)


def test_hopper_fp16_prepared_weights_pack_bf16_on_first_use():

    from kernelbook.vgg import prepare_weights

    rng = np.random.default_rng(23)
    shape = ConvPoolShape(1, 20, 12, 18, 30, 5)
    x, w, b = run.random_inputs(shape, rng)
    dx, dw, db = run.upload(x, w, b)
    prepared = prepare_weights(dw, "hopper-fp16")
    ref = reference(x, w, b)
    for operand, tol in (("fp16", 5e-3), ("bf16", 2e-2), ("fp16", 5e-3)):
        y = forward(dx, prepared, db, step="hopper-fp16", operand=operand)
        assert np.linalg.norm(y.get() - ref) <= tol * np.linalg.norm(ref), operand


@pytest.mark.parametrize("slug", HOPPER)
def test_hopper_chapter_checks_pass_with_prepared_weights(slug):
    """The chapter's checks (random shapes, and the range test for the FP32-accurate steps)
    through the study's operands, i.e. with the weights prepared once as the timed call has them."""
    results = study.check_step(slug, n_random=4, seed=31, full_case=None)
    failed = [r for r in results if not r.passed]
    assert not failed, [(r.label, r.shape, r.rel_l2_error, r.unwritten, r.error) for r in failed]
    if slug in ("hopper-3xtf32", "hopper-split"):
        assert sum(r.label.startswith("range test") for r in results) == len(run.RANGE_SCALES)
