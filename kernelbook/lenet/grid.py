"""Parameter grids of a LeNet step (the sweep, the streams, the tensor-core tiles), run by the
core's sweep (``kernelbook.sweep``): every configuration checked on both layers, then timed;
refused or failed configurations are recorded as such, never dropped."""

from __future__ import annotations

import numpy as np

from .. import session as session_mod
from ..errors import ParameterError
from ..sweep import Sweep, SweepResult, config_label, run_sweep  # noqa: F401 - config_label: shown by pages
from . import get_step
from .direct import Sweep as DirectSweep
from .problem import LAYERS, layer_shape
from .study import STUDY
from .study import inputs as load_inputs

#: The sweep of step 02 as declared data: every block shape, outputs per thread and images per block
#: of the direct kernel that fits in 1024 threads (``direct.Sweep.grid``), timed at the largest
#: batch. Its page runs it through the core (``kernelbook.sweep.run_sweep``).
SWEEP = Sweep("sweep", configs=tuple(DirectSweep.grid()), sizes=(10000,), repeats=5, warmup=1,
              title="Launch shape of the direct kernel")

#: The grid of a LeNet step, as the core records it (same part names and fields as before).
GridResult = SweepResult


def run_grid(step: str, configs: list[dict], metric: str = "op_time_ms", batch_sizes=(1000,),
             repeats: int = 5, warmup: int = 1, mode: str = "auto", run_id: str | None = None,
             replay_run: str | None = None, weights_path: str | None = None, seed: int | None = None,
             timelines: bool = False, device: str | None = None) -> SweepResult:
    """Check and time every configuration of ``step`` on both layers (``metric`` is
    ``op_time_ms`` or ``layer_time_ms``) with the core's sweep; refused configurations are
    recorded as such. ``timelines`` adds instrumented runs of the best configuration."""
    if metric not in ("op_time_ms", "layer_time_ms"):
        raise ParameterError(f"metric={metric!r} cannot be swept.", "use 'op_time_ms' or 'layer_time_ms'.")
    if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) for c in configs):
        raise ParameterError(f"configs={configs!r} is not a non-empty list of parameter dicts.",
                             "pass e.g. configs=[{'tile_width': 16}, {'tile_width': 32}].")
    impl = get_step(step)
    for c in configs:  # a configuration naming no parameter of the step is refused before any launch
        impl.params(**c)
    options = STUDY.options(weights_path=weights_path)  # checked in every mode, replaying too
    sizes = list(STUDY.default_sizes) if batch_sizes is None else batch_sizes
    sweep = Sweep(step, configs=tuple(configs), metric=metric)

    def extra(records):
        if not timelines:
            return {}
        return {"timelines": _timelines(impl, records, metric, STUDY.sizes(sizes), weights_path)}

    return run_sweep(STUDY, sweep, mode=mode, run_id=run_id, replay_run=replay_run, seed=seed, sizes=batch_sizes,
                     repeats=repeats, warmup=warmup, options=options, extra=extra,
                     device=device)


def _timelines(impl, records, metric, sizes, weights_path) -> list[dict]:
    """Instrumented runs of the one-stream configuration and of the best one, per layer."""
    import cupy as cp

    from .network import GpuLeNet

    images, _, weights = load_inputs(max(sizes), weights_path)
    feeder = GpuLeNet(weights, "baseline")  # only to produce C3's real input
    masks = {"C1": feeder.k1, "C3": feeder.k3}
    batch = max(sizes)
    grid = GridResult(impl.slug, session_mod.Recording("", None, records, parameters={"metric": metric}), tuple(LAYERS))
    x_dev = cp.asarray(np.ascontiguousarray(images[:batch]))
    inputs = {"C1": x_dev, "C3": feeder.stage2_input(x_dev)}
    rows = []
    for layer, x_in in inputs.items():
        best = grid.best(layer, batch)
        single = dict(best, n_streams=1)
        for config in ([single, best] if single != best else [best]):
            params = impl.params(**config)
            pipeline = impl.layer_round_trip(masks[layer], x_in.get(), layer_shape(layer, batch), params)
            pipeline()  # warm-up
            cp.cuda.Device().synchronize()
            rows.append({"layer": layer, "batch": batch, "config": config,
                         "config_label": config_label(config), "events": pipeline.timeline()})
    return rows
