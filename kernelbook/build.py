"""The Jupyter Book build: HTML from the notebooks the batch executed.

Why a staged copy: the sources are MyST text notebooks, but the book must show the outputs of
the papermill batch (one recorded run, executed once), and Jupyter Book must not execute
anything itself. So the build copies ``_config.yml``, ``_toc.yml`` and ``book/`` into a stage of
its own, replaces each notebook source by its executed ``.ipynb`` (removing the ``.md``, so Sphinx
sees exactly one document per name) once it is checked against the digest the batch recorded and
cleaned for publishing (``kernelbook.publish``), and builds the stage. The repository's own tree is never
modified, and the stage holds nothing but the book, so Sphinx cannot wander into ``_build``,
``.venv`` or ``data``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from . import paths
from .batch_report import source_digest
from .errors import KernelbookError
from .executed import CODE_DIR, LOCK_NAME, held_by, stale_sources, tree_digest
from .toc import book_notebooks, notebook_name

#: Folders next to ``book/`` that are copied into the stage too, so that a page's
#: ``{literalinclude} ../../kernels/...`` resolves in the stage as it does in the repository.
STAGED_SIBLINGS = ("kernels",)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Sphinx colours its output even into a pipe
_IGNORE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc", ".DS_Store")


class BuildError(KernelbookError, RuntimeError):
    """The book cannot be staged or Jupyter Book failed."""


def _read_executed(notebook: Path, name: str | None = None):
    """An executed notebook, or a BuildError that names it (and a full disk, the usual reason a
    notebook is cut short) when it cannot be read."""
    import nbformat

    try:
        return nbformat.read(notebook, as_version=4)
    except OSError:
        raise
    except Exception as exc:  # NotJSONError, a truncated file, a validation error
        try:
            free = shutil.disk_usage(notebook.parent).free
        except OSError:
            free = None
        full = (f" The disk holding it is full ({free // 2**20} MiB free): free space first."
                if free is not None and free < 64 * 2**20 else "")
        raise BuildError(f"The executed notebook {notebook} cannot be read ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}); it is truncated or damaged.{full}",
                         f"execute it again: `kernelbook run --only '{name or notebook.with_suffix('').name}'` "
                         "(or the whole book with `kernelbook run`).") from None


def _failed_in_batch(nb) -> bool:
    """Whether papermill marked this executed notebook as stopped by an exception."""
    return bool(nb.metadata.get("papermill", {}).get("exception"))


def _batch_problems(executed_dir: Path, names: list[str], sources: dict[str, Path]) -> tuple[list[str], list[str]]:
    """(notebooks the batch record says are not ok, notebooks whose source changed since they ran)."""
    record = executed_dir / "batch.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        entries = {nb["name"]: nb for nb in data.get("notebooks", [])}
    except FileNotFoundError:
        return [f"{name} (no batch record {record})" for name in names], []
    except (ValueError, TypeError, KeyError, AttributeError):
        return [f"every notebook (the batch record {record} is damaged)"], []
    bad, stale = [], []
    for name in names:
        entry = entries.get(name)
        if entry is None:
            bad.append(f"{name} (not in the batch record)")
        elif entry.get("status") != "ok":
            why = {"running": "interrupted while it ran", "pending": "never ran: the batch stopped before it"}
            bad.append(f"{name} ({why.get(entry.get('status'), entry.get('error') or entry.get('status'))})")
        elif not entry.get("notebook_sha256"):
            bad.append(f"{name} (the batch record holds no digest of its executed file: an older batch wrote it)")
        elif entry["notebook_sha256"] != source_digest(executed_dir / f"{name}.ipynb"):
            bad.append(f"{name} (its executed file is not the one the batch wrote: it was edited after the batch, "
                       "or comes from another folder)")
        elif entry.get("source_sha256") and entry["source_sha256"] != source_digest(sources[name]):
            stale.append(name)
    return bad, stale


def _only_pattern(names: list[str]) -> str:
    """One ``--only`` pattern that selects every name listed (an fnmatch pattern; a comma-separated
    list when there are several)."""
    return ",".join(dict.fromkeys(names))


def stage_book(
    executed_dir: Path,
    stage_dir: Path,
    *,
    toc: Path,
    config: Path,
    book_root: Path,
    siblings: Iterable[str] = STAGED_SIBLINGS,
    strict: bool = True,
    log: Callable[[str], Any] = print,
) -> Path:
    """Fill ``stage_dir`` (emptied first) with the book, notebooks replaced by executed copies."""
    root = toc.parent.resolve()
    book_root = book_root.resolve()
    try:
        book_rel = book_root.relative_to(root)
    except ValueError:
        raise BuildError(
            f"The book folder {book_root} is not inside {root}, the folder of {toc.name}.",
            "keep book/ next to _toc.yml.",
        ) from None

    running = held_by(executed_dir)
    if running:
        raise BuildError(f"A batch (process {running.get('pid')}) is writing to {executed_dir} since "
                         f"{running.get('since')}.", "wait for it to finish, then build.")
    if not executed_dir.is_dir():
        raise BuildError(f"The folder of executed notebooks {executed_dir} does not exist.",
                         "run `kernelbook run` first (`kernelbook run --out DIR` writes DIR; pass that as --executed).")
    notebooks = book_notebooks(toc)
    names = [notebook_name(nb, book_root) for nb in notebooks]
    executed = {name: executed_dir / f"{name}.ipynb" for name in names}
    missing = [name for name, path in executed.items() if not path.is_file()]
    if missing:
        raise BuildError(
            f"No executed notebook for {', '.join(missing)} in {executed_dir}.",
            f"run `kernelbook run --only '{_only_pattern(missing)}'` (or `kernelbook run` for the whole book) first.",
        )
    notebooks_read = {name: _read_executed(path, name) for name, path in executed.items()}  # a damaged file first
    bad, stale = _batch_problems(executed_dir, names, dict(zip(names, notebooks)))
    if bad:
        message = f"The batch record refuses {len(bad)} notebook(s): {'; '.join(bad)}."
        refused = [entry.split(" ")[0] for entry in bad]
        if strict:
            if refused == ["every"]:  # the batch record itself is damaged
                fix = "re-run the whole book (`kernelbook run`), or build with --no-strict to publish it as it is."
            else:
                fix = (f"re-run {'it' if len(refused) == 1 else 'them'} (`kernelbook run --only '{_only_pattern(refused)}'`), "
                       "or build with --no-strict to publish them as they are.")
            raise BuildError(message, fix)
        log(f"warning: {message}")
    crashed = [name for name, nb in notebooks_read.items() if _failed_in_batch(nb)]
    for name, nb in notebooks_read.items():
        kernels = stale_sources(nb, root)
        if kernels and name not in stale:
            stale.append(f"{name} (its kernel {', '.join(kernels)})")
    if stale:
        changed = [entry.split(" ")[0] for entry in stale]
        message = (f"The source of {len(stale)} page(s) changed after it was executed: {'; '.join(stale)}; the page "
                   "would show the old version.")
        if strict:
            raise BuildError(message, f"re-run them (`kernelbook run --only '{_only_pattern(changed)}'`), or build with "
                                      "--no-strict.")
        log(f"warning: {message}")
    if crashed:
        message = f"The executed notebook(s) {', '.join(crashed)} stopped at an exception in the batch."
        if strict:
            raise BuildError(
                message,
                f"fix the notebook(s) and re-run (`kernelbook run --only '{_only_pattern(crashed)}'`), "
                "or build with --no-strict to publish the error.",
            )
        log(f"warning: {message} The book will show the error.")

    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    shutil.copy2(config, stage_dir / "_config.yml")
    shutil.copy2(toc, stage_dir / "_toc.yml")
    shutil.copytree(book_root, stage_dir / book_rel, ignore=_IGNORE)
    for sibling in siblings:
        if (root / sibling).is_dir():
            shutil.copytree(root / sibling, stage_dir / sibling, ignore=_IGNORE)

    import nbformat

    from .publish import clean_notebook

    refused = []
    for source, name in zip(notebooks, names):
        staged = stage_dir / source.resolve().relative_to(root)
        staged.unlink(missing_ok=True)
        nb = notebooks_read[name]
        for problem in clean_notebook(nb, root):
            refused.append(f"{name} ({problem})")
        nbformat.write(nb, staged.with_suffix(".ipynb"))
    if refused:
        message = (f"{len(refused)} output(s) hold what the book does not publish: {'; '.join(refused[:10])}"
                   + (f" (and {len(refused) - 10} more)" if len(refused) > 10 else "") + ".")
        if strict:
            raise BuildError(message, "re-run the notebook(s) (`kernelbook run --only '"
                             + _only_pattern([entry.split(" ")[0] for entry in refused])
                             + "'`) without that output, or build with --no-strict to publish them with it removed.")
        log(f"warning: {message} It is removed from the page.")
    return stage_dir


def _jupyter_book_command() -> list[str]:
    """Jupyter Book's CLI in this interpreter (no reliance on PATH or on an activated venv)."""
    return [sys.executable, "-c", "from jupyter_book.cli.main import main; main()"]


def build_book(
    executed_dir: Path | None = None,
    path_output: Path | None = None,
    strict: bool = True,
    *,
    toc: Path | None = None,
    config: Path | None = None,
    book_root: Path | None = None,
    stage_dir: Path | None = None,
    log: Callable[[str], Any] = print,
) -> Path:
    """Stage the executed book and build it to ``<path_output>/_build/html``; return that folder.

    ``strict`` turns every Sphinx warning into a failure (``-W --keep-going``: all warnings are
    reported, then the build fails), so a broken reference or figure cannot be published silently.
    """
    executed_dir = Path(executed_dir) if executed_dir else paths.build_dir() / "executed"
    path_output = Path(path_output) if path_output else paths.REPO_ROOT
    toc = Path(toc) if toc else paths.REPO_ROOT / "_toc.yml"
    config = Path(config) if config else toc.parent / "_config.yml"
    book_root = Path(book_root) if book_root else paths.book_dir()
    stage_dir = Path(stage_dir) if stage_dir else None  # None: a folder of its own, beside the output
    if not config.is_file():
        raise BuildError(f"No Jupyter Book configuration at {config}.", "create _config.yml next to _toc.yml.")

    try:
        return _build(executed_dir, path_output, strict, toc, config, book_root, stage_dir, log)
    except OSError as exc:  # a full disk, a folder that cannot be written: one line, not a traceback
        raise _os_error(exc, path_output) from None


def _os_error(exc: OSError, path_output: Path) -> BuildError:
    where = exc.filename or path_output
    if exc.errno == errno.ENOSPC:
        return BuildError(f"No space left on the device while writing {where}; the previous book is left as it was.",
                          "free some disk space (`make clean` removes _build/), or build elsewhere with --out DIR.")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR):
        return BuildError(f"Cannot write the book to {where} ({exc.strerror}).",
                          "pass --out a folder you can write to (the HTML goes to DIR/_build/html).")
    return BuildError(f"The build stopped at {where}: {exc.strerror or exc}.", "fix what the message names and build again.")


#: Beside the book (``_build/``): the digest of what its last successful build was made from.
BUILT_RECORD = ".book-inputs.json"


def _build(executed_dir, path_output, strict, toc, config, book_root, stage_dir, log) -> Path:
    path_output = path_output.resolve()
    build_root = path_output / "_build"
    build_root.mkdir(parents=True, exist_ok=True)  # first, so an unwritable --out fails before any work
    _recover(build_root)
    html = build_root / "html"
    digest = None if held_by(executed_dir) else inputs_digest(executed_dir, toc, config, book_root, strict)
    if digest is not None and (html / "index.html").is_file() and _last_built(build_root) == digest:
        log(f"the book is unchanged since its last build (its executed notebooks, sources and settings): "
            f"{html} kept")
        return html
    # Each build stages in a folder of its own (two builds into different --out never share one),
    # and into a fresh temporary output beside the book, swapped in only when the build
    # succeeded: a failed or killed build leaves the previous book whole, and no page of a removed
    # notebook survives (every page is re-read, so -W sees every warning).
    own_stage = stage_dir is None
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=build_root))
    try:
        stage = stage_book(executed_dir, building / "stage" if own_stage else stage_dir, toc=toc, config=config,
                           book_root=book_root, strict=strict, log=log)
        new_html = _run_jupyter_book(stage, building / "out", strict, log)
        (build_root / BUILT_RECORD).unlink(missing_ok=True)  # the record never outlives the book it names
        _swap_in(new_html, html)
        if digest is not None:
            from .atomic import write_json_atomic

            write_json_atomic(build_root / BUILT_RECORD, {"inputs_sha256": digest})
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return html


def _last_built(build_root: Path) -> str | None:
    try:
        return json.loads((build_root / BUILT_RECORD).read_text(encoding="utf-8")).get("inputs_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def inputs_digest(executed_dir: Path, toc: Path, config: Path, book_root: Path, strict: bool) -> str | None:
    """The digest of everything a build reads: the executed notebooks and their batch record, the
    book's sources and configuration, the kernel sources the pages include, the package's code (it
    stages and cleans the pages), Jupyter Book's version and the strictness; None when the folder
    of executed notebooks is missing (the build then says so)."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    if not executed_dir.is_dir():
        return None
    root = toc.parent.resolve()
    digest = hashlib.sha256(f"strict={strict} root={root}\n".encode())
    for name in ("jupyter-book", "myst-nb", "sphinx", "sphinx-book-theme"):
        try:
            digest.update(f"{name} {version(name)}\n".encode())
        except PackageNotFoundError:
            digest.update(f"{name} none\n".encode())
    for label, path in (("toc", toc), ("config", config)):
        digest.update(f"{label} {hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None}\n".encode())
    # The executed notebooks, and of their batch record what the build checks (a batch that kept
    # every notebook rewrites its times and nothing else).
    tree_digest(digest, executed_dir, "executed", skip=(LOCK_NAME, "batch.json"))
    try:
        record = json.loads((executed_dir / "batch.json").read_text(encoding="utf-8")).get("notebooks") or []
        checked = sorted((str(nb.get("name")), nb.get("status"), nb.get("error"), nb.get("source_sha256"),
                          nb.get("notebook_sha256")) for nb in record if isinstance(nb, dict))
    except (OSError, ValueError, AttributeError):
        checked = None
    digest.update(f"batch {json.dumps(checked)}\n".encode())
    tree_digest(digest, book_root, "book", skip=(".ipynb_checkpoints",))
    for sibling in STAGED_SIBLINGS:
        tree_digest(digest, root / sibling, sibling)
    tree_digest(digest, CODE_DIR, "kernelbook", "**/*.py")
    return digest.hexdigest()


def _recover(build_root: Path) -> None:
    """Undo what a build killed during its swap left: the previous book put back, leftovers removed."""
    html, old = build_root / "html", build_root / ".html-previous"
    if old.is_dir() and not html.exists():
        os.rename(old, html)
    for leftover in [*build_root.glob(".building-*"), old]:
        shutil.rmtree(leftover, ignore_errors=True)


def _swap_in(new_html: Path, html: Path) -> None:
    """Replace ``html`` by ``new_html`` with two renames (a reader sees the old book or the new)."""
    old = html.parent / ".html-previous"
    shutil.rmtree(old, ignore_errors=True)
    if html.exists():
        os.rename(html, old)
    os.rename(new_html, html)
    shutil.rmtree(old, ignore_errors=True)


def _run_jupyter_book(stage: Path, output: Path, strict: bool, log) -> Path:
    """Build ``stage`` with Jupyter Book into ``output/_build/html``; return that folder."""
    html = output / "_build" / "html"
    output.mkdir(parents=True, exist_ok=True)
    command = _jupyter_book_command() + [
        "build", str(stage), "--path-output", str(output), "--builder", "html", "--all",
    ]
    if strict:
        command += ["-W", "--keep-going"]
    # (the stage and the output are temporary folders, gone when the build ends: not named)
    log("$ jupyter-book build <staged book> --builder html --all" + (" -W --keep-going" if strict else ""))
    warnings: list[str] = []
    no_space = False
    with subprocess.Popen(
        command, cwd=str(output), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, bufsize=1, errors="replace",
    ) as proc:
        assert proc.stdout is not None
        closing = False
        for line in proc.stdout:
            # Plain text, and repository-relative paths (the stage mirrors the repository).
            line = _ANSI.sub("", line.rstrip("\n")).replace(f"{stage}/", "").replace(str(stage), "<staged book>")
            # Jupyter Book's closing words name the temporary output, which is swapped in and gone
            # a moment later: `kernelbook build` names the book where it lands instead.
            closing = closing or "Your book's HTML pages are here" in line or "Finished generating HTML" in line
            if closing or str(output) in line or (line.strip() and set(line.strip()) <= {"="}):
                continue
            log(line)
            no_space = no_space or "No space left on device" in line
            if "WARNING:" in line or "ERROR:" in line:
                warnings.append(line.strip())
    if no_space:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(output))
    if proc.returncode != 0:
        shown = "; ".join(warnings[:5]) + (f" (and {len(warnings) - 5} more)" if len(warnings) > 5 else "")
        detail = f" Warnings/errors: {shown}" if warnings else ""
        raise BuildError(
            f"jupyter-book build failed with exit status {proc.returncode}"
            f"{' (strict: warnings are errors)' if strict else ''}; the previous book is left as it was.{detail}",
            "fix what the output above reports (a notebook's page is built from its executed "
            ".ipynb, the folder `kernelbook run` wrote), or build with --no-strict to look at the book anyway.",
        )
    if not (html / "index.html").is_file():
        raise BuildError("jupyter-book finished but wrote no index.html.", "look at the build output above.")
    return html
