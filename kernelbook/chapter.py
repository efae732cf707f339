"""One chapter of any study: check a step, time it (or replay it), and show it section by section.

A notebook holds its parameters cell, its narrative and one call per section::

    chapter = run_chapter(STUDY, step, params=params, batch_sizes=batch_sizes, mode=mode, ...)
    chapter.banner()        # measured or replayed: device, date, commit, run; warnings
    chapter.source()        # the .cu file
    chapter.compiler()      # ptxas resources and SASS mix
    chapter.correctness()   # float64 checks
    chapter.milestone()     # the study's milestone table
    chapter.reported()      # what the write-ups report
    chapter.deltas()        # against the baseline and the previous step (table and figure)
    chapter.profiler()      # Nsight Compute
    chapter.verdict()       # sentences computed from the records

so that changing a section is one edit here, not one per notebook. The previous step is the
study's step list's (``StepList.previous``), never typed in a notebook.
"""

from __future__ import annotations

import re

from . import limits, stepdata
from . import params as P
from . import session as session_mod
from .candidate import FILES_DIR
from .errors import MissingValue
from .escape import shown_value
from .measure import check_repeats
from .stepdata import StepRecording
from .study import Study


class Chapter(StepRecording):
    """A step's recording with its study, and a section per call: what every notebook runs."""

    def _not_recorded(self, caption: str):
        from .report import message_table

        return message_table(f"{self.step.slug}: {self.recording.absence}.", caption)

    def banner(self):
        from .report import banner

        return banner(self.recording)

    def source(self, start: str | None = None):
        """The step's ``.cu``; a candidate's run (``kernelbook try``) shows the file it ran, kept in the run."""
        from .report import show_source

        candidate = self.session.run.manifest.get("candidate") if self.session else None
        if isinstance(candidate, dict) and candidate.get("source"):
            return show_source(candidate["source"], start, folder=self.session.run.root / FILES_DIR)
        return show_source(self.step.source, start)

    def compiler(self):
        """The ptxas/SASS table and, where Nsight Compute counted other register numbers for the
        same kernels, a note saying which build each number belongs to."""
        from IPython.display import Markdown, display

        from .evidence import compiler

        if self.session is None:
            return self._not_recorded("The compiler's report of the timed build")
        found = compiler.for_chapter(self)
        notes = self.register_notes(found)
        if notes:
            display(compiler.table(found, self))
            return Markdown("\n".join(f"- {n}" for n in notes))
        return compiler.table(found, self)

    def register_notes(self, compiled) -> list[str]:
        """Sentences for each kernel whose ptxas register count differs from Nsight Compute's, and why:
        the compiler table builds each case with nvcc for the problem ``compiler.compiled_problem``
        names (the case's own size, or one item), the timed and profiled kernels are built at run time
        by NVRTC for the size launched."""
        from .evidence import compiler as compiler_mod
        from .evidence.ncu import load_ncu

        profiled = load_ncu(self.study, self.slug, prefer_run=self.session.run.run_id)
        if not (compiled.found and profiled.found):
            return []
        shown = compiler_mod.launched(self, compiled.records)   # not the rows of a stale build
        ptxas = {(r.get("kernel"), r["layer"]): r["value"] for r in shown if r["metric"] == "registers"}
        impl = self.study.impl(self.slug)
        size = profiled.extra.get("size") or profiled.extra.get("batch") or self.study.profile_size  # (runs before "size")
        notes = []
        for k in profiled.extra.get("kernels") or []:
            case = k.get("layer")
            a, b = ptxas.get((k.get("kernel"), case)), k.get("registers_per_thread")
            if a is None or b is None or a == b or case not in self.study.cases:
                continue
            params = impl.params(**self.case_params().get(case, {}))
            # a study whose rows are cases profiles each case at its own size, not the run's one size
            profiled_size = self.study.size_of(case, size) if self.study.rows == "cases" else size
            try:
                built = compiler_mod.compiled_problem(self.study, case)
                one = impl.defines(params, built)
                launched = impl.defines(params, self.study.problem(case, profiled_size))
            except Exception:  # a step whose defines cannot be derived here: say only what is known
                one = launched = None
            if one is not None and one != launched:
                changed = sorted(k2 for k2 in set(one) | set(launched) if one.get(k2) != launched.get(k2))
                built_for = self.study.size_of(case, 1)
                what = "one item" if built_for == 1 else f"size {built_for:,}"
                why = (f"the build depends on the size: the compiler table's build ({what}) and the profiled "
                       f"launch's (size {profiled_size:,}) differ in {', '.join(f'`{c}`' for c in changed)}, so they are two "
                       "builds of one kernel")
            else:
                why = ("the parameters and defines are the same, but the compiler table's build comes from the "
                       "nvcc installed where the table was made, the profiled one from NVRTC at run time (the "
                       "CUDA runtime the run's device table names), and two compilers, or two versions of one, "
                       "may allocate registers differently")
            notes.append(((k.get("kernel"), a, b, why), case))
        grouped: dict = {}
        for key, case in notes:  # one sentence per kernel and pair of counts, naming every case it holds for
            if case not in grouped.setdefault(key, []):   # a case profiled in several launches: named once
                grouped[key].append(case)
        return [f"**Registers of `{kernel}` ({', '.join(cases)}): ptxas {a:.0f}, Nsight Compute {b:.0f}.** "
                f"Both count registers per thread of one build; here {why}. What the profiler tables show "
                f"(occupancy included) follows from Nsight Compute's {b:.0f}."
                for (kernel, a, b, why), cases in grouped.items()]

    def correctness(self):
        from .report import check_table

        if self.session is None:
            return self._not_recorded("Checks against float64")
        return check_table(self)

    def milestone(self):
        from .report import milestone_table

        if self.session is None:
            return self._not_recorded("Measurements")
        return milestone_table(self)

    def reported(self):
        from .report import message_table

        table = self.study.reported(self.slug)
        return table if table is not None else message_table(
            f"No write-up reports the {self.slug} step.", "Reported by the write-ups")

    def comparison(self) -> dict[str, "Chapter"]:
        """{'baseline: …': …, 'previous step: …': …, 'this step: …': self}, what is recorded."""
        steps: dict[str, Chapter] = {}
        run_id = self.session.run.run_id
        previous = self.study.steps.previous(self.slug)
        for role, step in (("baseline", self.study.steps.baseline), ("previous step", previous)):
            if step is None or step.slug == self.slug or step.slug in [c.slug for c in steps.values()]:
                continue
            found = load_recorded(self.study, step.slug, prefer_run=run_id)
            if found is not None:
                steps[f"{role}: {step.slug}"] = found
        steps[f"this step: {self.slug}"] = self
        return steps

    def deltas(self):
        from IPython.display import display

        from . import plots
        from .report import delta_table

        if self.session is None:
            display(self._not_recorded("Against the baseline and the previous step"))
            return None
        steps = self.comparison()
        display(delta_table(steps))
        return plots.step_deltas(steps)

    def profiler(self, profile: bool = True):
        from .evidence import ncu

        if self.session is None:
            return self._not_recorded("Nsight Compute")
        return ncu.show_chapter(self, profile=profile)

    def tried(self, run_ids: list[str]):
        """The step's development candidates from promoted runs (``kernelbook.tried``): one row per
        configuration of each run, after the page's own run; never divided by a time of another run."""
        from .tried import table

        return table(self.study, self.slug, list(run_ids), book_run=self.session.run.run_id if self.session else None)

    def verdict_lines(self, metric: str | None = None) -> list[str]:
        from .report import step_verdict

        if self.session is None:
            return [f"{self.step.slug}: {self.recording.absence}; the verdict comes from its first readable recorded run."]
        return (step_verdict(self.comparison(), metric=metric or self.study.time_metric)
                + self.study.expectations(self))

    def verdict(self, metric: str | None = None):
        """Sentences computed from the records: against the baseline and the previous step, and the
        study's own judgements (scaling with size, the write-ups' numbers)."""
        from IPython.display import Markdown

        from .escape import md_safe

        return Markdown("\n".join(f"- {md_safe(whole_sentence(line))}" for line in self.verdict_lines(metric)))


#: What a value missing from a computed sentence leaves behind once formatted: Python's None, nan
#: or inf, the table's placeholder for "no value" (``format_ms(None)`` is "–") standing alone, a
#: blank before punctuation ("images , C1"), or empty brackets.
_BLANK = re.compile(r"\b(?:None|nan|inf)\b|(?:^|(?<=[\s(:]))–(?=\s*(?:[,.;:)]|$))|\s[,.;:](?=\s|$)|\(\s*\)")


def whole_sentence(line: str) -> str:
    """``line`` itself, or an error when a value is missing from it: a page never prints a sentence
    with a hole where a number belongs (the notebook fails, and so does the strict build)."""
    found = _BLANK.search(line)
    if found is not None:
        raise MissingValue(f"A computed sentence lacks a value (at {found.group(0).strip()!r}): {line!r}.",
                           "record the value it reads (re-run the step, or the run the sentence names), or "
                           "make the code that writes the sentence say plainly that the value is not recorded.")
    return line


def run_chapter(study: Study, step: str, params: dict | None = None, case_params: dict | None = None,
                sizes=None, repeats: int | None = None, warmup: int | None = None, mode: str = "auto",
                run_id: str | None = None, replay_run: str | None = None, check_shapes: int | None = None,
                seed: int | None = None, device: str | None = None, **options) -> Chapter:
    """Measure (on a GPU) or replay (without one) one step's chapter; every value is checked first.

    ``sizes``, ``repeats``, ``warmup`` and ``check_shapes`` left as None are the study's (one
    place: ``Study.default_sizes``, ``Study.repeats``, ``Study.warmup``, ``Study.check_shapes``),
    so every step of a study is timed the same way. A replay warns only about the values the
    reader gave (a value left to the study is whatever the recording was made with). Replaying,
    the page shows the book's recording of the study on ``device`` (part of a GPU's name, e.g.
    "H200"; None: the book's default GPU) and reads every number from that one run."""
    from .bookrecording import replay_target

    mode, replay_run = replay_target(study, mode, replay_run, device)
    entry = study.steps.get(step)
    impl = study.impl(step)
    merged = study.case_params(impl, params, case_params)
    given = {name: value for name, value in (("sizes", sizes), ("repeats", repeats), ("warmup", warmup),
                                             ("check_shapes", check_shapes)) if value is not None}
    chosen = study.sizes(list(study.default_sizes) if sizes is None else sizes)
    here: list = []

    def runs_here() -> tuple[bool, str]:   # an older GPU shows the recording of a step it cannot run
        from . import capability
        from .harness import problems

        if not here:
            here.append(capability.runs_here(impl, [(study.problem(case, study.size_of(case, size)), merged[case])
                                                    for case, size in problems(study, chosen)]))
        return here[0]

    if mode != "replay" and not runs_here()[0]:   # shown from the recording: checked as its device ran it
        with limits.assumed(limits.H100):
            study.check_problems(impl, merged, chosen)
    else:
        study.check_problems(impl, merged, chosen)  # what measuring refuses, a replay refuses too
    repeats = study.repeats if repeats is None else repeats
    warmup = study.warmup if warmup is None else warmup
    check_shapes = study.check_shapes if check_shapes is None else check_shapes
    check_repeats(repeats, warmup)
    P.non_negative_int("check_shapes", check_shapes, str(study.check_shapes))
    if check_shapes > 1000:
        raise P.ParameterError(f"check_shapes={check_shapes!r} exceeds the largest allowed, 1000.",
                               "pass at most check_shapes=1000.")
    P.optional_int("seed", seed)
    extra_options = study.options(**options)
    parameters = {"step": entry.slug, "params": P.mapping("params", params),
                  study.case_params_name: P.mapping(study.case_params_name, case_params),
                  study.size_name: chosen, "repeats": repeats, "warmup": warmup,
                  "check_shapes": check_shapes, "seed": seed, **shown_value(extra_options)}  # no absolute paths
    asked = {name: value for name, value in parameters.items()
             if name not in ("repeats", "warmup", "check_shapes", study.size_name, "params", study.case_params_name)
             or name in given or (name == study.size_name and "sizes" in given)
             or (name in ("params", study.case_params_name) and value)}

    def measure() -> session_mod.Measurement:
        records, check_rows = study.check(impl, merged, check_shapes, seed)
        if all(r["value"] == 1.0 for r in records if r["metric"] == "correct"):  # a failed check is never timed
            records += study.measure(impl, merged, chosen, repeats, warmup, extra_options)
        return session_mod.Measurement(records, check_rows)

    # required=False: replaying a step that no run holds yet gives a page that says so
    recording = session_mod.recorded(study.part(entry.slug), study.name, measure, parameters=parameters,
                                     mode=mode, run_id=run_id, replay_run=replay_run, compare=asked, required=False,
                                     available=runs_here)
    return Chapter(study, entry, recording)


def load_recorded(study: Study, step: str, prefer_run: str | None = None) -> Chapter | None:
    """``stepdata.load_recorded`` as a Chapter (with its sections), for comparisons on a page."""
    found = stepdata.load_recorded(study, step, prefer_run)
    return None if found is None else Chapter(found.study, found.step, found.recording)
