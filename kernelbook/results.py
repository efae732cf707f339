"""The results store: every number the book shows comes from here.

Layout::

    data/results/<run_id>/manifest.json        who, where, when: device, software, commit, host
    data/results/<run_id>/parts/<name>.json    one part per notebook (or script) that measured

``run_id`` starts with the UTC time (``20261122T0430Z-3f9c1a``), so sorting run ids sorts runs
by age. Every file is written atomically (temporary file in the same folder, then ``os.replace``),
so an interrupted run leaves whole files or none. Reading validates and names the bad file.

A *part* holds tidy records, one measured value each::

    {"study": "lenet", "step": "baseline", "layer": "C1", "size": 1000,
     "metric": "op_time_ms", "value": 1.23, "unit": "ms", "min": 1.2, "max": 1.3,
     "samples": [...]}

(``size`` is the study's size of the measurement: LeNet's and VGG's batch, the MLP's columns.
Runs recorded before wrote ``variant`` and ``batch``: ``store_schema.normalize_record`` reads them.)

plus optional ``checks`` (correctness evidence) and ``extra`` (anything a chapter needs to
replay: profiler rows, timelines, sweep grids).
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import shutil
import stat
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from . import paths
from .atomic import is_temporary, write_json_atomic  # noqa: F401  (write_json_atomic is re-exported)
from .candidate import kept_problems
from .errors import ResultsError
from .measure import Measured
from .store_schema import (  # noqa: F401  (the validator, re-exported: results.validate_part, ...)
    CREATED_PATTERN,
    MANIFEST_KEYS,
    MAX_MANIFEST_BYTES,
    MAX_PART_BYTES,
    NUMBER_BOUND,
    PART_NAME_PATTERN,
    RECORD_KEYS,
    RUN_ID_PATTERN,
    SCHEMA_VERSION,
    _bad,
    _entry,
    _is_finite,
    _is_text,
    _listing,
    loads,
    part_owner,
    read_json,
    validate_check,
    validate_manifest,
    validate_part,
    validate_record,
)

TEMP_DIR_SUFFIX = ".tmp-run"


# ----------------------------------------------------------------------------- reading parts


_PARTS: dict = {}  # path -> ((mtime_ns, size), validated part): a page looks parts up many times


def _read_part(path: Path) -> dict:
    """Read and validate a part once per version of the file (its mtime and size), not once per
    lookup: finding the newest run that holds a part, then reading it, would read it twice."""
    entry = _entry(path)
    if entry is None or not stat.S_ISREG(entry.st_mode):
        return validate_part(read_json(path), path)  # read_json names the missing file, the link
    key = (entry.st_mtime_ns, entry.st_size)
    cached = _PARTS.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    part = validate_part(read_json(path, MAX_PART_BYTES), path)
    if len(_PARTS) > 2048:
        _PARTS.clear()
    _PARTS[path] = (key, part)
    return part


# ----------------------------------------------------------------------------- run ids


def new_run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%MZ')}-{secrets.token_hex(3)}"


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise ResultsError(
            f"{run_id!r} is not a run id (expected e.g. 20261122T0430Z-3f9c1a).",
            "list the recorded runs with `kernelbook results --runs`.",
        )
    return run_id

# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    """One recorded run: a manifest and the parts written into it."""

    run_id: str
    root: Path
    manifest: dict

    @property
    def device(self) -> str:
        return self.manifest["device"]["name"]

    @property
    def created_utc(self) -> str:
        return self.manifest["created_utc"]

    @property
    def commit(self) -> str:
        return self.manifest["commit"]

    def part_path(self, name: str) -> Path:
        if not PART_NAME_PATTERN.match(name):
            raise ResultsError(
                f"{name!r} is not a valid part name.", "use letters, digits, '.', '_' and '-'."
            )
        return self.root / "parts" / f"{name}.json"

    def part_names(self) -> list[str]:
        """The names of the part files (a file whose name is no part name is left out: see
        ``stray_files``)."""
        return sorted(p.stem for p in self._parts() if p.suffix == ".json" and not is_temporary(p)
                      and PART_NAME_PATTERN.match(p.stem))

    def _parts(self) -> list[Path]:
        """What ``parts/`` holds (nothing when it is not there; ``load_run`` refused a link, a file
        and an unreadable folder)."""
        try:
            return _listing(self.root / "parts")
        except ResultsError:
            return []

    def stray_files(self) -> list[Path]:
        """Files in ``parts/`` that are no part (a name with spaces, another extension); never read."""
        return [p for p in self._parts()
                if not p.name.startswith(".") and not (p.suffix == ".json" and PART_NAME_PATTERN.match(p.stem))]

    def has_part(self, name: str) -> bool:
        """Whether the run holds something under the part's name (a link or a folder there is a
        damaged part, which ``read_part`` refuses, not a missing one)."""
        return _entry(self.part_path(name)) is not None

    def read_part(self, name: str) -> dict:
        """The validated part (shared between callers: treat it as read-only)."""
        return _read_part(self.part_path(name))

    def write_part(
        self,
        name: str,
        study: str,
        records: list[dict],
        checks: list[dict] | None = None,
        extra: dict | None = None,
        parameters: dict | None = None,
    ) -> Path:
        path = self.part_path(name)
        part = {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "name": name,
            "study": study,
            "mode": "measure",
            "written_utc": utc_now(),
            "parameters": parameters or {},
            "records": records,
            "checks": checks or [],
            "extra": extra or {},
        }
        validate_part(part, path)
        write_json_atomic(path, part)
        return path


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_run(manifest_fields: dict, run_id: str | None = None, root: Path | None = None) -> Run:
    """Create (or reopen, for a batch whose notebooks share one run id) a run folder.

    The folder appears whole: it is built under a temporary name (manifest and ``parts/``) and
    renamed into place, so no reader ever finds a run without its manifest. When two processes
    create the same run at once, the second one's rename fails and it opens the first one's.
    """
    root = Path(root) if root else paths.results_dir()
    run_id = validate_run_id(run_id) if run_id else new_run_id()
    folder = root / run_id
    if (folder / "manifest.json").is_file():
        return load_run(run_id, root)
    if folder.exists():
        raise ResultsError(f"{folder} exists but holds no manifest.json.",
                           f"move {folder} out of {root} (it is no complete run), then run again.")
    manifest = {"schema": SCHEMA_VERSION, "run_id": run_id, "created_utc": utc_now()}
    manifest.update(manifest_fields)
    validate_manifest(manifest, folder / "manifest.json")
    try:
        root.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=TEMP_DIR_SUFFIX, dir=root))
    except OSError as exc:
        raise ResultsError(f"Cannot create a run under {root} ({exc.strerror or exc}).",
                           "make the results folder writable, or point KERNELBOOK_RESULTS_DIR at one that is.") from exc
    try:
        os.chmod(building, 0o755)
        (building / "parts").mkdir()
        write_json_atomic(building / "manifest.json", manifest)
        os.rename(building, folder)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        if (folder / "manifest.json").is_file():  # another process created it first
            return load_run(run_id, root)
        raise
    return Run(run_id, folder, manifest)


def load_run(run_id: str, root: Path | None = None) -> Run:
    root = Path(root) if root else paths.results_dir()
    validate_run_id(run_id)
    folder = root / run_id
    manifest_path = folder / "manifest.json"
    entry = _entry(folder)
    if entry is not None and stat.S_ISLNK(entry.st_mode):
        raise ResultsError(f"The run folder {folder} is a symbolic link (to {os.readlink(folder)}), not a folder of "
                           "the store; it is never read.",
                           f"remove the link (`rm {folder}`) and copy the run itself into {root} if you mean to keep it.")
    if entry is None or not stat.S_ISDIR(entry.st_mode):
        raise ResultsError(
            f"No recorded run {run_id} under {root}.",
            "list the recorded runs with `kernelbook results --runs`.",
        )
    if _entry(manifest_path) is None:
        raise _bad(manifest_path, "does not exist (the run folder has no manifest)")
    manifest = validate_manifest(read_json(manifest_path, MAX_MANIFEST_BYTES), manifest_path)
    if manifest["run_id"] != run_id:
        raise _bad(manifest_path, f"run_id {manifest['run_id']!r} does not match its folder")
    parts = _entry(folder / "parts")
    if parts is not None:
        if stat.S_ISLNK(parts.st_mode):
            raise _bad(folder / "parts", "is a symbolic link (a run's parts are a folder of the run, not a link "
                                         "to one elsewhere)")
        if not stat.S_ISDIR(parts.st_mode):
            raise _bad(folder / "parts", "is not a folder (a run keeps its parts in the folder parts/)")
        _listing(folder / "parts")  # an unreadable parts folder is said here, once, with its run
    return Run(run_id, folder, manifest)


def _run_candidates(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in _listing(root) if RUN_ID_PATTERN.match(p.name)]


def list_runs(root: Path | None = None, strict: bool = False) -> list[Run]:
    """Every readable recorded run, oldest first.

    A malformed run (no manifest, a broken one, a stray file named like a run id) is skipped
    with a warning that names it and the fix, so that one damaged run never hides the others;
    ``strict`` raises instead.
    """
    root = Path(root) if root else paths.results_dir()
    runs = []
    for path in _run_candidates(root):
        try:
            if not path.is_dir() and not path.is_symlink():
                raise ResultsError(f"{path} is a file named like a run, not a run folder.",
                                   f"move it out of {root}.")
            runs.append(load_run(path.name, root))
        except ResultsError as exc:
            if strict:
                raise
            warnings.warn(f"skipping run {path.name}: {exc}", StoreWarning, stacklevel=2)
    # Oldest first by the manifest's creation time (seconds), then by id: two runs of one minute
    # share the id's time stamp, and their random suffixes say nothing about their order.
    return sorted(runs, key=lambda run: (str(run.created_utc), run.run_id))


def require_runs(root: Path | None = None) -> list[Run]:
    """The readable runs, or a ``ResultsError`` at once when there is none to replay: a batch
    that would replay every page checks this first, instead of failing each notebook in turn."""
    root = Path(root) if root else paths.results_dir()
    fix = ("restore the recorded runs (`git checkout -- data/results`, or point KERNELBOOK_RESULTS_DIR at a "
           "store), or measure on a CUDA GPU (`kernelbook run --mode measure`).")
    if not root.is_dir():
        raise ResultsError(f"There is no results folder at {root}, so there is nothing to replay.", fix)
    runs = list_runs(root)
    if not runs:
        damaged = [p.name for p in _run_candidates(root)]
        raise ResultsError(f"The results folder {root} holds no readable run"
                           + (f" ({len(damaged)} damaged: {', '.join(damaged[:5])}; `kernelbook results --check` "
                              "says why)" if damaged else "") + ", so there is nothing to replay.", fix)
    return runs


class StoreWarning(UserWarning):
    """A damaged file in the results store that was skipped."""


def readable_part(run: Run, name: str) -> dict | None:
    """The part ``name`` of ``run`` when it exists and is valid; a damaged one warns and gives None."""
    try:
        if not run.has_part(name):
            return None
        return run.read_part(name)
    except ResultsError as exc:
        warnings.warn(f"skipping {name} of run {run.run_id}: {exc}", StoreWarning, stacklevel=2)
        return None
    except OSError as exc:  # unreadable (permissions), a folder named like a part
        warnings.warn(f"skipping {name} of run {run.run_id}: {run.part_path(name)} cannot be read ({exc.strerror or exc}). "
                      "Fix: make it a readable file, or move it out of the store.", StoreWarning, stacklevel=2)
        return None


def damaged_copies(part_name: str, root: Path | None = None) -> list[str]:
    """Why each copy of ``part_name`` in the store cannot be read (empty: none is damaged). Tells
    "damaged" from "not recorded yet" when no run holds a valid copy."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        runs = list_runs(root)
    for run in runs:
        path = run.part_path(part_name)
        try:
            if not run.has_part(part_name):
                continue
            _read_part(path)
        except ResultsError as exc:
            found.append(str(exc))
        except OSError as exc:
            found.append(f"{path} cannot be read ({exc.strerror or exc}).")
    return found


def is_candidate(run: Run) -> bool:
    """A run of ``kernelbook try`` (its manifest names the candidate): cited by id, never a newest one."""
    return bool(run.manifest.get("candidate"))


def runs_with(part_name: str, root: Path | None = None) -> list[Run]:
    """The readable runs whose part ``part_name`` is valid, oldest first (no candidate's run)."""
    return [run for run in list_runs(root) if not is_candidate(run) and readable_part(run, part_name) is not None]


def run_with(part_name: str, prefer_run: str | None = None, root: Path | None = None) -> Run | None:
    """The run to read ``part_name`` from: ``prefer_run`` when it exists and holds it (so a page
    compares like with like), else the newest run that holds it; None when no run does."""
    if prefer_run and RUN_ID_PATTERN.match(prefer_run):
        folder = (Path(root) if root else paths.results_dir()) / prefer_run
        if folder.is_dir():  # e.g. the id a replayed batch was given: nothing was written under it
            try:
                run = load_run(prefer_run, root)
            except ResultsError as exc:  # a damaged run never hides the good ones
                warnings.warn(f"skipping run {prefer_run}: {exc}", StoreWarning, stacklevel=2)
                run = None
            if run is not None and readable_part(run, part_name) is not None:
                return run
    runs = runs_with(part_name, root)
    return runs[-1] if runs else None


def check_store(root: Path | None = None) -> list[str]:
    """Every problem in the store, one line each (empty: all runs and parts are valid)."""
    root = Path(root) if root else paths.results_dir()
    problems = []
    if not root.exists():
        return [f"{root}: the results folder does not exist (no run was ever recorded here, or the path is wrong: "
                "check KERNELBOOK_RESULTS_DIR, or restore data/results/ with `git checkout -- data/results`)"]
    if not root.is_dir():
        return [f"{root}: the results folder is a file, not a folder"]
    try:
        listing = _listing(root)
    except ResultsError as exc:
        return [str(exc)]
    for path in listing:
        if is_temporary(path) or path.name.endswith(TEMP_DIR_SUFFIX):
            problems.append(f"{path}: left over from an interrupted write (safe to delete)")
            continue
        if not RUN_ID_PATTERN.match(path.name):
            continue
        try:
            if not path.is_dir() and not path.is_symlink():
                raise ResultsError(f"{path} is a file named like a run, not a run folder.", f"move it out of {root}.")
            run = load_run(path.name, root)
        except ResultsError as exc:
            problems.append(str(exc))
            continue
        for leftover in (p for p in run._parts() if p.name.startswith(".")):
            problems.append(f"{leftover}: left over from an interrupted write (safe to delete)")
        for stray in run.stray_files():
            if not is_temporary(stray):
                problems.append(f"{stray}: not a part (a part file is named with letters, digits, '.', '_' and '-' "
                                "and ends in .json); it is never read. Fix: rename it or move it out of the store")
        for name in run.part_names():
            try:
                run.read_part(name)
            except ResultsError as exc:
                problems.append(str(exc))
        problems.extend(kept_problems(run.root, run.manifest.get("candidate")))
    return problems


# ----------------------------------------------------------------------------- reading


def iter_records(run_ids: Iterable[str] | None = None, root: Path | None = None) -> Iterator[dict]:
    """Every recorded measurement as a flat dict, with its run id and device added."""
    runs = list_runs(root) if run_ids is None else [load_run(r, root) for r in run_ids]
    for run in runs:
        for stray in run.stray_files():
            warnings.warn(f"skipping {stray}: not a part file name (letters, digits, '.', '_' and '-', ending in "
                          ".json). Fix: rename it or move it out of the store.", StoreWarning, stacklevel=2)
        for name in run.part_names():
            part = readable_part(run, name)
            if part is None:
                continue
            for record in part["records"]:
                flat = {"run_id": run.run_id, "device": run.device, "part": name}
                flat.update({k: v for k, v in record.items() if k != "samples"})
                flat["n_samples"] = len(record.get("samples") or [])
                yield flat


def record(
    study: str,
    step: str,
    layer: str | None,
    size: int | None,
    metric: str,
    value: float | Measured | None,
    unit: str = "",
    **extra: Any,
) -> dict:
    """Build one tidy record of ``step`` (or a library row) on ``layer`` (a layer or a case) at
    ``size`` (the study's size: a batch, columns); a ``Measured`` value keeps its samples, median,
    min and max."""
    rec: dict[str, Any] = {
        "study": study,
        "step": step,
        "layer": layer,
        "size": size,
        "metric": metric,
        "unit": unit,
    }
    if isinstance(value, Measured):
        rec.update(
            value=value.median,
            min=value.min,
            max=value.max,
            samples=list(value.samples),
            unit=value.unit,
            **value.extra,
        )
    else:
        rec["value"] = None if value is None else float(value)
    rec.update(extra)
    return rec


def part_name(owner: str, *qualifiers: str) -> str:
    """The one naming rule for recorded parts: ``owner[-qualifier...]``.

    ``part_name("lenet", "tiled")`` is a chapter, ``part_name("lenet", "tiled", "ncu")`` its Nsight
    Compute evidence, ``part_name("lenet", "tiled", "compiler")`` its compiler report,
    ``part_name("lenet", "sweep", "grid")`` a parameter grid, ``part_name("lenet", "cudnn")`` a
    vendor library, ``part_name("lenet", "sanitizer")`` the sanitizer and
    ``part_name("device", "ceilings")`` the device's measured ceilings.
    """
    name = "-".join((owner,) + tuple(q for q in qualifiers if q))
    if not PART_NAME_PATTERN.match(name):
        raise ResultsError(f"{name!r} is not a valid part name.", "use letters, digits, '.', '_' and '-'.")
    return name
