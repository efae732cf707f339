"""One vocabulary: a step is a ``step`` and a problem's size a ``size`` in every public name.
The names used before (``variant=``, ``get_variant``, ``chapter.variant``) still work for one
release, each with a ``DeprecationWarning`` that names its replacement."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

from kernelbook import lenet
from kernelbook.lenet import network
from kernelbook.stepdata import StepRecording

ROOT = Path(__file__).resolve().parent.parent


def test_get_variant_warns_and_answers_like_get_step():
    with pytest.warns(DeprecationWarning, match="lenet.get_step"):
        impl = lenet.get_variant("tiled")
    assert impl is lenet.get_step("tiled")
    with pytest.warns(DeprecationWarning, match="lenet.step_names"):
        assert lenet.variant_names() == lenet.step_names() == lenet.STEPS.slugs()


def test_conv_forward_variant_keyword_warns_and_is_read_as_step(monkeypatch):
    asked = []
    monkeypatch.setattr(lenet, "get_step", lambda slug: asked.append(slug) or (_ for _ in ()).throw(KeyError(slug)))
    with pytest.warns(DeprecationWarning, match=r"conv_forward\(step=\.\.\.\)"), pytest.raises(KeyError):
        lenet.conv_forward(None, None, variant="tiled")
    assert asked == ["tiled"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyError):
            lenet.conv_forward(None, None, step="tiled")
    assert asked == ["tiled", "tiled"]


def test_the_network_names_its_step_field_step():
    fields = [f.name for f in network.GpuLeNet.__dataclass_fields__.values()]
    assert fields[:2] == ["weights", "step"]


def test_a_chapter_says_its_slug_and_variant_only_with_a_warning():
    entry = lenet.STEPS.get("tiled")
    rec = StepRecording(lenet.STUDY, entry, recording=None)
    assert rec.slug == "tiled"
    with pytest.warns(DeprecationWarning, match="chapter.slug"):
        assert rec.variant == "tiled"


def _calls_with_old_names(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "variant":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: variant=")
        if isinstance(node, ast.Attribute) and node.attr in ("get_variant", "variant_names", "variant"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and key.value == "variant":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a 'variant' key (write 'step')")
    return found


def test_the_package_and_scripts_use_only_the_new_names():
    """Only the deprecated aliases themselves and the store's reader of old records name a variant."""
    allowed = {"kernelbook/lenet/__init__.py", "kernelbook/lenet/network.py", "kernelbook/stepdata.py",
               "kernelbook/store_schema.py"}
    files = [p for p in [*(ROOT / "kernelbook").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
             if str(p.relative_to(ROOT)) not in allowed and not p.name.startswith("bench_")]
    found = [line for p in files for line in _calls_with_old_names(p)]
    assert not found, "\n".join(found)
