"""The LeNet study as the harness sees it: cases, milestone columns, checks, timing, grids.

Metrics (the milestone's, defined once here and stated in the book):

- ``op_time_ms``      the convolution kernel(s) of one layer alone, data already on the device
- ``layer_time_ms``   host input -> device -> the layer's kernel(s) -> host output (the course's
                      prolog + op + epilog; device buffers come from CuPy's pool, so allocation
                      is not counted)
- ``total_time_ms``   inference of the B images from host images to host predictions (both conv
                      layers with this step, the rest in CuPy); compilation excluded
- ``accuracy``        top-1 on the first B Fashion-MNIST test images
- ``correct``         1.0 when every float64 check passed, else 0.0 (then nothing is timed)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import params as P
from .. import results
from ..measure import time_gpu
from ..study import Column, Study
from . import checks
from .problem import LAYERS, MAX_BATCH, layer_shape
from .steps import STEPS

NAME = "lenet"
DEFAULT_WEIGHTS = "data/models/lenet86.bin"
GOAL_MS = 1.0            # the study's goal: Op Time 1 + Op Time 2 at GOAL_BATCH images
GOAL_BATCH = 10000
GOAL_VS_CUDNN = 13.0     # ... and at least this many times faster than cuDNN FP32 in the same run
GOAL_STEPS = ("specialised", "hopper-final")  # the steps built to reach the goal


class LeNetStudy(Study):
    name = NAME
    module = "kernelbook.lenet"
    title = "LeNet-86 forward convolution"
    steps = STEPS
    cases = tuple(LAYERS)
    case_header = "Layer"
    size_header = "Batch Size"
    size_name = "batch_sizes"
    case_params_name = "layer_params"
    default_sizes = (100, 1000, 5000, 10000)  # 5,000: the batch seed 003 reports (recorded from the next run on)
    max_size = MAX_BATCH
    vendor_name = "cudnn"
    profile_size = 1000

    def columns(self) -> list[Column]:
        return [Column("Op Time 1", "op_time_ms", "C1"), Column("Op Time 2", "op_time_ms", "C3"),
                Column("Layer Time 1", "layer_time_ms", "C1"), Column("Layer Time 2", "layer_time_ms", "C3"),
                Column("Total Execution Time", "total_time_ms", "network"),
                Column("Accuracy", "accuracy", "network", kind="accuracy")]

    def problem(self, case: str, size: int):
        return layer_shape(case, size)

    def targets(self) -> list[dict]:
        """The study's goal as a target the summary judges: Op Time 1 + Op Time 2 at GOAL_BATCH
        images, for the steps built to reach it (FP32-accurate), beside cuDNN FP32."""
        return [{"what": f"Op Time 1 + Op Time 2 at batch {GOAL_BATCH:,}, FP32-accurate (and at least "
                         f"{GOAL_VS_CUDNN:g}× faster than cuDNN FP32)", "case": "C1 + C3", "cases": ["C1", "C3"],
                 "size": GOAL_BATCH, "limit_ms": GOAL_MS, "steps": list(GOAL_STEPS), "vendor": "cudnn"}]

    def options(self, weights_path=None) -> dict:
        return {"weights": P.optional_path("weights_path", weights_path) or DEFAULT_WEIGHTS}

    def check(self, impl, case_params: dict, n_random: int, seed: int | None):
        records, rows = [], []
        seen = {}
        for layer, params in case_params.items():
            key = tuple(sorted(params.items()))
            if key not in seen:
                seen[key] = checks.check_variant(impl, params, n_random=n_random, seed=seed)
            layer_checks = [c for c in seen[key] if c.label in (layer, "random")]
            rows += [dict(c.as_dict(), layer=layer, params=params) for c in layer_checks]
            ok = checks.all_passed(layer_checks)
            records.append(results.record(NAME, impl.slug, layer, None, "correct", 1.0 if ok else 0.0,
                                          n_checks=len(layer_checks)))
        return records, rows

    def measure(self, impl, case_params: dict, sizes: list[int], repeats: int, warmup: int, options: dict):
        import cupy as cp

        from .network import GpuLeNet

        images, labels, weights = inputs(max(sizes), options["weights"])
        net = GpuLeNet(weights, impl.slug, layer_params=case_params)
        masks = {"C1": net.k1, "C3": net.k3}
        timing = "events" if impl.graph_capturable else "host-bound"
        records: list[dict] = []
        rec = lambda *a, **kw: records.append(results.record(NAME, impl.slug, *a, **kw))  # noqa: E731
        for batch in sizes:
            x_host = np.ascontiguousarray(images[:batch], dtype=np.float32)
            x_dev = cp.asarray(x_host)
            layer_inputs = {"C1": x_dev, "C3": net.stage2_input(x_dev)}
            for layer, x_in in layer_inputs.items():
                shape, params, k = layer_shape(layer, batch), case_params[layer], masks[layer]
                impl.validate(shape, params)
                impl.prepare(params, shape)
                y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
                extra = {"flops": shape.flops, "min_bytes": shape.min_bytes}
                op = time_gpu(lambda: impl.launch(y_dev, x_in, k, shape, params), repeats, warmup,
                              graph=impl.graph_capturable, timing=timing)
                rec(layer, batch, "op_time_ms", op, **extra)
                round_trip = impl.layer_round_trip(k, x_in.get(), shape, params)
                rec(layer, batch, "layer_time_ms", time_gpu(round_trip, repeats, warmup, timing=timing), **extra)
                del y_dev, round_trip
            rec("network", batch, "total_time_ms", time_gpu(lambda: net.predict(x_host), repeats, warmup))
            predictions = net.predict(x_host)
            rec("network", batch, "accuracy", float(np.mean(predictions == labels[:batch])))
            del layer_inputs, x_dev
            cp.get_default_memory_pool().free_all_blocks()
        return records

    def launch_once(self, slug: str, case: str, size: int, params: dict, seed: int = 0):
        import cupy as cp

        impl = self.impl(slug)
        shape = layer_shape(case, size)
        impl.validate(shape, params)
        rng = np.random.default_rng(seed)
        x_dev = cp.empty(shape.x_shape, dtype=cp.float32)
        k_dev = cp.empty(shape.k_shape, dtype=cp.float32)
        x_dev.set(rng.uniform(0.0, 255.0, size=shape.x_shape).astype(np.float32))  # copies, not kernels
        k_dev.set(rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32))
        y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
        impl.prepare(params, shape)  # compile now: compilation is not a launch
        return lambda: impl.launch(y_dev, x_dev, k_dev, shape, params)

    def vendor(self, sizes: list[int], repeats: int, warmup: int) -> list[dict]:
        from .vendor import measure_cudnn

        return measure_cudnn(sizes, repeats=repeats, warmup=warmup)

    def reported(self, step: str):
        from .tables import reported_table

        return reported_table(step)

    def expectations(self, chapter) -> list[str]:
        from .tables import expectations, goal_lines, speedup_sentence

        return (goal_lines(chapter) + expectations(chapter)
                + [speedup_sentence(chapter, self.reported_frame(chapter.variant))])

    def reported_best(self):
        from .tables import reported_best

        return reported_best(self)

    def reported_frame(self, step: str):
        from .tables import reported

        return reported(step)


STUDY = LeNetStudy()


def inputs(n: int, weights_path: str | None):
    from .data import load_test_set
    from .weights import default_weights_path, read_weights

    path = Path(weights_path) if weights_path else default_weights_path()
    if not path.is_absolute() and not path.is_file():
        from .. import paths

        path = paths.REPO_ROOT / path
    weights = read_weights(path)
    images, labels = load_test_set(n=n)
    return images, labels, weights
