"""A chapter as a Jupyter user re-runs it: a real ``.ipynb`` beside its MyST source.

The chapters are MyST Markdown (jupytext text notebooks), which papermill cannot read and which
JupyterLab opens as notebooks only with jupytext's extension (``pip install -e '.[jupyter]'``).
``kernelbook notebook lenet/00`` writes ``book/lenet/00_baseline.ipynb`` from
``book/lenet/00_baseline.md`` (same cells, same parameters cell) with the ``kernelbook`` kernel
named in its metadata, and prints a papermill command that works as printed.
"""

from __future__ import annotations

from pathlib import Path

from . import paths
from .toc import BatchError, book_notebooks, notebook_name, select

KERNEL_NAME = "kernelbook"
KERNEL_DISPLAY = "Python (kernelbook)"


def kernel_spec() -> dict:
    """The kernelspec a generated notebook names: ``kernelbook`` when it is installed (``make
    env`` registers it), else this interpreter's ``python3``."""
    try:
        from jupyter_client.kernelspec import find_kernel_specs

        installed = KERNEL_NAME in find_kernel_specs()
    except Exception:  # no jupyter_client: papermill would be missing too
        installed = False
    if installed:
        return {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY, "language": "python"}
    return {"name": "python3", "display_name": "Python 3", "language": "python"}


def find(patterns: list[str], toc: Path | None = None, book_root: Path | None = None) -> list[Path]:
    """The notebook sources ``patterns`` name: ``lenet/00`` (a step's number), ``lenet/00_baseline``,
    or an fnmatch pattern such as ``'lenet/*'``."""
    book_root = Path(book_root) if book_root else paths.book_dir()
    notebooks = book_notebooks(toc)
    chosen: list[Path] = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            found = select(notebooks, pattern, book_root)
        else:
            pattern = pattern.removesuffix(".md").removesuffix(".ipynb").removeprefix("book/")
            found = [nb for nb in notebooks if notebook_name(nb, book_root) == pattern]
            found = found or [nb for nb in notebooks if notebook_name(nb, book_root).startswith(pattern + "_")]
            if not found:
                names = ", ".join(notebook_name(nb, book_root) for nb in notebooks)
                raise BatchError(f"No chapter {pattern!r} in the book (the chapters are: {names}).",
                                 "name one as study/NN (e.g. lenet/00) or study/NN_name, or a pattern like 'lenet/*'.")
        chosen += [nb for nb in found if nb not in chosen]
    return chosen


def write_notebook(source: Path) -> Path:
    """Write ``source`` (MyST) as ``.ipynb`` beside it; return the new file."""
    import jupytext
    import nbformat

    nb = jupytext.read(source)
    nb.metadata.pop("jupytext", None)  # a copy to run, not a paired file that jupytext would sync
    nb.metadata["kernelspec"] = kernel_spec()
    target = Path(source).with_suffix(".ipynb")
    from .atomic import write_text_atomic

    write_text_atomic(target, nbformat.writes(nb))
    return target


def papermill_line(notebook: Path) -> str:
    """A papermill command for ``notebook`` that works as printed (run from the project root)."""
    try:
        shown = notebook.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = notebook
    return (f"papermill {shown} out.ipynb -p repeats 30 -y 'batch_sizes: [100, 500]'"
            if "lenet" in str(shown) else f"papermill {shown} out.ipynb -p mode replay")
