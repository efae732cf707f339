"""The program that Nsight Compute and compute-sanitizer run: one launch of one variant per layer.

    python -m kernelbook.lenet.profile_target --variant tiled --layers C1,C3 --batch 1000 \
        --layer-params '{"C1": {"tile_width": 16}, "C3": {"tile_width": 8}}'

A profiler attributes everything the GPU runs inside the process, so this program launches
nothing but the variant's kernels: inputs are drawn with NumPy (uniform 0..255 for both layers:
no CuPy elementwise kernel ever runs), uploaded with plain copies (memcpy, not kernels),
compiled by ``impl.prepare`` before anything is launched (NVRTC compilation is no launch either),
and then each layer's kernels are launched exactly once inside an NVTX push/pop range named
``kb:<variant>:<layer>`` and synchronised. Nsight Compute filters on those ranges
(``--nvtx-include "kb:<variant>:C1/"``) and its raw CSV names the range of every kernel, which is
how ``kernelbook.profiling`` attributes kernels to layers.

It prints nothing on stdout on success (the profilers' own output must stay parseable) and one
line on stderr per layer; a refused shape or parameter exits with status 2 and the reason.
"""

from __future__ import annotations

import argparse
import json
import sys

NVTX_PREFIX = "kb"


def range_name(variant: str, layer: str) -> str:
    """The NVTX push/pop range around one layer's launch (``kb:tiled:C1``)."""
    return f"{NVTX_PREFIX}:{variant}:{layer}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kernelbook.lenet.profile_target",
        description="Launch one variant once per layer (for ncu and compute-sanitizer).")
    parser.add_argument("--variant", required=True, help="a registered variant, e.g. baseline")
    parser.add_argument("--layers", default="C1,C3", help="comma-separated layers (default C1,C3)")
    parser.add_argument("--batch", type=int, default=1000, help="images per layer (default 1000)")
    parser.add_argument("--layer-params", default="{}",
                        help='JSON: {"C1": {...}, "C3": {...}}, each layer\'s variant parameters')
    parser.add_argument("--seed", type=int, default=0, help="seed of the NumPy inputs")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # Imports after argument parsing, so that --help works anywhere.
    import numpy as np

    from ..errors import KernelbookError
    from . import LAYERS, check_batch, get_variant, layer_shape

    try:
        impl = get_variant(args.variant)
        check_batch(args.batch)
        layers = [name.strip() for name in args.layers.split(",") if name.strip()]
        unknown = [name for name in layers if name not in LAYERS]
        if not layers or unknown:
            print(f"error: unknown layer(s) {unknown or '(none given)'}; use {', '.join(LAYERS)}.",
                  file=sys.stderr)
            return 2
        try:
            per_layer = json.loads(args.layer_params)
        except json.JSONDecodeError as exc:
            print(f"error: --layer-params is not JSON ({exc}).", file=sys.stderr)
            return 2
        if not isinstance(per_layer, dict):
            print("error: --layer-params must be a JSON object keyed by layer.", file=sys.stderr)
            return 2
        rng = np.random.default_rng(args.seed)
        plan = []
        for layer in layers:
            shape = layer_shape(layer, args.batch)
            params = impl.params(**(per_layer.get(layer) or {}))
            impl.validate(shape, params)
            x = rng.uniform(0.0, 255.0, size=shape.x_shape).astype(np.float32)
            k = rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32)
            plan.append((layer, shape, params, x, k))
    except KernelbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import cupy as cp
    from cupy.cuda import nvtx

    device = []
    for layer, shape, params, x, k in plan:
        x_dev = cp.empty(shape.x_shape, dtype=cp.float32)
        k_dev = cp.empty(shape.k_shape, dtype=cp.float32)
        x_dev.set(x)  # host-to-device copies: no kernel
        k_dev.set(k)
        y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
        impl.prepare(params, shape)  # compile now: compilation is not a launch
        device.append((layer, shape, params, x_dev, k_dev, y_dev))
    cp.cuda.Device().synchronize()

    for layer, shape, params, x_dev, k_dev, y_dev in device:
        nvtx.RangePush(range_name(impl.slug, layer))
        try:
            impl.launch(y_dev, x_dev, k_dev, shape, params)
            cp.cuda.Device().synchronize()
        finally:
            nvtx.RangePop()
        print(f"profile_target: {impl.slug} {layer} batch {shape.B} launched", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
