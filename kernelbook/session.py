"""A notebook's session: measure now on a GPU, or replay the newest recorded run.

Every table and figure carries ``session.label``, so a replayed number always says where and
when it was measured, and is never presented as fresh.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import gpu, provenance, results
from .errors import GPUUnavailable, ShapeError

MODES = ("auto", "measure", "replay")


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
    def provenance(self) -> str:
        date = self.run.created_utc.replace("T", " ").replace("Z", " UTC")
        return f"{self.run.device}, {date}, commit {self.run.commit}, run {self.run.run_id}"

    @property
    def label(self) -> str:
        """One line for captions: measured now, or replayed (and why)."""
        if self.measuring:
            return f"Measured now: {self.provenance}."
        return f"Replayed recording (not measured now; {self.reason}): {self.provenance}."

    @property
    def short_label(self) -> str:
        """Fits under a plot title."""
        kind = "measured now" if self.measuring else "REPLAYED"
        date = self.run.created_utc[:10]
        return f"{kind}: {self.run.device}, {date}, {self.run.commit}"

    def _repr_markdown_(self) -> str:
        icon = "Measured" if self.measuring else "Replayed"
        return f"**{icon}.** {self.label}"


def resolve_mode(mode: str) -> tuple[str, str]:
    """``auto`` becomes ``measure`` with a GPU and ``replay`` without; returns (mode, reason)."""
    mode = os.environ.get("KERNELBOOK_MODE", mode) if mode == "auto" else mode
    if mode not in MODES:
        raise ShapeError(f"mode={mode!r} is not one of {', '.join(MODES)}.", "pass mode='auto', 'measure' or 'replay'.")
    ok, why = gpu.availability()
    if mode == "measure" and not ok:
        raise GPUUnavailable(
            f"mode='measure' needs a CUDA GPU, but {why}.",
            "run on a machine with a GPU, or pass mode='replay' to show the newest recorded run.",
        )
    if mode == "auto":
        return ("measure", why) if ok else ("replay", why)
    return mode, ("replay was asked for" if mode == "replay" else why)


def start(part: str, mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
          parameters: dict | None = None) -> Session:
    """Open the session of one notebook (``part`` names what it records, e.g. ``lenet-baseline``).

    ``run_id`` joins a batch's shared run when measuring; ``replay_run`` picks a recorded run
    instead of the newest one that holds ``part``.
    """
    mode, reason = resolve_mode(mode)
    if mode == "measure":
        run = results.create_run(
            provenance.manifest_fields(gpu.device_info(), parameters), run_id=run_id or None
        )
        return Session(part, "measure", run, reason)
    if replay_run:
        run = results.load_run(replay_run)
        if not run.has_part(part):
            from .errors import ResultsError

            raise ResultsError(
                f"Run {replay_run} holds no measurements for {part!r} (it has: {', '.join(run.part_names()) or 'none'}).",
                "pass another replay_run, or leave it empty to use the newest run that has them.",
            )
    else:
        run = results.newest_run_with(part)
    return Session(part, "replay", run, reason)
