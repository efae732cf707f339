"""Steps 09 and 10 of the VGG study: Winograd F(2×2, K×K) in FP32, and the final step, which runs
the FP32-accurate kernel of the study chosen for the call's GPU (on a Hopper GPU, the faster there of
steps 13 and 14, timed once per shape; elsewhere Winograd where it has transform tables, 3xTF32
otherwise)."""

from __future__ import annotations

from ..errors import LaunchLimitError, ParameterError, ShapeError
from ..steps import Launch
from .impls import ThreeTF32, VggStep, _int32, _int_param, cached_workspace, ceil_div, check_shape_type
from .problem import ConvPoolShape

WINOGRAD_K = (1, 3, 5, 7)               # the kernel sizes 09_winograd.cu has transform tables for
WINOGRAD_WORKSPACE_MAX = 8 * 1024 ** 3  # bytes; beyond this, split the batch


class Winograd(VggStep):
    """Step 09: Winograd F(2×2, K×K) in FP32 — α² = (K+1)² multiplies per 2×2 outputs instead of 4·K².

    Four launches (kernels/vgg/09_winograd.cu): weight transform, input transform, 36 batched
    FP32 GEMMs (128×128 tiles, 8×8 per thread), output transform fused with bias, ReLU and the
    pool (a 2×2 output tile is one pooling window). The transformed operands live in a
    workspace this object allocates once per size and device and keeps (so a CUDA graph that
    captured a launch stays valid); two launches of this step on different streams at the same
    time would share it, so don't do that.

    Accuracy: the transforms scale FP32 rounding by their entries; rel. L2 against float64 was
    2.7e-6 for the studied layer (K=5, C=256) and 6.5e-6 for K=7 in a float32 simulation
    (``winograd.winograd_conv_pool``), so the FP32 tolerance 1e-5 stands. K must be 1, 3, 5 or 7.
    """

    kernel_names = ("winograd_weights", "winograd_input", "winograd_gemm", "winograd_output")

    defaults = {"threads": 256}   # block size of the three transform kernels
    GEMM_TILE = 128
    GEMM_K = 8
    GEMM_THREADS = 256
    GEMM_SMEM = 3 * 2 * 8 * 128 * 4   # static: three stages of two 8×128 slabs

    def math_for(self, params, problem) -> str:
        """FP32 FMAs, (K+1)^2 per 2x2 outputs instead of 4 K^2: the floor counts those (floor.unit)."""
        return f"fp32*{(problem.K + 1) ** 2 / (4 * problem.K ** 2):.4g}"

    def __init__(self):
        self._workspaces: dict = {}

    def check_params(self, params):
        t = _int_param(params, "threads", 32, 1024, 256)
        if t % 32:
            raise ParameterError(f"threads={t} is not a multiple of 32 (whole warps).", "pass threads=128 or 256.")

    def defines(self, params, shape):
        return {"KSIZE": shape.K}

    def padded(self, shape: ConvPoolShape) -> tuple[int, int, int, int]:
        """(α², Cp, Mp, Pp): the GEMMs' sizes, rounded up to whole tiles."""
        tiles = shape.B * shape.Hp * shape.Wp
        g = self.GEMM_TILE
        return ((shape.K + 1) ** 2, ceil_div(shape.C, self.GEMM_K) * self.GEMM_K,
                ceil_div(shape.M, g) * g, ceil_div(tiles, g) * g)

    def workspace_floats(self, shape: ConvPoolShape) -> tuple[int, int, int]:
        a2, cp_, mp, pp = self.padded(shape)
        return a2 * cp_ * mp, a2 * cp_ * pp, a2 * mp * pp

    def launches(self, shape: ConvPoolShape, params: dict) -> list[Launch]:
        """The four launches, in order: the two transforms, the batched GEMMs, the output."""
        a2, cp_, mp, pp = self.padded(shape)
        t = params["threads"]
        g = self.GEMM_TILE
        return [Launch("winograd_weights", (ceil_div(cp_ * mp, t), 1, 1), (t, 1, 1)),
                Launch("winograd_input", (ceil_div(cp_ * pp, t), 1, 1), (t, 1, 1)),
                Launch("winograd_gemm", (pp // g, mp // g, a2), (self.GEMM_THREADS, 1, 1), static_smem=self.GEMM_SMEM),
                Launch("winograd_output", (ceil_div(shape.M * shape.B * shape.Hp * shape.Wp, t), 1, 1), (t, 1, 1))]

    def launch_args(self, launch, y, operands, shape, params):
        x, w, b = operands
        u, v, mx = self.workspace(shape)
        _, cp_, mp, pp = _int32(*self.padded(shape))
        B, C, H, W, M = _int32(shape.B, shape.C, shape.H, shape.W, shape.M)
        return {"winograd_weights": (u, w, C, M, cp_, mp),
                "winograd_input": (v, x, B, C, H, W, cp_, pp),
                "winograd_gemm": (mx, u, v, cp_, mp, pp),
                "winograd_output": (y, mx, b, B, H, W, M, mp, pp)}[launch.kernel]

    def geometry(self, shape, params):
        gemm = self.launches(shape, params)[2]   # the GEMM: where the time goes
        return gemm.grid, gemm.block, gemm.dynamic_smem

    def validate(self, shape, params):
        check_shape_type(shape)
        if shape.K not in WINOGRAD_K:
            raise ShapeError(f"Step 'winograd' has F(2×2, K×K) transforms for K in {WINOGRAD_K}, not K={shape.K}.",
                             "use another step (e.g. step='final' or 'register-tiled') for this kernel size.")
        self.check_params(params)
        nbytes = 4 * sum(self.workspace_floats(shape))
        if nbytes > WINOGRAD_WORKSPACE_MAX:
            raise ShapeError(f"Step 'winograd' needs a {nbytes / 2 ** 30:.1f} GiB workspace for {shape.as_dict()} "
                             f"(limit {WINOGRAD_WORKSPACE_MAX / 2 ** 30:.0f} GiB).",
                             "split the batch into smaller calls, or use another step.")
        self.check_launches(shape, params)

    def workspace(self, shape: ConvPoolShape):
        return cached_workspace(self._workspaces, self.workspace_floats(shape))

    def prepare(self, params, problem):
        super().prepare(params, problem)
        self.workspace(problem)


class _Step09Kernels(Winograd):
    """Step 09's kernels and launches, for step 10 to use (not in the step list itself)."""

    @property
    def slug(self) -> str:
        return "winograd"

    @property
    def source(self) -> str:
        return "vgg/09_winograd.cu"




_UNDECIDED = object()


def _takes(step, shape) -> bool:
    try:
        step.validate(shape, step.params())
        return True
    except (ShapeError, LaunchLimitError):
        return False


def faster(steps: list, shape: ConvPoolShape):
    """Of ``steps`` (each takes ``shape``), the one that runs it faster on this GPU: timed here
    (``timed_faster``) when measuring; on a page that replays a recording, the faster of the two
    in the book's recording of that GPU (``recorded_faster``). None for no step; the first when
    neither can tell."""
    from .. import limits

    if len(steps) <= 1:
        return steps[0] if steps else None
    if not measuring():
        return recorded_faster(steps, limits.current().name) or steps[0]
    return timed_faster(steps, shape)


def measuring() -> bool:
    """Whether this process's own GPU runs the calls (not a page showing a recording)."""
    from .. import gpu, limits

    return not limits.is_assumed() and gpu.available()


def recorded_faster(steps: list, device: str):
    """The step of ``steps`` with the lowest recorded time of the study's timed case in the book's
    recording on ``device`` (a GPU's name); None when that recording lacks one of them."""
    from ..bookrecording import book_run
    from ..report import record_value
    from ..stepdata import load_recorded
    from . import STUDY

    run = book_run(STUDY, device)
    if run is None:
        return None
    times = {}
    for step in steps:
        found = load_recorded(STUDY, step.slug, prefer_run=run.run_id)
        ms = (record_value(found.records, STUDY.time_metric, STUDY.profile_cases[0])
              if found is not None and found.session.run.run_id == run.run_id else None)
        if ms is None:
            return None
        times[step.slug] = ms
    return min(steps, key=lambda step: times[step.slug])


TIMING_BYTES = 256 * 1024 ** 2   # the largest input the choice allocates; a larger batch is timed in part


def timed_faster(steps: list, shape: ConvPoolShape, repeats: int = 3):
    """The step of ``steps`` whose call on ``shape`` (its batch cut so that the input stays under
    ``TIMING_BYTES``) has the lowest median here, timed by the book's timer (``measure.time_gpu``:
    CUDA events, one warm-up that compiles and packs) on the study's inputs and operands, as each
    step's own page times it. ``_UNDECIDED`` while a CUDA graph is being captured (no launch may be
    timed then)."""
    import dataclasses

    import cupy as cp
    import numpy as np

    from ..measure import time_gpu
    from . import STUDY

    if cp.cuda.get_current_stream().is_capturing():
        return _UNDECIDED
    per_image = 4 * shape.C * shape.H * shape.W
    sample = dataclasses.replace(shape, B=max(1, min(shape.B, TIMING_BYTES // per_image)))
    host = STUDY.inputs(None, sample, np.random.default_rng(0))
    y = cp.empty(sample.y_shape, dtype=cp.float32)
    times = {}
    for step in steps:
        params = step.params()
        operands = STUDY.operands(step, sample, host)
        step.prepare(params, sample)
        times[step.slug] = time_gpu(lambda: step.launch(y, *operands, sample, params), repeats, 1).median
    return min(steps, key=lambda step: times[step.slug])


def on_hopper() -> bool:
    """True when this process's GPU is a Hopper (compute capability 9.0, what ``sm_90a`` runs on);
    asked of the driver once per process (``limits.current``), so a call pays a look-up."""
    from .. import gpu, limits
    from ..capability import HOPPER

    if limits.is_assumed():   # a page showing a recording asks as the recording's device ran it
        return tuple(limits.current().compute_capability) == HOPPER
    return gpu.available() and tuple(limits.current().compute_capability) == HOPPER


class Final(ThreeTF32):
    """Step 10: the FP32-accurate kernel of the study chosen for the call's GPU.

    On a Hopper GPU that is the faster there of the FP32-accurate steps of Hopper's own path (TMA +
    wgmma), step 13 (3xTF32) and step 14 (the cross terms on BF16): both pass the range test, and
    which is faster depends on the GPU model (the recorded runs have step 13 ahead on the H100 and
    step 14 on the H200). The first call of a shape on a GPU times both (``timed_faster``: a few
    launches each, on the batch cut to 256 MiB of input) and later calls of that shape go straight
    to the faster; a page replaying a recording takes the faster in the book's recording of its GPU.
    Elsewhere (and for a shape neither takes) it is step 09's Winograd F(2×2, K×K) for K in 1, 3,
    5, 7 (its kernels, from kernels/vgg/09_winograd.cu), which the recorded runs time faster than
    3xTF32 at B=1, and for other K this file's 3xTF32 implicit GEMM (step 08's kernel with step
    08's tile). All are FP32-accurate (tolerance 1e-5). With a raw weight array, the Hopper steps
    pack it on their first call and compare it with that copy on the device on each later one (no
    copy to the host).
    """

    kernel_names = ("conv_pool_final", "tc_pack_weights", "tc_pack_input")
    HOPPER_STEPS = ("hopper-3xtf32", "hopper-split")   # the FP32-accurate steps of Hopper's path

    def __init__(self):
        super().__init__()
        self._winograd = _Step09Kernels()
        self._hopper_shapes: dict = {}

    def uses_winograd(self, shape: ConvPoolShape) -> bool:
        return isinstance(shape, ConvPoolShape) and shape.K in WINOGRAD_K and self.hopper(shape) is None

    def hopper(self, shape: ConvPoolShape):
        """The Hopper step that runs this call (a Hopper GPU and a shape one of ``HOPPER_STEPS``
        takes), else None; decided once per GPU and shape: the faster on this GPU (``faster``)."""
        if not (isinstance(shape, ConvPoolShape) and on_hopper()):
            return None
        from .. import limits

        key = (limits.current().name, limits.is_assumed(), shape)
        found = self._hopper_shapes.get(key)
        if found is None:
            taking = [step for step in map(self.other, self.HOPPER_STEPS) if _takes(step, shape)]
            choice = faster(taking, shape)
            if choice is _UNDECIDED:          # a graph is being captured: decide on a later call
                return taking[0]
            found = (choice,)
            if len(self._hopper_shapes) > 256:
                self._hopper_shapes.clear()
            self._hopper_shapes[key] = found
        return found[0]

    def routed(self, shape):
        """``(step, its params)`` whose kernels run this call instead of this file's, or None."""
        hopper = self.hopper(shape)
        if hopper is not None:
            return hopper, hopper.params()
        if self.uses_winograd(shape):
            return self._winograd, self._winograd.params()
        return None

    def math_for(self, params, problem) -> str:
        """The unit of the step that runs the call (Winograd counts its own multiplies), else 3xTF32."""
        other = self.routed(problem)
        return other[0].math_for(other[1], problem) if other else "3xtf32"

    def source_for(self, params, problem) -> str:
        other = self.routed(problem)
        return other[0].source if other else self.source

    def defines(self, params, shape):
        other = self.routed(shape)
        return other[0].defines(other[1], shape) if other else super().defines(params, shape)

    def arch_for(self, params, problem) -> str | None:
        """``sm_90a`` where a Hopper step's kernels run the call (the compiler report builds them so)."""
        hopper = self.hopper(problem)
        return hopper.arch if hopper else self.arch

    def kernel(self, name, params, problem):
        hopper = self.hopper(problem)
        return hopper.kernel(name, hopper.params(), problem) if hopper else super().kernel(name, params, problem)

    def kernels_for(self, params, problem):
        hopper = self.hopper(problem)
        return hopper.kernel_names if hopper else super().kernels_for(params, problem)

    def launches(self, shape, params):
        """Step 09's four launches for K in 1, 3, 5, 7; else the 3xTF32 ones (read by the limit
        checks and ``kernels_for``; ``launch`` routes the call). On a Hopper GPU, the chosen Hopper
        step's (None: it launches by hand)."""
        other = self.routed(shape)
        return other[0].launches(shape, other[1]) if other else super().launches(shape, params)

    def geometry(self, shape, params):
        other = self.routed(shape)
        return other[0].geometry(shape, other[1]) if other else super().geometry(shape, params)

    def validate(self, shape, params):
        super().validate(shape, params)   # the 3xTF32 parameters and launches are checked either way
        if self.uses_winograd(shape):
            self._winograd.validate(shape, self._winograd.params())

    def prepare(self, params, problem):
        other = self.routed(problem)
        if other:
            other[0].prepare(other[1], problem)
        else:
            super().prepare(params, problem)

    def handoff(self, shape, params, y, operands):
        """A Hopper GPU: the chosen Hopper step's launches; else K in 1, 3, 5, 7: step 09's
        Winograd launches."""
        return self.routed(shape)
