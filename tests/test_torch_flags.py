"""PyTorch's TF32 and cuDNN-benchmark flags: one context manager in the core (``measure.torch_flags``)
sets them for a library comparison and puts them back, whatever ends it. Tested on the CPU with a
fake ``torch``: a module of the same names whose tensors accept any call."""

from __future__ import annotations

import ast
import subprocess
import sys
import types

import pytest

from kernelbook import measure, paths


class Anything:
    """A stand-in tensor, model or context: every attribute, call, index and ``with`` gives itself."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, key):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_torch(benchmark=False, cudnn_tf32=True, matmul_tf32=False):
    torch = types.ModuleType("torch")
    torch.backends = types.SimpleNamespace(
        cudnn=types.SimpleNamespace(benchmark=benchmark, allow_tf32=cudnn_tf32, version=lambda: 90100),
        cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=matmul_tf32)))
    anything = Anything()
    torch.device = torch.from_numpy = torch.no_grad = lambda *a, **k: anything
    torch.cuda = types.SimpleNamespace(empty_cache=lambda: None, synchronize=lambda: None)
    torch.float16, torch.float32, torch.channels_last = "float16", "float32", "channels_last"
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.Sequential = torch.nn.Linear = torch.nn.ReLU = lambda *a, **k: anything
    torch.nn.functional = types.ModuleType("torch.nn.functional")
    torch.nn.functional.conv2d = torch.nn.functional.relu = torch.nn.functional.max_pool2d = lambda *a, **k: anything
    return torch


def flags_of(torch):
    return (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)


def test_flags_are_set_inside_and_restored_after_an_exception():
    torch = fake_torch(benchmark=False, cudnn_tf32=True, matmul_tf32=False)
    with pytest.raises(RuntimeError, match="mid-comparison"):
        with measure.torch_flags(torch, tf32=False, benchmark=True) as flags:
            assert flags_of(torch) == (True, False, False)
            flags.tf32(True)
            assert flags_of(torch) == (True, True, True)
            raise RuntimeError("mid-comparison")
    assert flags_of(torch) == (False, True, False)


def test_flags_are_restored_when_a_generator_is_closed_midway():
    torch = fake_torch(benchmark=False, cudnn_tf32=False, matmul_tf32=True)

    def rows():
        with measure.torch_flags(torch, benchmark=True) as flags:
            for tf32 in (False, True):
                flags.tf32(tf32)
                yield flags_of(torch)

    gen = rows()
    assert next(gen) == (True, False, False)
    gen.close()  # a consumer that stops after the first row (or fails on it)
    assert flags_of(torch) == (False, False, True)


@pytest.fixture
def torch(monkeypatch):
    fake = fake_torch(benchmark=False, cudnn_tf32=True, matmul_tf32=False)
    for name, module in (("torch", fake), ("torch.nn", fake.nn), ("torch.nn.functional", fake.nn.functional)):
        monkeypatch.setitem(sys.modules, name, module)
    return fake


def _lenet_rows():
    from kernelbook.lenet.vendor import vendor_runs
    return vendor_runs([1])


def _mlp_rows():
    from kernelbook.mlp.run import vendor_runs
    return vendor_runs(["5x5"])


def _vgg_rows():
    from kernelbook.vgg.problem import ConvPoolShape
    from kernelbook.vgg.run import vendor_runs
    return vendor_runs([ConvPoolShape(1, 2, 6, 6, 3, 3)], variants=("cudnn-fp32", "cudnn-tf32"))


@pytest.mark.parametrize("rows, benchmark", [(_lenet_rows, True), (_mlp_rows, False), (_vgg_rows, True)],
                         ids=["lenet", "mlp", "vgg"])
def test_every_study_s_library_rows_set_tf32_per_row_and_restore_the_flags(torch, rows, benchmark):
    gen = rows()
    seen = {}
    for run in gen:
        seen.setdefault(run.name, flags_of(torch))
        if len(seen) == 2:
            break
    (fp32, flags32), (tf32, flags_tf32) = list(seen.items())[:2]
    assert "fp32" in fp32 and flags32 == (benchmark, False, False)
    assert "tf32" in tf32 and flags_tf32 == (benchmark, True, True)
    gen.close()
    assert flags_of(torch) == (False, True, False)


def test_no_module_but_the_core_s_sets_pytorch_flags_by_hand():
    """The flags are assigned only inside ``measure.py``: no study keeps its own copy."""
    offenders = []
    for path in sorted((paths.REPO_ROOT / "kernelbook").rglob("*.py")):
        if path.name == "measure.py" and path.parent.name == "kernelbook":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(t, ast.Attribute) and t.attr in ("allow_tf32", "benchmark"):
                        offenders.append(f"{path.relative_to(paths.REPO_ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_importing_the_core_does_not_import_torch():
    code = ("import sys, kernelbook.measure, kernelbook.harness; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=paths.REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
