"""Direct-convolution steps: constant memory, sweep, tiling, restrict + unrolling, streams.

Each class is one registry entry and one ``kernels/lenet/NN_*.cu`` file, in book order.
"""

from __future__ import annotations

import dataclasses
import math

from .. import limits
from ..errors import LaunchLimitError, ParameterError, ShapeError
from ..steps import Launch, Upload
from .convstep import GRID_YZ_MAX, ConvShape, ConvStep, ceil_div, int32

CONST_CAPACITY = 16384         # floats: the 64 KiB constant bank available to user data
STATIC_SHARED_LIMIT = limits.H100.static_smem_per_block  # bytes a block may use without opting in


def _check_block(threads: int, what: str) -> None:
    if not 1 <= threads <= 1024:
        raise LaunchLimitError(f"{what} gives {threads} threads per block; CUDA allows 1 to 1024.",
                         "choose a smaller tile or fewer images per block.")


def _positive_int(params: dict, *names: str) -> None:
    for name in names:
        value = params[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParameterError(f"{name}={value!r} must be a positive integer.", f"pass {name} >= 1.")


class ConstantMask(ConvStep):
    """Shared behaviour of the steps that keep the mask in ``__constant__ float k_const[]``."""

    def check_params(self, shape: ConvShape, params: dict) -> None:
        super().check_params(shape, params)
        size = shape.M * shape.C * shape.K * shape.K
        if size > CONST_CAPACITY:
            raise ShapeError(
                f"The mask holds M*C*K*K = {size} floats; constant memory holds {CONST_CAPACITY} "
                f"({CONST_CAPACITY * 4 // 1024} KiB).",
                "use a step that reads the mask from global memory (e.g. baseline or tiled "
                "GEMM steps), or split the output maps into groups that fit.",
            )
        if shape.M > GRID_YZ_MAX:
            raise LaunchLimitError(f"M={shape.M} goes to grid y, which stops at {GRID_YZ_MAX}.",
                             f"split the maps into groups of at most {GRID_YZ_MAX}.")

    MASK = Upload("k_const", 1)   # k into the module's constant bank, before the kernel

    def defines(self, params, shape):
        """The step's macros and the constant bank's capacity, which the kernel declares its mask with."""
        return {**super().defines(params, shape), "CONST_CAPACITY": CONST_CAPACITY}

    def launches(self, shape: ConvShape, params: dict) -> list:
        """The mask's copy to constant memory, then the kernel's launches (``conv_launches``)."""
        return [self.MASK, *self.conv_launches(shape, params)]

    def conv_launches(self, shape: ConvShape, params: dict) -> list[Launch]:
        raise NotImplementedError

    def upload_mask(self, k, params: dict, shape: ConvShape, stream=None) -> None:
        """The mask's copy alone, ordered on ``stream`` (the streams step's pipeline copies it once)."""
        self.upload(self.MASK, k, shape, params, stream)

    def launch_args(self, launch, y, operands, shape: ConvShape, params: dict) -> tuple:
        x, _ = operands   # the mask is in constant memory
        return (y, x, *int32(shape.B, shape.M, shape.C, shape.H, shape.W, shape.K))


class ConstantMemory(ConstantMask):
    """Step 01: the baseline's mapping, weights read through the constant cache.

    Prediction: the weight load becomes a uniform constant-cache broadcast, taking one load per
    FMA off the LSU path: a modest gain (10-30 %), larger for C1 whose input plane is one channel.
    """

    kernel_names = ("conv_forward_constant",)
    defaults = {"tile_width": 16}

    macros = {"tile_width": "TILE_WIDTH"}

    def check_params(self, shape, params):
        super().check_params(shape, params)
        _positive_int(params, "tile_width")
        _check_block(params["tile_width"] ** 2, f"tile_width={params['tile_width']}")
        if shape.B > GRID_YZ_MAX:
            raise LaunchLimitError(f"B={shape.B} goes to grid z, which stops at {GRID_YZ_MAX}.",
                             f"split the batch into chunks of at most {GRID_YZ_MAX} images.")

    def conv_launches(self, shape, params):
        tile = params["tile_width"]
        tiles = ceil_div(shape.H_out, tile) * ceil_div(shape.W_out, tile)
        return [Launch(self.kernel_names[0], (tiles, shape.M, shape.B), (tile, tile, 1))]


def _check_image_blocks(shape: ConvShape, imgs_per_block: int) -> None:
    """The batch's blocks of ``imgs_per_block`` images go to grid z, which stops at GRID_YZ_MAX."""
    if ceil_div(shape.B, imgs_per_block) > GRID_YZ_MAX:
        raise LaunchLimitError(f"B={shape.B} needs more than {GRID_YZ_MAX} blocks in grid z.",
                               "raise imgs_per_block or split the batch.")


class Sweep(ConstantMask):
    """Step 02: block shape x outputs per thread x images per block, chosen per layer by measuring.

    Prediction: C3's 34x34 plane wastes up to half a 16x16 block's threads; a shape that fits
    (17x17) or several images per block should move C3 more than C1.
    """

    kernel_names = ("conv_forward_sweep",)
    defaults = {"tile_w": 16, "tile_h": 16, "out_per_thread": 1, "imgs_per_block": 1}

    macros = {"tile_w": "TILE_W", "tile_h": "TILE_H", "out_per_thread": "OUT_PER_THREAD",
              "imgs_per_block": "IMGS_PER_BLOCK"}

    def check_params(self, shape, params):
        super().check_params(shape, params)
        _positive_int(params, *self.defaults)
        threads = params["tile_w"] * params["tile_h"] * params["imgs_per_block"]
        _check_block(threads, f"{params['tile_w']}x{params['tile_h']}x{params['imgs_per_block']}")
        limits.check_launch((1, 1, ceil_div(shape.B, params["imgs_per_block"])),
                            (params["tile_w"], params["tile_h"], params["imgs_per_block"]), what=f"The {self.slug} block")
        if params["out_per_thread"] > 16:
            raise ParameterError(f"out_per_thread={params['out_per_thread']} keeps too many accumulators.",
                             "pass out_per_thread <= 16.")
        _check_image_blocks(shape, params["imgs_per_block"])

    def conv_launches(self, shape, params):
        tw, th = params["tile_w"], params["tile_h"]
        per, imgs = params["out_per_thread"], params["imgs_per_block"]
        tiles = ceil_div(shape.H_out, th) * ceil_div(shape.W_out, tw * per)
        return [Launch(self.kernel_names[0], (tiles, shape.M, ceil_div(shape.B, imgs)), (tw, th, imgs))]

    @staticmethod
    def grid(block_shapes=((4, 4), (8, 8), (16, 16), (17, 17), (20, 20), (32, 32), (32, 4), (32, 8)),
             out_per_thread=(1, 2, 4), imgs_per_block=(1, 2, 4)) -> list[dict]:
        """The sweep's configurations (the seeds' square blocks plus warp-wide rows)."""
        configs = []
        for (tw, th) in block_shapes:
            for per in out_per_thread:
                for imgs in imgs_per_block:
                    if tw * th * imgs <= 1024:
                        configs.append({"tile_w": tw, "tile_h": th, "out_per_thread": per, "imgs_per_block": imgs})
        return configs


class TiledBase(ConstantMask):
    defaults = {"tile_width": 16, "imgs_per_block": 4}
    macros = {"tile_width": "TILE_WIDTH", "imgs_per_block": "IMGS_PER_BLOCK"}

    def patch_bytes(self, shape: ConvShape, params: dict) -> int:
        side = params["tile_width"] + shape.K - 1
        return params["imgs_per_block"] * side * side * 4

    def check_params(self, shape, params):
        super().check_params(shape, params)
        _positive_int(params, "tile_width", "imgs_per_block")
        _check_block(params["tile_width"] ** 2 * params["imgs_per_block"],
                     f"tile_width={params['tile_width']}, imgs_per_block={params['imgs_per_block']}")
        grid, block = self.grid_block(shape, params)
        limits.check_launch(grid, block, what=f"The {self.slug} block")
        need = self.patch_bytes(shape, params)
        if need > STATIC_SHARED_LIMIT:
            raise LaunchLimitError(
                f"The input patch needs {need} bytes of shared memory per block (K={shape.K}); "
                f"the limit without opt-in is {STATIC_SHARED_LIMIT}.",
                "use a smaller tile_width or imgs_per_block.")
        _check_image_blocks(shape, params["imgs_per_block"])

    def grid_block(self, shape, params):
        tile, imgs = params["tile_width"], params["imgs_per_block"]
        tiles = ceil_div(shape.H_out, tile) * ceil_div(shape.W_out, tile)
        return (tiles, shape.M, ceil_div(shape.B, imgs)), (tile, tile, imgs)


class Tiled(TiledBase):
    """Step 03: input patch (tile + halo) in shared memory, several images per block in z.

    Prediction: each input pixel leaves global memory once per block and channel instead of up
    to K*K times; with the re-reads served by shared memory both layers should drop by 2-5x.
    """

    kernel_names = ("conv_forward_tiled",)

    def conv_launches(self, shape, params):
        grid, block = self.grid_block(shape, params)
        return [Launch(self.kernel_names[0], grid, block, dynamic_smem=self.patch_bytes(shape, params))]


class RestrictUnroll(TiledBase):
    """Step 04: K as a compile-time constant, the window fully unrolled, __restrict__ pointers.

    Prediction: the inner loop loses its counters and index arithmetic (49 FFMA with constant
    shared offsets for K=7); fewer instructions per FMA should cut 20-40 % off both layers.
    """

    kernel_names = ("conv_forward_restrict_unroll",)

    def defines(self, params, shape):
        return {**super().defines(params, shape), "KSIZE": shape.K}

    def conv_launches(self, shape, params):
        grid, block = self.grid_block(shape, params)
        return [Launch(self.kernel_names[0], grid, block)]

    def launch_args(self, launch, y, operands, shape, params):
        x, _ = operands   # the mask is in constant memory, K a compile-time constant
        return (y, x, *int32(shape.B, shape.M, shape.C, shape.H, shape.W))

    def launch_kernel(self, y, x, shape, params, stream=None):
        """The kernel alone (the mask already in constant memory)."""
        self.run_launches(self.conv_launches(shape, params), y, (x, None), shape, params, stream)


class Streams(RestrictUnroll):
    """Step 05: step 04's kernel, the batch cut into chunks over several streams.

    Prediction: with pinned host memory the copies (most of Layer Time) overlap with each
    other's directions and with the kernels, so Layer Time falls towards the larger of the two
    copy times; with pageable memory little changes. Op Time cannot improve.
    """

    kernel_names = ("conv_forward_restrict_unroll",)
    defaults = {"tile_width": 16, "imgs_per_block": 4, "n_streams": 4, "chunks_per_stream": 4,
                "host_memory": "pinned"}
    graph_capturable = False

    def layer_round_trip(self, k, x_host, shape, params):
        from .streams import LayerPipeline

        return LayerPipeline(self, k, x_host, shape, params)

    def check_params(self, shape, params):
        super().check_params(shape, params)
        _positive_int(params, "n_streams", "chunks_per_stream")
        if params["n_streams"] > 64:
            raise ParameterError(f"n_streams={params['n_streams']} is more than this step uses.", "pass 1 to 64 streams.")
        if params["host_memory"] not in ("pinned", "pageable"):
            raise ParameterError(f"host_memory={params['host_memory']!r} is not 'pinned' or 'pageable'.",
                             "pass host_memory='pinned' or 'pageable'.")

    def chunks(self, batch: int, params: dict) -> list[tuple[int, int]]:
        """Image ranges [start, stop): n_streams * chunks_per_stream pieces, at least one image each."""
        pieces = min(batch, params["n_streams"] * params["chunks_per_stream"])
        size = math.ceil(batch / pieces)
        return [(start, min(start + size, batch)) for start in range(0, batch, size)]

    def streams(self, params: dict) -> tuple:
        from .streams import stream_pool

        return stream_pool(params["n_streams"])

    def launches(self, shape, params):
        """Op Time: the mask's copy, then one launch per chunk of images (its ``key``: start:stop),
        spread over the step's streams, the data already on the device."""
        out = [self.MASK]
        for i, (start, stop) in enumerate(self.chunks(shape.B, params)):
            (one,) = self.conv_launches(self.part(shape, start, stop), params)
            out.append(dataclasses.replace(one, key=f"{start}:{stop}", stream=i % params["n_streams"]))
        return out

    @staticmethod
    def part(shape, start: int, stop: int) -> ConvShape:
        return ConvShape(stop - start, shape.M, shape.C, shape.H, shape.W, shape.K)

    def launch_args(self, launch, y, operands, shape, params):
        if not launch.key:   # the layer pipeline's launch: its chunk is the whole problem it hands in
            return super().launch_args(launch, y, operands, shape, params)
        start, stop = map(int, launch.key.split(":"))
        x, k = operands
        return super().launch_args(launch, y[start:stop], (x[start:stop], k), self.part(shape, start, stop), params)
