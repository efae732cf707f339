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
#: The phases, in the order the batch shows them ("other": the wall time no phase holds: starting
#: the kernel, imports, reading recordings, drawing figures).
NAMES = ("compile", "check", "time", "profile", "library", "ceilings", "other")

_TOTALS: dict[str, float] = {}
_STACK: list[list] = []   # [name, start, seconds spent in nested phases]


@contextmanager
def phase(name: str):
    if name not in NAMES or name == "other":
        raise ValueError(f"unknown phase {name!r}; one of {', '.join(NAMES[:-1])}")
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
        else:
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
