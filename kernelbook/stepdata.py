"""A step's recorded data with its study, and the lookup of a step's newest recording.

Below the presentation modules (report, plots, evidence, summary) and the chapter that calls them:
they read recorded steps from here, never from ``chapter``, so no import runs back up.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import session as session_mod
from .steps import Step
from .study import Study


@dataclass
class StepRecording(session_mod.RecordingView):
    """A step's recording with its study: the data every page, table and figure reads (the
    chapter's sections live above it, in ``chapter.Chapter``)."""

    study: Study
    step: Step
    recording: session_mod.Recording

    # ------------------------------------------------------------------ the recording

    @property
    def slug(self) -> str:
        return self.step.slug

    @property
    def variant(self) -> str:
        """Deprecated name of ``slug`` (kept one release)."""
        from .steps import renamed

        return renamed("chapter.variant", "chapter.slug", self.step.slug)

    @property
    def correct(self) -> bool:
        flags = [r["value"] for r in self.records if r["metric"] == "correct"]
        return bool(flags) and all(v == 1.0 for v in flags)

    def case_params(self) -> dict[str, dict]:
        """The parameters each case was timed with (chapter-wide under per-case ones)."""
        params = self.parameters.get("params") or {}
        per_case = self.parameters.get(self.study.case_params_name) or {}
        return {case: {**params, **(per_case.get(case) or {})} for case in self.study.cases}

    def frame(self):
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in self.records])


def load_recorded(study: Study, step: str, prefer_run: str | None = None) -> StepRecording | None:
    """A step's recording for comparisons: from ``prefer_run`` when it holds the step (so a batch
    compares like with like), else the newest run that does; None when none does."""
    entry = study.steps.get(step)
    recording = session_mod.replayed(study.part(entry.slug), study.name, prefer_run)
    if not recording.found:
        return None
    recording.session.reason = "recorded earlier, shown for comparison"
    return StepRecording(study, entry, recording)
