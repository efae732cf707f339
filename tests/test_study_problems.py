"""Each study's answers to the harness (its check cases, inputs and problems) are consistent on a
machine without a GPU: the references have the output's shape, the inputs the problem's, the
cases the harness checks are the study's own. (The harness itself is tested on a toy study in
test_harness.py; the launches need a GPU: test_gpu.py, test_mlp_gpu.py, test_vgg_gpu.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from kernelbook import harness
from kernelbook.lenet import STUDY as LENET
from kernelbook.mlp import STUDY as MLP
from kernelbook.vgg import STUDY as VGG


@pytest.mark.parametrize("study, step, n_random, fixed", [(LENET, "baseline", 3, ["C1", "C3"]),
                                                          (MLP, "baseline", 2, None),
                                                          (VGG, "register-tiled", 2, None)])
def test_check_cases_carry_inputs_and_a_float64_reference_of_the_output(study, step, n_random, fixed):
    impl = study.impl(step)
    cases = study.check_cases(impl, impl.params(), n_random, np.random.default_rng(0))
    assert all(isinstance(c, harness.CheckCase) for c in cases)
    if fixed:
        assert [c.label for c in cases[:len(fixed)]] == fixed
    small = [c for c in cases if np.prod(c.shape.y_shape) < 2_000_000]
    assert small
    for case in small:
        ref = case.reference()
        assert ref.dtype == np.float64
        if case.select is None:
            assert ref.shape == tuple(case.shape.y_shape)
        assert case.host[0].dtype == np.float32


def test_vgg_checks_the_whole_layer_at_sampled_outputs_and_fails_an_unwritten_one():
    impl = VGG.impl("register-tiled")
    full = VGG.check_cases(impl, impl.params(), 0, np.random.default_rng(0))[-1]
    assert full.label.startswith("B1 sampled") and full.select is not None
    got = np.zeros(full.shape.y_shape, np.float32)
    assert not np.isnan(full.select(got)).any()
    got[0, 0, 5, 7] = np.nan  # unwritten somewhere the sample does not look
    assert np.isnan(full.select(got)).any()


def test_lenet_random_check_shapes_are_ones_the_step_accepts():
    impl = LENET.impl("hopper-final")
    for case in LENET.check_cases(impl, impl.params(), 6, np.random.default_rng(1))[2:]:
        impl.validate(case.shape, impl.params())  # raises if the study drew a refused shape


@pytest.mark.parametrize("study, case, size", [(LENET, "C3", 7), (MLP, "5x5", None), (VGG, "B1", None)])
def test_inputs_have_the_problem_s_shapes(study, case, size):
    impl = study.impl(study.steps.baseline.slug)
    shape = study.problem(case, study.size_of(case, size))
    host = study.inputs(impl, shape, np.random.default_rng(0), case)
    assert host[0].dtype == np.float32
    assert case in [c for c, _ in harness.problems(study, [size] if size else [case])]


@pytest.mark.parametrize("slug, fp32", [("baseline", True), ("hopper-final", True), ("wgmma-final", True),
                                        ("fp16", False), ("tensor-cores", False)])
def test_lenet_fp32_steps_carry_the_range_test_and_half_precision_steps_do_not(slug, fp32):
    from kernelbook.lenet import checks

    impl = LENET.impl(slug)
    cases = LENET.check_cases(impl, impl.params(), 0, np.random.default_rng(2))
    ranged = {c.label: c for c in cases if c.label.startswith("range")}
    assert bool(ranged) == fp32
    if fp32:
        assert len(ranged) == 2 * len(checks.RANGE_CASES)
        big = ranged["range C3 x*1e+06 k*1e-06"]
        x, k = big.host
        assert 1e5 < np.abs(x).max() < 1e8 and 1e-8 < np.abs(k).max() < 1e-4
        x, _ = ranged["range C1 x*mixed k*1"].host
        assert np.abs(x).max() / np.abs(x[x != 0]).min() > 1e8  # magnitudes mixed in one tensor


def _check_cases(study, impl):
    """The study's checks for ``impl`` without random shapes (and, in VGG, without the whole layer)."""
    rng = np.random.default_rng(5)
    if study is VGG:
        from kernelbook.vgg.run import check_cases

        return check_cases(impl, impl.params(), 0, rng, full_case=None)
    return study.check_cases(impl, impl.params(), 0, rng)


@pytest.mark.parametrize("study", [LENET, MLP, VGG], ids=["lenet", "mlp", "vgg"])
def test_one_rule_decides_the_range_test_in_every_study(study, monkeypatch):
    """Every step for which ``checks.claims_fp32_range`` holds (FP32 accuracy claimed: tolerance
    <= 1e-5, and not restricted to a narrower range) carries its study's range test, and no other
    step does: taking the claim away removes exactly those cases."""
    from kernelbook.checks import claims_fp32_range

    claimed = []
    for slug in study.steps.slugs():
        impl = study.impl(slug)
        labels = [c.label for c in _check_cases(study, impl)]
        monkeypatch.setattr(impl, "full_range", False)
        without = [c.label for c in _check_cases(study, impl)]
        monkeypatch.undo()
        if claims_fp32_range(impl):
            claimed.append(slug)
            assert len(labels) > len(without) and without == labels[:len(without)], slug
        else:
            assert labels == without, slug
    assert claimed   # each study has FP32-accurate steps
