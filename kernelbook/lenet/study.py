"""One chapter of the LeNet study: check a variant, then measure it in the milestone format.

Metrics (the milestone's, defined once here and stated in the book):

- ``op_time_ms``      the convolution kernel(s) of one layer alone, data already on the device
- ``layer_time_ms``   host input -> device -> the layer's kernel(s) -> host output (the course's
                      prolog + op + epilog; device buffers come from CuPy's pool, so allocation
                      is not counted)
- ``total_time_ms``   inference of the B images from host images to host predictions (both conv
                      layers with this variant, the rest in CuPy); compilation excluded
- ``accuracy``        top-1 on the first B Fashion-MNIST test images
- ``correct``         1.0 when every float64 check passed, else 0.0 (then nothing is timed)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import checks, results, session as session_mod
from ..measure import check_repeats, time_gpu
from . import LAYERS, check_batch, get_variant, layer_shape

STUDY = "lenet"
DEFAULT_BATCHES = (100, 1000, 10000)


def part_name(variant: str) -> str:
    return f"{STUDY}-{variant}"


@dataclass
class ChapterResult:
    """What a chapter shows: the session (measured or replayed), records, checks, parameters."""

    variant: str
    session: session_mod.Session
    records: list[dict]
    checks: list[dict]
    parameters: dict
    extra: dict = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        flags = [r["value"] for r in self.records if r["metric"] == "correct"]
        return bool(flags) and all(v == 1.0 for v in flags)

    @property
    def label(self) -> str:
        return self.session.label

    def frame(self):
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in self.records])


def validate_batches(batch_sizes) -> list[int]:
    sizes = [check_batch(b) for b in batch_sizes]
    if not sizes:
        from ..errors import ShapeError

        raise ShapeError("batch_sizes is empty.", "pass e.g. batch_sizes=[100, 1000, 10000].")
    if max(sizes) > 10000:
        from ..errors import ShapeError

        raise ShapeError(f"batch {max(sizes)} exceeds the 10,000 test images.", "use batch sizes of at most 10000.")
    return sizes


def run_chapter(variant: str, params: dict | None = None, layer_params: dict | None = None,
                batch_sizes=DEFAULT_BATCHES, repeats: int = 10, warmup: int = 2, mode: str = "auto",
                run_id: str | None = None, replay_run: str | None = None, weights_path: str | None = None,
                check_shapes: int = 8, seed: int | None = None) -> ChapterResult:
    """Measure (on a GPU) or replay (without one) one variant's chapter."""
    impl = get_variant(variant)
    params = dict(params or {})
    layer_params = {k: dict(v) for k, v in (layer_params or {}).items()}
    merged = {layer: impl.params(**{**params, **layer_params.get(layer, {})}) for layer in LAYERS}
    sizes = validate_batches(batch_sizes)
    check_repeats(repeats, warmup)
    parameters = {"variant": variant, "params": params, "layer_params": layer_params,
                  "batch_sizes": sizes, "repeats": repeats, "warmup": warmup,
                  "weights": str(weights_path or "data/models/lenet86.bin"), "check_shapes": check_shapes,
                  "seed": seed}
    sess = session_mod.start(part_name(variant), mode=mode, run_id=run_id, replay_run=replay_run,
                             parameters=parameters)
    if not sess.measuring:
        part = sess.run.read_part(part_name(variant))
        return ChapterResult(variant, sess, part["records"], part["checks"], part["parameters"], part["extra"])

    records, check_rows = _check(impl, merged, check_shapes, seed)
    correct = all(r["value"] == 1.0 for r in records)
    if correct:
        records += _measure(impl, merged, sizes, repeats, warmup, weights_path)
    sess.run.write_part(part_name(variant), STUDY, records, check_rows, parameters=parameters)
    return ChapterResult(variant, sess, records, check_rows, parameters)


def _check(impl, merged: dict, check_shapes: int, seed: int | None) -> tuple[list[dict], list[dict]]:
    records, rows = [], []
    seen = {}
    for layer, params in merged.items():
        key = tuple(sorted(params.items()))
        if key not in seen:
            seen[key] = checks.check_variant(impl, params, n_random=check_shapes, seed=seed)
        layer_checks = [c for c in seen[key] if c.label in (layer, "random")]
        rows += [dict(c.as_dict(), layer=layer, params=params) for c in layer_checks]
        ok = checks.all_passed(layer_checks)
        records.append(results.record(STUDY, impl.slug, layer, None, "correct", 1.0 if ok else 0.0,
                                      n_checks=len(layer_checks)))
    return records, rows


def _measure(impl, merged: dict, sizes: list[int], repeats: int, warmup: int,
             weights_path: str | None) -> list[dict]:
    import cupy as cp

    from .network import GpuLeNet

    images, labels, weights = _inputs(max(sizes), weights_path)
    net = GpuLeNet(weights, impl.slug, layer_params=merged)
    masks = {"C1": net.k1, "C3": net.k3}
    records: list[dict] = []
    rec = lambda *a, **kw: records.append(results.record(STUDY, impl.slug, *a, **kw))  # noqa: E731
    for batch in sizes:
        x_host = np.ascontiguousarray(images[:batch], dtype=np.float32)
        x_dev = cp.asarray(x_host)
        layer_inputs = {"C1": x_dev, "C3": net.stage2_input(x_dev)}
        for layer, x_in in layer_inputs.items():
            shape, params, k = layer_shape(layer, batch), merged[layer], masks[layer]
            impl.validate(shape, params)
            y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
            extra = {"flops": shape.flops, "min_bytes": shape.min_bytes}
            op = time_gpu(lambda: impl.launch(y_dev, x_in, k, shape, params), repeats, warmup,
                          graph=impl.graph_capturable)
            rec(layer, batch, "op_time_ms", op, **extra)
            round_trip = impl.layer_round_trip(k, x_in.get(), shape, params)
            rec(layer, batch, "layer_time_ms", time_gpu(round_trip, repeats, warmup), **extra)
            del y_dev, round_trip
        rec("network", batch, "total_time_ms", time_gpu(lambda: net.predict(x_host), repeats, warmup))
        predictions = net.predict(x_host)
        rec("network", batch, "accuracy", float(np.mean(predictions == labels[:batch])))
        del layer_inputs, x_dev
        cp.get_default_memory_pool().free_all_blocks()
    return records


def _inputs(n: int, weights_path: str | None):
    from ..data import load_test_set
    from ..weights import default_weights_path, read_weights

    weights = read_weights(Path(weights_path) if weights_path else default_weights_path())
    images, labels = load_test_set(n=n)
    return images, labels, weights


# ----------------------------------------------------------------------------- comparisons


def load_recorded(variant: str, prefer_run: str | None = None) -> ChapterResult | None:
    """A step's recorded chapter for comparisons: from ``prefer_run`` (the run being written,
    so a batch compares like with like) when it holds the step, else the newest run that does.
    None when no run has it."""
    name = part_name(variant)
    run = results.run_with(name, prefer_run)
    if run is None:
        return None
    part = run.read_part(name)
    sess = session_mod.Session(name, "replay", run, "recorded earlier, shown for comparison")
    return ChapterResult(variant, sess, part["records"], part["checks"], part["parameters"], part["extra"])


def comparison_steps(chapter: ChapterResult, previous: str | None) -> dict[str, ChapterResult]:
    """{'baseline': ..., 'previous step': ..., 'this step': chapter}, skipping what is missing."""
    steps: dict[str, ChapterResult] = {}
    run_id = chapter.session.run.run_id
    for role, slug in (("baseline", "baseline"), ("previous step", previous)):
        if slug and slug != chapter.variant and slug not in [s.variant for s in steps.values()]:
            found = load_recorded(slug, prefer_run=run_id)
            if found is not None:
                steps[f"{role}: {slug}"] = found
    steps[f"this step: {chapter.variant}"] = chapter
    return steps


# ----------------------------------------------------------------------------- grids (sweeps)


def config_label(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


@dataclass
class GridResult:
    """Many configurations of one variant, each checked and then timed on the network's layers."""

    variant: str
    session: session_mod.Session
    records: list[dict]
    parameters: dict
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.session.label

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
            from ..errors import ResultsError

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
    from ..errors import ShapeError

    impl = get_variant(variant)
    if metric not in ("op_time_ms", "layer_time_ms"):
        raise ShapeError(f"metric={metric!r} cannot be swept.", "use 'op_time_ms' or 'layer_time_ms'.")
    if not configs:
        raise ShapeError("The sweep has no configurations.", "pass at least one parameter dict.")
    merged = [impl.params(**c) for c in configs]
    sizes = validate_batches(batch_sizes)
    check_repeats(repeats, warmup)
    parameters = {"variant": variant, "configs": configs, "metric": metric, "batch_sizes": sizes,
                  "repeats": repeats, "warmup": warmup, "seed": seed}
    name = f"{part_name(variant)}-grid"
    sess = session_mod.start(name, mode=mode, run_id=run_id, replay_run=replay_run, parameters=parameters)
    if not sess.measuring:
        part = sess.run.read_part(name)
        return GridResult(variant, sess, part["records"], part["parameters"], part["extra"])
    records, extra = _measure_grid(impl, configs, merged, metric, sizes, repeats, warmup, weights_path,
                                   seed, timelines)
    sess.run.write_part(name, STUDY, records, extra=extra, parameters=parameters)
    return GridResult(variant, sess, records, parameters, extra)


def _measure_grid(impl, configs, merged, metric, sizes, repeats, warmup, weights_path, seed, timelines):
    import cupy as cp

    from ..errors import ShapeError
    from .network import GpuLeNet

    images, _, weights = _inputs(max(sizes), weights_path)
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
            except ShapeError as exc:
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
                    except ShapeError as exc:
                        fields["status"] = f"refused: {exc.message}"
                    else:
                        k = masks[layer]
                        if metric == "op_time_ms":
                            y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
                            value = time_gpu(lambda: impl.launch(y_dev, x_in, k, shape, params), repeats,
                                             warmup, graph=impl.graph_capturable)
                            del y_dev
                        else:
                            value = time_gpu(impl.layer_round_trip(k, x_in.get(), shape, params), repeats, warmup)
                records.append(results.record(STUDY, impl.slug, layer, batch, metric, value, unit="ms", **fields))
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
    grid = GridResult(impl.slug, None, records, {"metric": metric})  # type: ignore[arg-type]
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
