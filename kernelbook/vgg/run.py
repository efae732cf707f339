"""What a chapter (or the harness) calls: check a step, time it, time cuDNN, launch it once.

- ``check_step``     float64 checks on random small shapes (odd and even H and W, C and M not
                     multiples of 16, K in 1, 3, 5, 7) with the output poisoned with NaN, plus the
                     full layer (B=1) checked at sampled pooled positions against float64
                     (``reference_at``; the whole layer in float64 on a CPU would take minutes)
- ``measure_step``   ``op_time_ms`` (CUDA-graph replays, data on the device) and ``gflops``
- ``measure_vendor`` cuDNN through PyTorch: conv2d + bias, ReLU, max_pool2d in FP32, TF32, FP16
- ``launch_once``    one launch of a step and nothing else (a target for Nsight Compute)
"""

from __future__ import annotations

import numpy as np

from .. import checks, results
from ..errors import ParameterError
from ..measure import Measured, check_repeats, time_gpu
from . import NAME, STEPS, forward, require_gpu
from .problem import CASES, ConvPoolShape
from .reference import reference, reference_at

SAMPLED_POSITIONS = 96       # pooled outputs checked against float64 on the full layer
K_CYCLE = (1, 3, 5, 7)


def random_inputs(shape: ConvPoolShape, rng: np.random.Generator):
    """x ~ U(-1, 1), w scaled so that pre-activations are O(1), b ~ U(-0.1, 0.1); float32 NumPy."""
    x = rng.uniform(-1.0, 1.0, shape.x_shape).astype(np.float32)
    scale = 1.0 / np.sqrt(shape.C * shape.K * shape.K)
    w = (rng.uniform(-1.0, 1.0, shape.w_shape) * scale * np.sqrt(3.0)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, shape.b_shape).astype(np.float32)
    return x, w, b


def upload(*arrays):
    """NumPy -> CuPy with ``.set()`` (a copy, no CuPy kernel)."""
    import cupy as cp

    out = []
    for a in arrays:
        d = cp.empty(a.shape, dtype=cp.float32)
        d.set(np.ascontiguousarray(a, dtype=np.float32))
        out.append(d)
    return out


def random_shapes(n: int, rng: np.random.Generator) -> list[ConvPoolShape]:
    """Small shapes that stress the edges: odd and even H and W, C and M off multiples of 8 and 16,
    K cycling through 1, 3, 5, 7, one or two images."""
    shapes = []
    for i in range(n):
        H = int(rng.integers(2, 41))
        W = int(rng.integers(2, 41))
        H = H | 1 if i % 2 == 0 else max(2, H & ~1)     # odd H on even i, even H otherwise
        W = max(2, W & ~1) if i % 3 == 0 else W | 1     # even W every third shape, odd otherwise
        C = int(rng.choice([1, 3, 7, 13, 17, 37]))
        M = int(rng.choice([1, 5, 19, 33, 70]))
        shapes.append(ConvPoolShape(int(rng.integers(1, 3)), C, H, W, M, K_CYCLE[i % len(K_CYCLE)]))
    return shapes


def _resolve_case(case) -> tuple[str, ConvPoolShape]:
    if isinstance(case, ConvPoolShape):
        return f"B{case.B}" if case == CASES.get(f"B{case.B}") else "custom", case
    if case not in CASES:
        raise ParameterError(f"Unknown case {case!r}.", f"use one of: {', '.join(CASES)}.")
    return case, CASES[case]


def check_step(slug: str, params: dict | None = None, n_random: int = 6, seed: int | None = None,
               full_case: str | None = "B1") -> list[checks.CheckResult]:
    """Float64 checks of one step; a launch that raises is a failed check, never a crash."""
    import cupy as cp

    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    require_gpu()
    rng = np.random.default_rng(seed)
    out: list[checks.CheckResult] = []
    for i, shape in enumerate(random_shapes(n_random, rng)):
        x, w, b = random_inputs(shape, rng)
        dx, dw, db = upload(x, w, b)

        def launch(dx=dx, dw=dw, db=db, shape=shape):
            y = checks.poisoned(shape.y_shape, cp)
            forward(dx, dw, db, step=slug, out=y, **merged)
            cp.cuda.Device().synchronize()
            return y

        out.append(checks.run_check(f"random-{i}", shape.as_dict(), impl.tolerance, launch,
                                    lambda x=x, w=w, b=b: reference(x, w, b)))
    if full_case:
        name, shape = _resolve_case(full_case)
        x, w, b = random_inputs(shape, rng)
        dx, dw, db = upload(x, w, b)
        corners = [(0, 0, 0, 0), (shape.B - 1, shape.M - 1, shape.Hp - 1, shape.Wp - 1),
                   (0, shape.M - 1, 0, shape.Wp - 1), (shape.B - 1, 0, shape.Hp - 1, 0)]
        picks = [tuple(int(rng.integers(0, d)) for d in shape.y_shape) for _ in range(SAMPLED_POSITIONS - 4)]
        positions = corners + picks
        idx = tuple(np.array(p) for p in zip(*positions))

        def launch_full():
            y = checks.poisoned(shape.y_shape, cp)
            forward(dx, dw, db, step=slug, out=y, **merged)
            got = y.get()
            unwritten = int(np.isnan(got).sum())
            sample = got[idx]
            if unwritten and not np.isnan(sample).any():
                sample[0] = np.nan  # an unwritten element anywhere fails the check
            return sample

        label = f"{name} sampled ({SAMPLED_POSITIONS} pooled outputs, whole output checked for NaN)"
        out.append(checks.run_check(label, shape.as_dict(), impl.tolerance, launch_full,
                                    lambda: reference_at(x, w, b, positions)))
    return out


def measure_step(slug: str, params: dict | None = None, cases=("B1",), repeats: int = 20,
                 warmup: int = 3, seed: int = 0) -> list[dict]:
    """``op_time_ms`` (median of CUDA-graph replays) and ``gflops`` per case."""
    import cupy as cp

    check_repeats(repeats, warmup)
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    require_gpu()
    rng = np.random.default_rng(seed)
    records = []
    for case in cases:
        name, shape = _resolve_case(case)
        impl.validate(shape, merged)
        dx, dw, db = upload(*random_inputs(shape, rng))
        y = cp.empty(shape.y_shape, dtype=cp.float32)
        impl.prepare(merged, shape)
        measured = time_gpu(lambda: impl.launch(y, dx, dw, db, shape, merged,
                                                stream=cp.cuda.get_current_stream()),
                            repeats, warmup, graph=impl.graph_capturable)
        common = dict(flops=shape.flops, min_bytes=shape.min_bytes, precision=impl.precision, params=merged)
        records.append(results.record(NAME, slug, name, shape.B, "op_time_ms", measured, **common))
        records.append(results.record(NAME, slug, name, shape.B, "gflops",
                                      shape.flops / (measured.median * 1e6), unit="GFLOP/s", **common))
    return records


VENDOR_VARIANTS = ("cudnn-fp32", "cudnn-tf32", "cudnn-fp16")


def measure_vendor(cases=("B1",), repeats: int = 20, warmup: int = 3, seed: int = 0,
                   variants=VENDOR_VARIANTS) -> list[dict]:
    """cuDNN through PyTorch: ``max_pool2d(relu(conv2d(x, w, b, padding=K//2)), 2)``.

    Timed with CUDA events around each call (not a graph: PyTorch launches on its own stream);
    each variant also gets a ``rel_l2_error`` record against float64 at sampled positions.
    """
    check_repeats(repeats, warmup)
    require_gpu()
    import torch
    import torch.nn.functional as F

    unknown = sorted(set(variants) - set(VENDOR_VARIANTS))
    if unknown:
        raise ParameterError(f"Unknown vendor variant(s) {unknown}.", f"use some of: {', '.join(VENDOR_VARIANTS)}.")
    rng = np.random.default_rng(seed)
    records = []
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        for case in cases:
            name, shape = _resolve_case(case)
            x, w, b = random_inputs(shape, rng)
            positions = [tuple(int(rng.integers(0, d)) for d in shape.y_shape) for _ in range(SAMPLED_POSITIONS)]
            idx = tuple(np.array(p) for p in zip(*positions))
            ref = reference_at(x, w, b, positions)
            for variant in variants:
                dtype = torch.float16 if variant == "cudnn-fp16" else torch.float32
                tx, tw, tb = (torch.from_numpy(a).cuda().to(dtype) for a in (x, w, b))
                torch.backends.cudnn.allow_tf32 = variant == "cudnn-tf32"
                torch.backends.cuda.matmul.allow_tf32 = variant == "cudnn-tf32"
                torch.backends.cudnn.benchmark = True

                def fn():
                    return F.max_pool2d(F.relu(F.conv2d(tx, tw, tb, padding=shape.K // 2)), 2)

                got = fn().float().cpu().numpy()
                err = float(np.linalg.norm(got[idx] - ref) / (np.linalg.norm(ref) or 1.0))
                samples = []
                for _ in range(warmup):
                    fn()
                torch.cuda.synchronize()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for _ in range(repeats):
                    start.record()
                    fn()
                    stop.record()
                    stop.synchronize()
                    samples.append(float(start.elapsed_time(stop)))
                measured = Measured(samples, unit="ms", extra={"timing": "events"})
                common = dict(flops=shape.flops, min_bytes=shape.min_bytes, library="cuDNN",
                              library_version=str(torch.backends.cudnn.version()))
                records.append(results.record(NAME, variant, name, shape.B, "op_time_ms", measured, **common))
                records.append(results.record(NAME, variant, name, shape.B, "gflops",
                                              shape.flops / (measured.median * 1e6), unit="GFLOP/s", **common))
                records.append(results.record(NAME, variant, name, shape.B, "rel_l2_error", err,
                                              reference="float64 at sampled pooled outputs", **common))
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    return records


def launch_once(slug: str, case="B1", params: dict | None = None, seed: int = 0):
    """Allocate inputs (NumPy, uploaded with ``.set()``), compile, and return a callable that
    launches the step once.

    After preparation nothing but the step's own kernel(s) is launched: a clean target for
    Nsight Compute or compute-sanitizer.
    """
    import cupy as cp

    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    require_gpu()
    _, shape = _resolve_case(case)
    impl.validate(shape, merged)
    dx, dw, db = upload(*random_inputs(shape, np.random.default_rng(seed)))
    y = cp.empty(shape.y_shape, dtype=cp.float32)
    impl.prepare(merged, shape)
    cp.cuda.Device().synchronize()
    return lambda: impl.launch(y, dx, dw, db, shape, merged)
