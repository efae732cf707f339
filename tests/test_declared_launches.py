"""Every step's launches match a table of expectations, on the CPU.

``tests/data/launch_table.json`` was recorded (``python tests/launch_recorder.py``) from the hand-
written launch paths (MLP ``plan()/args()`` of steps 00-16, VGG ``geometry()`` of steps 00-10,
LeNet's own ``launch`` of steps 00-07 and 09-16, the streams step's chunks and streams included,
the Hopper steps 15-16 on a fake device: SM count, occupancy, compute capability) before they were
ported to the declared ``launches()``/``launch_args()`` of ``kernelbook.steps``: for each step,
several valid and invalid shapes and parameter sets, whether ``validate`` refuses (and with which
error), which kernels ``prepare`` compiles, and every kernel call ``launch`` makes (kernel,
compile-time defines, grid, block, shared memory, opt-in dynamic shared memory, arguments by name
and type, the stream when it is not the caller's, a constant-memory upload). The ported code must
issue exactly the same (VGG 11-14 with raw and prepared weights, on a fake sm_90 device); on a GPU,
``make test-gpu`` checks the kernels themselves against float64.
"""

from __future__ import annotations

import json

import pytest
from launch_recorder import TABLE, all_cases, record_case

from kernelbook import lenet, mlp, vgg
from kernelbook.steps import StepImpl

EXPECTED = json.loads(TABLE.read_text())


def _key(entry) -> str:
    return f"{entry['study']}:{entry['step']}:{json.dumps(entry['shape'], sort_keys=True)}:" \
           f"{json.dumps(entry['params'], sort_keys=True)}"


#: The table by case, indexed once for all the cases.
EXPECTED_BY_KEY = {_key(e): e for e in EXPECTED}


def test_the_table_covers_every_case_and_refuses_some():
    cases = [(study, impl.slug, shape, over) for study, impl, shape, over in all_cases()]
    assert len(cases) == len(EXPECTED)
    assert sum("refused" in e for e in EXPECTED) >= 50 and sum("launches" in e for e in EXPECTED) >= 400
    assert {(e["study"], e["step"]) for e in EXPECTED} >= {("mlp", "best"), ("vgg", "3xtf32"), ("vgg", "final")}


@pytest.mark.parametrize("study, impl, shape, overrides",
                         [pytest.param(*c, id=f"{c[0]}-{c[1].slug}-{i}") for i, c in enumerate(all_cases())])
def test_launches_match_the_recorded_table(study, impl, shape, overrides, monkeypatch):
    got = json.loads(json.dumps(record_case(study, impl, shape, overrides, monkeypatch)))
    want = EXPECTED_BY_KEY[_key(got)]
    assert got.get("refused") == want.get("refused")
    assert got.get("prepared") == want.get("prepared")
    assert got.get("launches") == want.get("launches")



def test_the_recorder_sees_a_changed_launch(monkeypatch):
    """The comparison can fail: a grid off by one block is a different launch."""
    from kernelbook.vgg import STEPS

    impl = STEPS.impl("weights-shared")
    shape = {"B": 2, "C": 3, "H": 17, "W": 9, "M": 5, "K": 3}
    want = next(e for e in EXPECTED if e["step"] == "weights-shared" and e["shape"] == shape and not e["params"])
    original = type(impl).launches
    from kernelbook.steps import Launch

    def shifted(self, problem, params):
        launches = original(self, problem, params)
        first = launches[0]
        return [Launch(first.kernel, (first.grid[0] + 1,) + tuple(first.grid[1:]), first.block,
                       first.dynamic_smem, first.static_smem, first.min_blocks)] + launches[1:]

    monkeypatch.setattr(type(impl), "launches", shifted)
    got = json.loads(json.dumps(record_case("vgg", impl, shape, {}, monkeypatch)))
    assert got["launches"] != want["launches"]


def test_every_step_declares_its_launches_and_the_core_launches_them():
    """One shape of step: ``launches()`` declared and ``launch`` the core's, never overridden
    (pre-work is an ``Upload`` or ``LibraryCall`` in the list, ``operands`` or a ``handoff``)."""
    undeclared, own = [], []
    for study in (lenet, mlp, vgg):
        for step in study.STEPS:
            cls = type(study.STEPS.impl(step.slug))
            if cls.launches is StepImpl.launches:
                undeclared.append((study.STEPS.study, step.slug))
            if cls.launch is not StepImpl.launch:
                own.append((study.STEPS.study, step.slug))
    assert not undeclared, f"steps that declare no launches(): {undeclared}"
    assert not own, f"steps that override the core's launch(): {own}"


def test_the_streams_step_launches_a_chunk_the_layer_pipeline_hands_it(monkeypatch):
    """LeNet step 05's layer pipeline launches the kernel alone on a chunk it sliced itself (no
    start:stop key): the launch covers that chunk, never a failure on an empty key."""
    from launch_recorder import Named

    from kernelbook.lenet import STEPS, layer_shape

    impl = STEPS.impl("streams")
    params = impl.params()
    calls = []
    monkeypatch.setattr(type(impl), "kernel", lambda self, name, p, shape: (
        lambda grid, block, args, shared_mem=0, stream=None: calls.append((grid, args))))
    monkeypatch.setattr("kernelbook.steps.opt_in", lambda kernel, launch: None, raising=False)
    chunk = layer_shape("C1", 3)
    impl.launch_kernel(Named("y[0:3]"), Named("x[0:3]"), chunk, params)
    (grid, args), = calls
    assert [getattr(a, "name", None) for a in args[:2]] == ["y[0:3]", "x[0:3]"]
    assert int(args[2]) == 3   # the chunk's images, as handed in
