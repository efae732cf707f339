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
from ..study import Column, Study
from .problem import LAYERS, MAX_BATCH, layer_shape
from .steps import STEPS

DEFAULT_WEIGHTS = "data/models/lenet86.bin"


class LeNetStudy(Study):
    title = "LeNet-86 forward convolution"
    steps = STEPS
    cases = tuple(LAYERS)
    case_header = "Layer"
    size_header = "Batch Size"
    size_name = "batch_sizes"
    case_params_name = "layer_params"
    default_sizes = (100, 1000, 5000, 10000)  # 5,000: the batch seed 003 reports (recorded from the next run on)
    check_shapes = 8          # its random shapes are small: two more cost nothing
    max_size = MAX_BATCH
    vendor_name = "cudnn"   # the recorded part's name (kept: runs are stored under it)
    old_vendor_names = {"cudnn": "cudnn-fp32"}
    profile_size = 1000
    #: Repeats of the times that move the batch across PCIe (Layer Time, the network's total): each
    #: takes up to hundreds of milliseconds, and their spread is the copies'; the op times keep ``repeats``.
    round_trip_repeats = 5

    def columns(self) -> list[Column]:
        return [Column("Op Time 1", "op_time_ms", "C1"), Column("Op Time 2", "op_time_ms", "C3"),
                Column("Layer Time 1", "layer_time_ms", "C1"), Column("Layer Time 2", "layer_time_ms", "C3"),
                Column("Total Execution Time", "total_time_ms", "network"),
                Column("Accuracy", "accuracy", "network", kind="accuracy")]

    def problem(self, case: str, size: int):
        return layer_shape(case, size)

    def options(self, weights_path=None) -> dict:
        """``weights_path`` is checked in every mode (replaying too): a readable course-format file
        of the right size and layout, or a ParameterError before anything runs."""
        if P.optional_path("weights_path", weights_path) is None:
            return {"weights": DEFAULT_WEIGHTS}
        from .weights import FILE_BYTES, FILE_HEADER, read_weights

        path = P.readable_file("weights_path", weights_path, size=FILE_BYTES, header=FILE_HEADER,
                               example="'weights-86.bin'")
        read_weights(path)  # every layer's count and finite values
        return {"weights": str(path)}

    # ------------------------------------------------------------------ the problem, for the harness

    def inputs(self, impl, shape, rng, case=None):
        """Image-like x in [0, 255) and weights in [-1, 1) (what the profilers launch on)."""
        return (rng.uniform(0.0, 255.0, size=shape.x_shape).astype(np.float32),
                rng.uniform(-1.0, 1.0, size=shape.k_shape).astype(np.float32))

    def check_cases(self, impl, params, n_random, rng):
        from .checks import check_cases

        return check_cases(impl, params, n_random, rng)

    def timing_context(self, impl, case_params, sizes, options):
        """The test images, the trained network with this step in both layers, and per batch the
        layers' device inputs (C3's is C1's output through the network)."""
        from .network import GpuLeNet

        images, labels, weights = inputs(max(sizes), options["weights"])
        return {"images": images, "labels": labels,
                "net": GpuLeNet(weights, impl.slug, layer_params=case_params), "batch": None}

    def timed_operands(self, impl, case, size, shape, context):
        import cupy as cp

        if context["batch"] != size:
            net = context["net"]
            x_host = np.ascontiguousarray(context["images"][:size], dtype=np.float32)
            x_dev = cp.asarray(x_host)
            context.update(batch=size, x_host=x_host, layer_inputs={"C1": x_dev, "C3": net.stage2_input(x_dev)})
        net = context["net"]
        return context["layer_inputs"][case], {"C1": net.k1, "C3": net.k3}[case]

    def case_records(self, impl, case, shape, params, operands, run, output, op, context, time):
        x_in, k = operands
        round_trip = impl.layer_round_trip(k, x_in.get(), shape, params)
        return [("layer_time_ms", time(round_trip, repeats=self.round_trip_repeats), "ms")]

    def size_records(self, impl, size, context, time):
        import cupy as cp

        net, x_host = context["net"], context["x_host"]
        total = time(lambda: net.predict(x_host), timing="events", repeats=self.round_trip_repeats)
        predictions = net.predict(x_host)
        accuracy = float(np.mean(predictions == context["labels"][:size]))
        context.update(batch=None, layer_inputs=None, x_host=None)
        cp.get_default_memory_pool().free_all_blocks()
        return [("network", "total_time_ms", total, "ms"), ("network", "accuracy", accuracy, "")]

    def vendor_runs(self, sizes, seed):
        from .vendor import vendor_runs

        return vendor_runs(sizes, seed)

    def targets(self) -> list[dict]:
        """The study's goal: Op Time 1 + Op Time 2 at 10,000 images within 1.0 ms, and at least
        13× faster than cuDNN FP32 in the same run; judged on the steps built to reach it."""
        return [{"what": "Op Time 1 + Op Time 2 at batch 10,000", "case": "C1", "cases": ("C1", "C3"),
                 "size": 10000, "limit_ms": 1.0, "steps": ["specialised", "hopper-final", "wgmma-final"],
                 "vendor": "cudnn-fp32",
                 "vendor_factor": 13.0}]

    def reported(self, step: str):
        from .tables import reported_table

        return reported_table(step)

    def expectations(self, chapter) -> list[str]:
        from .tables import expectations, goal_lines, speedup_sentence

        return (goal_lines(chapter, self.targets()[0]) + expectations(chapter)
                + [speedup_sentence(chapter, self.reported_frame(chapter.slug))])

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


def check_step(impl, params: dict, n_random: int = 8, seed: int | None = None):
    """The network's two layers plus ``n_random`` random shapes the step accepts (the harness's
    checks of this study, by step)."""
    from ..harness import check_step

    return check_step(STUDY, impl, params, n_random, seed)
