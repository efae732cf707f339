"""Parameter grids of a LeNet step (the sweep, the streams): every configuration checked on both
layers, then timed; refused or failed configurations are recorded as such, never dropped."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import results
from .. import session as session_mod
from ..errors import KernelbookError, ParameterError, ResultsError
from ..measure import check_repeats, time_gpu
from . import checks, get_variant
from .problem import LAYERS, layer_shape
from .study import NAME, STUDY
from .study import inputs as load_inputs




def config_label(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


@dataclass
class GridResult(session_mod.RecordingView):
    """Many configurations of one variant, each checked and then timed on the network's layers."""

    variant: str
    recording: session_mod.Recording
    cases = tuple(LAYERS)

    def frame(self):
        import pandas as pd

        rows = []
        for r in self.records:
            row = {k: v for k, v in r.items() if k not in ("samples", "config")}
            row.update(r.get("config") or {})
            rows.append(row)
        return pd.DataFrame(rows)

    def best(self, layer: str, batch: int | None = None) -> dict:
        """The fastest correct configuration for ``layer`` at ``batch`` (default: the largest)."""
        metric = self.parameters["metric"]
        timed = [r for r in self.records if r["metric"] == metric and r["layer"] == layer and r["value"] is not None]
        if not timed:
            raise ResultsError(f"The {self.variant} grid has no correct timing for {layer}.",
                               "re-run the sweep on a GPU; every configuration failed or was refused.")
        batch = batch or max(r["batch"] for r in timed)
        return dict(min((r for r in timed if r["batch"] == batch), key=lambda r: r["value"])["config"])


def run_grid(variant: str, configs: list[dict], metric: str = "op_time_ms", batch_sizes=(1000,),
             repeats: int = 5, warmup: int = 1, mode: str = "auto", run_id: str | None = None,
             replay_run: str | None = None, weights_path: str | None = None, seed: int | None = None,
             timelines: bool = False) -> GridResult:
    """Check and time every configuration of ``variant`` on both layers (``metric`` is
    ``op_time_ms`` or ``layer_time_ms``); refused configurations are recorded as such."""
    impl = get_variant(variant)
    if metric not in ("op_time_ms", "layer_time_ms"):
        raise ParameterError(f"metric={metric!r} cannot be swept.", "use 'op_time_ms' or 'layer_time_ms'.")
    if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) for c in configs):
        raise ParameterError(f"configs={configs!r} is not a non-empty list of parameter dicts.",
                             "pass e.g. configs=[{'tile_width': 16}, {'tile_width': 32}].")
    merged = [impl.params(**c) for c in configs]
    STUDY.options(weights_path=weights_path)  # checked in every mode, replaying too
    sizes = STUDY.sizes(batch_sizes)
    check_repeats(repeats, warmup)
    parameters = {"variant": variant, "configs": configs, "metric": metric, "batch_sizes": sizes,
                  "repeats": repeats, "warmup": warmup, "seed": seed}

    def measure() -> session_mod.Measurement:
        records, extra = _measure_grid(impl, configs, merged, metric, sizes, repeats, warmup, weights_path,
                                       seed, timelines)
        return session_mod.Measurement(records, [], extra)

    recording = session_mod.recorded(STUDY.part(variant, "grid"), NAME, measure, parameters=parameters, mode=mode,
                                     run_id=run_id, replay_run=replay_run)
    return GridResult(variant, recording)


def _measure_grid(impl, configs, merged, metric, sizes, repeats, warmup, weights_path, seed, timelines):
    import cupy as cp

    from .network import GpuLeNet

    images, _, weights = load_inputs(max(sizes), weights_path)
    feeder = GpuLeNet(weights, "baseline")  # only to produce C3's real input
    masks = {"C1": feeder.k1, "C3": feeder.k3}
    rng = np.random.default_rng(seed)
    records = []
    for config, params in zip(configs, merged):
        label = config_label(config)
        verdicts = {}
        for layer in LAYERS:
            shape = layer_shape(layer, 2)
            try:
                impl.validate(shape, params)
            except KernelbookError as exc:
                verdicts[layer] = f"refused: {exc.message}"
                continue
            result = checks.check_shape(impl, params, shape, rng, layer)
            verdicts[layer] = "ok" if result.passed else f"failed check: {result.error or result.rel_l2_error}"
        for batch in sizes:
            x_dev = cp.asarray(np.ascontiguousarray(images[:batch]))
            inputs = {"C1": x_dev, "C3": feeder.stage2_input(x_dev)}
            for layer, x_in in inputs.items():
                shape = layer_shape(layer, batch)
                fields = {"config": config, "config_label": label, "status": verdicts[layer],
                          "flops": shape.flops, "min_bytes": shape.min_bytes}
                value = None
                if verdicts[layer] == "ok":
                    try:
                        impl.validate(shape, params)
                    except KernelbookError as exc:
                        fields["status"] = f"refused: {exc.message}"
                    else:
                        k = masks[layer]
                        if metric == "op_time_ms":
                            y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
                            value = time_gpu(lambda: impl.launch(y_dev, x_in, k, shape, params), repeats,
                                             warmup, graph=impl.graph_capturable)
                            del y_dev
                        else:
                            value = time_gpu(impl.layer_round_trip(k, x_in.get(), shape, params), repeats, warmup,
                                             timing="events" if impl.graph_capturable else "host-bound")
                records.append(results.record(NAME, impl.slug, layer, batch, metric, value, unit="ms", **fields))
            del inputs, x_dev
            cp.get_default_memory_pool().free_all_blocks()
    extra = {}
    if timelines:
        extra["timelines"] = _timelines(impl, records, metric, sizes, images, feeder, masks)
    return records, extra


def _timelines(impl, records, metric, sizes, images, feeder, masks) -> list[dict]:
    """Instrumented runs of the one-stream configuration and of the best one, per layer."""
    import cupy as cp

    batch = max(sizes)
    grid = GridResult(impl.slug, session_mod.Recording("", None, records, parameters={"metric": metric}))
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
