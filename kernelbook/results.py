"""The results store: every number the book shows comes from here.

Layout::

    data/results/<run_id>/manifest.json        who, where, when: device, software, commit, host
    data/results/<run_id>/parts/<name>.json    one part per notebook (or script) that measured

``run_id`` starts with the UTC time (``20261122T0430Z-3f9c1a``), so sorting run ids sorts runs
by age. Every file is written atomically (temporary file in the same folder, then ``os.replace``),
so an interrupted run leaves whole files or none. Reading validates and names the bad file.

A *part* holds tidy records, one measured value each::

    {"study": "lenet", "variant": "baseline", "layer": "C1", "batch": 1000,
     "metric": "op_time_ms", "value": 1.23, "unit": "ms", "min": 1.2, "max": 1.3,
     "samples": [...]}

plus optional ``checks`` (correctness evidence) and ``extra`` (anything a chapter needs to
replay: profiler rows, timelines, sweep grids).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from . import paths
from .errors import ResultsError
from .measure import Measured

SCHEMA_VERSION = 1
RUN_ID_PATTERN = re.compile(r"^\d{8}T\d{4}Z-[0-9a-z]+$")
PART_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
RECORD_KEYS = ("study", "variant", "layer", "batch", "metric", "value")
MANIFEST_KEYS = ("schema", "run_id", "created_utc", "device", "commit", "host")


# ----------------------------------------------------------------------------- atomic I/O


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON so that readers see the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=1, sort_keys=True, allow_nan=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ResultsError(
            f"Results file {path} does not exist.",
            "check the run id with `kernelbook results`, or record a run on a GPU.",
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(
            f"Results file {path} is not valid JSON ({exc}).",
            f"restore it with `git checkout -- {path}` or delete its run folder {path.parent}.",
        ) from exc


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


# ----------------------------------------------------------------------------- validation


def _bad(path: Path, what: str) -> ResultsError:
    return ResultsError(
        f"Results file {path} is malformed: {what}.",
        f"restore it with `git checkout -- {path}` or delete its run folder {path.parent.parent if path.parent.name == 'parts' else path.parent}.",
    )


def validate_manifest(manifest: Any, path: Path) -> dict:
    if not isinstance(manifest, dict):
        raise _bad(path, "the manifest is not a JSON object")
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise _bad(path, f"missing key(s) {', '.join(missing)}")
    if manifest["schema"] != SCHEMA_VERSION:
        raise _bad(path, f"schema {manifest['schema']!r}, this code reads {SCHEMA_VERSION}")
    if not isinstance(manifest["device"], dict) or "name" not in manifest["device"]:
        raise _bad(path, "'device' must be an object with a 'name'")
    return manifest


def validate_record(record: Any, path: Path, index: int) -> dict:
    if not isinstance(record, dict):
        raise _bad(path, f"record {index} is not an object")
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise _bad(path, f"record {index} lacks {', '.join(missing)}")
    value = record["value"]
    if value is not None and not isinstance(value, (int, float)):
        raise _bad(path, f"record {index} has a non-numeric value {value!r}")
    batch = record["batch"]
    if batch is not None and (not isinstance(batch, int) or batch <= 0):
        raise _bad(path, f"record {index} has batch {batch!r} (a positive integer or null)")
    samples = record.get("samples")
    if samples is not None and not all(isinstance(s, (int, float)) for s in samples):
        raise _bad(path, f"record {index} has non-numeric samples")
    return record


def validate_part(part: Any, path: Path) -> dict:
    if not isinstance(part, dict):
        raise _bad(path, "the part is not a JSON object")
    for key in ("schema", "run_id", "name", "study", "mode", "records"):
        if key not in part:
            raise _bad(path, f"missing key {key!r}")
    if part["schema"] != SCHEMA_VERSION:
        raise _bad(path, f"schema {part['schema']!r}, this code reads {SCHEMA_VERSION}")
    if not isinstance(part["records"], list):
        raise _bad(path, "'records' must be a list")
    for index, record in enumerate(part["records"]):
        validate_record(record, path, index)
    return part


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
        folder = self.root / "parts"
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

    def has_part(self, name: str) -> bool:
        return self.part_path(name).is_file()

    def read_part(self, name: str) -> dict:
        path = self.part_path(name)
        return validate_part(read_json(path), path)

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
    """Create (or reopen, for a batch whose notebooks share one run id) a run folder."""
    root = Path(root) if root else paths.results_dir()
    run_id = validate_run_id(run_id) if run_id else new_run_id()
    folder = root / run_id
    manifest_path = folder / "manifest.json"
    if manifest_path.is_file():
        return load_run(run_id, root)
    manifest = {"schema": SCHEMA_VERSION, "run_id": run_id, "created_utc": utc_now()}
    manifest.update(manifest_fields)
    validate_manifest(manifest, manifest_path)
    write_json_atomic(manifest_path, manifest)
    return Run(run_id, folder, manifest)


def load_run(run_id: str, root: Path | None = None) -> Run:
    root = Path(root) if root else paths.results_dir()
    validate_run_id(run_id)
    folder = root / run_id
    manifest_path = folder / "manifest.json"
    if not folder.is_dir():
        raise ResultsError(
            f"No recorded run {run_id} under {root}.",
            "list the recorded runs with `kernelbook results --runs`.",
        )
    manifest = validate_manifest(read_json(manifest_path), manifest_path)
    if manifest["run_id"] != run_id:
        raise _bad(manifest_path, f"run_id {manifest['run_id']!r} does not match its folder")
    return Run(run_id, folder, manifest)


def list_runs(root: Path | None = None) -> list[Run]:
    """Every recorded run, oldest first. Folders that are not run ids are ignored."""
    root = Path(root) if root else paths.results_dir()
    if not root.is_dir():
        return []
    return [load_run(p.name, root) for p in sorted(root.iterdir()) if RUN_ID_PATTERN.match(p.name)]


def newest_run_with(part_name: str, root: Path | None = None) -> Run:
    """The newest recorded run that holds ``part_name``: what a notebook replays."""
    runs = [run for run in list_runs(root) if run.has_part(part_name)]
    if not runs:
        where = Path(root) if root else paths.results_dir()
        raise ResultsError(
            f"No recorded run under {where} holds measurements for {part_name!r}.",
            "record one on a CUDA machine (`kernelbook run --mode measure`, or "
            "scripts/device_run.sh on the device) and commit data/results/.",
        )
    return runs[-1]


def run_with(part_name: str, prefer_run: str | None = None, root: Path | None = None) -> Run | None:
    """The run to read ``part_name`` from: ``prefer_run`` when it exists and holds it (so a page
    compares like with like), else the newest run that holds it; None when no run does."""
    if prefer_run:
        try:
            run = load_run(prefer_run, root)
        except ResultsError:
            run = None  # e.g. the id a replayed batch was given: nothing was written under it
        if run is not None and run.has_part(part_name):
            return run
    try:
        return newest_run_with(part_name, root)
    except ResultsError:
        return None


# ----------------------------------------------------------------------------- reading


def iter_records(run_ids: Iterable[str] | None = None, root: Path | None = None) -> Iterator[dict]:
    """Every recorded measurement as a flat dict, with its run id and device added."""
    runs = list_runs(root) if run_ids is None else [load_run(r, root) for r in run_ids]
    for run in runs:
        for name in run.part_names():
            part = run.read_part(name)
            for record in part["records"]:
                flat = {"run_id": run.run_id, "device": run.device, "part": name}
                flat.update({k: v for k, v in record.items() if k != "samples"})
                flat["n_samples"] = len(record.get("samples") or [])
                yield flat


def record(
    study: str,
    variant: str,
    layer: str | None,
    batch: int | None,
    metric: str,
    value: float | Measured | None,
    unit: str = "",
    **extra: Any,
) -> dict:
    """Build one tidy record; a ``Measured`` value keeps its samples, median, min and max."""
    rec: dict[str, Any] = {
        "study": study,
        "variant": variant,
        "layer": layer,
        "batch": batch,
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
