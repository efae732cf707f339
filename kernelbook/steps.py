"""A study's ordered list of steps: the single source of truth for its chapters.

One ``StepList`` per study, written once in the study's ``steps.py``::

    STEPS = StepList("lenet", [
        Step(0, "baseline", "00_baseline", "Baseline: direct convolution", Baseline),
        Step(1, "constant-memory", "01_constant_memory", "Constant memory", ConstantMemory),
        ...
    ])

Everything else is derived from it: the ``.cu`` file (``kernels/<study>/<stem>.cu``), the
notebook (``book/<study>/<stem>.md``), the part names under which runs are recorded, and the
*previous* step a chapter compares with (the one before it in the list, never typed by hand).
A slug that names no step is an error that lists the valid ones.

A step's implementation is a ``StepImpl``: its parameters (``defaults``), what it accepts
(``validate``, called before any launch) and how it launches. How a launch's arguments look is
the study's business (a convolution takes ``x`` and ``k``, an MLP ``x`` and six weight arrays);
the harness calls ``impl.launch(y, *operands, problem, params)`` and needs ``params``,
``validate``, ``prepare`` and the class attributes.

A new step declares its launches once, as data: ``launches(problem, params) -> [Launch]`` (kernel,
grid, block, shared memory, launch bounds) and ``launch_args(launch, y, operands, problem, params)``.
From that one list the core derives the limit checks (``validate``, before any launch), what is
compiled (``prepare``), which kernels the profilers and the compiler report look at
(``kernels_for``) and the launch itself (``launch``)::

    class Tiled(ConvStep):
        kernel_names = ("conv_tiled",)
        defaults = {"tile": 16}

        def launches(self, shape, params):
            t = params["tile"]
            return [Launch("conv_tiled", (ceil_div(shape.W_out, t), ceil_div(shape.H_out, t), shape.B),
                           (t, t, 1), dynamic_smem=4 * t * t)]

        def launch_args(self, launch, y, operands, shape, params):
            x, k = operands
            return (y, x, k, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K))

Pre-work is declared too: an ``Upload`` in the list copies an operand to constant memory before
the launches after it, a ``LibraryCall`` calls a vendor library (cuBLAS) among them; ``operands`` turns the caller's operands into the launches' (weights packed
once and cached, a workspace for the call); ``handoff`` runs another step's launches for a case it
hands on. ``launch`` is the core's, the same for every step (``tests/test_declared_launches.py``
checks that no step overrides it).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator

from . import paths
from .errors import ParameterError, StepError


def renamed(old: str, new: str, value=None):
    """A deprecated name still accepted for one release: warn (``DeprecationWarning`` naming the
    new name) and hand back ``value`` (``variant=`` is now ``step=``, ``get_variant`` ``get_step``)."""
    warnings.warn(f"{old} is deprecated; use {new}.", DeprecationWarning, stacklevel=3)
    return value


STEM = re.compile(r"^(\d{2})_[a-z0-9_]+$")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a step, as data: read by the limit checks, the compiler, the profilers
    and the launch alike (``StepImpl.launches``)."""

    kernel: str
    grid: tuple
    block: tuple
    dynamic_smem: int = 0       # bytes of dynamic shared memory
    static_smem: int = 0        # bytes of static shared memory (as ptxas reports it), for the limit check
    min_blocks: int = 0         # __launch_bounds__ minimum blocks per SM (0: none)
    #: Which of a step's launches this is, for ``launch_args`` when one kernel is launched more
    #: than once with other arguments (e.g. "layer2"); empty when the kernel name says it.
    key: str = ""
    #: Which of the step's own streams (``StepImpl.streams``) it runs on; None: the caller's.
    stream: int | None = None


@dataclass(frozen=True)
class Upload:
    """Pre-work as data, one of a step's ``launches``: copy operand ``operand`` (a float32 array)
    into the ``__constant__`` symbol ``symbol`` of the step's build, ordered on the call's stream
    before the launches after it; ``padded_bytes`` larger than the operand's bytes zeroes the rest
    of the symbol up to it (a last group's padding)."""

    symbol: str
    operand: int = 1
    padded_bytes: int = 0


@dataclass(frozen=True)
class LibraryCall:
    """A vendor-library call as data, one of a step's ``launches`` (cuBLAS through ``cupy.matmul``):
    the library picks and launches its own kernels; the step makes the call (``library_call``),
    on the call's stream, in its place among the launches. ``key`` says which one it is."""

    name: str
    key: str = ""


def kernel_launches(declared) -> list[Launch]:
    """The kernel launches among a step's declared ``launches`` (its uploads left out)."""
    return [item for item in declared or [] if isinstance(item, Launch)]


_SET: dict = {}  # (id(kernel), attribute) -> (kernel, value) last set


def set_once(kernel, attribute: str, value) -> None:
    """Set a compiled kernel's function attribute (the shared-memory opt-in, the L1 carveout) once
    per kernel and value: the driver keeps it, so a launch path that runs on every call does not
    ask the driver again."""
    key = (id(kernel), attribute)
    last = _SET.get(key)
    if last is None or last[0] is not kernel or last[1] != value:
        setattr(kernel, attribute, value)
        _SET[key] = (kernel, value)   # (the kernel is kept, so its id is not reused)


def opt_in(kernel, launch: "Launch") -> None:
    """A kernel whose static plus dynamic shared memory passes the default 48 KB must opt in to its
    dynamic part before it launches (once per kernel and size: ``set_once``)."""
    from .limits import H100

    if launch.dynamic_smem and launch.dynamic_smem + launch.static_smem > H100.static_smem_per_block:
        set_once(kernel, "max_dynamic_shared_size_bytes", launch.dynamic_smem)


class StepImpl:
    """Base of every step's implementation. Subclasses set the class attributes and declare their
    launches (``launches``, ``launch_args``); ``launch`` is the core's, the same for every step."""

    kernel_names: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict] = {}        # every parameter a caller may set, with its default
    tolerance: ClassVar[float] = 1e-5    # relative L2 error allowed against float64
    #: False for a step that claims FP32 accuracy only inside a narrower range and says so in its
    #: chapter (the MLP's 3xFP16 step 15): the range test (``claims_fp32_range``) is not its claim.
    full_range: ClassVar[bool] = True
    precision: ClassVar[str] = "fp32"
    graph_capturable: ClassVar[bool] = True  # False when its launches use streams of their own
    #: The arithmetic unit the step's products run on, for its floor: fp32 (CUDA cores), fp16x2
    #: (__half2 on CUDA cores), tf32 or fp16 (tensor cores), 3xtf32 or 3xfp16 (three tensor-core
    #: products per product, for FP32 accuracy), tf32+2xbf16 (one TF32 and two BF16 products).
    #: ``math_for`` answers per problem.
    math: ClassVar[str] = "fp32"
    #: None: NVRTC for the device's architecture; "sm_90a": nvcc for Hopper's architecture-specific
    #: target (wgmma, setmaxnreg), which also the compile test uses for this step.
    arch: ClassVar[str | None] = None
    step: "Step"                          # set by StepList
    step_list: "StepList"                 # set by StepList: the study's steps, for ``other``

    def other(self, slug: str) -> "StepImpl":
        """Another step of the same study (a step that hands a case to an earlier step's kernel
        asks for it here, so no step module imports the step list that imports it)."""
        return self.step_list.impl(slug)

    @property
    def slug(self) -> str:
        return self.step.slug

    @property
    def title(self) -> str:
        return self.step.title

    @property
    def source(self) -> str:
        """The ``.cu`` file relative to ``kernels/``."""
        return self.step.source

    def params(self, **overrides) -> dict:
        """Defaults merged with overrides; an unknown name is an error that lists the valid ones."""
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "none"
            raise ParameterError(f"Step {self.slug!r} has no parameter(s) {', '.join(unknown)}.",
                                 f"use one of: {valid}.")
        merged = dict(self.defaults)
        merged.update(overrides)
        return merged

    def defines(self, params: dict, problem) -> dict:
        """Compile-time parameters (``-D``) for ``params`` and ``problem``."""
        return {}

    # ------------------------------------------------------------------ launches as data

    def launches(self, problem, params: dict) -> list[Launch | Upload | LibraryCall] | None:
        """The step's launches for ``problem``, in order: kernel launches, the uploads before them
        and library calls among them (None: the step launches by hand)."""
        return None

    def operands(self, operands: tuple, problem, params: dict, stream=None) -> tuple:
        """The operands the declared launches take, from the caller's: pre-work that launches
        nothing (weights packed once and cached, a workspace for this call). Default: as given."""
        return operands

    def handoff(self, problem, params: dict, y, operands: tuple) -> tuple["StepImpl", dict] | None:
        """``(step, its params)`` when this call runs another step's launches instead (a step that
        hands a case to an earlier step's kernel, ``self.other(slug)``); None: its own."""
        return None

    def streams(self, params: dict) -> tuple:
        """The step's own streams, for launches that name one (``Launch.stream``); default none."""
        return ()

    def library_call(self, call: LibraryCall, y, operands: tuple, problem, params: dict, stream=None) -> None:
        """Make one declared ``LibraryCall`` on ``stream`` (a step that declares one says how)."""
        raise NotImplementedError(f"step {self.slug!r} declares a library call but no library_call()")

    def upload(self, upload: Upload, array, problem, params: dict, stream=None) -> None:
        """Run one declared ``Upload``: the copy, then the padding's zeros, ordered on ``stream``."""
        from . import kernels

        module = kernels.get_module(self.source, self.defines(params, problem))
        nbytes = 4 * array.size
        kernels.upload_constant(module, upload.symbol, array, nbytes, stream)
        if upload.padded_bytes > nbytes:
            (module.get_global(upload.symbol) + nbytes).memset_async(0, upload.padded_bytes - nbytes, stream)

    def launch_args(self, launch: Launch, y, operands: tuple, problem, params: dict) -> tuple:
        """The kernel arguments of one of ``launches`` (a step that declares launches says)."""
        raise NotImplementedError(f"step {self.slug!r} declares launches but not their launch_args()")

    def check_launches(self, problem, params: dict, launches: list[Launch] | None = None) -> None:
        """Refuse, before any launch, a declared launch the device cannot run (``launches``: these
        of the step's launches, in this order; default all of them)."""
        from . import limits

        for launch in kernel_launches(self.launches(problem, params) if launches is None else launches):
            what = f"Step {self.slug!r}: {launch.kernel}"
            limits.check_launch(launch.grid, launch.block, launch.dynamic_smem, launch.static_smem, what=what)
            if launch.min_blocks:
                block = launch.block if isinstance(launch.block, tuple) else (launch.block,)
                threads = 1
                for size in block:
                    threads *= size
                limits.check_launch_bounds(threads, launch.min_blocks, what=what)

    def launch(self, y, *operands_problem_params, stream=None):
        """Enqueue the declared launches: ``launch(y, *operands, problem, params)``, the same for
        every step (a step declares; it does not override this): the hand-off, the operands'
        pre-work, then each upload and kernel launch in order, on ``stream``. Returns ``y``."""
        *operands, problem, params = operands_problem_params
        handed = self.handoff(problem, params, y, tuple(operands))
        if handed is not None:
            other, other_params = handed
            return other.launch(y, *operands, problem, other_params, stream=stream)
        declared = self.launches(problem, params)
        if declared is None:
            raise NotImplementedError(f"step {self.slug!r} declares no launches")
        self.run_launches(declared, y, self.operands(tuple(operands), problem, params, stream), problem, params,
                          stream)
        return y

    def run_launches(self, declared: list, y, operands: tuple, problem, params: dict, stream=None) -> None:
        """Each of ``declared`` in order on ``stream``: an ``Upload`` copies, a ``LibraryCall`` calls
        the library, a ``Launch`` launches (on one of the step's own streams when it names one, after
        the caller's stream has finished what came before: an upload it reads)."""
        own, waited = None, stream is None
        for launch in declared:
            if isinstance(launch, Upload):
                self.upload(launch, operands[launch.operand], problem, params, stream)
                continue
            if isinstance(launch, LibraryCall):
                self.library_call(launch, y, operands, problem, params, stream)
                continue
            on = stream
            if launch.stream is not None:
                if not waited:
                    stream.synchronize()
                    waited = True
                own = self.streams(params) if own is None else own
                on = own[launch.stream]
            kernel = self.kernel(launch.kernel, params, problem)
            opt_in(kernel, launch)
            kernel(launch.grid, launch.block, self.launch_args(launch, y, operands, problem, params),
                   shared_mem=launch.dynamic_smem, stream=on)

    def validate(self, problem, params: dict) -> None:
        """Raise ``ParameterError``/``ShapeError``/``LaunchLimitError``; called before any launch.
        (Default: the declared launches' limits; a step adds its own parameter checks first.)"""
        self.check_launches(problem, params)

    def math_for(self, params: dict, problem) -> str:
        return self.math

    def kernels_for(self, params: dict, problem) -> tuple[str, ...] | None:
        """The kernels a launch for ``problem`` runs (None: every kernel of the build). A file may
        hold kernels of other paths that compile as stubs; their resources are no evidence."""
        declared = kernel_launches(self.launches(problem, params))
        return tuple(dict.fromkeys(launch.kernel for launch in declared)) if declared else None

    def source_for(self, params: dict, problem) -> str:
        """The ``.cu`` file whose kernels run for ``problem`` (a step may hand a case to an earlier
        step's kernel that measured faster for it; the chapter says so)."""
        return self.source

    def kernel(self, name: str, params: dict, problem):
        from . import kernels

        return kernels.get_kernel(self.source, name, self.defines(params, problem), arch=self.arch)

    def prepare(self, params: dict, problem) -> None:
        """Compile everything ``launch`` needs for ``problem``, so compiling stays out of timings."""
        declared = kernel_launches(self.launches(problem, params))
        for name in dict.fromkeys(launch.kernel for launch in declared) if declared else self.kernel_names:
            self.kernel(name, params, problem)


@dataclass(frozen=True)
class Step:
    number: int
    slug: str
    stem: str            # file stem shared by the .cu file and the notebook, e.g. "00_baseline"
    title: str
    impl: type[StepImpl]
    builds_on: str | None = None  # the step it changes, when that is not the one before it
    study: str = ""      # filled by StepList

    @property
    def source(self) -> str:
        return f"{self.study}/{self.stem}.cu"

    @property
    def notebook(self) -> str:
        """Relative to the repository root, without extension (as ``_toc.yml`` writes it)."""
        return f"book/{self.study}/{self.stem}"


@dataclass
class StepList:
    """The ordered steps of one study."""

    study: str
    steps: list[Step]
    _impls: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        fixed = []
        for position, step in enumerate(self.steps):
            match = STEM.match(step.stem)
            if not match or int(match.group(1)) != step.number:
                raise ValueError(f"step {step.slug}: stem {step.stem!r} must start with its number {step.number:02d}_")
            if not SLUG.match(step.slug):
                raise ValueError(f"step slug {step.slug!r} must be lower-case letters, digits and '-'")
            if position and step.number <= fixed[-1].number:
                raise ValueError(f"step {step.slug}: numbers must increase ({fixed[-1].number} then {step.number})")
            fixed.append(Step(step.number, step.slug, step.stem, step.title, step.impl, step.builds_on, self.study))
        slugs = [s.slug for s in fixed]
        if len(set(slugs)) != len(slugs):
            raise ValueError(f"duplicate slugs in the {self.study} step list: {slugs}")
        self.steps = fixed
        for step in fixed:
            if step.builds_on is not None and step.builds_on not in slugs[:slugs.index(step.slug)]:
                raise ValueError(f"step {step.slug} builds on {step.builds_on!r}, which is no earlier step: {slugs}")
        for step in fixed:
            impl = step.impl()
            impl.step = step
            impl.step_list = self
            self._impls[step.slug] = impl

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def slugs(self) -> list[str]:
        return [s.slug for s in self.steps]

    def get(self, slug: str) -> Step:
        for step in self.steps:
            if step.slug == slug:
                return step
        raise StepError(f"The {self.study} study has no step {slug!r}.", f"use one of: {', '.join(self.slugs())}.")

    def impl(self, slug: str) -> StepImpl:
        self.get(slug)
        return self._impls[slug]

    def previous(self, slug: str) -> Step | None:
        """The step ``slug`` changes: its ``builds_on``, else the one before it (None for the first)."""
        step = self.get(slug)
        if step.builds_on:
            return self.get(step.builds_on)
        index = self.slugs().index(step.slug)
        return self.steps[index - 1] if index else None

    @property
    def baseline(self) -> Step:
        return self.steps[0]

    def check_files(self) -> list[str]:
        """Problems between the list and the files: each step's .cu and notebook must exist, and
        every numbered .cu file and notebook of the study must be a step (or a page, 9x_)."""
        problems = []
        kernels_dir = paths.kernels_dir() / self.study
        book_dir = paths.book_dir() / self.study
        for step in self.steps:
            if not (paths.kernels_dir() / step.source).is_file():
                problems.append(f"{step.slug}: kernels/{step.source} is missing")
            if not (paths.REPO_ROOT / f"{step.notebook}.md").is_file():
                problems.append(f"{step.slug}: {step.notebook}.md is missing")
        stems = {s.stem for s in self.steps}
        for folder, suffix in ((kernels_dir, ".cu"), (book_dir, ".md")):
            for path in sorted(folder.glob(f"[0-9][0-9]_*{suffix}")):
                if path.stem not in stems and not path.stem.startswith("9"):
                    problems.append(f"{path.relative_to(paths.REPO_ROOT)} is numbered like a step but is not in the list")
        return problems


def slugs_of(steps: Iterable[Step]) -> list[str]:
    return [s.slug for s in steps]
