"""Timing with CUDA events or CUDA-graph replays: warm-up first, then repeats; raw samples kept,
median reported, host time beside device time.

Like ``cupyx.profiler.benchmark``, measuring returns a value (``Measured``) that holds every
sample; formatting and plotting are someone else's job. Compilation never lands inside a timed
region: callers build their kernels before calling ``time_gpu``, and the warm-up runs absorb
module loading and first-launch costs.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .errors import ParameterError

#: How a number was timed, in words a table footnote can show.
TIMING_WORDS = {
    "cuda-graph": "CUDA-graph replay (one replay per sample, CUDA events around it)",
    "cuda-graph-calls": ("CUDA-graph replays of R back-to-back calls (CUDA events around each replay; a sample is "
                         "the replay's time / R, R recorded as calls_per_replay; the replay's own launch latency "
                         "is in each sample once, shared by its R calls)"),
    "events": "CUDA events around each call",
    "host-bound": "CUDA events around a host-driven loop (launch overhead included)",
    "torch-events": "CUDA events around each PyTorch call",
}


@dataclass
class Measured:
    """Repeated timings of one thing: raw samples, and the median with its spread."""

    samples: list[float]
    unit: str = "ms"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a Measured needs at least one sample")

    @property
    def median(self) -> float:
        ordered = sorted(self.samples)
        n = len(ordered)
        mid = n // 2
        return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def __repr__(self) -> str:
        return (
            f"Measured(median={self.median:.4g} {self.unit}, min={self.min:.4g}, "
            f"max={self.max:.4g}, n={len(self.samples)})"
        )


#: The most timed repeats and warm-up runs one measurement may ask for (a typo such as
#: repeats=10000000000 would hold a GPU for days).
MAX_REPEATS = 10_000
MAX_WARMUP = 1_000

#: R, the calls of one timed replay: REPLAY_TARGET_MS divided by one replay of a single call timed
#: alone (at most MAX_CALLS). That one replay starts on an idle GPU, so it also holds the replay's
#: launch latency, and for a microsecond kernel R comes out well below 1 ms / the kernel's time
#: (the recorded R says what it was). Every timed sample is one replay of R calls and holds that
#: latency once: spread over R calls instead of added to each, so per-call times at microsecond
#: sizes lean slightly high, never low. A call of 1 ms or more is replayed alone.
REPLAY_TARGET_MS = 1.0
MAX_CALLS = 50


def calls_per_replay(one_call_ms: float) -> int:
    """How many back-to-back calls one timed graph replay holds, from one call's time."""
    if not one_call_ms > 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, math.ceil(REPLAY_TARGET_MS / one_call_ms)))


def check_repeats(repeats: int, warmup: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ParameterError(f"repeats={repeats!r} must be a positive integer.", "pass repeats >= 1 (e.g. repeats=10).")
    if repeats > MAX_REPEATS:
        raise ParameterError(f"repeats={repeats!r} exceeds the largest allowed, {MAX_REPEATS:,}.",
                             f"pass at most repeats={MAX_REPEATS} (the median settles long before).")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ParameterError(f"warmup={warmup!r} must be an integer >= 0.", "pass warmup >= 0 (e.g. warmup=2).")
    if warmup > MAX_WARMUP:
        raise ParameterError(f"warmup={warmup!r} exceeds the largest allowed, {MAX_WARMUP:,}.",
                             f"pass at most warmup={MAX_WARMUP}.")


def time_gpu(fn: Callable[[], object], repeats: int = 10, warmup: int = 2, stream=None,
             graph: bool = False, timing: str = "events") -> Measured:
    """Time ``fn`` (which enqueues GPU work on ``stream``) with CUDA events, in milliseconds.

    Each repeat is bracketed by its own pair of events and synchronised, so one sample is one
    complete execution of ``fn`` including any host work inside it (copies from pageable memory
    are synchronous anyway); the median of the samples is what the book reports. The host's wall
    time of each repeat (launch to synchronised) is kept beside it as ``host_ms`` (its median).
    ``timing`` names how the samples were taken (a key of ``TIMING_WORDS``).

    With ``graph`` the launches are captured into a CUDA graph of R back-to-back calls and each
    sample is one replay's time divided by R (``cuda-graph-calls``; R, from one call's time by
    ``calls_per_replay``, is recorded as ``calls_per_replay``): what a call costs when calls
    follow each other, without the replay's own launch latency on every call.
    """
    import cupy as cp

    check_repeats(repeats, warmup)
    if graph:
        captured = _capture(fn, warmup)
        if captured is not None:
            calls = calls_per_replay(_one_replay_ms(*captured))
            if calls > 1:
                captured = _capture(fn, 0, calls) or captured
                calls = captured[2]   # 1 when the larger graph could not be captured
            measured = time_gpu(captured[0], repeats, 1, stream=captured[1])
            measured.samples = [s / calls for s in measured.samples]
            measured.extra.update(timing="cuda-graph-calls", calls_per_replay=calls,
                                  host_ms=measured.extra["host_ms"] / calls)
            return measured
    stream = stream or cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    samples, host = [], []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeats):
        began = time.perf_counter()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        host.append((time.perf_counter() - began) * 1e3)
        samples.append(float(cp.cuda.get_elapsed_time(start, stop)))
    return Measured(samples, unit="ms", extra={"timing": timing, "host_ms": statistics.median(host)})


def _one_replay_ms(replay, stream, tries: int = 3) -> float:
    """The shortest of a few timed replays of a one-call graph: one call's time, for R."""
    import cupy as cp

    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = math.inf
    for _ in range(tries):
        start.record(stream)
        replay()
        stop.record(stream)
        stop.synchronize()
        best = min(best, float(cp.cuda.get_elapsed_time(start, stop)))
    return best


def _capture(fn: Callable[[], object], warmup: int, calls: int = 1):
    """Capture ``calls`` back-to-back calls of ``fn`` into a CUDA graph, so that timing sees GPU
    time, not Python.

    A kernel that runs for microseconds is shorter than the Python code that launches it; timed
    directly, the GPU would wait for the host and the median would measure the interpreter.
    Replaying a captured graph enqueues the same launches in one call. Returns ``(replay, stream,
    calls)``, or None when ``fn`` cannot be captured (it synchronises, or uses streams of its own);
    the caller then times ``fn`` directly.
    """
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            for _ in range(max(warmup, 1)):  # compile, load modules, fill the memory pool
                fn()
            stream.synchronize()
            stream.begin_capture()
            try:
                for _ in range(calls):
                    fn()
            finally:
                graph = stream.end_capture()
    except Exception:
        cp.cuda.Device().synchronize()
        return None
    return (lambda: graph.launch(stream)), stream, calls


def time_torch(fn: Callable[[], object], repeats: int = 10, warmup: int = 2, graph: bool = False,
               timing: str | None = None) -> Measured:
    """Time a PyTorch call (a vendor library) with CUDA events, in milliseconds: the one timer of
    every study's library comparison.

    Eager (``graph=False``): warm-up calls (cuDNN's ``benchmark`` mode picks its algorithm
    there), then one pair of events around each call; labelled ``torch-events``. With ``graph``
    the call is captured after a warm-up on a side stream into a ``torch.cuda.CUDAGraph`` of R
    back-to-back calls, R chosen as ``time_gpu`` chooses it, and each sample is a replay's time / R
    (``cuda-graph-calls``, the same method as the book's kernels); a call that cannot be captured
    is timed eagerly and says so. ``timing`` is accepted for the same signature as ``time_gpu``
    and ignored.
    """
    import torch

    check_repeats(repeats, warmup)
    call, label, calls = fn, "torch-events", 1
    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(max(warmup, 1)):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        try:
            captured = _torch_graph(torch, fn, 1)
            calls = calls_per_replay(min(_torch_elapsed(torch, captured.replay) for _ in range(3)))
            if calls > 1:
                captured = _torch_graph(torch, fn, calls)
            call, label = captured.replay, "cuda-graph-calls"
        except Exception:  # noqa: BLE001 - fall back to eager calls, said in the label
            torch.cuda.synchronize()
            call, calls = fn, 1
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    samples = [_torch_elapsed(torch, call) / calls for _ in range(repeats)]
    extra = {"timing": label}
    if label == "cuda-graph-calls":
        extra["calls_per_replay"] = calls
    return Measured(samples, unit="ms", extra=extra)


def _torch_graph(torch, fn: Callable[[], object], calls: int):
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        for _ in range(calls):
            fn()
    return captured


def _torch_elapsed(torch, call: Callable[[], object]) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    stop.record()
    stop.synchronize()
    return float(start.elapsed_time(stop))


class TorchFlags:
    """PyTorch's global math flags as a library comparison sets them: ``tf32(allowed)`` lets (or
    forbids) TF32 in both cuDNN's convolutions and cuBLAS's matmuls, ``benchmark(on)`` turns
    cuDNN's algorithm search on or off. Obtained from ``torch_flags``, which restores them."""

    NAMES = (("backends", "cudnn", "benchmark"), ("backends", "cudnn", "allow_tf32"),
             ("backends", "cuda", "matmul", "allow_tf32"))

    def __init__(self, torch):
        self._torch = torch

    def _owner(self, name):
        owner = self._torch
        for part in name[:-1]:
            owner = getattr(owner, part)
        return owner

    def get(self) -> tuple:
        return tuple(getattr(self._owner(n), n[-1]) for n in self.NAMES)

    def set_all(self, values: tuple) -> None:
        for name, value in zip(self.NAMES, values):
            setattr(self._owner(name), name[-1], value)

    def tf32(self, allowed: bool) -> None:
        self._torch.backends.cudnn.allow_tf32 = bool(allowed)
        self._torch.backends.cuda.matmul.allow_tf32 = bool(allowed)

    def benchmark(self, on: bool) -> None:
        self._torch.backends.cudnn.benchmark = bool(on)


@contextmanager
def torch_flags(torch=None, *, tf32: bool | None = None, benchmark: bool | None = None) -> Iterator[TorchFlags]:
    """Save PyTorch's TF32 and cuDNN-benchmark flags, set the ones given, yield a ``TorchFlags``
    to change them inside the block (per library row), and put every one back on leaving it,
    by an exception or a generator's close included. ``torch`` defaults to the real module,
    imported only here: the core does not import PyTorch when it is imported."""
    if torch is None:
        import torch
    flags = TorchFlags(torch)
    saved = flags.get()
    try:
        if tf32 is not None:
            flags.tf32(tf32)
        if benchmark is not None:
            flags.benchmark(benchmark)
        yield flags
    finally:
        flags.set_all(saved)
