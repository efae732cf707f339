"""What the harness needs to know about a study, and nothing more.

A study (``kernelbook.lenet``, ``kernelbook.mlp``, ``kernelbook.vgg``) subclasses ``Study``: its
name and title, its ordered ``StepList``, its cases (layers or test cases), the columns of its
milestone table, and the hooks that check and time one step. The core (chapters, evidence,
report, plots, batch, CLI) talks to a study only through this class, and never imports one: a
notebook hands its study object to the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import params as P
from .steps import StepImpl, StepList


@dataclass(frozen=True)
class Column:
    """One column of a milestone table: ``metric`` of ``case`` (a layer, a test case, or the
    whole network), formatted as a time, a ratio, an accuracy or a plain number."""

    header: str
    metric: str
    case: str | None         # None: the row's case (tables with a row per case)
    kind: str = "time"       # time | ms | accuracy | number | speedup | speedup_vs_baseline


class Study:
    """Base of every study. Subclasses set the class attributes and implement the hooks."""

    name: ClassVar[str]                       # default: the package's last name ("lenet")
    module: ClassVar[str]                     # default: the study's package ("kernelbook.lenet")
    title: ClassVar[str]
    steps: ClassVar[StepList]
    cases: ClassVar[tuple[str, ...]]          # layers or test cases, in table order
    profile_cases: ClassVar[tuple[str, ...] | None] = None  # the cases Nsight Compute profiles (default: all)
    case_header: ClassVar[str] = "Layer"
    size_header: ClassVar[str] = "Batch Size"  # what the size of a measurement is called
    size_name: ClassVar[str] = "batch_sizes"   # the notebook parameter that lists sizes
    case_params_name: ClassVar[str] = "case_params"  # the notebook parameter of per-case parameters
    rows: ClassVar[str] = "sizes"              # milestone rows: one per size, or one per case ("cases")
    sanitizer_size: ClassVar[int] = 4          # the size compute-sanitizer launches (small: it is slow)
    default_sizes: ClassVar[tuple[int, ...]] = ()
    # How every step of the study is timed and checked, unless a reader passes other values (the
    # notebooks' parameter cells leave these as None): one place, the same for every step.
    repeats: ClassVar[int] = 20                # timed repetitions (median reported, min-max shown)
    warmup: ClassVar[int] = 3                  # untimed runs first (module load, first-launch costs)
    check_shapes: ClassVar[int] = 6            # random shapes checked against float64 besides the fixed ones
    max_size: ClassVar[int | None] = None
    time_metric: ClassVar[str] = "op_time_ms"  # the metric steps are compared by
    rate_unit: ClassVar[str] = "GFLOP/s"
    vendor_name: ClassVar[str] = "vendor"      # part name suffix of the vendor-library timings
    #: Vendor row names of runs recorded before rows were named ``<library>-<precision>[-<layout>]``,
    #: mapped to today's names when a recording is read (the recorded data is never rewritten).
    old_vendor_names: ClassVar[dict[str, str]] = {}
    profile_size: ClassVar[int] = 1000         # the size Nsight Compute and the sanitizer launch

    def __init_subclass__(cls, **kwargs):
        """A study's ``module`` is the package its class is defined in and its ``name`` that
        package's last part, unless the class (or a study it extends) sets them."""
        super().__init_subclass__(**kwargs)
        package = cls.__module__.rpartition(".")[0] or cls.__module__
        if not hasattr(cls, "module"):
            cls.module = package
        if not hasattr(cls, "name"):
            cls.name = cls.module.rpartition(".")[2]

    # ------------------------------------------------------------------ derived

    def part(self, step: str, *kind: str) -> str:
        """The part name of a step's recording (``lenet-tiled``, ``lenet-tiled-ncu``)."""
        from .results import part_name

        return part_name(self.name, self.steps.get(step).slug, *kind)

    def size_of(self, case: str, size: int) -> int:
        """The size a measurement of ``case`` has when ``size`` was asked for (studies whose cases
        fix their own size, like the MLP's test cases, override this)."""
        return size

    def impl(self, step: str) -> StepImpl:
        return self.steps.impl(step)

    def sizes(self, value, name: str | None = None) -> list:
        """The sizes to time (batch sizes), or, for a study with a row per case, the cases to time;
        ``name`` is the parameter they came from, as errors name it (default ``size_name``: a
        profiles page's ``cudnn_batch_sizes`` is named as such)."""
        name = name or self.size_name
        if self.rows == "cases":
            import json

            example = json.dumps(list(self.default_sizes or self.cases[:1]))
            value = P.parsed_list(value)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
                raise P.ParameterError(f"{name}={P.shown(value)} is not a non-empty list of cases.",
                                       f"pass e.g. {name}={example}.")
            P.count(name, value, example)
            unknown = [v for v in value if v not in self.cases]
            if unknown:
                raise P.ParameterError(f"{name} holds {P.shown(unknown)}; the cases are {', '.join(self.cases)}.",
                                       f"pass e.g. {name}={example}.")
            return list(value)
        return P.sizes(name, value, maximum=self.max_size,
                       example="[" + ", ".join(map(str, self.default_sizes or (100,))) + "]")

    def check_problems(self, impl: StepImpl, case_params: dict[str, dict], sizes: list) -> None:
        """What measuring checks before it times a problem (``StepImpl.validate``: the step's
        parameters and its launches against the device's limits, the H100's without a GPU), for
        every problem a chapter times: run in every mode, so a replay refuses what a measurement
        would refuse instead of showing the recording of other values."""
        from .harness import problems

        for case, size in problems(self, sizes):
            impl.validate(self.problem(case, self.size_of(case, size)), case_params[case])

    def reported_csv(self, step: str | None = None):
        """The write-ups' numbers for the study (``data/reported/<study>.csv``), optionally one step's."""
        return reported_csv(self.name, step)

    def case_params(self, impl: StepImpl, params: dict | None, case_params: dict | None) -> dict[str, dict]:
        """Each case's parameters: the step's defaults, under ``params``, under ``case_params[case]``."""
        params = P.mapping("params", params)
        per_case = P.mapping("case_params", case_params)
        unknown = sorted(set(per_case) - set(self.cases))
        if unknown:
            raise P.ParameterError(f"case_params names {', '.join(unknown)}, which are not cases of the {self.name} study.",
                                   f"use the cases {', '.join(self.cases)}.")
        return {case: impl.params(**{**params, **P.mapping(f"case_params[{case!r}]", per_case.get(case))})
                for case in self.cases}

    # ------------------------------------------------------------------ hooks

    def columns(self) -> list[Column]:
        """The milestone table's columns after the size column."""
        raise NotImplementedError

    def problem(self, case: str, size: int):
        """The problem of ``case`` at ``size``: an object with ``flops``, ``min_bytes``, ``as_dict()``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what the harness asks
    # (kernelbook.harness runs the loops; a study says what its problem is)

    def array_module(self):
        """The array module outputs live in (CuPy; a test's toy study may hand NumPy)."""
        import cupy

        return cupy

    def inputs(self, impl: StepImpl, shape, rng, case: str | None = None) -> tuple:
        """Host input arrays for one problem (drawn from ``rng``, or the study's data)."""
        raise NotImplementedError

    def operands(self, impl: StepImpl, shape, host: tuple) -> tuple:
        """The device operands of ``impl.launch(y, *operands, shape, params)`` for host inputs
        (default: each array copied to the device, no kernel launched)."""
        xp = self.array_module()
        return tuple(upload(xp, a) for a in host)

    def check_cases(self, impl: StepImpl, params: dict, n_random: int, rng) -> list:
        """The problems a step is checked on (``harness.CheckCase``: inputs and float64 reference)."""
        raise NotImplementedError

    def judge(self, impl: StepImpl, got, case):
        """The verdict on one checked output (default: relative L2 error against float64)."""
        from .harness import judge

        return judge(impl, got, case)

    def timing_context(self, impl: StepImpl, case_params: dict, sizes: list, options: dict):
        """What the timed problems share (data sets, a network), made once per chapter."""
        return None

    def timed_operands(self, impl: StepImpl, case: str, size, shape, context) -> tuple:
        """The device operands a timed launch runs on (default: ``inputs`` drawn with seed 0)."""
        import numpy as np

        return self.operands(impl, shape, self.inputs(impl, shape, np.random.default_rng(0), case))

    def case_records(self, impl: StepImpl, case: str, shape, params: dict, operands: tuple, run, output, op,
                     context, time) -> list[tuple]:
        """Further ``(metric, value, unit)`` of a timed problem beside ``op_time_ms``: ``run()``
        launches once, ``output()`` poisons, launches and returns the output on the host,
        ``time(fn)`` times with the chapter's timer."""
        return []

    def size_records(self, impl: StepImpl, size, context, time) -> list[tuple]:
        """``(case, metric, value, unit)`` measured once per size after its cases (a network)."""
        return []

    def vendor_runs(self, sizes: list, seed: int):
        """The library calls of the vendor comparison (``harness.VendorRun``), one per problem."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the harness's loops

    def check(self, impl: StepImpl, case_params: dict[str, dict], n_random: int, seed: int | None):
        """Float64 checks: returns ``(records, check rows)``; records hold one ``correct`` per case."""
        from . import harness

        return harness.check(self, impl, case_params, n_random, seed)

    def measure(self, impl: StepImpl, case_params: dict[str, dict], sizes: list, repeats: int,
                warmup: int, options: dict) -> list[dict]:
        """Time a checked step; ``options`` holds the study's own chapter parameters."""
        from . import harness

        return harness.measure(self, impl, case_params, sizes, repeats, warmup, options)

    def options(self, **given) -> dict:
        """Validate the study's own chapter parameters (e.g. ``weights_path``)."""
        if given:
            raise P.ParameterError(f"The {self.name} study takes no parameter(s) {', '.join(sorted(given))}.",
                                   "remove them from the call.")
        return {}

    def launch_once(self, slug: str, case: str, size, params: dict, seed: int = 0, shape=None):
        """Prepare inputs and compile, then return a callable that launches the step once (what
        Nsight Compute and compute-sanitizer profile: nothing else may launch a kernel); ``shape``:
        this problem instead of the case's at ``size``."""
        from . import harness

        return harness.launch_once(self, slug, case, size, params, seed, shape)

    def sanitizer_problem(self, case: str):
        """The problem compute-sanitizer launches for ``case``, where the case's own is too large to
        check in reasonable time (memcheck instruments every access); None: the case's own problem
        at ``sanitizer_size``. It must keep what the case's kernels branch on (a study says which)."""
        return None

    def vendor(self, sizes: list, repeats: int, warmup: int) -> list[dict]:
        """The vendor library's timings (cuDNN, cuBLAS through PyTorch) on the study's cases."""
        from . import harness

        return harness.vendor(self, sizes, repeats, warmup)

    def expectations(self, chapter) -> list[str]:
        """Sentences that judge a chapter from its own records (the study's own view)."""
        return []

    def reported_frame(self, step: str):
        """The write-ups' rows for ``step`` (default: ``data/reported/<study>.csv``)."""
        return self.reported_csv(step)

    def targets(self) -> list[dict]:
        """The study's speed targets: ``{"what", "case", "limit_ms", "steps", "vendor"}`` each, where
        ``steps`` are the steps that count for it and ``vendor`` the library variant to beat."""
        return []

    def reported_best(self):
        """The write-ups' best reported result beside this book's best, as a DataFrame (or None)."""
        return None

    def reported(self, step: str):
        """The write-ups' reported numbers for ``step`` as a styled table (or None)."""
        return None


def upload(xp, host):
    """A device copy of a host array made by a plain copy (``.set``: no kernel is launched)."""
    import numpy as np

    host = np.ascontiguousarray(host)
    dev = xp.empty(host.shape, dtype=host.dtype)
    if hasattr(dev, "set"):
        dev.set(host)
    else:
        dev[...] = host
    return dev


def reported_csv(study: str, step: str | None = None):
    """The write-ups' numbers for ``study`` (``data/reported/<study>.csv``), optionally one step's."""
    import pandas as pd

    from . import paths
    from .errors import DataError

    path = paths.data_dir() / "reported" / f"{study}.csv"
    if not path.is_file():
        raise DataError(f"{path} is missing.", "restore it with `git checkout -- data/reported/`.")
    frame = pd.read_csv(path)
    return frame[frame["step"] == step].reset_index(drop=True) if step else frame
