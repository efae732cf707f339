"""The MLP's problem as the core harness asks for it (``kernelbook.harness`` runs the loops).

Checks (``check_cases``): N in FIXED_COLUMNS plus random N (2..20000), each with fresh random
weights and signals. FP32 steps pass on relative L2 error <= their tolerance (1e-5);
half-precision steps pass on the scaled absolute difference against the CPU float32 benchmark
<= 0.15 (``judge``, ``measure="scaled_abs_diff"``), their relative L2 error reported beside it.

Timing: ``op_time_ms`` is the step's kernels alone on inputs already on the GPU (the harness's
CUDA-graph replays); weights are packed and kernels compiled before. ``time_with_upload_ms``
adds the host-to-device copy of x (from pinned memory) in front of the same launch
(``case_records``). The vendor rows (``vendor_runs``) are PyTorch's three nn.Linear + ReLU.

The harness's loops on this study, by step name (``check_step``, ``measure_step``,
``measure_vendor``, ``launch_once``), are in ``study.py`` beside the study object.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import checks, harness
from ..checks import CheckResult, claims_fp32_range
from ..measure import torch_flags
from ..study import upload
from . import ranges
from .data import load_weights, make_signals, make_weights
from .problem import MlpShape, case_columns
from .reference import HALF_THRESHOLD, forward32, forward64, rel_l2, scaled_abs_diff

#: 36 and 12804: a multiple of four (the TMA steps 18 and 19 run their own kernels; other N go to
#: their fallbacks) with a ragged last tile (64 columns: the tile's second half past N).
FIXED_COLUMNS = (1, 31, 33, 36, 12799, 12800, 12804)


def _upload(host: np.ndarray):
    """A device copy made by a plain memcpy (no CuPy kernel)."""
    import cupy as cp

    return upload(cp, host)


def operands(impl, shape: MlpShape, host: tuple) -> tuple:
    """(x on the device, the step's prepared weights); scratch a step keeps is allocated here,
    before any timed or profiled launch."""
    x_host, weights = host
    x = _upload(x_host)
    prepared = impl.prepare_weights(tuple(_upload(w) for w in weights))
    if hasattr(impl, "scratch"):
        impl.scratch(shape.N)
    return x, prepared


def check_cases(impl, params: dict, n_random: int, rng: np.random.Generator) -> list[harness.CheckCase]:
    """Fixed and random N; for a step that claims FP32 accuracy, the range test's 16 cases too
    (``ranges.cases``: inputs and weights from 1e-6 to 1e6, independent scales and mixtures)."""
    columns = list(FIXED_COLUMNS) + [int(v) for v in rng.integers(2, 20001, size=n_random)]
    out = []
    for n in columns:
        case_seed = int(rng.integers(2**31))
        host_w = make_weights(case_seed)
        x_host = make_signals(n, case_seed + 1)
        out.append(harness.CheckCase(f"N={n}", MlpShape(n), (x_host, host_w),
                                     lambda x=x_host, w=host_w: forward64(x, w)))
    if claims_fp32_range(impl):
        for label, x_host, host_w in ranges.cases(rng):
            out.append(harness.CheckCase(label, MlpShape(x_host.shape[1]), (x_host, host_w),
                                         lambda x=x_host, w=host_w: forward64(x, w)))
    return out


def judge(impl, got: np.ndarray, case: harness.CheckCase) -> CheckResult:
    """FP32 steps: relative L2 error against float64. Half-precision steps: the write-up's scaled
    absolute difference against the CPU float32 result (relative L2 error kept beside it)."""
    if impl.measure != "scaled_abs_diff":
        return harness.judge(impl, got, case)
    res = checks.compare(got, case.reference(), float("inf"), case.label, case.shape.as_dict())
    x_host, host_w = case.host
    scaled = scaled_abs_diff(got, forward32(x_host, host_w))
    res.measure, res.measured, res.tolerance = "scaled_abs_diff", scaled, HALF_THRESHOLD
    res.passed = bool(res.unwritten == 0 and scaled <= HALF_THRESHOLD)
    return res


@functools.lru_cache(maxsize=2)
def case_data(case: str):
    """Host signals, shipped weights and both references for a test case (computed once)."""
    n = case_columns(case)
    x = make_signals(n)
    w = load_weights()
    return x, w, forward32(x, w), forward64(x, w)


def case_records(case: str, x, run, output, time) -> list[tuple]:
    """The upload-included time, and the timed output's accuracy against both references."""
    import cupyx

    x_host, _, ref32, ref64 = case_data(case)
    pinned = cupyx.empty_pinned(x_host.shape, dtype=np.float32)
    pinned[...] = x_host

    def upload_and_run():
        x.set(pinned)
        run()

    with_upload = time(upload_and_run, timing="events")
    got = output()
    return [("time_with_upload_ms", with_upload, "ms"), ("scaled_abs_diff", scaled_abs_diff(got, ref32), ""),
            ("rel_l2_error", rel_l2(got, ref64), "")]


VENDOR_VARIANTS = ("torch-fp32", "torch-tf32", "torch-fp16")


def vendor_runs(cases, seed: int = 0):
    """PyTorch: three nn.Linear + ReLU on the same weights, FP32 (TF32 off), TF32, FP16; timed as
    CUDA-graph replays (the MLP's launches are microseconds: eager timing would time Python)."""
    import torch

    with torch_flags(torch) as flags:
        for case in cases:
            x_host, w_host, ref32, ref64 = case_data(case)
            shape = MlpShape(x_host.shape[1])
            for variant in VENDOR_VARIANTS:
                dtype = torch.float16 if variant == "torch-fp16" else torch.float32
                flags.tf32(variant == "torch-tf32")
                model = torch.nn.Sequential(torch.nn.Linear(71, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                            torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
                with torch.no_grad():
                    for layer, (W, b) in zip((model[0], model[2], model[4]), zip(w_host[0::2], w_host[1::2])):
                        layer.weight.copy_(torch.from_numpy(W))
                        layer.bias.copy_(torch.from_numpy(b))
                model = model.to(dtype).eval()
                # PyTorch wants one signal per row: (N, 71); converting x is not timed.
                inp = torch.from_numpy(np.ascontiguousarray(x_host.T)).cuda().to(dtype)

                def call(model=model, inp=inp):
                    with torch.no_grad():
                        return model(inp)

                def accuracy(y, ref32=ref32, ref64=ref64):
                    torch.cuda.synchronize()
                    got = y.float().cpu().numpy().T
                    return {"scaled_abs_diff": scaled_abs_diff(got, ref32), "rel_l2_error": rel_l2(got, ref64)}

                yield harness.VendorRun(variant, case, shape.N, shape, call, accuracy, graph=True)
