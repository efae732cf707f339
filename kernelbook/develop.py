"""Development candidates through the book's own loop: ``kernelbook try`` and ``kernelbook promote``.

A *candidate* is a ``.cu`` file beside a study's steps (``kernels/<study>/``), a step's own file
with other compile-time parameters or a new one, standing in for one step (``--step``): the same
implementation class (launches, launch arguments, parameters, checks), with the source file
replaced and the candidate's ``-D`` values added to the step's own. It goes through the loop every
chapter uses (``chapter.run_chapter``: validate before any launch, poison the output, check against
float64, the range test where the study has one, time with ``measure.time_gpu``), a declared sweep
through ``sweep.run_sweep``, the compiler report and Nsight Compute through ``evidence``: nothing
here times, checks or launches by itself.

Which step a candidate stands for: ``--step`` when given; else the step whose ``.cu`` it is; else
the one step all of whose kernel names the file (with the local headers it includes) defines. None
or several is an error that names them and the fix (``--step``).

Compile-time parameters travel as parameters: an UPPER_CASE name in a candidate's parameters is a
``-D`` of its build (the step's own parameters stay lower-case), so a sweep over ``STAGES`` or over
``tile`` is the same declared ``Sweep``, each configuration's records name their values, and the
profilers' separate process (``evidence.target --source``) rebuilds the same candidate from the
recorded parameters. A name the step's own ``defines()`` sets is refused: the host side derives
its launch from the same value.

Records go to the development store (``paths.dev_results_dir()``, ``data/dev/``, git-ignored), in
the schema and under the part names of the book's runs, so ``kernelbook compare DEV_RUN BOOK_RUN``
lines the candidate up with the step it stands in for. The run's manifest and every part name the
candidate (``candidate``: study, step, source, defines, the sha256 of each file it compiles); every
record carries its label; the files themselves are kept in the run, compressed (``candidate/*.gz``).

``kernelbook promote RUN_ID`` copies a development run, validated, whole (built under a temporary
name, then renamed) into ``data/results/``, so that a chapter can cite it by run id. A candidate's
run is never a step's *newest* recording (``results.runs_with`` leaves it out): a page shows it
only when asked for by its id (``replay_run=``), so promoting never changes what the book replays.
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import paths, results
from .candidate import (
    candidate_impl,
    candidate_study,
    choose_step,
    compiled_files,
    keep_files,
    resolve_source,
    sha256,
    standing_in,
)
from .errors import ParameterError, ResultsError
from .kernels import NAME_RE, define_options
from .promote import promote  # noqa: F401  (re-exported: ``kernelbook promote``)

# ------------------------------------------------------------------------------ the candidate


@dataclass(frozen=True)
class Candidate:
    """What a candidate is: the step it stands in for, its file (relative to ``kernels/``), the
    compile-time parameters given with ``-D``, the step's parameters given with ``-P``, the swept
    values (name -> values), and the sha256 of every file it compiles (its own and the local
    headers it includes)."""

    study: str
    step: str
    source: str
    defines: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    sweep: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``12_hopper_fp16.cu -DHOPPER_CLUSTER=2`` (what a record and a comparison show)."""
        given = " ".join([*define_options(self.defines), *(f"-P{k}={v}" for k, v in sorted(self.params.items()))])
        swept = " ".join(f"--sweep {k}={','.join(map(str, v))}" for k, v in self.sweep.items())
        return " ".join(p for p in (Path(self.source).name, given, swept) if p)

    def as_dict(self) -> dict:
        return {"study": self.study, "step": self.step, "source": self.source, "defines": dict(self.defines),
                "params": dict(self.params), "sweep": {k: list(v) for k, v in self.sweep.items()},
                "files": dict(self.files), "label": self.label}


def parse_value(text: str):
    """``128`` -> 128, ``0.5`` -> 0.5, anything else stays text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignment(text: str, option: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ParameterError(f"{option} {text!r} is not NAME=VALUE.", f"write e.g. {option} BM=128.")
    return name.strip(), parse_value(value.strip())


def parse_sweep(text: str) -> tuple[str, list]:
    name, sep, values = text.partition("=")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not name.strip() or len(items) < 1:
        raise ParameterError(f"--sweep {text!r} is not NAME=V1,V2,...", "write e.g. --sweep STAGES=3,4.")
    return name.strip(), [parse_value(v) for v in items]


def refuse_own_defines(study, impl, params: dict, names, sweep: dict | None = None) -> None:
    """A compile-time name the step's ``defines()`` sets is refused: its launches derive from it
    (judged at the given parameters and at each swept value of the step's own parameters)."""
    base = study.impl(impl.slug)
    own = type(base).defaults
    clean = {k: v for k, v in params.items() if k in own}
    variants = [clean] + [{**clean, k: v} for k, values in (sweep or {}).items() if k in own for v in values]
    sets: set = set()
    size = study.default_sizes[0] if study.default_sizes and study.rows != "cases" else 1
    for case in study.cases:
        for given in variants:
            try:
                sets |= set(base.defines(base.params(**given), study.problem(case, study.size_of(case, size))))
            except Exception:  # noqa: BLE001 - a step whose defines cannot be derived here is not judged
                continue
    clash = sorted(set(names) & sets)
    if clash:
        raise ParameterError(f"Step {impl.slug!r} sets {', '.join(clash)} itself (from its parameters and the problem), "
                             "and its launches follow from that value.",
                             f"change it through the step's parameters (-P name=value: "
                             f"{', '.join(sorted(type(base).defaults)) or 'none'}), or give the candidate's own "
                             "compile-time parameter another name.")


# ------------------------------------------------------------------------------ the store


@contextmanager
def development_store():
    """Inside: every run written or read by the loop is the development store's
    (``KERNELBOOK_RESULTS_DIR`` pointed at ``paths.dev_results_dir()``, no batch staging)."""
    from .session import STAGING_ENV

    root = paths.dev_results_dir()
    saved = {name: os.environ.get(name) for name in ("KERNELBOOK_RESULTS_DIR", STAGING_ENV)}
    os.environ["KERNELBOOK_RESULTS_DIR"] = str(root)
    os.environ.pop(STAGING_ENV, None)
    try:
        yield root
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _stamp(run: results.Run, candidate: Candidate) -> None:
    """Name the candidate in every part of its run (parameters and each record's ``candidate``)."""
    for name in run.part_names():
        part = run.read_part(name)
        records = [dict(r, candidate=candidate.label) for r in part["records"]]
        parameters = dict(part.get("parameters") or {}, candidate=candidate.as_dict())
        run.write_part(name, part["study"], records, part.get("checks"), part.get("extra"), parameters)


# ------------------------------------------------------------------------------ try


@dataclass
class Tried:
    """What ``try_candidate`` made: its run (in the development store), the chapter of the
    candidate (at the sweep's best configuration per case when it swept), the sweep, and the
    compiler and Nsight Compute recordings (None when not asked or not possible)."""

    run: results.Run
    candidate: Candidate
    chapter: object = None
    sweep: object = None
    compiler: object = None
    profile: object = None
    lines: list = field(default_factory=list)


def _sizes(study, sizes) -> list:
    chosen = list(study.default_sizes) if sizes is None else list(sizes)
    return study.sizes(chosen)


def try_candidate(study, source, *, step: str | None = None, defines: dict | None = None,
                  params: dict | None = None, sweep: dict | None = None, sizes=None, repeats: int | None = None,
                  warmup: int | None = None, check_shapes: int | None = None, seed: int | None = None,
                  profile: bool = False, log: Callable[[str], None] = print, timer=None) -> Tried:
    """Check, time (and with ``profile`` profile) a candidate as its step's chapter would, and
    record it as a new run of the development store. ``sweep`` (name -> values) measures every
    configuration first (``sweep.run_sweep``, part ``<study>-<step>-grid``), each on the chapter's
    own check cases (same seed, same random shapes, the range test where the study has one), then
    the chapter at each case's fastest correct configuration at the largest size. The choice is per
    case (per layer), as a chapter takes parameters per case: each case's op time is timed alone, so
    the per-case fastest also gives the smallest sum of the cases' op times (LeNet's Op Time 1 +
    Op Time 2, its target). Should the chapter's checks still fail at a configuration the sweep
    passed (a result that varies from launch to launch), that configuration is recorded failed in
    the grid and the chapter runs again at the next fastest. ``seed`` None draws one, recorded. ``timer`` replaces
    ``measure.time_gpu`` (tests)."""
    from . import gpu, provenance
    from .errors import GPUUnavailable

    defines, params, sweep = dict(defines or {}), dict(params or {}), dict(sweep or {})
    relpath = resolve_source(study, source)
    slug = choose_step(study, relpath, step)
    swept_defines = {k: v[0] for k, v in sweep.items() if NAME_RE.match(k) and k not in type(study.impl(slug)).defaults}
    impl = candidate_impl(study, slug, relpath, {**swept_defines, **defines})
    refuse_own_defines(study, impl, params, [*defines, *swept_defines], sweep)
    twice = sorted(set(sweep) & (set(defines) | set(params)))
    if twice:
        raise ParameterError(f"{', '.join(twice)} is both swept and set.", "give each name once: -D/-P or --sweep.")
    impl.params(**params, **{k: v[0] for k, v in sweep.items()})  # unknown names refused before any work
    chosen = _sizes(study, sizes)
    if seed is None:  # one seed for the sweep's checks and the chapter's: the same check cases (recorded)
        seed = secrets.randbelow(2**31)
    ok, why = gpu.availability()
    if not ok:
        raise GPUUnavailable(f"kernelbook try measures on a CUDA GPU, but {why}.",
                             f"run it on the GPU machine (bash scripts/device_try.sh {study.name} kernels/{relpath} ...).")
    candidate = Candidate(study.name, slug, relpath, defines, params, sweep,
                          {rel: sha256(paths.kernels_dir() / rel) for rel in compiled_files(relpath)})
    view = candidate_study(study, impl)
    with development_store() as root, standing_in(study, impl):
        run = results.create_run({**provenance.manifest_fields(gpu.device_info()), "candidate": candidate.as_dict()},
                                 root=root)
        tried = Tried(run, candidate)

        def say(line: str) -> None:
            tried.lines.append(line)
            log(line)

        say(f"try {study.name} {slug}: {candidate.label} -> run {run.run_id} in {paths.relative(root)}")
        try:
            _measure(view, slug, tried, say, params, sweep, chosen, repeats, warmup, check_shapes, seed, profile,
                     timer)
        finally:  # whatever was recorded (an interrupted run too) names the candidate and keeps its files
            _stamp(run, candidate)
            keep_files(run.root, candidate.files)
    book = results.run_with(study.part(slug))   # (the book's store again: the newest book run of the step)
    say(f"recorded run {run.run_id} ({paths.relative(run.root)}); compare it with the book's newest run of {slug}: "
        f"kernelbook compare {book.run_id if book else 'BOOK_RUN'} {run.run_id} --study {study.name}")
    return tried


def _measure(view, slug, tried: Tried, say, params, sweep, sizes, repeats, warmup, check_shapes, seed, profile,
             timer) -> None:
    """The sweep (when declared), then the chapter, the compiler report and the profile, each through
    the core's own code with ``view`` (the study with the candidate in its step's place)."""
    from . import harness
    from . import sweep as sweep_mod
    from .chapter import run_chapter

    run_id = tried.run.run_id
    own_check_cases = view.check_cases
    progress = {"n": 0, "of": 0}   # of: the sweep's configurations while it runs

    def check_cases(impl, params_, n_random, rng):  # one call per configuration (and one for the chapter)
        shown = sweep_mod.config_label({k: params_.get(k) for k in sweep})
        if progress["of"]:
            progress["n"] += 1
            say(f"  [{progress['n']}/{progress['of']}] checking {shown} against float64")
        else:
            say(f"checking the candidate{' at ' + shown if shown else ''} against float64")
        return own_check_cases(impl, params_, n_random, rng)

    view.check_cases = check_cases   # (the view is this call's own copy of the study)
    if timer is not None:            # (tests) the chapter timed by the same replacement timer as the sweep
        view.measure = lambda impl, case_params, sizes_, repeats_, warmup_, options: harness.measure(
            view, impl, case_params, sizes_, repeats_, warmup_, options, timer=timer)
    case_params = {case: dict(params) for case in view.cases}
    if sweep:
        # every configuration checked on the chapter's own check cases (its random shapes, a range
        # test where the study has one, the same seed): a configuration the sweep passes, the
        # chapter's checks pass; one the chapter would fail is recorded failed, never the best
        shapes = view.check_shapes if check_shapes is None else check_shapes
        declared = sweep_mod.Sweep(slug, axes=sweep, check_shapes=shapes)
        progress["of"] = len(declared.configurations())
        say(f"sweep: {progress['of']} configurations of {', '.join(sweep)}, each checked as the chapter checks "
            f"(seed {seed}, {shapes} random shapes), then timed if it passed")
        result = sweep_mod.run_sweep(view, declared, mode="measure", run_id=run_id, seed=seed, sizes=sizes,
                                     repeats=repeats, warmup=warmup, options=view.options(), timer=timer)
        progress["of"] = 0
        tried.sweep = result
        for line in sweep_lines(result.records):
            say(line)
    while True:
        if sweep:
            best = {}
            for case in dict.fromkeys(case for case, _ in harness.problems(view, sizes)):
                try:
                    best[case] = result.best(case)
                except ResultsError:
                    continue
            if not best:
                say("no configuration passed its checks: nothing more is measured")
                return
            case_params = {case: {**params, **best.get(case, next(iter(best.values())))} for case in view.cases}
            say(best_line(result, best, summed=view.rows != "cases"))
        chapter = run_chapter(view, slug, case_params=case_params, sizes=sizes, repeats=repeats, warmup=warmup,
                              check_shapes=check_shapes, seed=seed, mode="measure", run_id=run_id)
        tried.chapter = chapter
        for line in chapter_lines(chapter):
            say(line)
        if chapter.correct or not sweep or not _fail_in_grid(tried.run, result, chapter, best, say):
            break
    if chapter.correct:
        tried.compiler = _evidence(say, "compiler report", lambda: _compiler(chapter))
        if profile:
            tried.profile = _evidence(say, "Nsight Compute", lambda: _profile(chapter))


def _fail_in_grid(run: results.Run, result, chapter, best: dict, say) -> bool:
    """The chapter's checks failed at a configuration the sweep's passed (the same check cases: a
    result that varies from launch to launch): record it failed in the grid part, never its best,
    and say so. False when nothing was left to mark (the chapter is then final)."""
    failed = {r["layer"] for r in chapter.records if r["metric"] == "correct" and r["value"] != 1.0}
    marked = []
    for r in result.records:
        if r["layer"] in failed and r["layer"] in best and r.get("config") == best[r["layer"]] and r["value"] is not None:
            r.update(value=None, status="failed check: the chapter's checks at this configuration failed")
            for key in ("min", "max", "samples"):
                r.pop(key, None)
            marked.append(r)
    if not marked:
        return False
    name = result.recording.part
    part = run.read_part(name)
    run.write_part(name, part["study"], result.records, part.get("checks"), part.get("extra"), part.get("parameters"))
    shown = sorted({f"{r['layer']}: {r['config_label']}" for r in marked})
    say(f"the chapter's checks failed where the sweep's passed ({'; '.join(shown)}): recorded as failed in the "
        "grid; the chapter again at the next fastest correct configuration")
    return True


def _compiler(chapter):
    from .evidence import compiler

    found = compiler.for_chapter(chapter)
    rows = [r for r in found.records if r["metric"] in ("registers", "spill_store_bytes")]
    shown = {}
    for r in rows:
        shown.setdefault((r.get("kernel"), r["layer"]), {})[r["metric"]] = r["value"]
    lines = [f"{k}: {v.get('registers', 0):.0f} registers, {v.get('spill_store_bytes', 0):.0f} bytes spilled ({case})"
             for (k, case), v in shown.items()]
    return found, lines or [found.status or "no compiler records"]


def _profile(chapter):
    from .evidence import ncu

    found = ncu.for_chapter(chapter, profile=True)
    if not found.measuring:
        return found, [f"not profiled: {found.status}"]
    durations = [r for r in found.records if r["metric"] == "duration_ms"]
    return found, [found.status] + [f"{r['layer']} {r.get('kernel', '')}: {r['value']:.4f} ms in Nsight Compute"
                                    for r in durations]


def _evidence(say, what: str, make):
    from .errors import KernelbookError

    try:
        found, lines = make()
    except KernelbookError as exc:  # evidence that cannot be made here is said, never fatal
        say(f"{what}: not recorded ({exc.message})")
        return None
    for line in lines:
        say(f"{what}: {line}")
    return found


def _ms(value) -> str:
    return "–" if value is None else f"{value:.4f} ms"


def sweep_lines(records: list[dict]) -> list[str]:
    """One line per configuration: its check status and time per case and size."""
    by_config: dict = {}
    for r in records:
        by_config.setdefault(r.get("config_label") or "", []).append(r)
    lines = []
    for label, rows in by_config.items():
        cells = [f"{r['layer']}{'' if r['size'] is None else ' size ' + str(r['size'])}: "
                 f"{_ms(r['value']) if r['value'] is not None else r.get('status', '')}" for r in rows]
        lines.append(f"  {label}: " + "; ".join(cells))
    return lines


def best_line(result, best: dict, summed: bool = True) -> str:
    """Each case's fastest correct configuration, its time at the largest size and, ``summed`` (cases
    that are parts of one problem: LeNet's layers, timed apart), their sum, which that choice minimises."""
    from .sweep import config_label

    metric = result.parameters.get("metric", "op_time_ms")
    timed = {}
    for case, config in best.items():
        rows = [r for r in result.records if r["metric"] == metric and r["layer"] == case
                and r.get("config") == config and r["value"] is not None]
        largest = [r for r in rows if r["size"] == max((x["size"] for x in rows if x["size"] is not None), default=None)]
        timed[case] = (largest or rows)[0]["value"] if rows else None
    shown = "; ".join(f"{case}: {config_label(c)} ({_ms(timed[case])})" for case, c in best.items())
    total = "" if not summed or len(best) < 2 or None in timed.values() else f"; sum {_ms(sum(timed.values()))}"
    return f"chapter at each case's fastest correct configuration: {shown}{total}"


def chapter_lines(chapter) -> list[str]:
    records = chapter.records
    failed = [r["layer"] for r in records if r["metric"] == "correct" and r["value"] != 1.0]
    if failed:
        errors = sorted({c.get("error") or f"relative L2 error {c.get('rel_l2_error')}" for c in chapter.checks
                         if not c.get("passed")})
        return [f"checks: FAILED for {', '.join(failed)} (not timed): {'; '.join(map(str, errors))[:600]}"]
    lines = [f"checks: passed ({sum(1 for c in chapter.checks)} problems against float64)"]
    for r in records:
        if r["metric"] == "op_time_ms":
            lines.append(f"  {r['layer']}{'' if r['size'] is None else ' size ' + str(r['size'])}: "
                         f"{_ms(r['value'])} (median of {len(r.get('samples') or [])}, {r.get('timing', '')})")
    return lines
