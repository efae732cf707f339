"""Is there a CUDA GPU here, and what is it? Asked once, answered without raising."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    """``(True, device name)`` when CuPy can use a GPU, else ``(False, why not)``.

    ``KERNELBOOK_NO_GPU=1`` forces the answer to no (tests of the replay path use it).
    The reason is plain words for a page ("no CUDA GPU on this machine"); the driver's own error
    text, which means little to a reader, is kept by ``diagnosis()`` for logs.
    """
    if os.environ.get("KERNELBOOK_NO_GPU") == "1":
        return False, "no CUDA GPU is used (KERNELBOOK_NO_GPU=1 is set)"
    try:
        import cupy as cp
    except Exception as exc:  # ImportError, or a broken CUDA library
        _DIAGNOSIS.append(f"CuPy cannot be imported: {type(exc).__name__}: {exc}")
        return False, "CuPy cannot be loaded on this machine"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, driver too old, no device
        _DIAGNOSIS.append(f"cudaGetDeviceCount failed: {type(exc).__name__}: {exc}")
        return False, "no CUDA GPU on this machine"
    if count < 1:
        return False, "no CUDA GPU on this machine"
    return True, device_info()["name"]


_DIAGNOSIS: list[str] = []


def diagnosis() -> str:
    """The raw reason (driver or import error) behind the last ``availability`` answer, for logs."""
    availability()
    return "; ".join(_DIAGNOSIS) or "none"


def available() -> bool:
    return availability()[0]


def require(what: str) -> None:
    """Refuse in plain words when no CUDA GPU can be used (never a raw driver error)."""
    ok, why = availability()
    if not ok:
        from .errors import GPUUnavailable

        raise GPUUnavailable(f"A CUDA GPU is needed for {what}, and there is none usable here ({why}).",
                             "run it on a machine with an NVIDIA GPU and CuPy; the book itself replays recorded "
                             "runs without one.")


_SM_COUNTS: dict[int, int] = {}


def multiprocessors() -> int:
    """The current device's SM count, asked of the driver once per device and process (a launcher
    that sizes a persistent grid calls this on every call)."""
    import cupy as cp

    device = cp.cuda.runtime.getDevice()
    count = _SM_COUNTS.get(device)
    if count is None:
        count = _SM_COUNTS[device] = int(cp.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])
    return count


def device_info() -> dict:
    """What the manifest records about the current device (call only when one is available)."""
    import cupy as cp

    device = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    driver = cp.cuda.runtime.driverGetVersion()
    runtime = cp.cuda.runtime.runtimeGetVersion()
    return {
        "name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "multiprocessors": int(props["multiProcessorCount"]),
        "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
        "l2_bytes": int(props.get("l2CacheSize", 0)),
        "shared_per_block_optin": int(props.get("sharedMemPerBlockOptin", 0)),
        "constant_bytes": int(props.get("totalConstMem", 0)),
        "clock_khz": int(props.get("clockRate", 0)),
        "cuda_driver": f"{driver // 1000}.{(driver % 1000) // 10}",
        "cuda_runtime": f"{runtime // 1000}.{(runtime % 1000) // 10}",
    }
