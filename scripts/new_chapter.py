#!/usr/bin/env python3
"""Make a step's notebook from book/_templates/chapter.md.

    python scripts/new_chapter.py mlp baseline      # writes book/mlp/00_baseline.md

The step must already be in the study's step list (kernelbook/<study>/steps.py); the notebook's
file name, title and parameters come from it. An existing notebook is never overwritten.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


STUDY_LABELS = {"lenet": "LeNet", "mlp": "MLP", "vgg": "VGG layer"}


def render(study_name: str, slug: str) -> tuple[Path, str]:
    study = importlib.import_module(f"kernelbook.{study_name}").STUDY
    step = study.steps.get(slug)
    text = (ROOT / "book" / "_templates" / "chapter.md").read_text()
    sizes = list(study.default_sizes)
    import json

    line = f"{study.size_name} = {json.dumps(sizes)}".ljust(34) + f"# {study.size_header.lower()} to time"
    label = STUDY_LABELS.get(study_name, study_name)  # titles name the study: search shows them alone
    text = (text.replace("# TITLE", f"# {label}, step {step.number}: {step.title}")
            .replace('step = "STEP"', f'step = "{step.slug}"')
            .replace("SIZES_LINE", line).replace("sizes=SIZES_NAME", f"sizes={study.size_name}")
            .replace("kernelbook.STUDY.STEPS", f"kernelbook.{study_name}.STEPS")
            .replace("from kernelbook.STUDY import STUDY", f"from kernelbook.{study_name} import STUDY"))
    return ROOT / f"{step.notebook}.md", text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study's package name, e.g. mlp")
    parser.add_argument("step", help="the step's slug, e.g. baseline")
    args = parser.parse_args(argv)
    path, text = render(args.study, args.step)
    if path.exists():
        print(f"{path} exists; not overwritten.", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path.relative_to(ROOT)}; add it to _toc.yml after the step before it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
