"""What the harness calls for the MLP study: checks, measurements, the vendor baseline, and a
single launch for profilers.

Timing (``measure_step``): ``op_time_ms`` is the step's kernels alone on inputs already on the
GPU, as CUDA graph replays of one launch (``measure.time_gpu(graph=True)``); weights are packed
and kernels compiled before. ``time_with_upload_ms`` adds the host-to-device copy of x (from
pinned memory) in front of the same launch, timed with CUDA events.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import checks, measure, results
from ..checks import CheckResult
from . import NAME, STEPS, require_gpu
from .data import load_weights, make_signals, make_weights
from .problem import CASES, MlpShape, case_columns
from .reference import HALF_THRESHOLD, forward32, forward64, rel_l2, scaled_abs_diff

FIXED_COLUMNS = (1, 31, 33, 12799, 12800)


def _upload(host: np.ndarray):
    """A device copy made by a plain memcpy (no CuPy kernel)."""
    import cupy as cp

    dev = cp.empty(host.shape, dtype=host.dtype)
    dev.set(np.ascontiguousarray(host))
    return dev


def _upload_weights(host_weights):
    return tuple(_upload(w) for w in host_weights)


def check_step(slug: str, params: dict | None = None, n_random: int = 6, seed: int | None = None
               ) -> list[CheckResult]:
    """The step against float64 on N in FIXED_COLUMNS plus ``n_random`` random N (2..20000),
    each with fresh random weights and signals and the output poisoned with NaN.

    FP32 steps pass on relative L2 error <= their tolerance (1e-5). Half-precision steps pass
    on the scaled absolute difference against the CPU float32 benchmark <= 0.15
    (``measure="scaled_abs_diff"``); their relative L2 error against float64 is reported too.
    """
    require_gpu()
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    rng = np.random.default_rng(seed)
    columns = list(FIXED_COLUMNS) + [int(v) for v in rng.integers(2, 20001, size=n_random)]
    out = []
    for i, n in enumerate(columns):
        shape = MlpShape(n)
        label = f"N={n}"
        case_seed = int(rng.integers(2**31))
        host_w = make_weights(case_seed)
        x_host = make_signals(n, case_seed + 1)
        try:
            impl.validate(shape, merged)
        except Exception as exc:  # noqa: BLE001 - a refused shape is a failed check here
            out.append(CheckResult(label, shape.as_dict(), False, error=f"{type(exc).__name__}: {exc}"))
            continue
        x = _upload(x_host)
        prepared = impl.prepare_weights(_upload_weights(host_w))

        def launch():
            y = checks.poisoned(shape.y_shape)
            impl.launch(y, x, prepared, shape, merged)
            return y

        ref64 = forward64(x_host, host_w)
        if impl.measure == "scaled_abs_diff":
            res = checks.run_check(label, shape.as_dict(), float("inf"), launch, lambda: ref64)
            if res.error is None:
                got = launch().get()
                scaled = scaled_abs_diff(got, forward32(x_host, host_w))
                res.measure, res.measured, res.tolerance = "scaled_abs_diff", scaled, HALF_THRESHOLD
                res.passed = bool(res.unwritten == 0 and scaled <= HALF_THRESHOLD)
            else:
                res.tolerance, res.measure = HALF_THRESHOLD, "scaled_abs_diff"
        else:
            res = checks.run_check(label, shape.as_dict(), impl.tolerance, launch, lambda: ref64)
        out.append(res)
    return out


@functools.lru_cache(maxsize=2)
def _case_data(case: str):
    """Host signals, shipped weights and both references for a test case (computed once)."""
    n = case_columns(case)
    x = make_signals(n)
    w = load_weights()
    return x, w, forward32(x, w), forward64(x, w)


def measure_step(slug: str, params: dict | None = None, cases=("5x5", "100x100"), repeats: int = 20,
                 warmup: int = 3) -> list[dict]:
    """Records op_time_ms, time_with_upload_ms, scaled_abs_diff and rel_l2_error per case."""
    import cupy as cp
    import cupyx

    require_gpu()
    measure.check_repeats(repeats, warmup)
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    records = []
    for case in cases:
        x_host, w_host, ref32, ref64 = _case_data(case)
        shape = MlpShape(x_host.shape[1])
        impl.validate(shape, merged)
        x = _upload(x_host)
        prepared = impl.prepare_weights(_upload_weights(w_host))
        impl.prepare(merged, shape)
        y = cp.empty(shape.y_shape, dtype=cp.float32)

        def run():
            impl.launch(y, x, prepared, shape, merged)

        op = measure.time_gpu(run, repeats, warmup, graph=impl.graph_capturable)
        pinned = cupyx.empty_pinned(x_host.shape, dtype=np.float32)
        pinned[...] = x_host

        def upload_and_run():
            x.set(pinned)
            run()

        with_upload = measure.time_gpu(upload_and_run, repeats, warmup)
        y.fill(np.nan)
        run()
        got = y.get()
        extra = {"flops": shape.flops, "min_bytes": shape.min_bytes, "params": merged}
        rec = functools.partial(results.record, NAME, slug, case, shape.N)
        records += [rec("op_time_ms", op, "ms", **extra),
                    rec("time_with_upload_ms", with_upload, "ms", **extra),
                    rec("scaled_abs_diff", scaled_abs_diff(got, ref32), "", **extra),
                    rec("rel_l2_error", rel_l2(got, ref64), "", **extra)]
    return records


VENDOR_VARIANTS = ("pytorch-fp32", "pytorch-tf32", "pytorch-fp16")


def _torch_time(fn, repeats: int, warmup: int) -> measure.Measured:
    """CUDA graph replays of ``fn`` timed with CUDA events (eager launches if capture fails)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    timing = "cuda-graph"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        call = graph.replay
    except Exception:  # noqa: BLE001 - fall back to eager launches, said in the record
        torch.cuda.synchronize()
        call, timing = fn, "events"
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        samples.append(float(start.elapsed_time(stop)))
    return measure.Measured(samples, "ms", {"timing": timing})


def measure_vendor(cases=("5x5", "100x100"), repeats: int = 20, warmup: int = 3) -> list[dict]:
    """PyTorch: three nn.Linear + ReLU on the same weights, FP32 (TF32 off), TF32, FP16."""
    import torch

    require_gpu()
    measure.check_repeats(repeats, warmup)
    records = []
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for case in cases:
            x_host, w_host, ref32, ref64 = _case_data(case)
            shape = MlpShape(x_host.shape[1])
            for variant in VENDOR_VARIANTS:
                dtype = torch.float16 if variant == "pytorch-fp16" else torch.float32
                torch.backends.cuda.matmul.allow_tf32 = variant == "pytorch-tf32"
                model = torch.nn.Sequential(torch.nn.Linear(71, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                            torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
                with torch.no_grad():
                    for layer, (W, b) in zip((model[0], model[2], model[4]), zip(w_host[0::2], w_host[1::2])):
                        layer.weight.copy_(torch.from_numpy(W))
                        layer.bias.copy_(torch.from_numpy(b))
                model = model.to(dtype).eval()
                # PyTorch wants one signal per row: (N, 71); converting x is not timed.
                inp = torch.from_numpy(np.ascontiguousarray(x_host.T)).cuda().to(dtype)
                holder = {}

                def run():
                    with torch.no_grad():
                        holder["y"] = model(inp)

                op = _torch_time(run, repeats, warmup)
                run()
                torch.cuda.synchronize()
                got = holder["y"].float().cpu().numpy().T
                extra = {"flops": shape.flops, "min_bytes": shape.min_bytes}
                rec = functools.partial(results.record, NAME, variant, case, shape.N)
                records += [rec("op_time_ms", op, "ms", **extra),
                            rec("scaled_abs_diff", scaled_abs_diff(got, ref32), "", **extra),
                            rec("rel_l2_error", rel_l2(got, ref64), "", **extra)]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    return records


def launch_once(slug: str, case: str, params: dict | None = None):
    """Prepare, and return a callable that launches the step once for a test case (a profiler
    target: after preparation only the step's own kernels run; inputs are drawn with NumPy and
    copied)."""
    import cupy as cp

    require_gpu()
    impl = STEPS.impl(slug)
    merged = impl.params(**(params or {}))
    shape = MlpShape(case_columns(case))
    impl.validate(shape, merged)
    x = _upload(make_signals(shape.N))
    prepared = impl.prepare_weights(_upload_weights(load_weights()))
    impl.prepare(merged, shape)
    y = cp.empty(shape.y_shape, dtype=cp.float32)
    if hasattr(impl, "scratch"):
        impl.scratch(shape.N)
    cp.cuda.Device().synchronize()
    return lambda: impl.launch(y, x, prepared, shape, merged)


__all__ = ["CASES", "VENDOR_VARIANTS", "check_step", "launch_once", "measure_step", "measure_vendor"]
