"""The shape of the package: the core imports no study, each study's step list agrees with the
files, and no module grows past what one reader can hold."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import yaml

from kernelbook import paths
from kernelbook.errors import StepError

PACKAGE = paths.REPO_ROOT / "kernelbook"
CORE_SUBPACKAGES = {"evidence"}
MAX_LINES = 520


def study_packages() -> list[str]:
    """Every sub-package of kernelbook that is not part of the core is a study."""
    return sorted(p.name for p in PACKAGE.iterdir()
                  if (p / "__init__.py").is_file() and p.name not in CORE_SUBPACKAGES)


def core_modules() -> list[Path]:
    studies = set(study_packages())
    return [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in studies]


def imported_modules(path: Path, package: str | None = None) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against
    ``package``, by default the package the file lives in)."""
    tree = ast.parse(path.read_text())
    package = package or ".".join(("kernelbook",) + path.relative_to(PACKAGE).parent.parts)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_there_are_studies_and_a_core():
    assert "lenet" in study_packages()
    assert len(core_modules()) > 20


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_imports_no_study(path):
    studies = {f"kernelbook.{name}" for name in study_packages()}
    bad = sorted(m for m in imported_modules(path) if any(m == s or m.startswith(s + ".") for s in studies))
    assert not bad, f"{path.relative_to(paths.REPO_ROOT)} (core) imports {bad}"


def test_the_import_rule_sees_relative_and_lazy_imports_of_a_study(tmp_path):
    path = tmp_path / "report.py"
    path.write_text((PACKAGE / "report.py").read_text() + "\n\ndef f():\n    from .lenet import STUDY\n")
    assert "kernelbook.lenet" in imported_modules(path, "kernelbook")
    path.write_text("import kernelbook.mlp.run\n")
    assert "kernelbook.mlp.run" in imported_modules(path, "kernelbook")


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_longer_than_one_reader_can_hold(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(paths.REPO_ROOT)} has {lines} lines; split it by responsibility"


# ----------------------------------------------------------------------------- step lists


def toc_files() -> list[str]:
    from kernelbook.toc import _toc_files

    return _toc_files(yaml.safe_load((paths.REPO_ROOT / "_toc.yml").read_text()))


def book_studies() -> list[str]:
    """The studies that have a part in the book."""
    return sorted({f.split("/")[1] for f in toc_files() if f.startswith("book/") and f.count("/") == 2}
                  & set(study_packages()))


@pytest.mark.parametrize("study", book_studies())
def test_step_list_agrees_with_kernels_notebooks_and_toc(study):
    steps = importlib.import_module(f"kernelbook.{study}").STEPS
    assert steps.check_files() == []
    in_toc = [f for f in toc_files() if f.startswith(f"book/{study}/")]
    chapters = [f for f in in_toc if Path(f).name[:2].isdigit() and not Path(f).name.startswith("9")]
    assert chapters == [s.notebook for s in steps], "the toc's chapters are not the step list, in its order"


def test_toc_is_generated_from_the_step_lists():
    """``_toc.yml``'s chapters are what ``scripts/new_chapter.py`` writes from the step lists
    (``toc.with_steps``): unchanged by a rewrite, and a new step lands after the one before it."""
    from kernelbook.toc import with_steps

    text = (paths.REPO_ROOT / "_toc.yml").read_text()
    lists = {study: [s.notebook for s in importlib.import_module(f"kernelbook.{study}").STEPS]
             for study in book_studies()}
    assert with_steps(text, lists) == text
    first, *rest = lists["mlp"]
    grown = with_steps(text, {**lists, "mlp": [first, "book/mlp/00_extra", *rest]})
    entries = [line.split("file: ")[1] for line in grown.splitlines() if "file: book/mlp/" in line]
    assert entries[:3] == [first, "book/mlp/00_extra", rest[0]] and entries[-1].startswith("book/mlp/9")


@pytest.mark.parametrize("study", book_studies())
def test_no_notebook_types_its_previous_step(study):
    for path in sorted((paths.book_dir() / study).glob("*.md")):
        text = path.read_text()
        assert "\nprevious = " not in text, f"{path.name} types its previous step; the step list derives it"


def test_previous_is_derived_and_a_bad_slug_lists_the_valid_ones():
    from kernelbook.lenet import STEPS

    assert STEPS.previous("tiled").slug == "sweep"
    assert STEPS.previous("fp16").slug == "fused-unroll-matmul"  # its builds_on, declared in the list
    assert STEPS.previous("baseline") is None
    with pytest.raises(StepError) as info:
        STEPS.get("tiles")
    assert "tiled" in info.value.fix and "baseline" in info.value.fix


def test_a_step_list_refuses_numbers_out_of_order_and_unknown_builds_on():
    from kernelbook.steps import Step, StepImpl, StepList

    with pytest.raises(ValueError, match="numbers must increase"):
        StepList("x", [Step(1, "a", "01_a", "A", StepImpl), Step(0, "b", "00_b", "B", StepImpl)])
    with pytest.raises(ValueError, match="no earlier step"):
        StepList("x", [Step(0, "a", "00_a", "A", StepImpl), Step(1, "b", "01_b", "B", StepImpl, builds_on="c")])
    with pytest.raises(ValueError, match="must start with its number"):
        StepList("x", [Step(0, "a", "01_a", "A", StepImpl)])


def _whole_book_builders() -> list[str]:
    """Test modules (and conftest.py's fixtures) that replay the whole book: a ``run_batch`` call
    given no ``toc`` (the real ``_toc.yml``)."""
    found = []
    tests = paths.REPO_ROOT / "tests"
    for path in sorted(tests.glob("test_*.py")) + [tests / "conftest.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "run_batch"
                    and not any(k.arg in ("toc", None) for k in node.keywords)):
                found.append(path.name)
                break
    return found


def _recipe(makefile: str, target: str) -> str:
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        body.append(line)
    return "\n".join(body)


def test_whole_book_tests_are_out_of_make_test_and_run_once_in_ci():
    builders = _whole_book_builders()
    assert builders == ["conftest.py"], builders  # one strict whole-book build: the built_book fixture
    users = [p for p in sorted((paths.REPO_ROOT / "tests").glob("test_*.py")) if "(built_book)" in p.read_text()]
    assert "test_book.py" in [p.name for p in users]
    for path in users:
        assert "pytest.mark.book" in path.read_text(), path.name
    makefile = (paths.REPO_ROOT / "Makefile").read_text()
    assert '-m "not gpu and not book"' in _recipe(makefile, "test")
    assert '-m "book and not gpu"' in _recipe(makefile, "test-book")
    ci = [line.strip() for line in (paths.REPO_ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci.index("make test") < ci.index("make test-book")
