"""The book's recording of a study: the device it was made on, and the runs of that device that
the summary reads (a reader's run on another GPU stands beside them, never mixed in). Below both
``kernelbook.summary`` and ``kernelbook.verdict``, which read a study's recording through it."""

from __future__ import annotations

from . import results, stepdata
from .bookrecording import (  # noqa: F401
    _CHOSEN,
    DEFAULT_DEVICE,
    book_device,
    book_run,
    choose,
    complete,
    recorded_devices,
    replay_target,
)
from .evidence.vendor import vendor


def load_recorded(study, step: str, prefer_run: str | None = None):
    """``stepdata.load_recorded`` from the book's recording of ``study`` (``book_run`` on the chosen
    GPU) when there is one, read from it alone; else from the book's device only (``book_device``):
    the newest run of that device holding the step when the newest of all was made on another GPU."""
    from . import session

    whole = book_run(study, _CHOSEN.get("device"))
    if whole is not None and prefer_run is None:
        with session.pinned_to(whole.run_id):
            return stepdata.load_recorded(study, step, whole.run_id)
    found = stepdata.load_recorded(study, step, prefer_run)
    device = book_device(study)
    if found is None or device is None or found.session.run.device == device:
        return found
    for run in reversed(results.runs_with(study.part(step))):
        if run.device == device:
            return stepdata.load_recorded(study, step, prefer_run=run.run_id)
    return None


def book_vendor(study):
    """The library rows of the book's recording (``book_run``), or recorded on the book's device."""
    from . import session
    from .evidence.vendor import part

    whole = book_run(study, _CHOSEN.get("device"))
    if whole is not None:
        with session.pinned_to(whole.run_id):
            return vendor(study, "replay", prefer_run=whole.run_id)
    found = vendor(study, "replay")
    device = book_device(study)
    if not found.found or device is None or found.session.run.device == device:
        return found
    runs = [run for run in results.runs_with(part(study)) if run.device == device]
    if not runs:
        from .session import Recording

        return Recording(part(study), None)
    return vendor(study, "replay", prefer_run=runs[-1].run_id)


def vendor_of_run(study, run_id: str | None, fallback):
    """The library rows run ``run_id`` timed itself, when it holds them (so that a step of that
    run is compared with the library in one run); else ``fallback``."""
    from . import session
    from .evidence.vendor import part

    if run_id is None or not results.RUN_ID_PATTERN.match(run_id):
        return fallback
    try:
        run = results.load_run(run_id)
    except results.ResultsError:
        return fallback
    if not run.has_part(part(study)):
        return fallback
    with session.pinned_to(run_id):
        own = vendor(study, "replay", prefer_run=run_id)
    return own if own.found and own.session.run.run_id == run_id else fallback


def headline_size(study, case: str, chapters: dict) -> int | None:
    """The size a case is judged at: its largest recorded size (LeNet: 10,000 images)."""
    sizes = {r["size"] for ch in chapters.values() if ch is not None
             for r in ch.records if r["metric"] == study.time_metric and r["layer"] == case}
    return max(sizes) if sizes else None
