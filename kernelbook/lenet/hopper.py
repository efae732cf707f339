"""Step 15, the final kernel: C3 on tensor cores (FP16 hi/lo split) at FP32-level accuracy, C1 on
the path that measured fastest for it (step 14's FP32 direct kernel, or the same tensor-core
kernel with ``c1_path="tensor"``)."""

from __future__ import annotations

from typing import ClassVar

from ..errors import ParameterError
from ..limits import H100
from ..steps import Launch
from .convstep import ConvShape, ConvStep, Planned, ceil_div, check_persistent, generic_plan, int32, persistent_launches

HOPPER_MAX_K = 7                # the 8-column window holds both output offsets only for K <= 7
HOPPER_SMEM_MAX = 200 * 1024    # dynamic shared memory per block this plan accepts (opt-in limit 227 KiB)
HOPPER_MAX_PREFETCH = 16        # float4 registers per thread for one image
STATIC_SMEM_MAX = H100.static_smem_per_block  # beyond this the launch must raise the kernel's dynamic limit
_ATTRIBUTES: dict = {}          # device ordinal -> its attributes (read once: see HopperFinal._attributes)

# 'auto' configurations, by layer kind, the fastest of the development sweeps (kernels/lenet/DESIGN.md,
# step 15). "wide" = at least 8 maps (C3), "narrow" = fewer (C1).
AUTO = {
    "wide": {"threads": 256, "tiles_per_warp": 5, "groups_per_warp": 4, "prefetch": True,
             "streaming_stores": False, "min_blocks": 1, "interleave": False, "mma_ordered": True},
    "narrow": {"threads": 256, "tiles_per_warp": 4, "groups_per_warp": 1, "prefetch": True,
               "streaming_stores": True, "min_blocks": 2, "interleave": True, "mma_ordered": False},
}


class HopperFinal(Planned, ConvStep):
    """Hopper final: FP16 hi/lo split on mma.sync, weights as a Toeplitz B operand, persistent grid.

    Changes from ``final`` (step 14): one kernel for both layers, on tensor cores. Output pairs
    (2w, 2w+1) of a row are the 16 rows of an m16n8k16 product; its k dimension is two (c, p)
    input rows x 8 columns, read straight from the image in shared memory (no im2col); the
    weights, shifted by 0 and 1 column, form the 8 columns (4 maps x 2 offsets). Every operand
    is split into FP16 hi + lo with a power-of-two scale (per image for x, per launch for k) and
    y = xl*wh + xh*wl + xh*wh in FP32 accumulators: ~22 mantissa bits per operand, measured
    relative L2 error <= 1e-6. Persistent blocks build the weight fragments once and loop over
    images (optionally loading the next image into registers during the current one).

    Parameters ('auto' picks per layer, see ``AUTO``): ``threads`` (multiple of 32, 64..1024),
    ``tiles_per_warp`` (1..8 tiles of 16 output pairs per warp at a time), ``groups_per_warp``
    (1..4 groups of 4 maps per warp at a time), ``prefetch`` (bool), ``streaming_stores``
    (bool), ``min_blocks`` (1..8, ``__launch_bounds__``), ``blocks_per_sm`` ('auto' = from the
    compiled kernel's registers and shared memory, or 1..32: the persistent grid is
    min(B, SMs * blocks_per_sm)).

    Shapes with K > 7, or whose image does not fit the shared-memory / register plan, run
    ``conv_generic`` (FP32, one output per thread, slow but exact); ``plan()["reason"]`` says why.

    Build: plain NVRTC (CuPy RawModule) with the device's default architecture works: the kernel
    uses mma.sync (sm_80+), no sm_90a-only instruction. With nvcc: ``-arch=sm_90`` (or
    ``-gencode=arch=compute_90a,code=sm_90a``).
    """

    plan_math = {"conv_hopper": "3xfp16"}

    kernel_names = ("conv_hopper", "conv_generic")
    defaults = {"c1_path": "auto", "threads": "auto", "tiles_per_warp": "auto", "groups_per_warp": "auto", "prefetch": "auto",
                "streaming_stores": "auto", "min_blocks": "auto", "blocks_per_sm": "auto"}
    tolerance = 1e-5
    precision: ClassVar[str] = "fp32"

    def __init__(self) -> None:
        self._launches: dict = {}   # (shape, device, params) -> [Launch] (the persistent grid)

    # -- geometry (mirrors the constexprs of 15_hopper_final.cu)

    @staticmethod
    def geometry(shape: ConvShape, threads: int) -> dict:
        wp = ceil_div(shape.W_out, 2)                      # output pairs per row
        rsw = ceil_div(max(2 * wp + 6, shape.W), 2)        # 32-bit words per shared row
        npairs = ceil_div(shape.C * shape.K, 2)            # k-steps (two input rows each)
        ngrp = ceil_div(shape.M, 4)                        # map groups of 4
        plane_words = shape.C * shape.H * rsw
        wf_words = npairs * ngrp * 32 * 4
        nelem = shape.C * shape.H * shape.W
        npre = ceil_div(nelem // 4, threads) if nelem % 4 == 0 else 1
        return {"positions_per_row": wp, "tiles": ceil_div(shape.H_out * wp, 16), "k_steps": npairs,
                "map_groups": ngrp, "smem_bytes": 4 * (2 * plane_words + wf_words), "prefetch_float4": npre}

    def _resolved(self, shape: ConvShape, params: dict) -> dict:
        auto = AUTO["wide" if shape.M >= 8 else "narrow"]
        names = {"threads": "threads", "tiles_per_warp": "tiles_per_warp", "groups_per_warp": "groups_per_warp",
                 "prefetch": "prefetch", "streaming_stores": "streaming_stores", "min_blocks": "min_blocks"}
        out = {key: (auto[key] if params[name] == "auto" else params[name]) for key, name in names.items()}
        # How the products are ordered is tied to the register budget of the tile shape: taken
        # from the layer kind, not a caller parameter.
        out["interleave"], out["mma_ordered"] = auto["interleave"], auto["mma_ordered"]
        out["groups_per_warp"] = min(out["groups_per_warp"], ceil_div(shape.M, 4))
        return out

    # -- C1: the FP32 direct kernel of step 14, which measured faster than this one for few maps

    def direct(self, shape: ConvShape, params: dict) -> bool:
        """Whether ``shape`` runs step 14's FP32 direct kernel (``c1_path``; 'auto': fewer than 8
        maps, i.e. C1, where that kernel measured faster: see kernels/lenet/DESIGN.md, step 15)."""
        path = params["c1_path"]
        return shape.M < 8 if path == "auto" else path == "direct"

    def specialised(self):
        return self.other("specialised")

    def kernels_for(self, params: dict, shape: ConvShape) -> tuple[str, ...]:
        if self.direct(shape, params):
            return self.specialised().kernels_for(self.specialised().params(), shape)
        return super().kernels_for(params, shape)

    def math_for(self, params: dict, shape: ConvShape) -> str:
        if self.direct(shape, params):
            return self.specialised().math_for(self.specialised().params(), shape)
        return super().math_for(params, shape)

    def source_for(self, params: dict, shape: ConvShape) -> str:
        return self.specialised().source if self.direct(shape, params) else self.source

    def prepare(self, params: dict, shape: ConvShape) -> None:
        """Compile (one build holds both kernels) and work out the launch's device facts, outside
        timings."""
        if self.direct(shape, params):
            self.specialised().prepare(self.specialised().params(), shape)
            return
        for name in self.kernel_names:
            self.kernel(name, params, shape)
        self.launches(shape, params)

    def plan(self, shape: ConvShape, params: dict) -> dict:
        """``{"kernel": "conv_hopper", ...}`` or ``{"kernel": "conv_generic", "reason": ...}``."""
        if self.direct(shape, params):
            return {"kernel": "step 14 conv_direct", "reason": "c1_path: step 14's FP32 direct kernel", "direct": True}
        cfg = self._resolved(shape, params)


        if shape.K > HOPPER_MAX_K:
            return generic_plan(shape, f"K={shape.K} > {HOPPER_MAX_K}: the 8-column window holds both output offsets "
                           f"only for K <= {HOPPER_MAX_K}")
        geo = self.geometry(shape, cfg["threads"])
        if geo["smem_bytes"] > HOPPER_SMEM_MAX:
            return generic_plan(shape, f"one image in FP16 hi/lo planes plus the weight fragments need {geo['smem_bytes']} "
                           f"bytes of shared memory (> {HOPPER_SMEM_MAX})")
        if geo["prefetch_float4"] > HOPPER_MAX_PREFETCH:
            return generic_plan(shape, f"one image is {geo['prefetch_float4']} float4 registers per thread "
                           f"(> {HOPPER_MAX_PREFETCH}); raise threads")
        return {"kernel": "conv_hopper", "reason": None, **cfg, **geo}

    def defines(self, params: dict, shape: ConvShape) -> dict:
        if self.direct(shape, params):
            return self.specialised().defines(self.specialised().params(), shape)
        plan = self.plan(shape, params)
        if plan["kernel"] == "conv_generic":
            return {"GENERIC_ONLY": 1}
        return {"KS": shape.K, "CIN": shape.C, "HIN": shape.H, "WIN": shape.W, "MOUT": shape.M,
                "THREADS": plan["threads"], "NT": plan["tiles_per_warp"], "MGW": plan["groups_per_warp"],
                "PREFETCH": int(plan["prefetch"]), "STORE_CS": int(plan["streaming_stores"]),
                "MIN_BLOCKS": plan["min_blocks"], "MMA_ORDERED": int(plan["mma_ordered"]),
                "INTERLEAVE": int(plan["interleave"])}

    # -- checks before any launch

    def check_params(self, shape: ConvShape, params: dict) -> None:
        if params["c1_path"] not in ("auto", "tensor", "direct"):
            raise ParameterError(f"c1_path={params['c1_path']!r} is not 'auto', 'tensor' or 'direct'.",
                                 "pass c1_path='auto' (step 14's FP32 kernel for fewer than 8 maps).")
        if self.direct(shape, params):
            return   # step 14's parameters are its defaults (check_launches validates them)
        for name in ("threads", "tiles_per_warp", "groups_per_warp", "min_blocks", "blocks_per_sm"):
            value = params[name]
            lo, hi = {"threads": (64, 1024), "tiles_per_warp": (1, 8), "groups_per_warp": (1, 4),
                      "min_blocks": (1, 8), "blocks_per_sm": (1, 32)}[name]
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
                raise ParameterError(f"{name}={value!r} is outside {lo}..{hi}.", f"pass {name}='auto' or an integer in {lo}..{hi}.")
        if params["threads"] != "auto" and params["threads"] % 32:
            raise ParameterError(f"threads={params['threads']} is not a multiple of 32 (whole warps).",
                             "pass threads='auto' or a multiple of 32.")
        for name in ("prefetch", "streaming_stores"):
            if params[name] not in ("auto", True, False):
                raise ParameterError(f"{name}={params[name]!r} must be 'auto', True or False.", f"pass {name}='auto'.")

    def check_launches(self, shape: ConvShape, params: dict, launches=None) -> None:
        """Step 14's checks for the shapes it runs; else the declared launch, without asking the
        device: its grid as on an H100 (132 SMs) with ``blocks_per_sm`` (or ``min_blocks`` for
        'auto') blocks each, which is at most B anyway."""
        if self.direct(shape, params):
            self.specialised().validate(shape, self.specialised().params())
            return
        check_persistent(self, shape, params, "conv_hopper", 32)

    # -- the declared launch (its persistent grid from the device, cached per shape, parameters
    #    and device)

    def _declared(self, shape: ConvShape, params: dict, blocks: int) -> list[Launch]:
        """The plan's one launch, with at most ``blocks`` persistent blocks (the generic fallback's
        grid is the plan's)."""
        plan = self.plan(shape, params)
        return persistent_launches(plan, "conv_hopper", shape.B, blocks,
                                   static_smem=2 * 4 * (plan["threads"] // 32))   # the two per-warp reduction arrays

    def launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        """Step 14's launch for the shapes it runs (``launch`` hands them to it, with its
        constant-memory copy); else the plan's launch, for ``conv_hopper`` a persistent grid of
        min(B, SMs x blocks per SM) from the current device (``_device_blocks``), worked out once
        per (shape, parameters, device)."""
        if self.direct(shape, params):
            return self.specialised().launches(shape, self.specialised().params())
        import cupy as cp

        key = (shape, cp.cuda.runtime.getDevice(), *params.items())   # (order: a second entry at worst)
        found = self._launches.get(key)
        if found is None:
            generic = self.plan(shape, params)["kernel"] == "conv_generic"
            blocks = 0 if generic else self._device_blocks(shape, params)
            found = self._launches[key] = self._declared(shape, params, blocks)
        return found

    def _device_blocks(self, shape: ConvShape, params: dict) -> int:
        """SMs x blocks per SM on the current device: the SM count (``gpu.multiprocessors``), and
        for blocks_per_sm='auto' the resident blocks of the compiled kernel."""
        from .. import gpu

        plan = self.plan(shape, params)
        per_sm = params["blocks_per_sm"]
        if per_sm == "auto":
            per_sm = self._blocks_per_sm(self.kernel("conv_hopper", params, shape), plan["threads"], plan["smem_bytes"])
        return gpu.multiprocessors() * per_sm   # persistent: each block loops over images

    @staticmethod
    def _attributes() -> dict:
        """The current device's attributes, read once per device (CuPy's ``Device().attributes``
        queries every attribute of the device: tens of microseconds on each call)."""
        import cupy as cp

        device = cp.cuda.runtime.getDevice()
        if device not in _ATTRIBUTES:
            _ATTRIBUTES[device] = dict(cp.cuda.Device(device).attributes)
        return _ATTRIBUTES[device]

    @classmethod
    def _blocks_per_sm(cls, kernel, threads: int, smem: int) -> int:
        """Resident blocks per SM from the compiled kernel's registers and its shared memory."""
        attrs = cls._attributes()
        regs_per_warp = ceil_div(kernel.num_regs * 32, 256) * 256
        by_regs = (attrs.get("MaxRegistersPerMultiprocessor", 65536) // regs_per_warp) // (threads // 32)
        by_smem = attrs.get("MaxSharedMemoryPerMultiprocessor", 233472) // (smem + 1024)
        by_threads = attrs.get("MaxThreadsPerMultiProcessor", 2048) // threads
        return max(1, min(by_regs, by_smem, by_threads, 32))

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        if launch.kernel == "conv_generic":
            return super().launch_args(launch, y, operands, shape, params)
        x, k = operands
        return (y, x, k, *int32(shape.B))   # the rest of the shape is compiled in

    def handoff(self, shape: ConvShape, params: dict, y, operands):
        """Shapes on step 14's kernel run its launches (its constant-memory copy first)."""
        return (self.specialised(), self.specialised().params()) if self.direct(shape, params) else None
