"""The timer's graph method without a GPU: a fake ``cupy`` records what is captured and replayed,
so the choice of R and the per-call samples are checked here; tests/test_gpu.py checks it on a GPU."""

from __future__ import annotations

import sys
import types

import pytest

from kernelbook import measure


class FakeCupy(types.ModuleType):
    """Just enough of cupy for ``time_gpu``: a replay of a graph of R calls takes R * call_ms."""

    def __init__(self, call_ms: float):
        super().__init__("cupy")
        self.call_ms, self.captured, self.pending = call_ms, [], 0.0
        fake = self

        class Event:
            def __init__(self):
                self.t = 0.0

            def record(self, stream=None):
                self.t = fake.pending

            def synchronize(self):
                pass

        class Stream:
            def __init__(self, non_blocking=False):
                self.calls = 0

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def synchronize(self):
                pass

            def begin_capture(self):
                self.calls = 0

            def end_capture(self):
                calls = self.calls
                fake.captured.append(calls)

                class Graph:
                    def launch(self, stream):
                        fake.pending += calls * fake.call_ms

                return Graph()

        self.cuda = types.SimpleNamespace(Event=Event, Stream=Stream, get_elapsed_time=lambda a, b: b.t - a.t,
                                          get_current_stream=lambda: Stream(), Device=lambda: Stream())


@pytest.fixture
def fake_cupy(monkeypatch):
    def make(call_ms):
        cp = FakeCupy(call_ms)
        monkeypatch.setitem(sys.modules, "cupy", cp)
        return cp
    return make


def _timed(cp, monkeypatch, repeats=5):
    streams = []
    real_stream = cp.cuda.Stream

    def stream(non_blocking=False):
        s = real_stream(non_blocking)
        streams.append(s)
        return s

    monkeypatch.setattr(cp.cuda, "Stream", stream)

    def fn():  # one "launch" on the stream being captured
        streams[-1].calls += 1

    return measure.time_gpu(fn, repeats=repeats, warmup=1, graph=True)


@pytest.mark.parametrize("call_ms, calls", [(0.005, 50), (0.1, 10), (0.3, 4), (1.0, 1), (5.0, 1)])
def test_a_graph_replay_holds_about_a_millisecond_of_calls_and_samples_are_per_call(fake_cupy, monkeypatch,
                                                                                   call_ms, calls):
    cp = fake_cupy(call_ms)
    m = _timed(cp, monkeypatch)
    assert m.extra["timing"] == "cuda-graph-calls" and m.extra["calls_per_replay"] == calls
    assert cp.captured[-1] == calls                        # the timed graph holds R calls
    assert m.samples == pytest.approx([call_ms] * 5)       # a replay's time / R


def test_calls_per_replay_is_bounded():
    assert measure.calls_per_replay(0.0) == measure.MAX_CALLS
    assert measure.calls_per_replay(1e-9) == measure.MAX_CALLS
    assert measure.calls_per_replay(measure.REPLAY_TARGET_MS * 3) == 1
    assert measure.calls_per_replay(measure.REPLAY_TARGET_MS / 2.5) == 3


def test_the_summary_says_how_many_calls_a_replay_held():
    from kernelbook.summary import _timing_caption, timed_by

    assert timed_by({"timing": "cuda-graph-calls", "calls_per_replay": 50}) == "graph of calls (R = 50)"
    assert timed_by({"timing": "cuda-graph"}) == "graph"
    caption = _timing_caption(["cuda-graph-calls", "cuda-graph"])
    assert "2 timing methods" in caption and "spreads over its R calls" in caption
    assert "Timed by: 'graph of calls'" in _timing_caption(["cuda-graph-calls", "cuda-graph-calls"])

