"""The book's recording of a study: the device it was made on, and the runs of that device that
the summary reads (a reader's run on another GPU stands beside them, never mixed in). Below both
``kernelbook.summary`` and ``kernelbook.verdict``, which read a study's recording through it."""

from __future__ import annotations

import contextlib

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


@contextlib.contextmanager
def _the_book(study):
    """Read as the book's pages read ``study``: from its whole recording on the chosen GPU
    (``book_run``), else from the newest run of the book's device holding each part
    (``session.pin_device``); yields the whole run, or None."""
    from . import session

    whole = book_run(study, _CHOSEN.get("device"))
    device = None if whole is not None else book_device(study)
    with session.pinned_to(whole.run_id if whole is not None else None):
        if device is not None:
            session.pin_device(device)
        yield whole


def load_recorded(study, step: str, prefer_run: str | None = None):
    """``stepdata.load_recorded`` as the book shows it (``_the_book``): a reader's run on another
    GPU stands beside the book's recording, never mixed into it."""
    with _the_book(study) as whole:
        return stepdata.load_recorded(study, step, prefer_run or (whole.run_id if whole is not None else None))


def book_vendor(study):
    """The library rows of the book's recording (``_the_book``)."""
    with _the_book(study) as whole:
        return vendor(study, "replay", prefer_run=whole.run_id if whole is not None else None)


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
