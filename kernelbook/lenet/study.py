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

    def value(self, metric: str, layer: str, batch: int | None) -> float | None:
        for r in self.records:
            if r["metric"] == metric and r["layer"] == layer and r["batch"] == batch:
                return r["value"]
        return None


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

    from ..data import load_test_set
    from ..weights import default_weights_path, read_weights
    from .network import GpuLeNet

    weights = read_weights(Path(weights_path) if weights_path else default_weights_path())
    images, labels = load_test_set(n=max(sizes))
    net = GpuLeNet(weights, impl.slug, layer_params=merged)
    records: list[dict] = []
    rec = lambda *a, **kw: records.append(results.record(STUDY, impl.slug, *a, **kw))  # noqa: E731
    for batch in sizes:
        x_host = np.ascontiguousarray(images[:batch], dtype=np.float32)
        x_dev = cp.asarray(x_host)
        inputs = {"C1": x_dev, "C3": net.stage2_input(x_dev)}
        convs = {"C1": net.conv1, "C3": net.conv3}
        for layer, conv in convs.items():
            shape = layer_shape(layer, batch)
            x_in = inputs[layer]
            y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
            extra = {"flops": shape.flops, "min_bytes": shape.min_bytes}
            rec(layer, batch, "op_time_ms", time_gpu(lambda: conv(x_in, out=y_dev), repeats, warmup), **extra)
            x_in_host = x_in.get()
            y_host = np.empty(shape.y_shape, dtype=np.float32)

            def layer_round_trip(x_in=x_in, x_in_host=x_in_host, y_dev=y_dev, y_host=y_host, conv=conv):
                x_in.set(x_in_host)
                conv(x_in, out=y_dev)
                y_dev.get(out=y_host)

            rec(layer, batch, "layer_time_ms", time_gpu(layer_round_trip, repeats, warmup), **extra)
            del y_dev
        rec("network", batch, "total_time_ms", time_gpu(lambda: net.predict(x_host), repeats, warmup))
        predictions = net.predict(x_host)
        rec("network", batch, "accuracy", float(np.mean(predictions == labels[:batch])))
        del inputs, x_dev
        cp.get_default_memory_pool().free_all_blocks()
    return records
