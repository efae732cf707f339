"""What a launch may ask of the GPU, checked before anything is launched.

Every step's ``validate`` calls ``check_launch`` with the grid, block and shared memory it is
about to use, so that a configuration no SM can run is refused with a clear ``LaunchLimitError``
instead of a CUDA error (or, worse, a silently skipped launch). The limits are read from the
device when one is present; without one (replay, CI) they are the H100's, the device every
recorded run of this book used, so that validation gives the same answer everywhere.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

from .errors import LaunchLimitError, ParameterError


@dataclass(frozen=True)
class DeviceLimits:
    name: str = "NVIDIA H100 (limits assumed: no GPU here)"
    compute_capability: tuple[int, int] = (9, 0)
    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    static_smem_per_block: int = 48 * 1024
    smem_per_block_optin: int = 227 * 1024
    smem_per_sm: int = 228 * 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255


H100 = DeviceLimits()


_ASSUMED: list[DeviceLimits] = []


@contextlib.contextmanager
def assumed(limits: DeviceLimits):
    """Check launches against ``limits`` instead of this GPU's inside the block: a page that shows
    a recording (an older GPU showing a Hopper step's) checks the step as the recording's device
    ran it."""
    _ASSUMED.append(limits)
    try:
        yield limits
    finally:
        _ASSUMED.pop()


def is_assumed() -> bool:
    """Whether a block of ``assumed`` is open: the limits are a recording's device's, not this GPU's."""
    return bool(_ASSUMED)


def of_recording(device: dict) -> DeviceLimits:
    """The limits a run's manifest device (``compute_capability`` "9.0") stands for: its
    compute capability, the rest the H100's (what every recorded device of this book shares)."""
    try:
        major, minor = (int(part) for part in str(device.get("compute_capability", "9.0")).split(".")[:2])
    except ValueError:
        major, minor = H100.compute_capability
    return DeviceLimits(name=str(device.get("name", H100.name)), compute_capability=(major, minor))


def as_recorded(session):
    """``assumed`` the limits of the device a replayed ``session`` was recorded on (nothing to
    assume when it measures now, or has no device): a step that routes by GPU decides as it did."""
    device = session.run.manifest.get("device") if session is not None and not session.measuring else None
    return assumed(of_recording(device)) if isinstance(device, dict) else contextlib.nullcontext()


def current() -> DeviceLimits:
    """The limits of this process's GPU, or the H100's when there is none (or those ``assumed``)."""
    return _ASSUMED[-1] if _ASSUMED else _current()


@functools.lru_cache(maxsize=1)
def _current() -> DeviceLimits:
    from . import gpu

    if not gpu.available():
        return H100
    import cupy as cp

    return _device_limits(cp.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _device_limits(device_id: int) -> DeviceLimits:
    """Read once per device: querying every property costs about a millisecond, which a public
    call that validates its launch must not pay each time."""
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceLimits(
        name=name,
        compute_capability=(int(props["major"]), int(props["minor"])),
        max_threads_per_block=int(props["maxThreadsPerBlock"]),
        max_block=tuple(int(v) for v in props["maxThreadsDim"]),
        max_grid=tuple(int(v) for v in props["maxGridSize"]),
        static_smem_per_block=int(props["sharedMemPerBlock"]),
        smem_per_block_optin=int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
        smem_per_sm=int(props.get("sharedMemPerMultiprocessor", H100.smem_per_sm)),
        max_threads_per_sm=int(props.get("maxThreadsPerMultiProcessor", H100.max_threads_per_sm)),
        max_blocks_per_sm=int(props.get("maxBlocksPerMultiProcessor", H100.max_blocks_per_sm)),
        registers_per_sm=int(props.get("regsPerMultiprocessor", H100.registers_per_sm)),
    )


def ceil_div(a: int, b: int) -> int:
    """Blocks of ``b`` needed to cover ``a`` items."""
    return -(-a // b)


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    dims = tuple(int(v) for v in dims) + (1,) * (3 - len(dims))
    if len(dims) != 3 or min(dims) < 1:
        raise LaunchLimitError(f"The {what} {tuple(value) if isinstance(value, (tuple, list)) else value} "
                               "has a dimension below 1.", f"every {what} dimension must be at least 1.")
    return dims  # type: ignore[return-value]


def check_launch(grid, block, dynamic_smem: int = 0, static_smem: int = 0, what: str = "this launch",
                 limits: DeviceLimits | None = None) -> None:
    """Refuse a grid, block or shared-memory request the device cannot run."""
    lim = limits or current()
    g, b = _dims(grid, "grid"), _dims(block, "block")
    threads = b[0] * b[1] * b[2]
    if threads > lim.max_threads_per_block:
        raise LaunchLimitError(f"{what} asks for a block of {b[0]}×{b[1]}×{b[2]} = {threads} threads; "
                               f"a block holds at most {lim.max_threads_per_block}.",
                               "choose parameters that give fewer threads per block.")
    for axis, size, cap in zip("xyz", b, lim.max_block):
        if size > cap:
            raise LaunchLimitError(f"{what} asks for a block {axis} dimension of {size}; the limit is {cap}.",
                                   f"keep the block's {axis} dimension at most {cap} (e.g. fewer images per block).")
    for axis, size, cap in zip("xyz", g, lim.max_grid):
        if size > cap:
            raise LaunchLimitError(f"{what} needs a grid {axis} dimension of {size}; the limit is {cap}.",
                                   "split the work into smaller launches (e.g. a smaller batch per call).")
    if static_smem > lim.static_smem_per_block:
        raise LaunchLimitError(f"{what} needs {static_smem} bytes of static shared memory; a block may have at most "
                               f"{lim.static_smem_per_block}.", "choose smaller tiles.")
    if static_smem + dynamic_smem > lim.smem_per_block_optin:
        raise LaunchLimitError(f"{what} needs {static_smem + dynamic_smem} bytes of shared memory per block; "
                               f"{lim.name} allows at most {lim.smem_per_block_optin} (opt-in).",
                               "choose smaller tiles or fewer images per block.")


def check_launch_bounds(threads: int, min_blocks: int, what: str = "this kernel",
                        limits: DeviceLimits | None = None) -> None:
    """``__launch_bounds__(threads, min_blocks)`` must describe blocks an SM can hold at once."""
    lim = limits or current()
    if threads * min_blocks > lim.max_threads_per_sm or min_blocks > lim.max_blocks_per_sm:
        raise LaunchLimitError(f"{what}: __launch_bounds__({threads}, {min_blocks}) asks for {threads * min_blocks} "
                               f"resident threads per SM; an SM holds at most {lim.max_threads_per_sm} threads and "
                               f"{lim.max_blocks_per_sm} blocks.",
                               f"lower min_blocks to at most {max(1, lim.max_threads_per_sm // threads)}.")


def require_compute_capability(major: int, minor: int, what: str, limits: DeviceLimits | None = None) -> None:
    lim = limits or current()
    if lim.compute_capability < (major, minor):
        have = ".".join(map(str, lim.compute_capability))
        raise LaunchLimitError(f"{what} needs compute capability {major}.{minor} or newer; {lim.name} has {have}.",
                               "choose a step without this instruction, or run on a newer GPU.")


def finite_number(name: str, value, low: float | None = None, high: float | None = None,
                  example: str | None = None) -> float:
    """A real, finite number (optionally within [low, high]); booleans and strings are refused."""
    fix = f"pass {name}={example}" if example else f"pass a finite number for {name}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(f"{name}={value!r} is not a number.", fix + ".")
    if not math.isfinite(value):
        raise ParameterError(f"{name}={value!r} is not finite.", fix + ".")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ParameterError(f"{name}={value!r} is outside {low}..{high}.", fix + ".")
    return value
