"""Where a page's time goes: compiling, checking against float64, timing, profiling, the library.

``with phase("compile"): ...`` adds the block's wall time to the named phase of this process, less
the time of the phases nested in it (a check that compiles counts its compile under "compile"), so
the phases of a page add up to no more than its wall time. Inside a batch, ``kernelbook run`` names
a file per notebook (``PHASES_ENV``): the totals are written there whenever the outermost phase
ends, so a notebook that later fails or is killed still says where its time went, and the batch
shows them per notebook and summed (``batch.json``, the batch log).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

#: The file a batch notebook's kernel writes its phase totals to (set per notebook by the batch).
PHASES_ENV = "KERNELBOOK_PHASES_FILE"
#: The file lock that notebooks sharing a GPU take turns on (set per notebook by the batch).
GPU_LOCK_ENV = "KERNELBOOK_GPU_LOCK"
#: The phases, in the order the batch shows them ("wait": for the GPU, held by another notebook;
#: "other": the wall time no phase holds: starting the kernel, imports, reading recordings,
#: drawing figures).
NAMES = ("compile", "check", "time", "profile", "library", "ceilings", "wait", "other")
#: The phases that run work on the GPU. Where the batch runs two notebooks on one GPU, one holds
#: the GPU for these while the other compiles, starts or draws: no timing shares the GPU with
#: another notebook's kernels. A compile inside one of them gives the GPU back while nvcc runs.
GPU_PHASES = frozenset({"check", "time", "profile", "library", "ceilings"})

_TOTALS: dict[str, float] = {}
_STACK: list[list] = []   # [name, start, seconds spent in nested phases]
_LOCK: dict = {"file": None, "held": False}


def gpu_lock_path(gpu_id: str) -> Path:
    """The lock file of one GPU on this machine (its UUID or index in the name)."""
    import tempfile

    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(gpu_id))
    return Path(tempfile.gettempdir()) / f"kernelbook-gpu-{safe}.lock"


def _acquire() -> float:
    """Take this GPU's lock (where the batch set one); the seconds spent waiting for it."""
    target = os.environ.get(GPU_LOCK_ENV)
    if not target or _LOCK["held"]:
        return 0.0
    import fcntl

    if _LOCK["file"] is None:
        _LOCK["file"] = open(target, "a+b")  # noqa: SIM115 - held open for the process's life
    started = time.perf_counter()
    fcntl.flock(_LOCK["file"].fileno(), fcntl.LOCK_EX)
    _LOCK["held"] = True
    return time.perf_counter() - started


def _release() -> None:
    if _LOCK["held"]:
        import fcntl

        fcntl.flock(_LOCK["file"].fileno(), fcntl.LOCK_UN)
        _LOCK["held"] = False


def _waited(seconds: float) -> None:
    if seconds > 0.0:
        _TOTALS["wait"] = _TOTALS.get("wait", 0.0) + seconds
        if _STACK:   # the enclosing phase did not spend it
            _STACK[-1][2] += seconds


@contextmanager
def phase(name: str):
    if name not in NAMES or name in ("other", "wait"):
        raise ValueError(f"unknown phase {name!r}; one of {', '.join(n for n in NAMES if n not in ('wait', 'other'))}")
    took = name in GPU_PHASES and not _LOCK["held"]
    if took:
        _waited(_acquire())
    gave = name == "compile" and _LOCK["held"]
    if gave:
        _release()
    frame = [name, time.perf_counter(), 0.0]
    _STACK.append(frame)
    try:
        yield
    finally:
        _STACK.pop()
        spent = time.perf_counter() - frame[1]
        _TOTALS[name] = _TOTALS.get(name, 0.0) + spent - frame[2]
        if _STACK:
            _STACK[-1][2] += spent
        if gave:
            _waited(_acquire())
        if took:
            _release()
        if not _STACK:
            _write()


def totals() -> dict[str, float]:
    """Seconds per phase so far in this process (only the phases that ran)."""
    return {name: round(_TOTALS[name], 3) for name in NAMES if name in _TOTALS}


def reset() -> None:
    _TOTALS.clear()


def _write() -> None:
    target = os.environ.get(PHASES_ENV)
    if not target:
        return
    path = Path(target)
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(json.dumps(totals()), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:   # where the time went is a report, never a reason for a page to fail
        pass


def read(path: Path) -> dict[str, float]:
    """The totals a notebook's kernel wrote to ``path`` ({} when it wrote none or the file is bad)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if k in NAMES and isinstance(v, (int, float))}


def with_other(found: dict[str, float], wall: float | None) -> dict[str, float]:
    """``found`` plus "other": the wall time no phase holds (never below 0)."""
    if wall is None:
        return dict(found)
    return {**found, "other": round(max(0.0, wall - sum(found.values())), 2)}


def line(found: dict[str, float]) -> str:
    """"compile 12.0 s, check 3.1 s, ..." in the phases' order, leaving out those under 0.05 s."""
    return ", ".join(f"{name} {found[name]:.1f} s" for name in NAMES if found.get(name, 0.0) >= 0.05)


def timed(name: str):
    """A decorator: every call of the function is a ``phase(name)``."""
    import functools

    def wrap(function):
        @functools.wraps(function)
        def inner(*args, **kwargs):
            with phase(name):
                return function(*args, **kwargs)
        return inner
    return wrap
