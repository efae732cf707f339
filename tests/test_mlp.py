"""MLP study without a GPU: problem, data files, references, validation before launch, the step
list, the packed weight layouts (emulated lane by lane), and nvcc builds of every kernel."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kernelbook import kernels
from kernelbook.checks import claims_fp32_range
from kernelbook.errors import DataError, GPUUnavailable, LaunchLimitError, ParameterError, ShapeError
from kernelbook.mlp import CASES, STEPS, MlpShape, check_call, data, forward, pack, reference

W = data.make_weights(3)


# ----------------------------------------------------------------------------- problem


def test_shape_counts_flops_and_bytes():
    s = MlpShape(CASES["100x100"])
    assert s.flops == 2 * 2_097_152 * (71 * 64 + 64 * 64 + 64 * 4)
    assert s.min_bytes == 4 * (75 * 2_097_152 + 9028)
    assert round(s.flops / 1e9, 1) == 37.3 and round(s.min_bytes / 1e9, 2) == 0.63
    assert s.as_dict()["N"] == 2_097_152 and s.y_shape == (4, 2_097_152)


@pytest.mark.parametrize("n", [0, -3, True, 2.0, "12", 2**31])
def test_bad_column_counts_are_refused(n):
    with pytest.raises(ShapeError, match="Fix:"):
        MlpShape(n)


# ----------------------------------------------------------------------------- data files


def test_weights_round_trip_and_shipped_file(tmp_path):
    path = data.write_weights(W, tmp_path / "w.bin")
    back = data.read_weights(path)
    for a, b in zip(W, back):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    shipped = data.load_weights()
    assert all(np.array_equal(a, b) for a, b in zip(shipped, data.make_weights(data.WEIGHTS_SEED)))


def test_signals_round_trip_and_determinism(tmp_path):
    x = data.make_signals(33, seed=5)
    assert x.shape == (71, 33) and x.dtype == np.float32 and np.abs(x).max() <= 1
    assert np.array_equal(x, data.make_signals(33, seed=5))
    assert np.array_equal(data.read_signals(data.write_signals(x, tmp_path / "x.bin")), x)


def test_missing_truncated_and_malformed_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        data.read_weights(tmp_path / "none.bin")
    good = data.write_weights(W, tmp_path / "w.bin").read_bytes()
    cases = {"truncated": good[:-10], "magic": b"XXXXXXXX" + good[8:], "header": good[:10],
             "padded": good + b"\0\0\0\0"}
    for name, raw in cases.items():
        p = tmp_path / f"{name}.bin"
        p.write_bytes(raw)
        with pytest.raises(DataError, match="malformed") as err:
            data.read_weights(p)
        assert str(p) in str(err.value) and "Fix:" in str(err.value)
    with pytest.raises(DataError, match="signals"):
        data.read_signals(tmp_path / "w.bin")   # a weights file is not a signals file


def test_non_finite_weights_in_a_file(tmp_path):
    bad = list(W)
    bad[2] = bad[2].copy()
    bad[2][1, 1] = np.nan
    path = tmp_path / "nan.bin"
    data._write(path, data.WEIGHTS_MAGIC, bad)  # write around the checks, as a corrupt file would be
    with pytest.raises(DataError, match="non-finite values in W2"):
        data.read_weights(path)


# ----------------------------------------------------------------------------- references


def test_references_agree_and_scaled_measure():
    x = data.make_signals(500, 1)
    y64, y32 = reference.forward64(x, W), reference.forward32(x, W)
    assert y64.shape == (4, 500) and y32.dtype == np.float32
    assert reference.rel_l2(y32, y64) < 1e-6
    assert reference.scaled_abs_diff(y32, y32) == 0.0
    shifted = y32.copy()
    shifted[0, 0] += 0.1 * np.abs(y32).max()
    assert reference.scaled_abs_diff(shifted, y32) == pytest.approx(0.1, rel=1e-5)
    shifted[1, 1] = np.nan
    assert reference.scaled_abs_diff(shifted, y32) == float("inf")
    h = reference.forward64(x.astype(np.float16), [w.astype(np.float16) for w in W])
    assert reference.scaled_abs_diff(h, y32) < reference.HALF_THRESHOLD


# ----------------------------------------------------------------------------- validation


def test_step_list_matches_the_kernel_files():
    assert len(STEPS) == 20 and STEPS.baseline.slug == "baseline"
    problems = [p for p in STEPS.check_files() if not p.endswith(".md is missing")]
    assert problems == []
    for step in STEPS:
        impl = STEPS.impl(step.slug)
        assert impl.kernel_names
        assert impl.precision in ("fp32", "fp16")
        assert (impl.measure == "scaled_abs_diff") == (impl.precision == "fp16")


@pytest.mark.parametrize("slug", STEPS.slugs())
def test_every_step_accepts_odd_column_counts(slug):
    x = data.make_signals(33, 2)
    impl, shape, params, _ = check_call(slug, x, W)
    for n in (1, 31, 12800, CASES["100x100"]):
        impl.validate(MlpShape(n), params)


def test_arguments_are_checked_before_any_launch():
    x = data.make_signals(40, 2)
    with pytest.raises(ShapeError, match=r"\(71, N\)"):
        check_call("baseline", x.T.copy(), W)
    with pytest.raises(ShapeError, match="float32"):
        check_call("baseline", x.astype(np.float64), W)
    with pytest.raises(ShapeError, match="C-contiguous"):
        check_call("baseline", np.asfortranarray(x), W)
    with pytest.raises(ShapeError, match="W2"):
        check_call("baseline", x, (W[0], W[1], W[2][:, :63].copy(), W[3], W[4], W[5]))
    with pytest.raises(ShapeError, match="six"):
        check_call("baseline", x, W[:5])
    bad = list(W)
    bad[4] = bad[4].copy()
    bad[4][0, 0] = np.inf
    with pytest.raises(ShapeError, match="non-finite"):
        check_call("final", x, tuple(bad))
    with pytest.raises(ShapeError, match="out"):
        check_call("baseline", x, W, out=np.zeros((4, 41), np.float32))


#: Parameters each step refuses with a ParameterError (one try per dict).
REFUSED = {
    "baseline": [{"tile": 64}, {"tile": 16.0}, {"tiles": 16}],
    "fused-global": [{"columns": 0}],
    "whole-net-shared": [{"blocks_per_sm": True}],
    "better-occupancy": [{"min_blocks": 9}],
    "best": [{"small": "fastest"}, {"switch_columns": float("nan")}],
    "tensor-core-3xtf32": [{"m_tiles": 3}],
    "tensor-core-fp16": [{"warps": 40}],
    "final": [{"large_warps": 0}],
    "fp32-register-tiled": [{"ring": 2}, {"ring": 3}, {"warps": 9}],
    "final-full-range": [{"warps": 17}, {"m_tiles": 3}, {"blocks_per_sm": 5}],
    "tensor-core-fp16-tma": [{"ring_warps": 17}, {"stages": 0}, {"l2_promotion": 512}, {"switch_columns": -1},
                             {"switch_columns": 1.5}, {"ring_blocks_per_sm": 5}],
}


@pytest.mark.parametrize("slug, params, error", [(slug, params, ParameterError) for slug, tries in REFUSED.items()
                                                 for params in tries]
                         + [("tensor-core-fp16-tma", {"ring_warps": 16, "ring_slots": 2}, LaunchLimitError)])   # 296 KB of tiles
def test_bad_parameters_are_refused(slug, params, error):
    with pytest.raises(error, match="Fix:"):
        check_call(slug, data.make_signals(8, 2), W, **params)


def test_a_parameter_at_its_limit_is_accepted():
    check_call("better-occupancy", data.make_signals(8, 2), W, min_blocks=8)   # 8 x 256 = 2048 threads per SM: fits


def test_launch_limits_are_checked(monkeypatch):
    """A smaller GPU's limits refuse launches the H100 accepts, with the limit named."""
    import dataclasses

    from kernelbook import limits

    small = dataclasses.replace(limits.H100, name="a small GPU", max_threads_per_block=128,
                                static_smem_per_block=16 * 1024, max_threads_per_sm=1024)
    monkeypatch.setattr(limits, "current", lambda: small)
    x = data.make_signals(10, 2)
    with pytest.raises(LaunchLimitError, match="128"):
        check_call("fused-global", x, W)                       # 256 threads per block
    with pytest.raises(LaunchLimitError, match="shared memory"):
        check_call("fused-shared", x, W, columns=2)            # 37 KB of static shared memory
    with pytest.raises(LaunchLimitError, match="__launch_bounds__"):
        STEPS.impl("better-occupancy").validate(MlpShape(10), {"blocks_per_sm": 4, "min_blocks": 5})


def test_forward_without_gpu_says_so(no_gpu):
    x = data.make_signals(8, 2)
    with pytest.raises(GPUUnavailable, match="CUDA GPU is needed"):
        forward(x, W)
    with pytest.raises(ParameterError):   # parameter names are checked first, GPU or not
        forward(x, W, tile_width=3)


# ----------------------------------------------------------------------------- packed layouts


def _lanes():
    lane = np.arange(32)
    return lane // 4, lane % 4


def _mma(a_rows, b_rows, c, k):
    """D += A B for one warp-level mma, rebuilt from lane fragments (PTX ISA layouts)."""
    g, q = _lanes()
    A, B = np.zeros((16, k)), np.zeros((k, 8))
    if k == 8:
        A[g, q], A[g + 8, q], A[g, q + 4], A[g + 8, q + 4] = a_rows.T
        B[q, g], B[q + 4, g] = b_rows.T
    else:
        for e, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            A[g + dr, 2 * q + dk], A[g + dr, 2 * q + dk + 1] = a_rows[:, e].T
        (B[2 * q, g], B[2 * q + 1, g]), (B[2 * q + 8, g], B[2 * q + 9, g]) = b_rows[:, 0].T, b_rows[:, 1].T
    D = A @ B
    c += np.stack([D[g, 2 * q], D[g, 2 * q + 1], D[g + 8, 2 * q], D[g + 8, 2 * q + 1]], 1)


def _init(bias, off, count):
    g, q = _lanes()
    return np.stack([np.stack([bias[off + 8 * t + 2 * q], bias[off + 8 * t + 2 * q + 1],
                               bias[off + 8 * t + 2 * q], bias[off + 8 * t + 2 * q + 1]], 1)
                     for t in range(count)])


def _outputs(out):
    g, q = _lanes()
    y = np.full((4, 16), np.nan)
    for lane in np.flatnonzero(q < 2):
        o, col = 2 * q[lane], g[lane]
        y[o, col], y[o + 1, col], y[o, col + 8], y[o + 1, col + 8] = out[lane]
    return y


def test_tf32_fragments_reproduce_the_network():
    """Emulate step 13 on one tile: the packed B fragments and the permuted k order of layers
    2-3 (accumulators reused as A fragments) must give the network (big + small ~ FP32)."""
    x = data.make_signals(16, 4)
    p = pack.tf32_fragments(W).astype(np.float64)
    sizes = np.cumsum([0, 9 * 8 * 32 * 4, 8 * 8 * 32 * 4, 8 * 32 * 4])
    f1, f2, f3 = (p[a:b].reshape(-1, 32, 4) for a, b in zip(sizes[:-1], sizes[1:]))
    bias = p[sizes[-1]:]
    g, q = _lanes()
    xp = np.vstack([x, np.zeros((1, 16))])
    acc = _init(bias, 0, 8)
    for j in range(9):
        a = np.stack([xp[8 * j + q, g], xp[8 * j + q, g + 8], xp[8 * j + q + 4, g], xp[8 * j + q + 4, g + 8]], 1)
        for nt in range(8):
            b = f1[j * 8 + nt]
            _mma(a, b[:, :2] + b[:, 2:], acc[nt], 8)
    acc2 = _init(bias, 64, 8)
    for j in range(8):
        a = np.maximum(acc[j], 0)[:, [0, 2, 1, 3]]
        for nt in range(8):
            b = f2[j * 8 + nt]
            _mma(a, b[:, :2] + b[:, 2:], acc2[nt], 8)
    out = _init(bias, 128, 1)[0]
    for j in range(8):
        b = f3[j]
        _mma(np.maximum(acc2[j], 0)[:, [0, 2, 1, 3]], b[:, :2] + b[:, 2:], out, 8)
    ref = reference.forward64(x, W)
    assert np.abs(_outputs(out) - ref).max() < 1e-5 * np.abs(ref).max()


def test_f16_fragments_reproduce_the_network():
    x = data.make_signals(16, 4)
    raw = pack.f16_fragments(W).tobytes()
    assert len(raw) == 20000
    h = np.frombuffer(raw[:19456], dtype=np.float16).astype(np.float64).reshape(-1, 32, 2, 2)
    f1, f2, f3 = h[:40], h[40:72], h[72:]
    bias = np.frombuffer(raw[19456:], dtype=np.float32).astype(np.float64)
    g, q = _lanes()
    xp = np.vstack([x, np.zeros((9, 16))])

    def a_from(acc, j):
        r = np.maximum(acc, 0)
        return np.stack([r[2 * j][:, :2], r[2 * j][:, 2:], r[2 * j + 1][:, :2], r[2 * j + 1][:, 2:]], 1)

    acc = _init(bias, 0, 8)
    for j in range(5):
        k = 16 * j + 2 * q
        a = np.stack([np.stack([xp[k + dk, g + dr], xp[k + dk + 1, g + dr]], 1)
                      for dr, dk in ((0, 0), (8, 0), (0, 8), (8, 8))], 1)
        for nt in range(8):
            _mma(a, f1[j * 8 + nt], acc[nt], 16)
    acc2 = _init(bias, 64, 8)
    for j in range(4):
        for nt in range(8):
            _mma(a_from(acc, j), f2[j * 8 + nt], acc2[nt], 16)
    out = _init(bias, 128, 1)[0]
    for j in range(4):
        _mma(a_from(acc2, j), f3[j], out, 16)
    ref = reference.forward32(x, W)
    assert reference.scaled_abs_diff(_outputs(out), ref) < 5e-3


def test_half_and_quarter_row_packing():
    hp, qp = pack.half_rows(W), pack.quarter_rows(W)
    W1 = np.pad(W[0], ((0, 0), (0, 1)))
    for q in (0, 5, 127):
        u, h = divmod(q, 2)
        assert np.allclose(hp["w1p"][:, q].ravel(), W1[u, 36 * h:36 * h + 36], atol=2e-3)
        assert np.allclose(hp["w2p"][:, q].ravel(), W[2][u, 32 * h:32 * h + 32], atol=2e-3)
    for t in (0, 7, 255):
        u, r = divmod(t, 4)
        assert np.allclose(qp["w1q"][:, t].ravel(), W1[u, 18 * r:18 * r + 18], atol=2e-3)
        assert np.allclose(qp["w2q"][:, t].ravel(), W[2][u, 16 * r:16 * r + 16], atol=2e-3)
    for s in (0, 6, 15):
        o, r = divmod(s, 4)
        assert np.allclose(qp["w3q"][:, s].ravel(), W[4][o, 16 * r:16 * r + 16], atol=2e-3)
    assert np.allclose(hp["w3p"].reshape(4, 64), W[4], atol=2e-3)


# ----------------------------------------------------------------------------- nvcc


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("slug", STEPS.slugs())
def test_every_kernel_compiles_for_sm90(slug, tmp_path):
    impl = STEPS.impl(slug)
    params = impl.params()
    for n in (12800, CASES["100x100"]):
        cubin, report = kernels.compile_cubin(impl.source_for(params, MlpShape(n)), impl.defines(params, MlpShape(n)),
                                              arch=getattr(impl, "arch", None) or "sm_90", out=tmp_path / f"{n}.cubin")
        assert cubin.stat().st_size > 0
        names = {r.name for r in report}
        assert set(impl.kernel_names) <= names
        # no spills, except the few bytes a step declares (and says why in its docstring)
        assert all(r.spill_store_bytes <= getattr(impl, "spill_store_bytes_allowed", 0) for r in report)
    if slug == "better-occupancy":
        assert max(r.registers for r in report) <= 64


def test_f16_split_fragments_carry_fp32_precision():
    """Step 15's 3xFP16 layout: the hi halves are step 14's fragments, hi + lo is the weight."""
    split = pack.f16_split_fragments(W).tobytes()
    plain = pack.f16_fragments(W).tobytes()
    assert len(split) == 39456 and split[-544:] == plain[-544:]
    halves = np.frombuffer(split[:-544], dtype=np.float16).reshape(-1, 2, 4)
    plain_h = np.frombuffer(plain[:-544], dtype=np.float16).reshape(-1, 4)
    assert np.array_equal(halves[:, 0], plain_h)
    full = halves[:, 0].astype(np.float64) + halves[:, 1].astype(np.float64)
    exact = np.frombuffer(plain[:-544], dtype=np.float16)  # only the layout; values from W below
    assert exact.size == full.size
    W1 = np.pad(W[0], ((0, 0), (0, 9)))
    g, q = _lanes()
    first = np.stack([W1[g, 2 * q], W1[g, 2 * q + 1], W1[g, 2 * q + 8], W1[g, 2 * q + 9]], 1)
    assert np.abs(full[:32] - first).max() <= 2e-7 * np.abs(W1).max()


# ----------------------------------------------------------------------------- steps 16-17 and the range test


def test_register_tiled_packing():
    """Step 16: W1^T with a zero row 71, units 32..63 shifted to column 36, then W3^T and biases."""
    p = pack.register_tiled(W)
    assert p.size == 9640 and p.dtype == np.float32
    w1t = p[:72 * 68].reshape(72, 68)
    w2t = p[72 * 68:136 * 68].reshape(64, 68)
    assert np.array_equal(w1t[:71, :32], W[0][:32].T) and np.array_equal(w1t[:71, 36:], W[0][32:].T)
    assert not w1t[71].any() and not w1t[:, 32:36].any()
    assert np.array_equal(w2t[:, :32], W[2][:32].T) and np.array_equal(w2t[:, 36:], W[2][32:].T)
    tail = p[136 * 68:]
    assert np.array_equal(tail[:256].reshape(64, 4), W[4].T)
    assert np.array_equal(tail[256:320], W[1]) and np.array_equal(tail[384:388], W[5])


def _full_range_parts(weights):
    d = pack.full_range(weights)
    raw = d["split"].tobytes()
    header = np.frombuffer(raw[-32:], dtype=np.int32)
    h = np.frombuffer(raw[:-32 - 136 * 4], dtype=np.float16).astype(np.float64).reshape(-1, 32, 8)
    return d, header, h


def test_full_range_packing_scales_each_layer_into_half_range():
    d, header, h = _full_range_parts(W)
    ew = header[:3]
    assert header[6] == 0
    for W_l, e in zip(W[0::2], ew):
        assert 2.0**14 <= np.abs(np.ldexp(W_l.astype(np.float64), int(e))).max() < 2.0**15
    # hi + lo' / 2^11 carries the scaled weight to about 2^-20 of the largest. Each lane's entry
    # is 8 halves {hi of W[n, k], W[n, k+1], W[n, k+8], W[n, k+9]; lo' of the same}; here the
    # last 4 entries, layer 3 (k-steps j = 0..3, n = g, k = 16 j + 2 q), against W3 * 2^ew3.
    approx = h[..., :4] + h[..., 4:] / 2048.0
    w3 = np.pad(np.ldexp(W[4].astype(np.float64), int(ew[2])), ((0, 4), (0, 0)))
    g, q = _lanes()
    for j in range(4):
        k = 16 * j + 2 * q
        ref = np.stack([w3[g, k], w3[g, k + 1], w3[g, k + 8], w3[g, k + 9]], 1)
        assert np.abs(approx[-4 + j] - ref).max() <= 2.0**-19 * np.abs(w3).max()
    assert np.array_equal(d["packed"], pack.tf32_fragments(W))


def test_full_range_packing_flags_what_scaling_cannot_hold():
    wide = list(W)
    wide[2] = W[2].copy()
    wide[2][0, 0] = W[2][0, 0] * np.float32(2.0**-40)   # a span beyond 2^31 inside W2
    assert _full_range_parts(tuple(wide))[1][6] == 1
    tiny = tuple(w * np.float32(1e-30) if w.ndim == 2 else w for w in W)
    assert _full_range_parts(tiny)[1][6] == 0            # uniformly small is only a scale


def test_range_cases_cover_the_promised_grid():
    from kernelbook.mlp import ranges

    rng = np.random.default_rng(0)
    subset = list(ranges.cases(rng))
    grid = list(ranges.cases(rng, grid=True))
    assert len(subset) == 16 and len(grid) == 5 * 125 + 5 + 8
    mags = [np.abs(x[x != 0]).max() for _, x, _ in grid]
    assert min(mags) < 2e-6 and max(mags) > 5e5
    for _, x, w in grid:
        assert x.dtype == np.float32 and all(a.dtype == np.float32 for a in w)
    claimed = [s for s in STEPS.slugs() if claims_fp32_range(STEPS.impl(s))]
    assert {"baseline", "whole-net-registers", "tensor-core-3xtf32", "fp32-register-tiled",
            "final-full-range"} <= set(claimed)
    assert not {"best", "tensor-core-fp16", "tensor-core-fp16-tma"} & set(claimed)


def test_the_library_ratio_is_judged_only_within_one_run():
    from kernelbook.summary import vendor_ratio

    t = {"best": ("fp32-register-tiled", 0.914, "runA"), "vendor_ms": 2.2987, "vendor_run": "runA", "vendor_ratio": 2.5}
    assert "2.51× the step's time" in vendor_ratio(t) and vendor_ratio(t).endswith("met)")
    assert "missed" in vendor_ratio({**t, "vendor_ms": 2.0})          # 2.19x is under 2.5x
    assert "no ratio" in vendor_ratio({**t, "vendor_run": "runB"})    # two runs: no ratio at all
    assert vendor_ratio({**t, "vendor_ms": None}) == ""


# ----------------------------------------------------------------------------- step 18 (TMA-fed FP16)


def test_tma_step_picks_its_kernel_by_columns_and_falls_back_to_step_14():
    """Ring up to switch_columns, stages above; N % 4 != 0 is step 14's kernel, launched with step
    14's own launch; the shared memory declared is what the kernels' layout needs."""
    impl = STEPS.impl("tensor-core-fp16-tma")
    params = impl.params()
    (ring,) = impl.launches(MlpShape(12800), params)
    assert ring.kernel == "tmaRingHalfKernel" and ring.block == (128, 1, 1) and ring.min_blocks == 2
    assert ring.grid == (100, 1, 1)                        # 400 tiles, 4 warps a block
    assert ring.dynamic_smem == 4 * 2 * 9216 + 1024 and ring.static_smem == 20000 + 8 * 8
    (stages,) = impl.launches(MlpShape(CASES["100x100"]), params)
    assert stages.kernel == "tmaStagesHalfKernel" and stages.block == (288, 1, 1)
    assert stages.grid == (132, 1, 1) and stages.dynamic_smem == 2 * 8 * 9216 + 1024
    assert impl.launches(MlpShape(65536), params)[0].kernel == "tmaRingHalfKernel"
    assert impl.launches(MlpShape(65540), params)[0].kernel == "tmaStagesHalfKernel"
    assert impl.launches(MlpShape(12800), impl.params(switch_columns=0))[0].kernel == "tmaStagesHalfKernel"
    step14 = STEPS.impl("tensor-core-fp16")
    for n in (1, 31, 12799, 65537):
        shape = MlpShape(n)
        assert impl.launches(shape, params) == step14.launches(shape, step14.params())
        assert impl.source_for(params, shape) == step14.source
        assert impl.defines(params, shape) == step14.defines(step14.params(), shape)
    assert impl.source_for(params, MlpShape(12800)) == "mlp/18_tensor_core_fp16_tma.cu"
    assert impl.defines(params, MlpShape(12800)) == {"RING_WARPS": 4, "RING_SLOTS": 2, "RING_MIN_BLOCKS": 2,
                                                      "STAGE_WARPS": 8, "STAGES": 2}


def test_tma_step_caches_the_descriptor_and_the_plan(monkeypatch):
    """A repeated call asks the driver for x's tensor map once per (address, N, promotion) and
    builds its launch plan once; another address or promotion asks again. Misaligned x or y and
    N % 4 != 0 go to step 14's launch without a descriptor."""
    import types

    import cupy as cp

    from kernelbook.mlp import tensor

    impl = STEPS.impl("tensor-core-fp16-tma")
    asked, launched, fell_back = [], [], []
    monkeypatch.setattr(tensor, "x_descriptor", lambda ptr, n, promo, rows: asked.append((ptr, n, promo, rows)) or bytes(128))

    class Buffer:
        def set(self, host, stream=None):
            assert len(host) == 128

    class Stream:
        capturing, synced = False, 0

        def is_capturing(self):
            return self.capturing

        def synchronize(self):
            self.synced += 1

    stream = Stream()
    monkeypatch.setattr(cp, "empty", lambda n, dtype=None: Buffer())
    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cp.cuda, "get_current_stream", lambda: stream)
    monkeypatch.setattr(impl, "kernel", lambda name, params, problem: (lambda *a, **k: launched.append((name, a[0]))))
    monkeypatch.setattr(impl, "_launch_cache", {}, raising=False)   # made on a first call
    monkeypatch.setattr(impl, "_maps", {})
    monkeypatch.setattr(type(impl.fallback()), "launch", lambda self, y, x, w, shape, params, stream=None:
                        fell_back.append(shape.N))

    def array(ptr):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))

    from kernelbook.mlp.impls import PreparedWeights

    w = PreparedWeights(tuple(range(6)), {"packed": "packed"})
    params = impl.params()
    for _ in range(3):
        impl.launch(array(4096), array(8192), w, MlpShape(12800), params)
    assert asked == [(8192, 12800, 256, 72)] and len(launched) == 3 and len(impl._launch_cache) == 1
    assert stream.synced == 1      # the upload has landed before any stream's kernel reads it
    stream.capturing = True        # a new x while a graph is being captured: refused, nothing asked
    with pytest.raises(ShapeError, match="before capturing"):
        impl.launch(array(4096), array(1 << 20), w, MlpShape(12800), params)
    impl.launch(array(4096), array(8192), w, MlpShape(12800), params)   # a known x is fine while capturing
    stream.capturing = False
    assert len(asked) == 1 and len(launched) == 4
    impl.launch(array(4096), array(16384), w, MlpShape(12800), params)
    impl.launch(array(4096), array(16384), w, MlpShape(12800), impl.params(l2_promotion=128))
    assert asked[1:] == [(16384, 12800, 256, 72), (16384, 12800, 128, 72)]
    impl.launch(array(4096), array(8196), w, MlpShape(12800), params)     # x 4 bytes off
    impl.launch(array(4100), array(8192), w, MlpShape(12800), params)     # y 4 bytes off
    impl.launch(array(4096), array(8192), w, MlpShape(12801), params)     # N % 4 != 0
    assert fell_back == [12800, 12800, 12801] and len(asked) == 3


def test_wgmma_pack_is_the_layout_the_kernel_reads():
    """Step 19's blob: W1 and W2 scaled by 2^ew (max into [2^10, 2^11)), hi + 2^-16 lo' within
    2^-21 of each scaled weight, in wgmma's K-major layout ([j][row group][k half][row][8]); W3 as
    [c][e][q][o]; the biases; the header's factors and exponents; the transposed FP32 copy."""
    out = pack.wgmma_full_range(W)
    blob = out["wgmma"]
    assert blob.size == pack.WGMMA_BYTES and out["exact_only"] == 0
    halves = blob[:36864].view(np.float16).astype(np.float64)
    floats = blob[36864:].view(np.float32)
    ints = blob[-16:].view(np.int32)
    for layer, (Wl, k, hi_at, lo_at) in enumerate(((W[0], 80, 0, 5120), (W[2], 64, 10240, 14336))):
        ew = ints[1 + layer]
        assert 2.0 ** 10 <= np.abs(Wl).max() * 2.0 ** ew < 2.0 ** 11
        assert floats[256 + 132 + 2 * layer] == np.float32(2.0 ** -ew)
        assert floats[256 + 133 + 2 * layer] == np.float32(2.0 ** (-16 - ew))
        j, ng, kc, r, kk = np.meshgrid(np.arange(k // 16), np.arange(8), np.arange(2), np.arange(8), np.arange(8),
                                       indexing="ij")
        rows, cols = (8 * ng + r).ravel(), (16 * j + 8 * kc + kk).ravel()
        size = 64 * k
        hi = halves[hi_at:hi_at + size]
        lo = halves[lo_at:lo_at + size]
        got = np.zeros((64, k))
        got[rows, cols] = hi + lo * 2.0 ** -16
        scaled = np.zeros((64, k))
        scaled[:, :Wl.shape[1]] = Wl.astype(np.float64) * 2.0 ** ew
        assert np.all(np.abs(got - scaled) <= 2.0 ** -21 * np.abs(scaled) + 1e-30)
    w3 = floats[:256].reshape(8, 2, 4, 4)
    c, e, q, o = np.meshgrid(*(np.arange(n) for n in (8, 2, 4, 4)), indexing="ij")
    assert np.array_equal(w3, W[4][o, 8 * c + 2 * q + e])
    assert np.array_equal(floats[256:320], W[1]) and np.array_equal(floats[320:384], W[3])
    assert np.array_equal(floats[384:388], W[5])
    raw = out["raw"]
    assert np.array_equal(raw[:71 * 64].reshape(71, 64), W[0].T)
    assert np.array_equal(raw[71 * 64 + 64:71 * 64 + 64 + 4096].reshape(64, 64), W[2].T)


@pytest.mark.parametrize("layer, factor, exact", [(0, 2.0**-26, False), (0, 2.0**-28, True), (2, 2.0**-40, True)])
def test_wgmma_pack_flags_weights_the_scaling_cannot_hold(layer, factor, exact):
    """A layer whose nonzero weights span more than 2^27 sends every column to the exact path
    (below 2^-17 of the scaled maximum the split is off by more than 2^-19 of the weight)."""
    w = [a.copy() for a in W]
    w[layer][1, 2] = np.float32(np.abs(w[layer]).max() * factor)
    assert pack.wgmma_full_range(tuple(w))["exact_only"] == int(exact)


def test_wgmma_step_picks_warpgroups_by_columns_and_hands_unreadable_shapes_to_step_17():
    impl = STEPS.impl("wgmma-full-range")
    p = impl.params()
    small, large = impl.launches(MlpShape(12800), p)[0], impl.launches(MlpShape(CASES["100x100"]), p)[0]
    assert small.block == (256, 1, 1) and large.block == (384, 1, 1)
    assert large.dynamic_smem == 1024 + 38912 + 3 * 2 * 20480 <= 227 * 1024
    assert impl.launches(MlpShape(12799), p)[0].kernel == "fullRange3xFP16Kernel"
    with pytest.raises(ParameterError, match="large_wgs"):
        impl.validate(MlpShape(4096), impl.params(large_wgs=5))


def test_wgmma_step_caches_its_descriptor_and_checks_the_device_once(monkeypatch):
    """Step 19 asks the driver for x's tensor map (boxes of 80 rows) once per (address, N,
    promotion) and the device for sm_90a once; misaligned x or y and N % 4 != 0 go to step 17."""
    import types

    import cupy as cp

    from kernelbook.mlp import tensor

    impl = STEPS.impl("wgmma-full-range")
    asked, launched, fell_back, devices = [], [], [], []
    monkeypatch.setattr(tensor, "x_descriptor", lambda ptr, n, promo, rows: asked.append((ptr, n, promo, rows)) or bytes(128))

    class Buffer:
        def set(self, host, stream=None):
            assert len(host) == 128

    class Stream:
        def is_capturing(self):
            return False

        def synchronize(self):
            pass

    monkeypatch.setattr(cp, "empty", lambda n, dtype=None: Buffer())
    gets = []
    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: gets.append(0) or 0)
    monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", lambda d: devices.append(d) or {"major": 9, "minor": 0})
    monkeypatch.setattr(cp.cuda, "get_current_stream", lambda: Stream())
    monkeypatch.setattr(impl, "kernel", lambda name, params, problem: (lambda *a, **k: launched.append((name, a[2]))))
    monkeypatch.setattr(impl, "_plans", {})
    monkeypatch.setattr(impl, "_maps", {})
    monkeypatch.setattr(impl, "_checked_devices", set())
    monkeypatch.setattr(type(impl.fallback()), "launch", lambda self, y, x, w, shape, params, stream=None:
                        fell_back.append(shape.N))

    def array(ptr):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))

    from kernelbook.mlp.impls import PreparedWeights

    w = PreparedWeights(tuple(range(6)), {"wgmma": "wgmma", "raw": "raw", "exact_only": 1})
    for _ in range(3):
        impl.launch(array(4096), array(8192), w, MlpShape(12800), impl.params())
    assert asked == [(8192, 12800, 256, 80)] and devices == [0] and len(launched) == 3
    assert len(gets) == 3   # the current device asked once per call, for the check and the descriptor alike
    args = launched[0][1]
    assert args[1].data.ptr == 8192 and args[2:4] == ("wgmma", "raw") and args[4].data.ptr == 4096
    assert args[5] == 12800 and args[6] == 1   # N, and the host's exact_only flag (no device read)
    impl.launch(array(4096), array(8196), w, MlpShape(12800), impl.params())     # x 4 bytes off
    impl.launch(array(4096), array(8192), w, MlpShape(12801), impl.params())     # N % 4 != 0
    assert fell_back == [12800, 12801] and len(asked) == 1


# ----------------------------------------------------------------------------- step 15 outside half's range

def test_step_15_finds_weights_outside_halfs_range_when_packing():
    """Weights the 3xFP16 split cannot hold (|w| >= 65520, a non-finite one, a row whose largest
    magnitude is not 0 but below 2^-6) set ``exact_only`` at packing, on the host: every column then
    takes the kernel's FP32 path; the shipped weights, a zero row and the edges inside do not."""
    weights = data.make_weights(11)
    assert pack.f16_split_exact(weights) == 0

    def changed(layer, row, value, whole_row=False):
        w = [a.copy() for a in weights]
        if whole_row:
            w[2 * layer][row] *= np.float32(value)
        else:
            w[2 * layer][row, 3] = np.float32(value)
        return tuple(w)

    for layer in range(3):
        assert pack.f16_split_exact(changed(layer, 1, 65520.0)) == 1       # half(65520) is infinite
        assert pack.f16_split_exact(changed(layer, 1, -1e5)) == 1
        assert pack.f16_split_exact(changed(layer, 1, np.nan)) == 1
        assert pack.f16_split_exact(changed(layer, 1, 65504.0)) == 0       # half's largest, finite
        row_top = np.abs(weights[2 * layer][1]).max()
        assert pack.f16_split_exact(changed(layer, 1, 2.0 ** -7 / row_top, whole_row=True)) == 1
        assert pack.f16_split_exact(changed(layer, 1, 2.0 ** -6 / row_top, whole_row=True)) == 0
        assert pack.f16_split_exact(changed(layer, 1, 0.0, whole_row=True)) == 0   # zeros are exact
    scaled = tuple(a * np.float32(1e5) if i % 2 == 0 else a for i, a in enumerate(weights))
    assert pack.f16_split_exact(scaled) == 1
    biased = tuple(a * np.float32(1e30) if i % 2 == 1 else a for i, a in enumerate(weights))
    assert pack.f16_split_exact(biased) == 0                                # biases are never split


def test_step_15_packs_the_exact_path_and_passes_its_flag_without_a_device_copy():
    """The 3xFP16 launch takes the FP32 weights (W1^T b1 W2^T b2 W3 b3) and the host's flag as a
    kernel argument; the packing is step 19's FP32 layout, and the kernel's thresholds are pack.py's."""
    from kernelbook.mlp.impls import PreparedWeights

    weights = data.make_weights(4)
    impl = STEPS.impl("final")
    packed = impl.packing(weights)
    W1, b1, W2, b2, W3, b3 = weights
    raw = packed["raw"]
    assert raw.dtype == np.float32 and raw.size == 71 * 64 + 64 + 64 * 64 + 64 + 4 * 64 + 4
    assert np.array_equal(raw[:71 * 64].reshape(71, 64), W1.T) and np.array_equal(raw[-4:], b3)
    assert np.array_equal(raw, pack.wgmma_full_range(weights)["raw"])
    assert packed["exact_only"] == 0
    flagged = impl.packing(tuple(a * np.float32(1e5) for a in weights))
    assert flagged["exact_only"] == 1
    prepared = PreparedWeights(weights, {"split": "split", "raw": "raw", "packed": "packed", "exact_only": 1})
    shape, params = MlpShape(300), impl.params()
    (launch,) = impl.launches(shape, params)
    args = impl.launch_args(launch, "y", ("x", prepared), shape, params)
    assert launch.kernel == "fusedTensorCore3xFP16Kernel"
    assert args[:4] == ("x", "split", "raw", "y") and args[4] == 300 and args[5] == 1 and isinstance(args[5], np.int32)
    source = kernels.source_path("mlp/15_final.cu").read_text()
    assert f"#define S_SMALL {pack.SPLIT_SMALL!r}f" in source and f"#define S_OVERFLOW {pack.SPLIT_OVERFLOW!r}f" in source
    edge = np.float32(pack.SPLIT_OVERFLOW)       # where rounding to half starts giving infinity
    with np.errstate(over="ignore"):
        assert np.isinf(edge.astype(np.float16)) and np.isfinite(np.nextafter(edge, np.float32(0)).astype(np.float16))
