"""Parameter sweeps as declared data, recorded by the core for any study.

A study declares a sweep (``Sweep``): which step, which parameter values (the product of
``axes``, or an explicit list of ``configs``), which metric, at which sizes. ``run_sweep`` then
does the same for every study: each configuration is validated (a refusal is recorded as
``refused: ...``), checked on the study's own check cases (``harness.check_one``: poisoned output,
float64 reference; every configuration on the cases a chapter with the same seed and
``check_shapes`` checks, drawn afresh from the seed, so that a configuration the sweep passes is
one the chapter's checks pass) and, only if it passed, timed with the harness's one timer
(``harness.measure``); one record per (configuration, case, size) with ``config``,
``config_label`` and ``status``, a failed or refused configuration with ``value`` None, never
dropped. Everything goes through ``session.recorded`` (part ``<study>-<step>-grid``), so a replay
shows the recorded sweep, and a sweep never recorded says so (``table`` and ``figure`` render that
state as a message, not an error).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import harness, results
from . import params as P
from . import session as session_mod
from .errors import KernelbookError, ParameterError, ResultsError
from .measure import check_repeats


def config_label(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


@dataclass(frozen=True)
class Sweep:
    """A declared parameter sweep of one step.

    ``axes``: parameter -> values; the configurations are their product, in order (a value may be
    a dict of several parameters that vary together, e.g. a block shape). ``configs``: an explicit
    list instead (a product with the impossible corners left out). ``sizes``: the sizes (or, for
    a study with a row per case, the cases) it is timed at, None for the study's defaults;
    ``metric``: the record the sweep compares (``op_time_ms`` or one of the study's
    ``case_records``); ``repeats``/``warmup``: its timing (None: the study's defaults);
    ``check_shapes``: random shapes checked besides the study's fixed check cases."""

    step: str
    axes: dict = field(default_factory=dict)
    configs: tuple = ()
    sizes: tuple | None = None
    metric: str = "op_time_ms"
    repeats: int | None = None
    warmup: int | None = None
    check_shapes: int = 0
    title: str = ""

    def configurations(self) -> list[dict]:
        if self.configs:
            return [dict(c) for c in self.configs]
        if not self.axes:
            raise ParameterError(f"The sweep of {self.step} declares neither axes nor configs.",
                                 "declare axes={'name': [values]} or configs=[{...}].")
        out = []
        for values in itertools.product(*self.axes.values()):
            config: dict = {}
            for name, value in zip(self.axes, values):
                config.update(value if isinstance(value, dict) else {name: value})
            out.append(config)
        return out


@dataclass
class SweepResult(session_mod.RecordingView):
    """A recorded sweep: every configuration of one step, checked and then timed per case."""

    step: str
    recording: session_mod.Recording
    cases: tuple = ()

    @property
    def found(self) -> bool:
        return self.recording.found

    def frame(self):
        import pandas as pd

        rows = []
        for r in self.records:
            row = {k: v for k, v in r.items() if k not in ("samples", "config")}
            row.update(r.get("config") or {})
            rows.append(row)
        return pd.DataFrame(rows)

    def best(self, case: str, size=None) -> dict:
        """The fastest correct configuration for ``case`` at ``size`` (default: the largest)."""
        metric = self.parameters.get("metric", "op_time_ms")
        timed = [r for r in self.records if r["metric"] == metric and r["layer"] == case and r["value"] is not None]
        if not timed:
            raise ResultsError(f"The {self.step} sweep has no correct timing for {case}.",
                               "re-run the sweep on a GPU; every configuration failed or was refused.")
        sizes = [r["size"] for r in timed if r["size"] is not None]
        size = size if size is not None else (max(sizes) if sizes else None)
        return dict(min((r for r in timed if r["size"] == size), key=lambda r: r["value"])["config"])


def _verdicts(study, impl, params: dict, cases: list, n_random: int, rng) -> dict[str, str]:
    """``ok``, ``refused: ...`` or ``failed check: ...`` per case for one configuration. As in a
    chapter's checks (``harness.check``), a case's verdict counts the check cases labelled with it
    and those labelled with no case (random shapes, fixed check sizes); a case with nothing to
    check it is not ``ok``."""
    found = []
    for c in study.check_cases(impl, params, n_random, rng):
        try:
            impl.validate(c.shape, params)
        except KernelbookError as exc:
            found.append((c.label, f"refused: {exc.message}"))
            continue
        result = harness.check_one(study, impl, params, c)
        found.append((c.label, "ok" if result.passed else
                      f"failed check: {c.label}: {result.error or f'relative L2 error {result.rel_l2_error:.3g}'}"))
    verdicts = {}
    for case in cases:
        mine = [status for label, status in found if label == case or label not in study.cases]
        verdicts[case] = next((s for s in mine if s != "ok"), "ok") if mine else "failed check: no check covers it"
    return verdicts


def measure_sweep(study, sweep: Sweep, sizes: list, repeats: int, warmup: int, seed: int | None,
                  options: dict | None = None, timer=None) -> list[dict]:
    """Check, then time, every configuration of ``sweep`` (what ``run_sweep`` records)."""
    impl = study.impl(sweep.step)
    pairs = harness.problems(study, sizes)
    cases = list(dict.fromkeys(case for case, _ in pairs))
    records = []
    for config in sweep.configurations():
        label = config_label(config)
        rng = np.random.default_rng(seed)   # each configuration: the check cases of a chapter with this seed
        try:
            params = impl.params(**config)
            verdicts = _verdicts(study, impl, params, cases, sweep.check_shapes, rng)
        except KernelbookError as exc:
            params, verdicts = None, {case: f"refused: {exc.message}" for case in cases}
        ok = [case for case in cases if verdicts[case] == "ok"]
        try:
            timed, refused = _time_config(study, impl, sweep, params, cases, ok, pairs, sizes, repeats, warmup,
                                          options, timer)
        except _NoMetric:   # (only the metric's absence: any other error of the timing is its own)
            raise ParameterError(f"The {study.name} study records no {sweep.metric!r} for {sweep.step}.",
                                 "sweep op_time_ms or a metric of the study's case records.") from None
        for case, size in pairs:
            fields = {"config": config, "config_label": label, "status": refused.get((case, size), verdicts[case])}
            value = timed.get((case, size))
            if isinstance(value, dict):  # the timing's spread travels with its median
                fields.update({k: v for k, v in value.items() if k != "value"})
                value = value["value"]
            if verdicts[case] == "ok":
                shape = study.problem(case, study.size_of(case, size))
                fields.update(flops=shape.flops, min_bytes=shape.min_bytes)
            records.append(results.record(study.name, impl.slug, case, study.size_of(case, size) if size is not None
                                          else None, sweep.metric, value, unit="ms", **fields))
    return records


#: What a sweep's record keeps of a timing besides its median: the spread and how it was timed.
SPREAD = ("min", "max", "samples", "timing", "calls_per_replay")


class _NoMetric(Exception):
    """The timed records hold no record of the sweep's metric for a problem."""


def _time_config(study, impl, sweep, params, cases, ok, pairs, sizes, repeats, warmup, options, timer):
    """``({(case, size): measured}, {(case, size): "refused: ..."})`` for one checked configuration:
    one ``harness.measure`` over every case that passed (the configuration in every case, as a
    chapter would run it); if a size is refused there, each problem alone."""
    if not ok:
        return {}, {}
    case_params = {case: params for case in cases}

    def pick(records, case, size):
        batch = study.size_of(case, size)
        for r in records:
            if r["metric"] == sweep.metric and r["layer"] == case and (size is None or r["size"] == batch):
                spread = {k: r[k] for k in SPREAD if r.get(k) is not None}
                return {"value": r["value"], **spread} if spread else r["value"]
        raise _NoMetric(sweep.metric)

    wanted = [(case, size) for case, size in pairs if case in ok]
    try:
        records = harness.measure(study, impl, case_params, sizes, repeats, warmup, options or {}, timer=timer,
                                  cases=ok, size_records=False, case_records=sweep.metric != "op_time_ms")
        return {(case, size): pick(records, case, size) for case, size in wanted}, {}
    except KernelbookError:
        pass  # some problem refused: time each alone below
    timed, refused = {}, {}
    for case, size in wanted:  # one problem at a time: a refusal at one size keeps the others
        try:
            records = harness.measure(study, impl, case_params, [case] if study.rows == "cases" else [size],
                                      repeats, warmup, options or {}, timer=timer, cases=[case],
                                      size_records=False, case_records=sweep.metric != "op_time_ms")
            timed[(case, size)] = pick(records, case, size)
        except KernelbookError as exc:
            refused[(case, size)] = f"refused: {exc.message}"
    return timed, refused


def run_sweep(study, sweep: Sweep, *, mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
              seed: int | None = None, sizes=None, repeats: int | None = None, warmup: int | None = None,
              options: dict | None = None, required: bool = True,
              extra: Callable[[list[dict]], dict] | None = None, timer=None,
              sizes_name: str | None = None, device: str | None = None) -> SweepResult:
    """Measure (on a GPU) or replay the declared ``sweep`` of ``study``: one part,
    ``<study>-<step>-grid``, whose parameters say what was swept and how it was timed.
    ``extra(records)`` adds study evidence to a measured part (e.g. timelines);
    ``required=False`` returns an empty result (``found`` False) where nothing was recorded;
    ``sizes_name``: the page's parameter that gave ``sizes`` (``sweep_batch_sizes``), as errors name it;
    ``device``: replay the book's recording made on that GPU (``bookrun.replay_target``)."""
    from .bookrecording import replay_target

    mode, replay_run = replay_target(study, mode, replay_run, device)
    configs = sweep.configurations()
    given = sizes
    wanted = sizes if sizes is not None else sweep.sizes
    sizes = study.sizes(list(study.default_sizes) if wanted is None else P.parsed_list(wanted), name=sizes_name)
    repeats = repeats if repeats is not None else sweep.repeats if sweep.repeats is not None else study.repeats
    warmup = warmup if warmup is not None else sweep.warmup if sweep.warmup is not None else study.warmup
    check_repeats(repeats, warmup)
    study.impl(sweep.step)  # an unknown step is refused before anything runs
    parameters = {"step": sweep.step, "configs": configs, "metric": sweep.metric, study.size_name: sizes,
                  "repeats": repeats, "warmup": warmup, "seed": seed}
    if sweep.check_shapes:  # (absent when 0: the grids recorded before sweeps were declared have none)
        parameters["check_shapes"] = sweep.check_shapes

    def measure() -> session_mod.Measurement:
        records = measure_sweep(study, sweep, sizes, repeats, warmup, seed, options, timer=timer)
        return session_mod.Measurement(records, [], extra(records) if extra else {})

    # A replay warns of what the reader set: sizes left to the sweep or the study are whatever the
    # recording was made with (the study's default sizes may since hold one more).
    asked = {k: v for k, v in parameters.items() if not (k == study.size_name and given is None)}
    def runs_here() -> tuple[bool, str]:   # an older GPU shows the recorded sweep of a Hopper step
        from .capability import runs_here

        return runs_here(study.impl(sweep.step), [])

    recording = session_mod.recorded(study.part(sweep.step, "grid"), study.name, measure, parameters=parameters,
                                     mode=mode, run_id=run_id, replay_run=replay_run, required=required,
                                     compare=asked, available=runs_here)
    return SweepResult(sweep.step, recording, tuple(study.cases))


# ------------------------------------------------------------------------- shown on a page

NOT_RECORDED = "not recorded yet: this sweep runs with the next measured run on a GPU"


def _absent(result: SweepResult) -> str:
    """Why a sweep shows nothing: damaged (every recording of it), or not recorded yet."""
    return result.recording.absence if result.recording.damaged else NOT_RECORDED


def table(result: SweepResult):
    """Every configuration: its check status and its time per case and size; a sweep never
    recorded is a one-line message."""
    import pandas as pd

    from .report import format_ms, message_table, styled

    if not result.found or not result.records:
        return message_table(f"{result.step} sweep", f"The {result.step} sweep is {_absent(result)}.")
    frame = result.frame()
    metric = result.parameters.get("metric", "op_time_ms")
    frame = frame[frame["metric"] == metric]
    rows = []
    for (label, case), group in frame.groupby(["config_label", "layer"], sort=False):
        row = {"Configuration": label, "Case": case, "Check": group["status"].iloc[0]}
        for _, r in group.iterrows():
            key = f"size {r['size']}" if r["size"] == r["size"] and r["size"] is not None else "time"
            row[key] = format_ms(r["value"]) if r["value"] == r["value"] and r["value"] is not None else "–"
        rows.append(row)
    what = metric.replace("_ms", "").replace("_", " ")
    # wrapped: a configuration's label (every parameter it sets) can be longer than the page is wide
    return styled(pd.DataFrame(rows), f"{result.step}: {what} (median) of every configuration. "
                                      f"[{result.short_label}]", wrap=True)


def against_step(result: SweepResult, step):
    """Per case: the step as its page times it (its own parameters) beside the sweep's fastest
    correct configuration, at the sweep's largest size, and how much slower the step is. A step
    whose parameters are not the sweep's fastest on this GPU says so here, in numbers, instead of
    leaving the reader to find it in the sweep's table. ``step``: the page's ``StepRecording``."""
    import pandas as pd

    from .report import format_ms, message_table, styled

    metric = result.parameters.get("metric", "op_time_ms")
    if not result.found or not result.records or step is None or not step.recording.found:
        return message_table(f"{result.step} against its sweep",
                             f"The {result.step} sweep or the step's own timing is {_absent(result)}.")
    rows = []
    for case in dict.fromkeys(r["layer"] for r in result.records):
        timed = [r for r in result.records if r["metric"] == metric and r["layer"] == case and r["value"] is not None]
        own = [r for r in step.records if r["metric"] == metric and r["layer"] == case and r.get("value") is not None]
        if not timed or not own:
            continue
        sizes = [r["size"] for r in timed if r["size"] is not None]
        size = max(sizes) if sizes else None
        fastest = min((r for r in timed if r["size"] == size), key=lambda r: r["value"])
        mine = [r for r in own if size is None or r.get("size") == size] or own
        time = mine[-1]["value"]
        slower = (time - fastest["value"]) / fastest["value"] * 100
        config = fastest.get("config") or {}
        params = step.study.impl(step.slug).params(**step.case_params().get(case, {}))   # its defaults filled in
        same = bool(config) and all(params.get(k) == v for k, v in config.items())
        verdict = ("as fast or faster" if slower <= 0 else
                   f"{slower:.1f} % slower, within the spread of that configuration's repeats"
                   if time <= fastest.get("max", fastest["value"]) else f"{slower:.1f} % slower")
        rows.append({"Case": case, "The step (its own parameters)": format_ms(time),
                     "The sweep's fastest": format_ms(fastest["value"]),
                     "Its configuration": fastest["config_label"],
                     "The step's own": ("the same: two timings of one configuration" if same else
                                        ", ".join(f"{k}={params.get(k)}" for k in config) or "–"),
                     "The step against it": verdict})
    if not rows:
        return message_table(f"{result.step} against its sweep", "No case has both a sweep timing and the step's own.")
    runs = sorted({result.session.run.run_id, step.session.run.run_id})
    where = (f"run {runs[0]}: the sweep and the step are two recordings of one run" if len(runs) == 1 else
             f"runs {' and '.join(runs)}: two runs, so the difference holds a run-to-run change too")
    return styled(pd.DataFrame(rows), f"{result.step}: its own parameters against the fastest configuration of its sweep, "
                                      f"{metric.replace('_ms', '').replace('_', ' ')} (median; {where}).", wrap=True)


def figure(result: SweepResult):
    """One horizontal bar per configuration and case at the largest size (refused or failed
    configurations marked ✕); a sweep never recorded is a figure that says so."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from .plots import footer

    if not result.found or not result.records:
        fig, ax = plt.subplots(figsize=(7, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{result.step} sweep: {_absent(result)}", ha="center", va="center", fontsize=9)
        footer(fig, "not recorded")
        return fig
    frame = result.frame()
    metric = result.parameters.get("metric", "op_time_ms")
    frame = frame[frame["metric"] == metric]
    if frame["size"].notna().any():
        frame = frame[frame["size"] == frame["size"].max()]
    cases = list(dict.fromkeys(frame["layer"]))
    labels = list(dict.fromkeys(frame["config_label"]))
    # wide enough for the longest configuration label at 7 pt (~0.06 in a character) beside its bars:
    # a narrower figure leaves tight_layout no room and it warns instead of laying out
    longest = max((len(str(label)) for label in labels), default=10)
    fig, axes = plt.subplots(1, len(cases), figsize=(max(6.0, 3.5 + 0.06 * longest) * len(cases),
                                                     0.35 * len(labels) + 1.5), squeeze=False)
    for ax, case in zip(axes[0], cases):
        sub = frame[frame["layer"] == case].set_index("config_label").reindex(labels)
        values = sub["value"].astype(float).to_numpy()
        ax.barh(range(len(labels)), np.nan_to_num(values, nan=0.0), color="#0072B2")
        for i, v in enumerate(values):
            if np.isnan(v):
                ax.text(0, i, " ✕ refused or failed", va="center", fontsize=7, color="0.35")
        if np.isfinite(values).any():
            best = int(np.nanargmin(values))
            ax.barh([best], [values[best]], color="#D55E00")  # named in the title: no key over the bars
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{metric.replace('_ms', '').replace('_', ' ')} (ms, median)")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))   # few ticks: the phone variant's panels are narrow
        ax.set_title(f"{case} (orange: the fastest correct)", fontsize=9)
    footer(fig, result.short_label, bool(result.session and result.session.measuring))
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
