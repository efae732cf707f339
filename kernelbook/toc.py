"""The book's table of contents: which notebooks the batch executes, in reading order, and how
a notebook is named (its path under ``book/`` without extension, e.g. ``lenet/00_baseline``)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .errors import KernelbookError

NOTEBOOK_SUFFIXES = (".md", ".ipynb")


class BatchError(KernelbookError, ValueError):
    """The batch cannot start: bad table of contents, pattern, parameter, mode or output folder."""


def _toc_files(entry: Any) -> list[str]:
    """Every ``file:`` named in a (nested) jb-book table of contents entry, in reading order."""
    found: list[str] = []
    if isinstance(entry, dict):
        if "root" in entry:
            found.append(str(entry["root"]))
        if "file" in entry:
            found.append(str(entry["file"]))
        for key in ("parts", "chapters", "sections"):
            for child in entry.get(key) or []:
                found.extend(_toc_files(child))
    elif isinstance(entry, list):
        for child in entry:
            found.extend(_toc_files(child))
    return found


def _front_matter(path: Path) -> dict:
    """The YAML front matter of a Markdown file, or ``{}`` when it has none."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return {}
    lines = text.splitlines()
    for end, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            try:
                data = yaml.safe_load("\n".join(lines[1:end]))
            except yaml.YAMLError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def is_notebook(path: Path) -> bool:
    """An ``.ipynb``, or a MyST ``.md`` whose front matter makes it a jupytext notebook.

    Plain Markdown pages (the introduction) have no kernel and are not executed.
    """
    path = Path(path)
    if path.suffix == ".ipynb":
        return True
    if path.suffix == ".md":
        meta = _front_matter(path)
        return "jupytext" in meta or "kernelspec" in meta
    return False


def _resolve_entry(base: Path, name: str, toc: Path) -> Path:
    """The source file of a toc entry (entries are written without extension)."""
    candidate = base / name
    if candidate.suffix in NOTEBOOK_SUFFIXES and candidate.is_file():
        return candidate
    for suffix in NOTEBOOK_SUFFIXES:
        path = candidate.with_name(candidate.name + suffix)
        if path.is_file():
            return path
    raise BatchError(
        f"{toc} names {name!r}, but neither {name}.md nor {name}.ipynb exists under {base}.",
        f"create the page or remove the entry from {toc.name}.",
    )


def book_notebooks(toc: Path | None = None) -> list[Path]:
    """The notebooks of the book, in table-of-contents order (plain pages left out)."""
    toc = Path(toc) if toc else paths.REPO_ROOT / "_toc.yml"
    if not toc.is_file():
        raise BatchError(f"No table of contents at {toc}.", "create _toc.yml (jb-book format) at the repo root.")
    try:
        data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise BatchError(f"{toc} is not valid YAML ({exc}).", f"fix the syntax of {toc.name}.") from exc
    if not isinstance(data, dict) or "root" not in data:
        raise BatchError(f"{toc} has no 'root' entry.", "use the jb-book format: `format: jb-book`, `root: book/intro`.")
    sources = [_resolve_entry(toc.parent, name, toc) for name in _toc_files(data)]
    return [path for path in sources if is_notebook(path)]


def notebook_name(path: Path, book_root: Path) -> str:
    """How the batch names a notebook: its path under ``book/`` without extension (``lenet/00_baseline``)."""
    path, book_root = Path(path).resolve(), Path(book_root).resolve()
    try:
        relative = path.relative_to(book_root)
    except ValueError:
        raise BatchError(
            f"Notebook {path} is not under the book folder {book_root}.",
            "keep every notebook of _toc.yml inside book/.",
        ) from None
    return relative.with_suffix("").as_posix()


def select(notebooks: list[Path], only: str | None, book_root: Path) -> list[Path]:
    """The notebooks whose name (or name with extension) matches ``only``: one fnmatch pattern, or
    several separated by commas (``'lenet/00_*,lenet/90_*'``), in table-of-contents order."""
    if not only:
        return list(notebooks)
    patterns = [p.strip() for p in only.split(",") if p.strip()]

    def matches(nb: Path) -> bool:
        names = (notebook_name(nb, book_root),
                 Path(nb).resolve().relative_to(Path(book_root).resolve()).as_posix())
        return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)

    chosen = [nb for nb in notebooks if matches(nb)]
    if not chosen:
        names = ", ".join(notebook_name(nb, book_root) for nb in notebooks) or "none"
        raise BatchError(
            f"--only {only!r} matches no notebook of the book (the notebooks are: {names}).",
            "pass a pattern relative to book/, e.g. --only 'lenet/*' or --only 'lenet/00_*,mlp/*'.",
        )
    return chosen


STEP_ENTRY = re.compile(r"^(?P<indent>\s*- file: )book/(?P<study>[a-z0-9_]+)/(?P<number>\d\d)_[a-z0-9_]+\s*$")


def with_steps(text: str, notebooks: dict[str, list[str]]) -> str:
    """``_toc.yml``'s text with each study's step chapters written from its step list
    (``notebooks``: study -> the steps' notebooks in order, ``book/<study>/<stem>``): the block of
    numbered entries of a study is replaced by the list, in place of the first of them; pages
    numbered 9x (profiles), other entries and comments are kept as they are."""
    out, done = [], set()
    for line in text.splitlines(keepends=True):
        match = STEP_ENTRY.match(line)
        if not match or match["study"] not in notebooks or match["number"].startswith("9"):
            out.append(line)
            continue
        if match["study"] not in done:
            done.add(match["study"])
            out += [f"{match['indent']}{notebook}\n" for notebook in notebooks[match["study"]]]
    return "".join(out)
