"""The VGG layer's problem as the core harness asks for it (``kernelbook.harness`` runs the loops).

- ``check_cases``    random small shapes (odd and even H and W, C and M not multiples of 16, K in
                     1, 3, 5, 7), the range test for steps that claim FP32 accuracy over FP32's
                     range (``checks.claims_fp32_range``), plus the full layer (B=1) checked at sampled pooled
                     positions against float64 (``reference_at``; the whole layer in float64 on a
                     CPU would take minutes)
- ``vendor_runs``    cuDNN through PyTorch: conv2d + bias, ReLU, max_pool2d in FP32, TF32, FP16,
                     each with NCHW tensors and with channels_last (NHWC) tensors

The harness's loops on this study, by step name (``check_step``, ``measure_step``,
``measure_vendor``, ``launch_once``), are in ``study.py`` beside the study object.
"""

from __future__ import annotations

import numpy as np

from .. import harness
from ..checks import claims_fp32_range
from ..errors import ParameterError
from ..measure import torch_flags
from .problem import CASES, ConvPoolShape
from .problem import case as studied
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
    """NumPy -> CuPy float32 with ``.set()`` (a copy, no CuPy kernel)."""
    import cupy as cp

    from ..study import upload as copy

    return [copy(cp, np.asarray(a, dtype=np.float32)) for a in arrays]


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


#: The FP32-range test of a step that claims FP32 accuracy (``checks.claims_fp32_range``): inputs and
#: weights scaled by 1e-6 and 1e6 independently, and tensors whose every element is scaled by
#: 10^U(-6, 6), on one small shape; each is a row of the step's correctness table.
RANGE_SHAPE = ConvPoolShape(1, 40, 24, 36, 48, 5)
RANGE_SCALES = ((1e-6, 1e-6), (1e-6, 1e6), (1e6, 1e-6), (1e6, 1e6), "mixed")


def range_cases(rng: np.random.Generator) -> list[harness.CheckCase]:
    out = []
    for scale in RANGE_SCALES:
        x, w, b = random_inputs(RANGE_SHAPE, rng)
        if scale == "mixed":
            x = (x * 10.0 ** rng.uniform(-6, 6, x.shape)).astype(np.float32)
            w = (w * 10.0 ** rng.uniform(-6, 6, w.shape)).astype(np.float32)
            label = "range test: every element of x and w scaled by 10^U(-6, 6)"
        else:
            sx, sw = scale
            x, w, b = (x * sx).astype(np.float32), (w * sw).astype(np.float32), (b * sx * sw).astype(np.float32)
            label = f"range test: x scaled by {sx:g}, w by {sw:g}"
        out.append(harness.CheckCase(label, RANGE_SHAPE, (x, w, b), lambda x=x, w=w, b=b: reference(x, w, b)))
    return out


def _resolve_case(case) -> tuple[str, ConvPoolShape]:
    if isinstance(case, ConvPoolShape):   # the studied layer at any batch size is "B<n>"
        return f"B{case.B}" if case == studied(case.B) else "custom", case
    if case not in CASES:
        raise ParameterError(f"Unknown case {case!r}.", f"use one of: {', '.join(CASES)}, or a ConvPoolShape.")
    return case, CASES[case]


def check_cases(impl, params: dict, n_random: int, rng: np.random.Generator, full_case: str | None = "B1"
                ) -> list[harness.CheckCase]:
    """``n_random`` random small shapes, then (``full_case``) the whole layer at sampled outputs."""
    out = []
    for i, shape in enumerate(random_shapes(n_random, rng)):
        x, w, b = random_inputs(shape, rng)
        out.append(harness.CheckCase(f"random-{i}", shape, (x, w, b), lambda x=x, w=w, b=b: reference(x, w, b)))
    if claims_fp32_range(impl):
        out.extend(range_cases(rng))
    if full_case:
        name, shape = _resolve_case(full_case)
        x, w, b = random_inputs(shape, rng)
        corners = [(0, 0, 0, 0), (shape.B - 1, shape.M - 1, shape.Hp - 1, shape.Wp - 1),
                   (0, shape.M - 1, 0, shape.Wp - 1), (shape.B - 1, 0, shape.Hp - 1, 0)]
        picks = [tuple(int(rng.integers(0, d)) for d in shape.y_shape) for _ in range(SAMPLED_POSITIONS - 4)]
        positions = corners + picks
        idx = tuple(np.array(p) for p in zip(*positions))

        def sampled(got):
            sample = got[idx]
            if np.isnan(got).any() and not np.isnan(sample).any():
                sample[0] = np.nan  # an unwritten element anywhere fails the check
            return sample

        label = f"{name} sampled ({SAMPLED_POSITIONS} pooled outputs, whole output checked for NaN)"
        out.append(harness.CheckCase(label, shape, (x, w, b), lambda: reference_at(x, w, b, positions), sampled))
    return out


def vendor_runs(cases, seed: int = 0, variants=None):
    """cuDNN through PyTorch: ``max_pool2d(relu(conv2d(x, w, b, padding=K//2)), 2)`` per case and
    precision (``cudnn-fp32`` with TF32 off, ``cudnn-tf32``, ``cudnn-fp16``), each also with x and
    w in channels_last memory format (``...-channels-last``; the output's layout is cuDNN's
    choice), checked against float64 at sampled pooled outputs."""
    import torch
    import torch.nn.functional as F

    variants = VENDOR_VARIANTS if variants is None else variants
    unknown = sorted(set(variants) - set(VENDOR_VARIANTS))
    if unknown:
        raise ParameterError(f"Unknown vendor variant(s) {unknown}.", f"use some of: {', '.join(VENDOR_VARIANTS)}.")
    rng = np.random.default_rng(seed)
    with torch_flags(torch, benchmark=True) as flags:
        for case in cases:
            name, shape = _resolve_case(case)
            x, w, b = random_inputs(shape, rng)
            positions = [tuple(int(rng.integers(0, d)) for d in shape.y_shape) for _ in range(SAMPLED_POSITIONS)]
            idx = tuple(np.array(p) for p in zip(*positions))
            ref = reference_at(x, w, b, positions)
            for variant in variants:
                dtype = torch.float16 if "fp16" in variant else torch.float32
                tx, tw, tb = (torch.from_numpy(a).cuda().to(dtype) for a in (x, w, b))
                if variant.endswith(CHANNELS_LAST):   # NHWC storage: cuDNN's faster layout on the H100
                    tx, tw = (t.contiguous(memory_format=torch.channels_last) for t in (tx, tw))
                flags.tf32("tf32" in variant)

                def call(tx=tx, tw=tw, tb=tb, k=shape.K):
                    return F.max_pool2d(F.relu(F.conv2d(tx, tw, tb, padding=k // 2)), 2)

                def accuracy(out, idx=idx, ref=ref):
                    got = out.float().cpu().numpy()
                    return {"rel_l2_error": float(np.linalg.norm(got[idx] - ref) / (np.linalg.norm(ref) or 1.0))}

                yield harness.VendorRun(
                    variant, name, shape.B, shape, call, accuracy,
                    derived=lambda m, shape=shape: [("gflops", shape.flops / (m.median * 1e6), "GFLOP/s")],
                    extra={"library": "cuDNN", "library_version": str(torch.backends.cudnn.version()),
                           "reference": "float64 at sampled pooled outputs"})
                del tx, tw, tb


CHANNELS_LAST = "-channels-last"
VENDOR_VARIANTS = ("cudnn-fp32", "cudnn-tf32", "cudnn-fp16",
                   "cudnn-fp32-channels-last", "cudnn-tf32-channels-last", "cudnn-fp16-channels-last")
