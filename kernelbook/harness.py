"""One measuring loop for every study: the core checks, times, records and builds the profilers'
launch; a study only says what its problem is.

A study (a ``kernelbook.study.Study``) answers four questions, and nothing here knows which
study it talks to:

- *What are the inputs for a problem?* ``inputs(impl, shape, rng, case)`` returns host arrays;
  ``operands(impl, shape, host)`` turns them into the device operands of
  ``impl.launch(y, *operands, shape, params)`` (uploads, packed weights).
- *What is right?* ``check_cases(impl, params, n_random, rng)`` returns ``CheckCase``s: a
  problem, its host inputs and its float64 reference; ``judge(impl, got, case)`` turns an
  output into a verdict (default: relative L2 error against float64, ``checks.compare``).
- *What else does a timed step show?* ``case_records`` and ``size_records`` (a layer's round
  trip, a network's accuracy, a rate): extra records, timed with the same timer.
- *What would a user pick instead?* ``vendor_runs(sizes, seed)`` yields ``VendorRun``s: a
  library call on one problem, named ``<library>-<precision>[-<layout>]``, and its accuracy.

The core does the rest the same way for every study: validate before any launch, poison the
output, launch, compare (``check``); prepare (compile) outside timings, time with one timer
(``measure.time_gpu``; ``measure.time_torch`` for the libraries) and one timing label per
step, record with one set of fields (``measure``, ``vendor``); and build the single launch the
profilers run (``launch_once``). A failed check is never timed (``kernelbook.chapter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import results
from .checks import CheckResult, compare
from .errors import KernelbookError
from .phases import timed


@dataclass
class CheckCase:
    """One problem a step is checked on: its label (a case name, or ``random``), its shape (an
    object with ``y_shape`` and ``as_dict()``), the host inputs, and the float64 reference.

    ``select`` (optional) picks what is compared from the whole output (sampled positions of a
    layer too large to compute in float64 on a CPU); ``reference`` is then of the selection."""

    label: str
    shape: Any
    host: tuple
    reference: Callable[[], np.ndarray]
    select: Callable[[np.ndarray], np.ndarray] | None = None

    def compared(self, got: np.ndarray) -> np.ndarray:
        return self.select(got) if self.select is not None else got


@dataclass
class VendorRun:
    """One library call on one problem, for the vendor comparison.

    ``call()`` enqueues the library's work and returns its output; ``accuracy(output)`` returns
    ``{metric: value}`` (e.g. ``rel_l2_error``) recorded beside the time; ``graph``: time CUDA
    graph replays of ``call`` (else CUDA events around each call); ``derived(measured)`` returns
    further ``(metric, value, unit)`` rows (a rate); ``extra`` goes into every record."""

    name: str
    case: str
    size: int | None
    shape: Any
    call: Callable[[], Any]
    accuracy: Callable[[Any], dict] = lambda out: {}
    graph: bool = False
    derived: Callable[[Any], list] = lambda measured: []
    extra: dict = field(default_factory=dict)


def timing_label(impl) -> str:
    """How a step's launches are timed: CUDA-graph replays when they can be captured (the timer
    says ``cuda-graph`` then), else CUDA events around a host-driven loop."""
    return "events" if impl.graph_capturable else "host-bound"


def _to_host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def _synchronize(xp) -> None:
    cuda = getattr(xp, "cuda", None)
    if cuda is not None:
        cuda.get_current_stream().synchronize()


def _error(exc: Exception) -> str:
    message = exc.message if isinstance(exc, KernelbookError) else str(exc)
    return f"{type(exc).__name__}: {message}"


# ---------------------------------------------------------------------------------------- checks


def check_step(study, impl, params: dict, n_random: int, seed: int | None) -> list[CheckResult]:
    """Every ``CheckCase`` of the study for ``impl`` with ``params``: validated before any launch
    (a refusal is a failed check naming the error), the output poisoned with NaN, one launch,
    the verdict. A launch that raises is a failed check, never a crash."""
    rng = np.random.default_rng(seed)
    return [check_one(study, impl, params, case) for case in study.check_cases(impl, params, n_random, rng)]


@timed("check")
def check_one(study, impl, params: dict, case: CheckCase) -> CheckResult:
    """One ``CheckCase``: validate, poison, launch once, judge (a refusal or a raising launch is a
    failed check that names the error)."""
    xp = study.array_module()
    shape = case.shape.as_dict()
    try:
        impl.validate(case.shape, params)
    except KernelbookError as exc:
        return CheckResult(case.label, shape, False, tolerance=impl.tolerance, error=_error(exc))
    try:
        operands = study.operands(impl, case.shape, case.host)
        y = xp.full(case.shape.y_shape, xp.nan, dtype="float32")
        impl.launch(y, *operands, case.shape, params)
        _synchronize(xp)
        got = _to_host(y)
    except Exception as exc:  # noqa: BLE001 - a failed launch is a failed check, shown as such
        return CheckResult(case.label, shape, False, tolerance=impl.tolerance, error=_error(exc))
    return study.judge(impl, got, case)


def judge(impl, got: np.ndarray, case: CheckCase) -> CheckResult:
    """The default verdict: relative L2 error of the (selected) output against float64."""
    return compare(case.compared(got), case.reference(), impl.tolerance, case.label, case.shape.as_dict())


def check(study, impl, case_params: dict[str, dict], n_random: int, seed: int | None):
    """Checks for a chapter: ``(records, rows)``. Cases that share parameters are checked once;
    a case's verdict (one ``correct`` record each) counts the checks labelled with it and those
    labelled with no case (random shapes). Rows name the case(s) each check stands for."""
    groups: dict[str, tuple[dict, list[str]]] = {}
    for case, params in case_params.items():
        key = repr(sorted(params.items()))
        groups.setdefault(key, (params, []))[1].append(case)
    records, rows = [], []
    for params, cases in groups.values():
        found = check_step(study, impl, params, n_random, seed)
        for c in found:
            rows.append(dict(c.as_dict(), layer=c.label if c.label in study.cases else ", ".join(cases),
                             params=params))
        for case in cases:
            mine = [c for c in found if c.label == case or c.label not in study.cases]
            ok = bool(mine) and all(c.passed for c in mine)
            records.append(results.record(study.name, impl.slug, case, None, "correct", 1.0 if ok else 0.0,
                                          n_checks=len(mine)))
    order = {case: i for i, case in enumerate(study.cases)}
    records.sort(key=lambda r: order.get(r["layer"], len(order)))
    return records, rows


# ---------------------------------------------------------------------------------------- timing


def problems(study, sizes: list, cases: list | None = None) -> list[tuple[str, Any]]:
    """(case, size) pairs a chapter times, in order: every case at every size, or each case named
    in ``sizes`` for a study with a row per case (only those in ``cases`` when it is given)."""
    if study.rows == "cases":
        pairs = [(case, None) for case in sizes]
    else:
        pairs = [(case, size) for size in sizes for case in study.cases]
    return pairs if cases is None else [(case, size) for case, size in pairs if case in cases]


@timed("time")
def measure(study, impl, case_params: dict[str, dict], sizes: list, repeats: int, warmup: int,
            options: dict, timer=None, cases: list | None = None, size_records: bool = True,
            case_records: bool = True) -> list[dict]:
    """Time a checked step on every problem (of ``cases`` only, when given): ``op_time_ms`` (the
    step's launches alone, operands on the device, compiled first) plus the study's own records
    (``size_records=False``: the per-case ones only, as a sweep needs; ``case_records=False``: the
    op time alone, as a sweep of it needs), all with one timer. A study's record that moves its data
    across PCIe (a round trip of hundreds of milliseconds) may ask ``time(fn, repeats=n)`` for at
    most ``n`` repeats after one warm-up: the samples kept say how many."""
    from .measure import time_gpu

    timer = timer or time_gpu
    label = timing_label(impl)
    xp = study.array_module()

    def time(fn, graph: bool = False, timing: str | None = None, repeats: int | None = None):
        if repeats is not None:
            return timer(fn, min(repeats, chosen_repeats), min(warmup, 1), graph=graph, timing=timing or label)
        return timer(fn, chosen_repeats, warmup, graph=graph, timing=timing or label)

    chosen_repeats = repeats

    context = study.timing_context(impl, case_params, sizes, options)
    records: list[dict] = []
    last = object()
    pairs = problems(study, sizes, cases)
    for index, (case, size) in enumerate(pairs):
        shape = study.problem(case, study.size_of(case, size))
        params = case_params[case]
        impl.validate(shape, params)
        operands = study.timed_operands(impl, case, size, shape, context)
        impl.prepare(params, shape)
        y = xp.empty(shape.y_shape, dtype="float32")

        def run(y=y, operands=operands, shape=shape, params=params):
            impl.launch(y, *operands, shape, params)

        def output(y=y, run=run):
            """Poison, launch once, copy back: the timed output, for the study's accuracy records."""
            y.fill(np.nan)
            run()
            return _to_host(y)

        op = time(run, graph=impl.graph_capturable)
        common = {"flops": shape.flops, "min_bytes": shape.min_bytes, "precision": impl.precision, "params": params}
        batch = study.size_of(case, size)
        records.append(results.record(study.name, impl.slug, case, batch, "op_time_ms", op, **common))
        for metric, value, unit in (study.case_records(impl, case, shape, params, operands, run, output, op, context,
                                                       time) if case_records else ()):
            records.append(results.record(study.name, impl.slug, case, batch, metric, value, unit, **common))
        del y, operands, run, output  # free the device buffers before the next problem
        last = size
        if size_records and (index + 1 == len(pairs) or pairs[index + 1][1] != size):
            for case_name, metric, value, unit in study.size_records(impl, last, context, time):
                records.append(results.record(study.name, impl.slug, case_name, last, metric, value, unit))
    return records


def launch_once(study, slug: str, case: str, size, params: dict, seed: int = 0, shape=None):
    """Prepare inputs (drawn with NumPy and copied, no kernel) and compile, then return a callable
    that launches the step once: what Nsight Compute and compute-sanitizer profile, so nothing
    else may launch a kernel."""
    xp = study.array_module()
    impl = study.impl(slug)
    shape = shape if shape is not None else study.problem(case, study.size_of(case, size))
    impl.validate(shape, params)
    operands = study.operands(impl, shape, study.inputs(impl, shape, np.random.default_rng(seed), case))
    y = xp.empty(shape.y_shape, dtype="float32")
    impl.prepare(params, shape)  # compile now: compilation is not a launch
    _synchronize(xp)
    return lambda: impl.launch(y, *operands, shape, params)


# ---------------------------------------------------------------------------------------- vendor


@timed("library")
def vendor(study, sizes: list, repeats: int, warmup: int, seed: int = 0, timer=None) -> list[dict]:
    """The study's library calls (``vendor_runs``), each checked once then timed with one timer
    (``measure.time_torch``): ``op_time_ms`` (with the accuracy beside it) and one record per
    accuracy metric and derived value."""
    from .measure import check_repeats, time_torch

    check_repeats(repeats, warmup)
    timer = timer or time_torch
    records: list[dict] = []
    for run in study.vendor_runs(sizes, seed):
        accuracy = run.accuracy(run.call())
        measured = timer(run.call, repeats, warmup, graph=run.graph)
        common = {"flops": run.shape.flops, "min_bytes": run.shape.min_bytes, **run.extra}
        rec = lambda metric, value, unit="", **kw: records.append(  # noqa: E731
            results.record(study.name, run.name, run.case, run.size, metric, value, unit, **common, **kw))
        rec("op_time_ms", measured, "ms", **accuracy)
        for metric, value, unit in run.derived(measured):
            rec(metric, value, unit)
        for metric, value in accuracy.items():
            rec(metric, value)
    return records
