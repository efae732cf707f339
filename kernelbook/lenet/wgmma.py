"""Step 16, the wgmma final: both layers on Hopper's asynchronous warpgroup MMA (sm_90a), at
FP32-level accuracy (power-of-two-scaled FP16 hi/lo split), fed by bulk copies in a persistent grid.

The launcher caches what does not change between calls: a validated (shape, parameters) pair is
not validated again, and the plan, the compiled kernel, the device's multiprocessor count and the
resident blocks per SM are looked up once per (shape, parameters, device). A user calling
``conv_forward`` in a loop pays the argument checks and one kernel launch.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import ParameterError
from ..limits import H100
from ..steps import Launch
from .convstep import ConvShape, ConvStep, Planned, ceil_div, check_persistent, generic_plan, int32, persistent_launches

WGMMA_MAX_K = 7            # the 8-column window holds both column offsets only for K <= 7
WGMMA_MAX_COLUMNS = 32     # (map, output row) pairs per position: N of the wide product <= 128
SMEM_MAX = 227 * 1024      # dynamic shared memory one block may opt in to

# 'auto' configurations by layer kind (wide: at least 8 maps, i.e. C3), from the device sweeps in
# kernels/lenet/DESIGN.md (step 16): two blocks of two warpgroups per SM, commit groups of 3 k-steps
# for C3 (120 registers), one group per tile for C1 (4 k-steps, 100 registers).
AUTO = {
    "wide": {"threads": 256, "min_blocks": 2, "group": 3, "stages": 2, "streaming_stores": True},
    "narrow": {"threads": 256, "min_blocks": 2, "group": 4, "stages": 2, "streaming_stores": True},
}


class WgmmaFinal(Planned, ConvStep):
    """wgmma final: warpgroup MMA (``wgmma.mma_async``, A from registers, Toeplitz weights as B in
    shared memory), FP16 hi/lo split with power-of-two scales, bulk-copy input ring, persistent grid.

    Changes from ``hopper-final`` (step 15): C3 on ``wgmma`` instead of per-warp ``mma.sync``
    (64 positions x all maps per instruction, accumulators per warpgroup, no dependent-MMA wait
    per warp), and C1 on the same kernel (two output rows per position) instead of the FP32
    CUDA-core kernel; each image arrives by ``cp.async.bulk`` into a ring of shared-memory stages
    completing on mbarriers; the plan, kernel and device facts are cached per shape.

    Parameters ('auto' picks per layer kind, see ``AUTO``): ``threads`` (128..1024, whole
    warpgroups), ``min_blocks`` (1..4, ``__launch_bounds__``), ``group`` (k-steps per wgmma commit
    group, 1..64), ``stages`` (input stages in flight, 1..4), ``rows_per_position`` (1..4; 'auto':
    2 when 2 * M <= 16, else 1), ``streaming_stores`` (bool), ``blocks_per_sm`` ('auto' = the
    occupancy of the compiled kernel, or 1..32: the persistent grid is min(B, SMs x blocks_per_sm)).

    Shapes with K > 7, more than 32 (map, row) columns, or an image too large for shared memory
    run ``conv_generic`` (FP32 on CUDA cores, slow, exact); ``plan()["reason"]`` says why.

    Build: ``nvcc -gencode=arch=compute_90a,code=sm_90a`` (``arch``): ``wgmma`` exists only on the
    sm_90a target, so this step needs an H100 or H200 and refuses other GPUs before launching.
    """

    plan_math = {"conv_wgmma": "3xfp16"}

    kernel_names = ("conv_wgmma", "conv_generic")
    defaults = {"threads": "auto", "min_blocks": "auto", "group": "auto", "stages": "auto",
                "rows_per_position": "auto", "streaming_stores": "auto", "blocks_per_sm": "auto"}
    tolerance = 1e-5
    precision: ClassVar[str] = "fp32"
    arch: ClassVar[str] = "sm_90a"

    def __init__(self) -> None:
        self._plans: dict = {}       # (shape, params) -> plan
        self._validated: set = set()  # (shape, params) accepted by validate
        self._launches: dict = {}    # (shape, params, device) -> [Launch] (the persistent grid)
        self._kernels: dict = {}     # (shape, params, kernel name, device) -> compiled kernel

    @staticmethod
    def _key(shape: ConvShape, params: dict) -> tuple:
        return (shape, tuple(sorted(params.items())))

    # -- geometry (mirrors the constexprs of 16_wgmma_final.cu)

    @staticmethod
    def geometry(shape: ConvShape, rpp: int, stages: int) -> dict:
        wp = ceil_div(shape.W_out, 2)
        hp = ceil_div(shape.H_out, rpp)
        prows = rpp + shape.K - 1
        nks = ceil_div(shape.C * prows, 2)
        mq = shape.M * rpp
        mq = 4 if mq <= 4 else (8 if mq <= 8 else (16 if mq <= 16 else 32))
        n1 = 4 * mq
        hpl = max(rpp * hp + shape.K - 1, shape.H)
        rsw = ceil_div(max(2 * wp + 6, shape.W), 2)
        nelem = shape.C * shape.H * shape.W
        smem = nks * n1 * 32 + stages * ceil_div(nelem, 32) * 32 * 4 + 2 * shape.C * hpl * rsw * 4
        return {"rows_per_position": rpp, "positions": hp * wp, "tiles": ceil_div(hp * wp, 64), "k_steps": nks,
                "columns": n1, "smem_bytes": smem}

    def _resolved(self, shape: ConvShape, params: dict) -> dict:
        auto = AUTO["wide" if shape.M >= 8 else "narrow"]
        out = {}
        for name in ("threads", "min_blocks", "stages", "streaming_stores"):
            out[name] = auto[name] if params[name] == "auto" else params[name]
        rpp = params["rows_per_position"]
        out["rows_per_position"] = (2 if 2 * shape.M <= 16 else 1) if rpp == "auto" else rpp
        if params["min_blocks"] == "auto" and shape.M * out["rows_per_position"] > 16:
            out["min_blocks"] = 1  # N = 128 + 64 columns: 96 accumulator registers do not fit 128
        return out

    def plan(self, shape: ConvShape, params: dict) -> dict:
        """``{"kernel": "conv_wgmma", ...}`` or ``{"kernel": "conv_generic", "reason": ...}`` (cached)."""
        key = self._key(shape, params)
        if key not in self._plans:
            self._plans[key] = self._plan(shape, params)
        return self._plans[key]

    def _plan(self, shape: ConvShape, params: dict) -> dict:
        cfg = self._resolved(shape, params)


        if shape.K > WGMMA_MAX_K:
            return generic_plan(shape, f"K={shape.K} > {WGMMA_MAX_K}: the 8-column window holds both column offsets only "
                           f"for K <= {WGMMA_MAX_K}")
        if shape.M * cfg["rows_per_position"] > WGMMA_MAX_COLUMNS:
            return generic_plan(shape, f"M={shape.M} maps x {cfg['rows_per_position']} rows per position > {WGMMA_MAX_COLUMNS} "
                           "columns of one product")
        geo = self.geometry(shape, cfg["rows_per_position"], cfg["stages"])
        if geo["smem_bytes"] > SMEM_MAX:
            return generic_plan(shape, f"weights, {cfg['stages']} input stage(s) and the FP16 planes need {geo['smem_bytes']} "
                           f"bytes of shared memory (> {SMEM_MAX})")
        group = params["group"]
        if group == "auto":
            group = 3 if geo["k_steps"] > 4 else geo["k_steps"]
        return {"kernel": "conv_wgmma", "reason": None, **cfg, "group": group, **geo}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_generic":
            return {"GENERIC_ONLY": 1}
        return {"KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W, "MOUT": shape.M,
                "RPP": plan["rows_per_position"], "THREADS": plan["threads"], "NSTAGE": plan["stages"],
                "STORE_CS": int(plan["streaming_stores"]), "MIN_BLOCKS": plan["min_blocks"], "GROUP": plan["group"]}

    # -- checks before any launch (once per shape and parameters)

    def validate(self, shape: ConvShape, params: dict) -> None:
        key = self._key(shape, params)
        if key in self._validated:
            return
        super().validate(shape, params)   # the 32-bit sizes, check_params, then check_launches
        self._validated.add(key)

    def check_params(self, shape: ConvShape, params: dict) -> None:
        limits = {"threads": (128, 1024), "min_blocks": (1, 4), "group": (1, 64), "stages": (1, 4),
                  "rows_per_position": (1, 4), "blocks_per_sm": (1, 32)}
        for name, (lo, hi) in limits.items():
            value = params[name]
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
                raise ParameterError(f"{name}={value!r} is outside {lo}..{hi}.",
                                     f"pass {name}='auto' or an integer in {lo}..{hi}.")
        if params["threads"] != "auto" and params["threads"] % 128:
            raise ParameterError(f"threads={params['threads']} is not a multiple of 128 (whole warpgroups).",
                                 "pass threads='auto' or a multiple of 128.")
        if params["streaming_stores"] not in ("auto", True, False):
            raise ParameterError(f"streaming_stores={params['streaming_stores']!r} must be 'auto', True or False.",
                                 "pass streaming_stores='auto'.")

    def check_launches(self, shape: ConvShape, params: dict, launches=None) -> None:
        """The declared launch, without asking the device: its grid as on an H100 (132 SMs) with
        ``blocks_per_sm`` (or ``min_blocks`` for 'auto') blocks each, which is at most B anyway."""
        check_persistent(self, shape, params, "conv_wgmma", 64, " (the accumulators alone need up to 96)")

    # -- the declared launch (its persistent grid from the device, cached per shape, parameters
    #    and device)

    def _declared(self, shape: ConvShape, params: dict, blocks: int) -> list[Launch]:
        """The plan's one launch, with at most ``blocks`` persistent blocks (the generic fallback's
        grid is the plan's)."""
        return persistent_launches(self.plan(shape, params), "conv_wgmma", shape.B, blocks, static_smem=256)

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        """The plan's launch; for ``conv_wgmma`` a persistent grid of min(B, SMs x blocks per SM)
        from the current device (``_device_blocks``), worked out once per (shape, parameters, device)."""
        import cupy as cp

        key = (self._key(shape, params), cp.cuda.runtime.getDevice())
        found = self._launches.get(key)
        if found is None:
            generic = self.plan(shape, params)["kernel"] == "conv_generic"
            blocks = 0 if generic else self._device_blocks(shape, params, key[1])
            found = self._launches[key] = self._declared(shape, params, blocks)
        return found

    def _device_blocks(self, shape: ConvShape, params: dict, device: int) -> int:
        """SMs x blocks per SM on ``device`` (refused unless it has sm_90a's wgmma): the SM count,
        and for blocks_per_sm='auto' the occupancy of the compiled kernel."""
        import cupy as cp

        plan = self.plan(shape, params)
        props = cp.cuda.runtime.getDeviceProperties(device)
        if (int(props["major"]), int(props["minor"])) != (9, 0):
            raise ParameterError(f"step {self.slug} runs wgmma (sm_90a), which this GPU "
                                 f"(compute capability {props['major']}.{props['minor']}) does not have.",
                                 "run it on an H100 or H200, or use step hopper-final.")
        per_sm = params["blocks_per_sm"]
        if per_sm == "auto":
            kernel = self.kernel("conv_wgmma", params, shape)
            if plan["smem_bytes"] > H100.static_smem_per_block:
                kernel.max_dynamic_shared_size_bytes = plan["smem_bytes"]  # opt in past 48 KiB
            per_sm = self._blocks_per_sm(kernel, plan["threads"], plan["smem_bytes"], props)
        return int(props["multiProcessorCount"]) * per_sm   # persistent: blocks loop over images

    @staticmethod
    def _blocks_per_sm(kernel, threads: int, smem: int, props: dict) -> int:
        """Resident blocks per SM: the driver's occupancy answer, else from registers and memory."""
        import cupy as cp

        try:
            return max(1, int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, smem)))
        except Exception:  # an older CuPy without the driver call
            regs_per_warp = ceil_div(kernel.num_regs * 32, 256) * 256
            by_regs = (int(props.get("regsPerMultiprocessor", 65536)) // regs_per_warp) // (threads // 32)
            by_smem = int(props.get("sharedMemPerMultiprocessor", 233472)) // (smem + 1024)
            return max(1, min(by_regs, by_smem, 2048 // threads))

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        if launch.kernel == "conv_generic":
            return super().launch_args(launch, y, operands, shape, params)
        x, k = operands
        return (y, x, k, *int32(shape.B))   # the rest of the shape is compiled in

    def kernel(self, name: str, params: dict, shape: ConvShape):
        """The compiled kernel, looked up once per (shape, parameters, device)."""
        import cupy as cp

        key = (shape, name, cp.cuda.runtime.getDevice(), *params.items())   # (order: a second entry at worst)
        fn = self._kernels.get(key)
        if fn is None:
            fn = self._kernels[key] = super().kernel(name, params, shape)
        return fn
