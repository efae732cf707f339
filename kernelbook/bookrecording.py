"""The book's recording of a study on a GPU: the one run a page reads every number from.

``book_run(study, device)`` is, of the runs made on that GPU that hold every step of the study, the
fullest of the newest commit (``book_runs``: one per GPU recorded);
``replay_target`` is what a page's entry call (``run_chapter``, ``run_sweep``, ``open_page``) asks
before it replays: which run, pinned (``session.pin``) so that no part is filled in from another
run. Below the evidence modules and the pages: it reads the store and the session only.
"""

from __future__ import annotations

from . import results
from .errors import ParameterError

#: The GPU whose recording a page shows when it is not told otherwise (a page's ``device=``).
DEFAULT_DEVICE = "H200"


def _on(run: results.Run, device: str) -> bool:
    return _on_name(run.device, device)


def _on_name(name: str, device: str) -> bool:
    return device.strip().lower() in name.lower()


def complete(study, run: results.Run) -> bool:
    """Whether ``run`` holds every step of ``study`` (a recording of the whole study)."""
    return all(run.has_part(study.part(slug)) for slug in study.steps.slugs())


def _evidence(study, run: results.Run) -> int:
    """How many of ``study``'s parts ``run`` holds (steps, profiles, sanitizer rows, libraries)."""
    return sum(1 for name in run.part_names() if name.startswith(f"{study.name}-"))


def fullest_of_newest_commit(runs: list, weight):
    """Of ``runs`` (oldest first), those of the newest one's commit, and of them the one with the
    largest ``weight(run)`` (the newest among equals): how the book picks its recording among runs
    that each would do. None for no runs."""
    if not runs:
        return None
    newest = [run for run in runs if run.commit == runs[-1].commit]
    return max(reversed(newest), key=weight)


def book_run(study, device: str | None = None) -> results.Run | None:
    """The book's recording of ``study`` on ``device`` (part of the GPU's name, e.g. "H200"; None:
    ``DEFAULT_DEVICE``): a run made on that GPU that holds every step of the study, so that a page
    reads every number from one run — of the newest commit so recorded, and of its runs the one
    holding the most of the study's evidence (a run with Nsight Compute profiles before one of
    the same code without). None when no run is whole (a page then reads each part from the
    newest run that holds it, and says so)."""
    want = device or DEFAULT_DEVICE
    whole = [run for run in results.runs_with(study.part(study.steps.steps[-1].slug))
             if _on(run, want) and complete(study, run)]
    return fullest_of_newest_commit(whole, lambda run: _evidence(study, run))


def book_runs(study) -> dict:
    """``{GPU name: its book run of study}`` for every GPU some run of the study was made on and
    one run of it holds every step (what the devices tables and the device limits read)."""
    found = {name: book_run(study, name) for name in recorded_devices(study)}
    return {name: run for name, run in found.items() if run is not None}


def recorded_devices(study) -> list[str]:
    """The GPUs some run of ``study``'s steps was made on, oldest first."""
    import warnings

    parts = [study.part(slug) for slug in study.steps.slugs()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", results.StoreWarning)   # runs_with warns of a damaged run
        runs = results.list_runs()
    return list(dict.fromkeys(run.device for run in runs
                              if not results.is_candidate(run) and any(run.has_part(p) for p in parts)))


def book_device(study) -> str | None:
    """The GPU the book's recording of ``study`` was made on: that of ``book_run`` when the study
    has a whole recording, else that of the newest run holding its last step. A reader's run on
    another GPU (an older one, which cannot run the Hopper steps) stands beside it in the devices
    table, never mixed into its rows."""
    found = book_run(study, _CHOSEN.get("device"))
    if found is not None:
        return found.device
    runs = results.runs_with(study.part(study.steps.steps[-1].slug))
    want = [run for run in runs if _on(run, _CHOSEN.get("device") or DEFAULT_DEVICE)]
    return (want or runs)[-1].device if runs else None


#: The GPU a page that spans studies (the summary) was asked to show (``choose``).
_CHOSEN: dict = {}


def choose(device: str | None, studies=()) -> None:
    """Show the book's recordings on ``device`` on a page that spans ``studies`` (None: the
    default GPU); an error when none of them has a whole recording made on that GPU."""
    _CHOSEN.clear()
    if device is None:
        return
    device = _device_name(device)
    if studies and all(book_run(study, device) is None for study in studies):
        recorded = sorted({d for study in studies for d in recorded_devices(study)})
        raise ParameterError(f"No study has a whole recording made on a GPU named {device!r}"
                             + (f"; they were recorded on: {', '.join(recorded)}." if recorded else "."),
                             "pass device= one of those (part of its name, e.g. 'H100'), or device=None.")
    _CHOSEN["device"] = device


def _device_name(device) -> str:
    if not isinstance(device, str) or not device.strip():
        raise ParameterError(f"device={device!r} must name a GPU, e.g. 'H100' or 'H200'.",
                             "pass device='H200' (part of the GPU's name), or device=None for the book's default.")
    return device.strip()


def replay_target(study, mode: str, replay_run: str | None, device: str | None) -> tuple[str, str | None]:
    """The mode and run a page of ``study`` uses, and the pin that keeps it to one run.

    ``device`` (part of a GPU's name) asks for the book's recording made on that GPU: the page
    replays it even where a GPU could measure. Replaying without ``replay_run``, a page shows the
    book's recording of its study (``book_run``) and reads every part from it alone; a run given
    by ``replay_run`` is read alone too when it is a whole recording of the study."""
    from . import session

    if device is not None:
        device = _device_name(device)
        if mode == "measure":
            raise ParameterError(f"device={device!r} picks a recording to replay, but mode='measure' measures "
                                 "this machine's GPU.", "leave device=None to measure here, or pass mode='replay'.")
        if replay_run is not None:
            raise ParameterError(f"device={device!r} and replay_run={replay_run!r} both pick a recording.",
                                 "pass one of them.")
        mode = "replay"
    if session.resolve_mode(mode)[0] != "replay":
        session.pin(None)
        return mode, replay_run
    if replay_run is not None:
        run = results.load_run(results.validate_run_id(replay_run))
        if complete(study, run):
            session.pin(run.run_id, f"A whole recording of this study on the {run.device}, chosen by `replay_run`.")
        return mode, replay_run
    run = book_run(study, device)
    want = device or DEFAULT_DEVICE
    if run is None:   # no whole recording on that GPU: each part from its newest run there
        on_it = [d for d in recorded_devices(study) if _on_name(d, want)]
        if device is not None and not on_it:
            recorded = recorded_devices(study)
            raise ParameterError(f"No run of the {study.title} was made on a GPU named {device!r}"
                                 + (f" (it was recorded on: {', '.join(recorded)})." if recorded else "."),
                                 "pass device= one of those (part of its name, e.g. 'H100'), or device=None.")
        if on_it:
            session.pin_device(want, f"No run of the {on_it[-1]} holds every step of this study yet: each "
                                     "part of this page comes from the newest run of that GPU holding it.")
        else:
            session.pin(None)
        return mode, None
    others = [d for d in recorded_devices(study) if not _on(run, d) and book_run(study, d) is not None]
    note = (f"The book's recording of this study on the {run.device}"
            + (f"; pass `device=` with {' or '.join(repr(o) for o in others)} for the other GPU's." if others else "."))
    session.pin(run.run_id, note)
    return mode, run.run_id
