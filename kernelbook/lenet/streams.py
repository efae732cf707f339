"""The streams step's host side: chunked copy -> kernel -> copy pipelines, and their timeline.

Streams are created once per count (``stream_pool``) and are *blocking* streams, so an event
recorded on the legacy default stream after the pipeline waits for all of them: that is how
``measure.time_gpu`` times the whole pipeline. The timeline is a separate, instrumented run that
records an event pair around every copy and kernel, so the timed runs carry no extra events.
"""

from __future__ import annotations

import functools

import numpy as np

from .convstep import ConvShape


@functools.lru_cache(maxsize=None)
def stream_pool(n: int) -> tuple:
    import cupy as cp

    return tuple(cp.cuda.Stream(non_blocking=False) for _ in range(n))


class LayerPipeline:
    """Host input -> device -> kernel -> host output for one layer, cut into chunks over streams.

    Host buffers are allocated once here (pinned or pageable, per ``params["host_memory"]``),
    filled with the layer's input outside any timed region.
    """

    def __init__(self, impl, k_dev, x_host: np.ndarray, shape: ConvShape, params: dict):
        import cupy as cp
        import cupyx

        self.impl, self.shape, self.params = impl, shape, params
        self.pinned = params["host_memory"] == "pinned"
        if self.pinned:
            self.x_host = cupyx.empty_pinned(shape.x_shape, dtype=np.float32)
            self.y_host = cupyx.empty_pinned(shape.y_shape, dtype=np.float32)
        else:
            self.x_host = np.empty(shape.x_shape, dtype=np.float32)
            self.y_host = np.empty(shape.y_shape, dtype=np.float32)
        self.x_host[...] = x_host
        self.x_dev = cp.empty(shape.x_shape, dtype=cp.float32)
        self.y_dev = cp.empty(shape.y_shape, dtype=cp.float32)
        self.streams = stream_pool(params["n_streams"])
        self.chunks = impl.chunks(shape.B, params)
        impl.upload_mask(k_dev, params, shape)
        cp.cuda.get_current_stream().synchronize()

    def _steps(self, i: int, start: int, stop: int):
        stream = self.streams[i % len(self.streams)]
        part = ConvShape(stop - start, *(getattr(self.shape, n) for n in ("M", "C", "H", "W", "K")))
        x_dev, y_dev = self.x_dev[start:stop], self.y_dev[start:stop]
        yield "H2D", stream, lambda: x_dev.set(self.x_host[start:stop], stream=stream)
        yield "kernel", stream, lambda: self.impl.launch_kernel(y_dev, x_dev, part, self.params, stream)
        yield "D2H", stream, lambda: y_dev.get(stream=stream, out=self.y_host[start:stop],
                                               blocking=not self.pinned)

    def __call__(self) -> None:
        """Enqueue the whole pipeline (what Layer Time times)."""
        for i, (start, stop) in enumerate(self.chunks):
            for _, _, step in self._steps(i, start, stop):
                step()

    def output(self) -> np.ndarray:
        return np.asarray(self.y_host)

    def timeline(self) -> list[dict]:
        """One instrumented run: start and end of every copy and kernel, in ms from the start."""
        import cupy as cp

        origin = cp.cuda.Event()
        origin.record(cp.cuda.Stream.null)
        marks = []
        for i, (start, stop) in enumerate(self.chunks):
            for kind, stream, step in self._steps(i, start, stop):
                begin, end = cp.cuda.Event(), cp.cuda.Event()
                begin.record(stream)
                step()
                end.record(stream)
                marks.append((i % len(self.streams), i, kind, begin, end))
        cp.cuda.Device().synchronize()
        return [{"stream": s, "chunk": c, "kind": kind,
                 "start_ms": float(cp.cuda.get_elapsed_time(origin, begin)),
                 "end_ms": float(cp.cuda.get_elapsed_time(origin, end))}
                for s, c, kind, begin, end in marks]
