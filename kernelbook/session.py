"""Measure now on a GPU, or replay the recording: the one primitive every page uses.

``recorded(part, ...)`` is how a chapter, a parameter grid, the compiler report, Nsight Compute,
the device ceilings, a vendor library and the sanitizer all get their numbers. It returns one
shape, a ``Recording``: the records, the checks, the extra data, the parameters they were made
with and the ``Session`` that says *measured now* or *replayed*, with device, date, commit and
run. A replayed number is never presented as fresh, and a value the reader asked for that the
recording holds with another value is never dropped in silence: it is listed in ``mismatches``
and shown.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import gpu, provenance, results
from .errors import GPUUnavailable, ParameterError, ResultsError
from .escape import md_code, md_text, shown_value
from .params import shown

MODES = ("auto", "measure", "replay")
#: Where ``recorded`` appends what a batch must report (set per notebook by ``kernelbook run``).
NOTES_ENV = "KERNELBOOK_NOTES_FILE"
#: Inside a batch (``kernelbook run``), where a measuring page records: a private staging folder
#: laid out like the store, which the batch validates and copies into the store (the batch is the
#: store's one writer). Outside a batch, a page records into the store itself.
STAGING_ENV = "KERNELBOOK_STAGING_DIR"
NOT_RECORDED = "not recorded yet"


@dataclass
class Session:
    """``mode`` is ``measure`` or ``replay``; ``run`` is written (measure) or read (replay)."""

    part: str
    mode: str
    run: results.Run
    reason: str = ""

    @property
    def measuring(self) -> bool:
        return self.mode == "measure"

    @property
    def date(self) -> str:
        return self.run.created_utc.replace("T", " ").replace("Z", " UTC")

    @property
    def provenance(self) -> str:
        shown = f"{self.run.device}, {self.date}, commit {self.run.commit}, run {self.run.run_id}"
        candidate = self.run.manifest.get("candidate")   # a development candidate (kernelbook try)
        return shown + (f" (candidate {candidate.get('label')} for step {candidate.get('step')})"
                        if isinstance(candidate, dict) else "")

    @property
    def label(self) -> str:
        """One line: measured now, or replayed (and why)."""
        if self.measuring:
            return f"Measured now: {self.provenance}."
        return f"Replayed recording (not measured now; {self.reason}): {self.provenance}."

    @property
    def short_label(self) -> str:
        """A tag for captions and under plot titles."""
        kind = "measured now" if self.measuring else "replayed"
        return f"{kind}: {self.run.device}, {self.run.created_utc[:10]}, {self.run.commit}, run {self.run.run_id}"

    def _repr_markdown_(self) -> str:
        """The label with its first words in bold, said once ("**Replayed recording** (…): …")."""
        if self.measuring:
            return f"**Measured now:** {md_text(self.provenance + '.')}"
        return f"**Replayed recording** {md_text(f'(not measured now; {self.reason}): {self.provenance}.')}"


@dataclass
class Recording:
    """What ``recorded`` returns, measured or replayed (``session`` None: nothing recorded)."""

    part: str
    session: Session | None
    records: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    status: str = ""
    mismatches: list[tuple[str, object, object]] = field(default_factory=list)
    #: Nothing readable, but recorded: every copy of the part in the store is damaged.
    damaged: bool = False

    @property
    def found(self) -> bool:
        return self.session is not None

    @property
    def absence(self) -> str:
        """Why there is nothing to show, in a few words: damaged, or not recorded yet."""
        return ("damaged (every recording of it is damaged; `kernelbook results --check` says why)"
                if self.damaged else NOT_RECORDED)

    @property
    def measuring(self) -> bool:
        return self.session is not None and self.session.measuring

    @property
    def label(self) -> str:
        return self.session.label if self.session else (self.status or f"{self.part}: {NOT_RECORDED}.")

    @property
    def short_label(self) -> str:
        return self.session.short_label if self.session else ("damaged" if self.damaged else NOT_RECORDED)

    def warning(self) -> str:
        """Markdown that lists each requested value the page shows a recorded one instead of."""
        if not self.mismatches:
            return ""
        lines = [f"- {md_code(name)}: you asked for {md_code(shown(shown_value(want), 200))}; "
                 f"the recording shows {md_code(shown(shown_value(have), 200))}"
                 for name, want, have in self.mismatches]
        return ("**Warning: this page replays a recording made with other values than the ones you passed.**\n\n"
                + "\n".join(lines) + "\n\nMeasure on a CUDA GPU to see your values.")

    def _repr_markdown_(self) -> str:
        head = (self.session._repr_markdown_() if self.session else
                f"**{'Damaged' if self.damaged else 'Not recorded'}.** {md_text(self.label)}")
        warning = self.warning()
        return head + (f"\n\n{warning}" if warning else "")


def _shown(name: str, doc: str) -> property:
    """A read-only attribute of the view that is its recording's attribute ``name``."""
    return property(lambda self: getattr(self.recording, name), doc=doc)


class RecordingView:
    """What every page object built on a ``Recording`` shows (a chapter, a grid, the ceilings):
    its session, records and parameters, and the provenance labels."""

    recording: Recording

    session = _shown("session", "The session (measured now or replayed; None: nothing recorded).")
    records = _shown("records", "The recorded rows.")
    checks = _shown("checks", "The float64 checks' rows.")
    parameters = _shown("parameters", "The parameters the recording was made with.")
    extra = _shown("extra", "The recording's extra data.")
    label = _shown("label", "One line: measured now, or replayed (and why).")
    status = _shown("status", "Why it was replayed or not measured (empty when measured now).")
    short_label = _shown("short_label", "A tag for captions and under plot titles.")

    def _repr_markdown_(self) -> str:
        return self.recording._repr_markdown_()


@dataclass
class Measurement:
    """What a ``measure`` callable hands ``recorded``: records, and optionally checks and extra."""

    records: list[dict]
    checks: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def resolve_mode(mode: str) -> tuple[str, str]:
    """``auto`` becomes ``measure`` with a GPU and ``replay`` without; returns (mode, reason)."""
    mode = os.environ.get("KERNELBOOK_MODE", mode) if mode == "auto" else mode
    if mode not in MODES:
        raise ParameterError(f"mode={mode!r} is not one of {', '.join(MODES)}.",
                             "pass mode='auto', 'measure' or 'replay'.")
    ok, why = gpu.availability()
    if mode == "measure" and not ok:
        raise GPUUnavailable(f"mode='measure' needs a CUDA GPU, but {why}.",
                             "run on a machine with a GPU, or pass mode='replay' to show the newest recorded run.")
    if mode == "auto":
        return ("measure", why) if ok else ("replay", why)
    return mode, ("replay was asked for" if mode == "replay" else why)


def _normal(value):
    """Compare parameters as JSON would store them (tuples are lists, keys are strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def mismatches(requested: dict, recorded: dict) -> list[tuple[str, object, object]]:
    """(name, requested, recorded) for every requested parameter the recording holds with another
    value. (A parameter a recording predates cannot be compared; it is not reported.)"""
    found = []
    for name, want in requested.items():
        if name in recorded and _normal(want) != _normal(recorded[name]):
            found.append((name, want, recorded[name]))
    return found


def _note(part: str, found: list) -> None:
    """Tell the batch (``kernelbook run``) about shown-instead values, so its summary lists them."""
    target = os.environ.get(NOTES_ENV)
    if not target or not found:
        return
    line = json.dumps({"part": part, "mismatches": [[n, _normal(w), _normal(h)] for n, w, h in found]})
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def keep(part: str, study: str, got: Measurement, parameters: dict, run_id: str | None, device: dict) -> results.Run:
    """Record a measured part: into the run ``run_id`` (a new run when None) of the store, or,
    inside a batch, of the batch's staging folder (``KERNELBOOK_STAGING_DIR``)."""
    staging = os.environ.get(STAGING_ENV)
    fields = provenance.manifest_fields(device)  # each part keeps its own parameters
    if staging and run_id:
        try:  # the run exists in the store already (an earlier page of the batch): same manifest
            existing = results.load_run(run_id)
        except (ResultsError, OSError):
            existing = None
        if existing is not None:
            fields = {k: v for k, v in existing.manifest.items() if k not in ("schema", "run_id")}
    run = results.create_run(fields, run_id=run_id or None, root=Path(staging) if staging else None)
    run.write_part(part, study, got.records, got.checks, got.extra, parameters=parameters)
    return run


def _staged_run(part: str, run_id: str | None = None) -> results.Run | None:
    """The run of this batch's staging folder that holds ``part`` (what this page measured now)."""
    staging = os.environ.get(STAGING_ENV)
    if not staging or not Path(staging).is_dir():
        return None
    for folder in sorted(Path(staging).iterdir(), reverse=True):
        if (run_id and folder.name != run_id) or not results.RUN_ID_PATTERN.match(folder.name):
            continue
        try:
            run = results.load_run(folder.name, Path(staging))
        except ResultsError:
            continue
        if results.readable_part(run, part) is not None:
            return run
    return None


#: The one run a replaying page reads every part from (``pin``): set when the page shows the book's
#: recording of its study, so that no part is filled in from another run.
_PINNED: dict = {}


def pin(run_id: str | None, note: str = "") -> None:
    """Read every replayed part of this process from run ``run_id`` and from no other (None: back
    to the newest run holding each part); ``note`` is what the page's banner adds about it."""
    _PINNED.clear()
    if run_id is not None:
        _PINNED.update(run=results.validate_run_id(run_id), note=note)


def pin_device(device: str, note: str = "") -> None:
    """Read every replayed part of this process from the newest run made on a GPU whose name holds
    ``device`` (the page's own run first, when it is one of them): no GPU's part stands in for
    another's."""
    _PINNED.clear()
    _PINNED.update(device=device.strip().lower(), note=note)


def shown_here(run: results.Run) -> bool:
    """Whether this page may read ``run`` (``pin``: that run alone; ``pin_device``: that GPU's runs)
    when it merges several runs' results itself (the sanitizer's table)."""
    if _PINNED.get("run"):
        return run.run_id == _PINNED["run"]
    if _PINNED.get("device"):
        return _PINNED["device"] in run.device.lower()
    return True


def pinned() -> tuple[str | None, str]:
    """The run ``pin`` set (None when none, or a GPU is pinned) and the banner's note."""
    return _PINNED.get("run"), _PINNED.get("note", "")


class pinned_to:
    """``with pinned_to(run_id): ...``: ``pin`` for a block, then back to what was pinned before."""

    def __init__(self, run_id: str | None, note: str = ""):
        self.run_id, self.note = run_id, note

    def __enter__(self):
        self.before = dict(_PINNED)
        pin(self.run_id, self.note)
        return self

    def __exit__(self, *exc):
        _PINNED.clear()
        _PINNED.update(self.before)
        return False


def _replay_run(part: str, replay_run: str | None, prefer_run: str | None) -> results.Run | None:
    # What this page measured a moment ago (staged, not yet in the store) is the newest recording.
    staged = _staged_run(part, replay_run or prefer_run)
    if staged is not None:
        return staged
    if not replay_run and _PINNED.get("run"):   # the book's recording: this run's part, or none
        run = results.run_with(part, _PINNED["run"])
        return run if run is not None and run.run_id == _PINNED["run"] else None
    if not replay_run and _PINNED.get("device"):   # that GPU's newest run holding the part
        runs = [run for run in results.runs_with(part) if _PINNED["device"] in run.device.lower()]
        preferred = [run for run in runs if run.run_id == prefer_run]
        return (preferred or runs or [None])[-1]
    if replay_run:
        run = results.load_run(replay_run)  # a malformed run is an error here, never "not recorded"
        if run.has_part(part):
            return run
        others = [r.run_id for r in results.runs_with(part)]
        raise ResultsError(
            f"Run {replay_run} holds no measurements for {part!r}"
            + (f"; these runs do: {', '.join(others)}." if others else "; no recorded run does."),
            (f"pass replay_run={others[-1]!r}, or leave replay_run empty for the newest." if others
             else "record it on a CUDA machine (`kernelbook run --mode measure`)."),
        )
    found = results.run_with(part, prefer_run)
    if found is not None and prefer_run and found.run_id == prefer_run:
        return found
    return _staged_run(part) or found


def _takes_progress(measure: Callable) -> bool:
    """Whether ``measure`` accepts a ``progress`` writer (one positional parameter)."""
    import inspect

    try:
        return len(inspect.signature(measure).parameters) == 1
    except (TypeError, ValueError):
        return False


def recorded(part: str, study: str, measure: Callable[..., Measurement], *, parameters: dict,
             mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
             prefer_run: str | None = None, available: Callable[[], tuple[bool, str]] | None = None,
             required: bool = True, compare: dict | None = None) -> Recording:
    """Measure ``part`` now (and write it into the run) or replay its recording.

    - ``mode``: ``auto`` measures where a CUDA GPU is usable, ``measure`` insists, ``replay`` never
      measures. ``available`` (optional) says whether the tool this part needs is here (Nsight
      Compute, PyTorch); when it is not, the part is replayed and ``status`` says why.
    - ``run_id`` joins a batch's run when measuring; ``replay_run`` picks the run to replay (an
      error, naming the runs that hold ``part``, if it does not); otherwise ``prefer_run`` (the
      page's own run) when it holds the part, else the newest run that does.
    - ``compare``: the parameters the reader asked for (default ``parameters``); those that differ
      from the recording's are listed in ``mismatches`` and reported to the batch.
    - ``required``: with nothing recorded, raise (a chapter) or return an empty Recording with a
      status (evidence that is shown when present).
    - ``measure`` may take one argument, ``progress(records, checks, extra)``: it writes the part
      as measured so far (a long measurement that is killed keeps what finished).
    """
    mode, reason = resolve_mode(mode)
    status = ""
    if mode == "measure" and available is not None:
        ok, why = available()
        if not ok:
            mode, reason, status = "replay", why, f"Not measured now: {why}."
    if mode == "measure":
        # A run holds many parts, each with its own parameters in its own file; the manifest says
        # where the run was made, not which notebook happened to create it.
        if _takes_progress(measure):
            progress_run: list = []

            def progress(records: list[dict], checks: list[dict] | None = None, extra: dict | None = None):
                """Write what is measured so far (a long measurement killed later keeps it)."""
                so_far = Measurement(records, checks or [], extra or {})
                progress_run[:] = [keep(part, study, so_far, parameters,
                                        progress_run[0].run_id if progress_run else run_id, gpu.device_info())]
                return progress_run[0]

            got = measure(progress)
            run_id = progress_run[0].run_id if progress_run else run_id
        else:
            got = measure()
        run = keep(part, study, got, parameters, run_id, gpu.device_info())
        return Recording(part, Session(part, "measure", run, reason), got.records, got.checks, got.extra,
                         parameters, status or "Measured now.")
    run = _replay_run(part, replay_run, prefer_run)
    if run is None:
        damaged = results.damaged_copies(part)
        if _PINNED.get("run") and not replay_run:   # only the shown run's copy matters here
            damaged = [d for d in damaged if _PINNED["run"] in str(d)]
        if damaged:  # recorded, but no copy can be read: say so, never "not recorded yet"
            message = (f"Every recording of {part!r} is damaged ({len(damaged)} cop{'y' if len(damaged) == 1 else 'ies'}); "
                       f"the newest: {damaged[-1]}")
            fix = ("restore the file named above (`git checkout -- data/results`), or measure again on a CUDA GPU; "
                   "`kernelbook results --check` lists every problem.")
        else:
            message = (f"Run {_PINNED['run']}, the recording this page shows, holds no {part!r}."
                       if _PINNED.get("run") and not replay_run else
                       f"No run of a GPU named {_PINNED['device']!r} holds {part!r} ({NOT_RECORDED} on it)."
                       if _PINNED.get("device") and not replay_run else
                       f"No recorded run holds {part!r} ({NOT_RECORDED}).")
            fix = ("record one on a CUDA machine (`kernelbook run --mode measure`, or "
                   "scripts/device_run.sh on the device) and commit data/results/.")
        if required:
            raise ResultsError(message, fix)
        return Recording(part, None, status=f"{status} {message}".strip(), damaged=bool(damaged))
    stored = run.read_part(part)
    found = mismatches(parameters if compare is None else compare, stored.get("parameters") or {})
    _note(part, found)
    shown = f"Replayed from run {run.run_id} ({run.device}, {run.created_utc[:10]})."
    return Recording(part, Session(part, "replay", run, reason), stored["records"], stored.get("checks") or [],
                     stored.get("extra") or {}, stored.get("parameters") or {}, f"{status} {shown}".strip(), found)


def replayed(part: str, study: str, prefer_run: str | None = None) -> Recording:
    """A part's recording, never measured: from ``prefer_run`` when it holds the part, else the
    newest run that does (an empty Recording when none does). For pages that show what other
    steps or tools recorded beside their own."""
    def never() -> Measurement:
        raise AssertionError(f"a replay-only lookup of {part} tried to measure")

    return recorded(part, study, never, parameters={}, mode="replay", prefer_run=prefer_run, required=False)

