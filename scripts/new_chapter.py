#!/usr/bin/env python3
"""Make a step's notebook from book/_templates/chapter.md, or renew the parameter cells.

    python scripts/new_chapter.py mlp baseline      # writes book/mlp/00_baseline.md and its _toc.yml entry
    python scripts/new_chapter.py --parameters      # rewrites every step notebook's parameter cell

The step must already be in the study's step list (kernelbook/<study>/steps.py); the notebook's
file name, title and parameters come from it, and ``_toc.yml``'s chapters are written from the list. An existing notebook is never overwritten; with
``--parameters`` only its cell tagged ``parameters`` is replaced by the template's (timing and
sizes left to the study; lines of the page's own parameters, such as a sweep's, kept as they are).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STUDY_LABELS = {"lenet": "LeNet", "mlp": "MLP", "vgg": "VGG layer"}
TEMPLATE = ROOT / "book" / "_templates" / "chapter.md"
CELL = re.compile(r"(```\{code-cell\} ipython3\n:tags: \[parameters(?:, hide-input)?\]\n\n)(.*?)(```)", re.S)
STANDARD = ("step", "variant", "params", "repeats", "warmup", "check_shapes", "seed", "mode", "run_id",
            "replay_run", "profile")


def fill(text: str, study_name: str, study, step, extra: list[str]) -> str:
    sizes_line = f"{study.size_name} = None".ljust(34) + "# None: the study's (STUDY.default_sizes)"
    label = STUDY_LABELS.get(study_name, study_name)  # titles name the study: search shows them alone
    return (text.replace("# TITLE", f"# {label}, step {step.number}: {step.title}")
            .replace('step = "STEP"', f'step = "{step.slug}"')
            .replace("SIZES_NAME = None                 # None: the study's (STUDY.default_sizes)", sizes_line)
            .replace("sizes=SIZES_NAME", f"sizes={study.size_name}")
            .replace("EXTRA_LINES\n", "".join(line + "\n" for line in extra))
            .replace("kernelbook.STUDY.STEPS", f"kernelbook.{study_name}.STEPS")
            .replace("from kernelbook.STUDY import STUDY", f"from kernelbook.{study_name} import STUDY"))



def render(study_name: str, slug: str) -> tuple[Path, str]:
    study = importlib.import_module(f"kernelbook.{study_name}").STUDY
    step = study.steps.get(slug)
    return ROOT / f"{step.notebook}.md", fill(TEMPLATE.read_text(), study_name, study, step, [])


def _name(line: str) -> str:
    return line.split("=")[0].strip() if "=" in line and not line.lstrip().startswith("#") else ""


def renew_parameters(path: Path, study_name: str, study, step) -> bool:
    """Replace ``path``'s parameter cell with the template's; keep lines the template has no name
    for (the page's own parameters) and a ``params`` that differs from the step's defaults."""
    text = path.read_text()
    found = CELL.search(text)
    if not found:
        raise SystemExit(f"{path}: no cell tagged parameters")
    old = found.group(2).splitlines()
    statements: list[list[str]] = []   # a statement and its continuation lines (a list over lines)
    for line in old:
        if _name(line) and not line[:1].isspace() or not statements:
            statements.append([line])
        else:
            statements[-1].append(line)
    extra = [line for statement in statements if _name(statement[0]) not in STANDARD + (study.size_name, "")
             for line in statement]
    template_cell = CELL.search(fill(TEMPLATE.read_text(), study_name, study, step, extra)).group(2)
    params_line = next((line for line in old if _name(line) == "params"), None)
    if params_line is not None:
        value = eval(params_line.split("=", 1)[1].split("#")[0])  # noqa: S307 - our own notebooks
        if value and value != {k: v for k, v in study.impl(step.slug).defaults.items() if k in value}:
            template_cell = re.sub(r"^params = \{\}", f"params = {value!r}", template_cell, flags=re.M)
    renewed = text[:found.start(2)] + template_cell + text[found.end(2):]
    # the step's name is ``step`` in every notebook's code (it was ``variant`` in some)
    renewed = re.sub(r"```\{code-cell\}.*?```",
                     lambda m: re.sub(r"(?<![.\w\"])variant(?=,)", "step", m.group(0)), renewed, flags=re.S)
    if renewed != text:
        path.write_text(renewed)
        return True
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?", help="the study's package name, e.g. mlp")
    parser.add_argument("step", nargs="?", help="the step's slug, e.g. baseline")
    parser.add_argument("--parameters", action="store_true",
                        help="renew the parameter cell of every step notebook (of STUDY, when given)")
    args = parser.parse_args(argv)
    if args.parameters:
        for name in [args.study] if args.study else ["lenet", "mlp", "vgg"]:
            study = importlib.import_module(f"kernelbook.{name}").STUDY
            for step in study.steps:
                path = ROOT / f"{step.notebook}.md"
                if path.exists() and renew_parameters(path, name, study, step):
                    print(f"renewed {path.relative_to(ROOT)}")
        return 0
    if not (args.study and args.step):
        parser.error("give STUDY and STEP, or --parameters")
    path, text = render(args.study, args.step)
    if path.exists():
        print(f"{path} exists; not overwritten.", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    write_toc()
    print(f"wrote {path.relative_to(ROOT)} and its entry in _toc.yml (after the step before it)")
    return 0


def toc_notebooks() -> dict[str, list[str]]:
    """Each study's step notebooks in list order: what ``_toc.yml`` lists for its chapters."""
    return {name: [step.notebook for step in importlib.import_module(f"kernelbook.{name}").STEPS]
            for name in STUDY_LABELS}


def write_toc() -> None:
    """``_toc.yml`` with each study's chapters written from its step list (``toc.with_steps``)."""
    from kernelbook import toc

    path = ROOT / "_toc.yml"
    path.write_text(toc.with_steps(path.read_text(), toc_notebooks()))


if __name__ == "__main__":
    sys.exit(main())
