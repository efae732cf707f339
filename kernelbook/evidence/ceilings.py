"""The device's ceilings, measured on the device itself: copy bandwidth, the FP32 FMA rate, and
the FP16 and TF32 tensor rates (cuBLAS through CuPy). Every floor and roofline in the book is
drawn against these measured values, never against datasheet numbers. The FMA micro-benchmark's
source is ``kernels/device/fp32_fma_peak.cu``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import gpu, kernels, results
from .. import session as session_mod
from ..measure import check_repeats
from ..phases import timed
from .tools import NOT_RECORDED

PART = results.part_name("device", "ceilings")
FMA_SOURCE = "device/fp32_fma_peak.cu"
FMA_CHAINS = 16
EMPTY_SOURCE = "device/empty_kernel.cu"
READ_SOURCE = "device/read_stream.cu"
CEILING_METRICS = {"copy_gbs": "GB/s", "read_gbs": "GB/s", "fp32_gflops": "GFLOP/s", "fp16_tensor_gflops": "GFLOP/s",
                   "tf32_tensor_gflops": "GFLOP/s", "empty_call_us": "µs", "empty_replay_us": "µs"}
CEILING_TITLES = {"copy_gbs": "Copy bandwidth (device to device, read + write)",
                  "read_gbs": "Read bandwidth (a streaming read, nothing written)",
                  "fp32_gflops": "FP32 FMA rate (CUDA cores)",
                  "fp16_tensor_gflops": "FP16 tensor rate (cuBLAS, 8192³)",
                  "tf32_tensor_gflops": "TF32 tensor rate (cuBLAS, 8192³)",
                  "empty_call_us": "Timer floor: an empty kernel, per call in a graph of R calls",
                  "empty_replay_us": "An empty kernel replayed alone (one call per graph replay)"}


def _ceiling(metric: str, value: float, measured, **extra) -> dict:
    timing = {k: measured.extra[k] for k in ("timing", "calls_per_replay") if k in measured.extra}
    return results.record("device", "ceilings", None, None, metric, value, unit=CEILING_METRICS[metric],
                          time_ms=measured.median, time_ms_min=measured.min, time_ms_max=measured.max,
                          time_ms_samples=list(measured.samples), **{**timing, **extra})


@timed("ceilings")
def measure_ceilings(repeats: int = 10, warmup: int = 2, copy_bytes: int = 2**30, matrix: int = 8192,
                     fma_iters: int = 65536) -> list[dict]:
    """The device's ceilings, measured now: copy bandwidth, FP32 FMA rate, FP16 and TF32 tensor rates.

    Each is the median of ``repeats`` CUDA-event timings after ``warmup`` runs. A ceiling that
    cannot be measured (e.g. TF32 compute type refused) is recorded with value None and why.
    """
    import cupy as cp

    from ..measure import time_gpu

    records = []
    src = cp.empty(copy_bytes, dtype=cp.uint8)
    dst = cp.empty_like(src)
    src.data.memset_async(1, copy_bytes)
    # CUDA events around each copy, launched directly. Not a graph: captured, a device-to-device
    # cudaMemcpyAsync becomes a memcpy node that the copy engines execute, a different and slower
    # path (2,430 GB/s against 2,954 for the same copy launched directly, runs 20261123T1944Z-84f88f
    # and 20261123T1723Z-770a7d), which would put the floor above what kernels reach.
    copy = time_gpu(lambda: dst.data.copy_from_device_async(src.data, copy_bytes), repeats, warmup)
    records.append(_ceiling("copy_gbs", 2 * copy_bytes / (copy.median / 1e3) / 1e9, copy, bytes_moved=2 * copy_bytes,
                            how="cudaMemcpyAsync device to device, CUDA events around each copy (launched directly: "
                                "in a graph the copy engines would run it); bytes read + written"))
    dst = None  # free the buffer before the next allocation
    records.append(_read_ceiling(src, copy_bytes, repeats, warmup))
    src = None

    blocks, threads = gpu.multiprocessors() * 8, 256
    kernel = kernels.get_kernel(FMA_SOURCE, "fp32_fma_peak", {"FMA_CHAINS": FMA_CHAINS})
    out = cp.empty(blocks * threads, dtype=cp.float32)
    args = (out, cp.int32(fma_iters), cp.float32(0.999), cp.float32(0.001))
    fma = time_gpu(lambda: kernel((blocks,), (threads,), args), max(3, repeats // 2), warmup)
    flops = 2 * FMA_CHAINS * fma_iters * blocks * threads
    records.append(_ceiling("fp32_gflops", flops / (fma.median / 1e3) / 1e9, fma, flops=flops,
                            how=f"{FMA_CHAINS} independent FMA chains per thread, {blocks}x{threads} threads, 2 FLOP per FMA"))
    del out

    n = matrix
    flops = 2 * n**3
    a = cp.random.random((n, n), dtype=cp.float32)
    b = cp.random.random((n, n), dtype=cp.float32)
    ah, bh = a.astype(cp.float16), b.astype(cp.float16)
    ch = cp.empty((n, n), dtype=cp.float16)
    half = time_gpu(lambda: cp.matmul(ah, bh, out=ch), repeats, warmup)
    records.append(_ceiling("fp16_tensor_gflops", flops / (half.median / 1e3) / 1e9, half, flops=flops,
                            how=f"cupy.matmul of {n}x{n} float16 matrices (cuBLAS, tensor cores)"))
    ah = bh = ch = None
    c = cp.empty((n, n), dtype=cp.float32)
    try:
        from cupy._core import _routines_linalg as linalg

        old = linalg.get_compute_type(cp.float32)
        linalg.set_compute_type(cp.float32, linalg.COMPUTE_TYPE_TF32)
        try:
            tf32 = time_gpu(lambda: cp.matmul(a, b, out=c), repeats, warmup)
        finally:
            linalg.set_compute_type(cp.float32, old)
        records.append(_ceiling("tf32_tensor_gflops", flops / (tf32.median / 1e3) / 1e9, tf32, flops=flops,
                                how=f"cupy.matmul of {n}x{n} float32 matrices with COMPUTE_TYPE_TF32"))
    except Exception as exc:  # a CuPy without the switch: say so, keep the other ceilings
        records.append(results.record("device", "ceilings", None, None, "tf32_tensor_gflops", None,
                                      unit="GFLOP/s", how=f"not measured: {type(exc).__name__}: {exc}"))
    a = b = c = None
    cp.get_default_memory_pool().free_all_blocks()
    records.extend(_timer_floor(repeats, warmup))
    return records


def _read_ceiling(buffer, nbytes: int, repeats: int, warmup: int) -> dict:
    """The rate at which the device reads ``nbytes`` that nothing writes back (``read_stream.cu``)."""
    import cupy as cp

    from ..measure import time_gpu

    blocks, threads = gpu.multiprocessors() * 8, 256
    kernel = kernels.get_kernel(READ_SOURCE, "read_stream", {})
    out = cp.empty(blocks * threads, dtype=cp.float32)
    args = (buffer, cp.int64(nbytes // 16), out)
    read = time_gpu(lambda: kernel((blocks,), (threads,), args), repeats, warmup, graph=True)
    return _ceiling("read_gbs", nbytes / (read.median / 1e3) / 1e9, read, bytes_moved=nbytes,
                    how=f"{READ_SOURCE}: 16-byte streaming loads, {blocks}x{threads} threads; bytes read")


def _timer_floor(repeats: int, warmup: int) -> list[dict]:
    """An empty kernel timed as every step is (a graph of R back-to-back calls, per call) and as a
    graph of one call replayed alone: the timer's own floor, and the replay latency that a
    one-call replay adds to every sample."""
    from ..measure import _capture, time_gpu

    empty = kernels.get_kernel(EMPTY_SOURCE, "empty_kernel", {})
    call = lambda: empty((1,), (32,), ())  # noqa: E731
    batched = time_gpu(call, repeats, warmup, graph=True)
    records = [_ceiling("empty_call_us", batched.median * 1e3, batched,
                        how=f"{EMPTY_SOURCE}, one block; a graph of {batched.extra.get('calls_per_replay')} calls "
                            "per replay, CUDA events around it, time per call")]
    captured = _capture(call, warmup)
    if captured is not None:
        alone = time_gpu(captured[0], repeats, 1, stream=captured[1])
        records.append(_ceiling("empty_replay_us", alone.median * 1e3, alone,
                                how=f"{EMPTY_SOURCE}, one block; a graph of one call per replay, CUDA events around it"))
    return records


@dataclass
class Ceilings(session_mod.RecordingView):
    """Measured ceilings and where they come from (an empty recording: nothing recorded)."""

    recording: session_mod.Recording

    @property
    def values(self) -> dict:
        return {r["metric"]: r["value"] for r in self.recording.records if r["value"] is not None}

    @property
    def label(self) -> str:
        return self.recording.label if self.recording.found else f"Device ceilings: {self.recording.absence}."


def ceilings(mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
             repeats: int = 10, prefer_run: str | None = None) -> Ceilings:
    """Measure the ceilings (GPU; part ``device-ceilings``) or replay the recorded ones."""
    check_repeats(repeats, 0)  # in every mode: a replay refuses what a measurement would

    def measure() -> session_mod.Measurement:
        return session_mod.Measurement(measure_ceilings(repeats=repeats))

    return Ceilings(session_mod.recorded(PART, "device", measure, parameters={"repeats": repeats}, mode=mode,
                                         run_id=run_id, replay_run=replay_run, prefer_run=prefer_run or run_id,
                                         required=False, compare={}))


def ceilings_for(source=None) -> Ceilings:
    """Recorded ceilings for a run (a Run, run id, Session or chapter): that run's, else the newest."""
    run_id = None
    if source is not None:
        run = getattr(getattr(source, "session", None), "run", None) or getattr(source, "run", None) or source
        run_id = run if isinstance(run, str) else getattr(run, "run_id", None)
    return ceilings("replay", prefer_run=run_id)


def ceilings_table(found: Ceilings):
    import pandas as pd

    rows = []
    by_metric = {r["metric"]: r for r in found.records}
    for metric, title in CEILING_TITLES.items():
        r = by_metric.get(metric)
        value = None if r is None else r["value"]
        text = NOT_RECORDED if r is None else ("not measured" if value is None else
                                               f"{value:,.0f} {CEILING_METRICS[metric]}" if value >= 100 else
                                               f"{value:.3g} {CEILING_METRICS[metric]}")
        rows.append({"Ceiling": title, "Value": text, "How": (r or {}).get("how", "")})
    from ..report import styled

    return styled(pd.DataFrame(rows), f"Measured ceilings of the device. [{found.short_label}]")


