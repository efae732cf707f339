"""``kernelbook promote RUN_ID``: a development candidate's run (``kernelbook.develop``), validated,
copied whole into the book's store, so that a chapter can cite it by run id (``replay_run=``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from . import paths, results
from .candidate import kept_problems
from .errors import ResultsError


def promote(run_id: str, log: Callable[[str], None] = print) -> results.Run:
    """Copy a development run into the book's store, whole or not at all, after validating it:
    its manifest names the candidate, every part reads back valid, and the copied files are the
    ones whose sha256 it recorded. The development copy stays."""
    results.validate_run_id(run_id)
    dev_root, book_root = paths.dev_results_dir(), paths.results_dir()
    if (book_root / run_id).exists():
        raise ResultsError(f"Run {run_id} is in {book_root} already.",
                           "nothing to do: a chapter can cite it (replay_run=...); promote another run id.")
    if not (dev_root / run_id).is_dir():
        raise ResultsError(f"No development run {run_id} under {dev_root}.",
                           "list them with `kernelbook results --runs --dev`; import a device's with "
                           "scripts/import_device_run.sh.")
    run = results.load_run(run_id, dev_root)
    spec = run.manifest.get("candidate")
    if not isinstance(spec, dict) or not spec.get("source"):
        raise ResultsError(f"Run {run_id} names no candidate in its manifest: it was not made by `kernelbook try`.",
                           "promote only runs that `kernelbook try` recorded.")
    names = run.part_names()
    if not names:
        raise ResultsError(f"Run {run_id} holds no part: nothing was measured.", "run the candidate again.")
    for name in names:
        part = run.read_part(name)  # raises, naming the file, when damaged
        unnamed = [r for r in part["records"] if r.get("candidate") != spec.get("label")]
        if unnamed:
            raise ResultsError(f"Part {name} of run {run_id} holds {len(unnamed)} record(s) that do not name the "
                               f"candidate {spec.get('label')!r}.", "promote a run exactly as `kernelbook try` wrote it.")
    for problem in kept_problems(run.root, spec):
        raise ResultsError(f"{problem}.", "promote a run exactly as `kernelbook try` wrote it.")
    for problem in run.stray_files():
        raise ResultsError(f"{problem} is no part of run {run_id}.", "move it out of the run folder, then promote.")
    book_root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=results.TEMP_DIR_SUFFIX, dir=book_root))
    try:
        shutil.copytree(run.root, building, dirs_exist_ok=True)
        os.chmod(building, 0o755)
        os.rename(building, book_root / run_id)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        raise
    promoted = results.load_run(run_id, book_root)
    for name in promoted.part_names():
        promoted.read_part(name)
    log(f"promoted run {run_id} into {paths.relative(book_root / run_id)} ({len(names)} parts, candidate "
        f"{spec.get('label')} for step {spec.get('step')}); a chapter cites it with replay_run={run_id!r}")
    return promoted

