"""The one validator of the results store: what ``results --check``, every replaying page and
``compare`` accept. A manifest, a part, its records and checks are checked field by field:
strings where names belong, finite numbers where measurements belong (no NaN, no Infinity, no
text), every number of a file finite (but a failed check's error) and every integer within
``NUMBER_BOUND`` (a 401-digit integer is a damaged file, not an ``OverflowError``), a part's ``run_id`` and ``name`` equal to its run folder's id and its file's
name, its ``study`` the owner its name starts with (``lenet-tiled`` is of the study ``lenet``), and
every record of the part's own study. A failure is a ``ResultsError`` that names the file and the
fix. ``loads`` parses a file's text with the same bound, so nothing unbounded is ever built.

A record's fields say what they hold: ``step`` (the step, or the library row, that was measured)
and ``size`` (the study's size of the measurement: images of a batch in LeNet and VGG, columns in
the MLP; the study's ``size_header`` names it on pages). Runs recorded before these names wrote
``variant`` and ``batch``; ``normalize_record`` reads them as ``step`` and ``size``, here and
nowhere else, so every recorded run replays unchanged and its files are never rewritten.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from .errors import ResultsError

SCHEMA_VERSION = 1
RUN_ID_PATTERN = re.compile(r"^\d{8}T\d{4}Z-[0-9a-z]+$")
PART_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")
RECORD_KEYS = ("study", "step", "layer", "size", "metric", "value")
#: The record fields of runs recorded before the store's vocabulary was fixed, and their names now.
OLD_RECORD_NAMES = {"variant": "step", "batch": "size"}
MANIFEST_KEYS = ("schema", "run_id", "created_utc", "device", "commit", "host")
CREATED_PATTERN = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?Z$")
#: The largest magnitude of an integer in the store (the recorded runs stay below 1e13: byte and
#: FLOP counts, clocks); a larger one is damage, refused while parsing, before it is built. (A
#: float is bounded by being finite: a failed check's error may be as large as float32 garbage.)
NUMBER_BOUND = 10 ** 30
#: The longest name a page shows in a banner or a table cell (a device, a commit, a step, a
#: metric): the recorded ones are under 30 characters.
MAX_NAME_CHARS = 200
_MAX_DIGITS = len(str(NUMBER_BOUND))


def _is_text(value) -> bool:
    return isinstance(value, str) and bool(value)


def _is_finite(value) -> bool:
    """A JSON number that is a real measurement: not a bool, not NaN, not infinite, an integer
    within the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= NUMBER_BOUND if isinstance(value, int) else math.isfinite(value)



class _Unbounded(ValueError):
    """A number in a file beyond ``NUMBER_BOUND`` (raised while parsing, before it is built)."""


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > _MAX_DIGITS or int(digits) > NUMBER_BOUND:
        shown = text if len(text) <= 24 else f"{text[:12]}...({len(digits):,} digits)"
        raise _Unbounded(f"holds the integer {shown}, beyond the bound of {NUMBER_BOUND:.0e} on any number")
    return int(text)


def _bounded_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # an exponent such as 1e999 reads as infinity
        shown = text if len(text) <= 24 else f"{text[:12]}..."
        raise _Unbounded(f"holds the number {shown}, which is not finite")
    return value


def loads(text: str | bytes, path: Path):
    """A results file's JSON, parsed with every number bounded (see ``NUMBER_BOUND``); any
    failure (not JSON, not UTF-8, too deeply nested, a number out of bounds) names the file."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float)
    except _Unbounded as exc:
        raise _bad(path, str(exc)) from None
    except RecursionError:
        raise _bad(path, "is nested too deeply to be a results file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(path, "is empty" if not text else f"is not valid JSON ({exc})") from None


def _out_of_bounds(value, where: str = "", nonfinite_ok: bool = False) -> str | None:
    """Where in ``value`` (a parsed or a to-be-written file) a number is not finite or an integer
    lies beyond the bound, or None (``nonfinite_ok``: NaN and infinities pass, as a failed check's
    error may be either)."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if abs(item) > NUMBER_BOUND:
                return at or "a value"
        elif isinstance(item, float):
            if not math.isfinite(item) and not nonfinite_ok:
                return at or "a value"
        elif isinstance(item, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def _check_bounds(value, path: Path, nonfinite_ok: bool = False) -> None:
    where = _out_of_bounds(value, nonfinite_ok=nonfinite_ok)
    if where is not None:
        raise _bad(path, f"{where} is not a finite number, or an integer beyond the bound of {NUMBER_BOUND:.0e}")


def _short(text: str, what: str, path: Path) -> None:
    if len(text) > MAX_NAME_CHARS:
        raise _bad(path, f"its {what} is {len(text):,} characters long, more than the {MAX_NAME_CHARS} a name may have")


def part_owner(name: str) -> str:
    """The study (or ``device``) a part's name says it belongs to: ``lenet-tiled-ncu`` -> ``lenet``."""
    return name.split("-", 1)[0]


def _run_folder(path: Path) -> Path:
    path = Path(path)
    return path.parent.parent if path.parent.name == "parts" else path.parent


def _bad(path: Path, what: str) -> ResultsError:
    return ResultsError(
        f"Results file {path} {what}." if what.startswith(("is ", "does ")) else f"Results file {path} is malformed: {what}.",
        f"restore it with `git checkout -- {path}`, or move its run folder {_run_folder(path)} out of "
        f"{_run_folder(path).parent} if it cannot be restored (`kernelbook results --check` lists every problem).",
    )


# ----------------------------------------------------------------------------- reading a file


#: The largest file the store reads (the largest part recorded so far is about 0.2 MB): a larger
#: one is refused from its size alone, before a byte of it is read.
MAX_PART_BYTES = 32 * 1024 * 1024
MAX_MANIFEST_BYTES = 1024 * 1024


def _entry(path: Path) -> os.stat_result | None:
    """``lstat`` of a path of the store (None: there is none); a path that cannot be looked at
    (a folder above it of mode 000) is a damaged file that names the folder."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _unreadable(path.parent, exc) from None


def _unreadable(folder: Path, exc: OSError) -> ResultsError:
    """A folder of the store that cannot be listed or looked into (mode 000, another owner)."""
    return ResultsError(f"The folder {folder} cannot be read ({exc.strerror or exc}); it is skipped.",
                        f"make it readable (`chmod -R a+rX {folder}`), or move its run out of the store.")


def _listing(folder: Path) -> list[Path]:
    """The entries of a folder of the store, sorted; an unreadable folder is a ``ResultsError``."""
    try:
        with os.scandir(folder) as entries:
            return sorted(folder / entry.name for entry in entries)
    except OSError as exc:
        raise _unreadable(folder, exc) from None


def read_json(path: Path, limit: int = MAX_PART_BYTES) -> Any:
    """A file of the store, parsed with every number bounded: a symbolic link, anything but a
    regular file, or a file over ``limit`` bytes is refused before it is read."""
    path = Path(path)
    entry = _entry(path)
    if entry is None:
        raise ResultsError(
            f"Results file {path} does not exist.",
            "check the run id with `kernelbook results`, or record a run on a GPU.",
        )
    if stat.S_ISLNK(entry.st_mode):
        raise _bad(path, "is a symbolic link (the store reads its own files, never a link to one elsewhere)")
    if not stat.S_ISREG(entry.st_mode):
        raise _bad(path, "is not a regular file")
    if entry.st_size > limit:
        raise _bad(path, f"is {entry.st_size:,} bytes, more than the {limit:,} a results file may hold")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:  # unreadable (permissions, an I/O error): a damaged file like any other
        raise ResultsError(f"Results file {path} cannot be read ({exc.strerror or exc}).",
                           f"make it readable (`chmod a+r {path}`), or move its run out of the store.") from exc
    if len(data) > limit:  # it grew since it was looked at
        raise _bad(path, f"is more than the {limit:,} bytes a results file may hold")
    return loads(data, path)


# ----------------------------------------------------------------------------- validating


def validate_manifest(manifest: Any, path: Path) -> dict:
    if not isinstance(manifest, dict):
        raise _bad(path, "the manifest is not a JSON object")
    _check_bounds(manifest, path)
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise _bad(path, f"missing key(s) {', '.join(missing)}")
    if manifest["schema"] != SCHEMA_VERSION:
        raise _bad(path, f"schema {manifest['schema']!r}, this code reads {SCHEMA_VERSION}")
    if not isinstance(manifest["device"], dict) or not _is_text(manifest["device"].get("name")):
        raise _bad(path, "'device' must be an object with a 'name' (a non-empty string)")
    for key in ("run_id", "created_utc", "commit", "host"):
        if not isinstance(manifest[key], str):
            raise _bad(path, f"{key!r} is {manifest[key]!r}, not a string")
    for key, value in (("device name", manifest["device"]["name"]), ("commit", manifest["commit"]),
                       ("host", manifest["host"]), ("run_id", manifest["run_id"])):
        _short(value, key, path)
    if not CREATED_PATTERN.match(manifest["created_utc"]):
        raise _bad(path, f"created_utc {manifest['created_utc']!r} is not a UTC time like 2026-11-22T04:30:00Z")
    for key in ("software", "parameters"):
        if not isinstance(manifest.get(key, {}), dict):
            raise _bad(path, f"{key!r} must be an object")
    return manifest


def normalize_record(record: dict) -> dict:
    """The record under today's field names: an old run's ``variant`` is its ``step`` and its
    ``batch`` its ``size`` (the field order kept). A record that already has the new names, or
    both, is returned as it is; one that has both an old and its new name is refused by the
    validator."""
    if not any(old in record for old in OLD_RECORD_NAMES):
        return record
    if any(new in record for new in OLD_RECORD_NAMES.values()):
        return record
    return {OLD_RECORD_NAMES.get(key, key): value for key, value in record.items()}


def validate_record(record: Any, path: Path, index: int) -> dict:
    """One record (already normalized): strings where names belong, finite numbers where
    numbers belong."""
    if not isinstance(record, dict):
        raise _bad(path, f"record {index} is not an object")
    mixed = [old for old, new in OLD_RECORD_NAMES.items() if old in record and new in record]
    if mixed:
        raise _bad(path, f"record {index} has both {mixed[0]!r} and {OLD_RECORD_NAMES[mixed[0]]!r} (one name for one field)")
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise _bad(path, f"record {index} lacks {', '.join(missing)}")
    if not _is_text(record["metric"]):
        raise _bad(path, f"record {index} has metric {record['metric']!r} (a non-empty string)")
    if not _is_text(record["study"]) or not _is_text(record["step"]):
        raise _bad(path, f"record {index} needs non-empty string 'study' and 'step'")
    for key in ("study", "step", "layer", "metric", "unit"):
        if isinstance(record.get(key), str):
            _short(record[key], f"record {index}'s {key}", path)
    if record["layer"] is not None and not isinstance(record["layer"], str):
        raise _bad(path, f"record {index} has layer {record['layer']!r} (a string or null)")
    if not isinstance(record.get("unit", ""), str):
        raise _bad(path, f"record {index} has unit {record['unit']!r} (a string)")
    value = record["value"]
    if value is not None and not _is_finite(value):
        raise _bad(path, f"record {index} has value {value!r} (a finite number, or null when nothing was measured)")
    for key in ("min", "max"):
        if record.get(key) is not None and not _is_finite(record[key]):
            raise _bad(path, f"record {index} has {key} {record[key]!r} (a finite number or null)")
    size = record["size"]
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise _bad(path, f"record {index} has size {size!r} (a positive integer or null)")
    samples = record.get("samples")
    if samples is not None and not isinstance(samples, list):
        raise _bad(path, f"record {index} has samples {samples!r} (a list of numbers)")
    if samples is not None and not all(_is_finite(s) for s in samples):
        raise _bad(path, f"record {index} has samples that are not finite numbers (NaN, infinity or text)")
    return record


def validate_check(check: Any, path: Path, index: int) -> dict:
    """One correctness check: a label, passed or not, and fields of the types pages read. Its
    error measures may be NaN (a kernel that wrote NaN fails its check with a NaN error)."""
    if not isinstance(check, dict):
        raise _bad(path, f"check {index} is not an object")
    if not _is_text(check.get("label")) or not isinstance(check.get("passed"), bool):
        raise _bad(path, f"check {index} needs a 'label' (a non-empty string) and 'passed' (true or false)")
    for key in ("shape", "params"):
        if check.get(key) is not None and not isinstance(check[key], dict):
            raise _bad(path, f"check {index} has {key} {check[key]!r} (an object)")
    for key in ("layer", "error", "measure"):
        if check.get(key) is not None and not isinstance(check[key], str):
            raise _bad(path, f"check {index} has {key} {check[key]!r} (a string or null)")
    for key in ("rel_l2_error", "max_abs_error", "measured", "tolerance", "unwritten"):
        value = check.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise _bad(path, f"check {index} has {key} {value!r} (a number or null)")
    return check


def validate_part(part: Any, path: Path) -> dict:
    if not isinstance(part, dict):
        raise _bad(path, "the part is not a JSON object")
    # Every number finite and bounded, but for the checks' error measures (NaN or infinite when a
    # kernel wrote NaN: the check fails and says so).
    _check_bounds({key: value for key, value in part.items() if key != "checks"}, path)
    _check_bounds(part.get("checks"), path, nonfinite_ok=True)
    for key in ("schema", "run_id", "name", "study", "mode", "records", "checks"):
        if key not in part:
            raise _bad(path, f"missing key {key!r}")
    if part["schema"] != SCHEMA_VERSION:
        raise _bad(path, f"schema {part['schema']!r}, this code reads {SCHEMA_VERSION}")
    if not isinstance(part["records"], list):
        raise _bad(path, "'records' must be a list")
    if not isinstance(part.get("checks"), list):
        raise _bad(path, "'checks' must be a list (empty when nothing was checked)")
    if not isinstance(part.get("extra", {}), dict) or not isinstance(part.get("parameters", {}), dict):
        raise _bad(path, "'extra' and 'parameters' must be objects")
    for key in ("run_id", "name", "study", "mode"):
        if not _is_text(part[key]):
            raise _bad(path, f"{key!r} is {part[key]!r}, not a non-empty string")
    for index, check in enumerate(part["checks"]):
        validate_check(check, path, index)
    # A part belongs where it lies: its run folder's id, its file's name, its name's study.
    if path.parent.name == "parts":
        folder = path.parent.parent.name
        if RUN_ID_PATTERN.match(folder) and part["run_id"] != folder:
            raise _bad(path, f"its run_id {part['run_id']!r} is not the id of its run folder {folder!r}")
        if part["name"] != path.stem:
            raise _bad(path, f"its name {part['name']!r} is not its file's name {path.stem!r}")
    if part["study"] != part_owner(part["name"]):
        raise _bad(path, f"it says study {part['study']!r}, but its name {part['name']!r} belongs to "
                         f"{part_owner(part['name'])!r} (a part is of the study its name starts with)")
    part["records"] = [normalize_record(r) if isinstance(r, dict) else r for r in part["records"]]
    for index, record in enumerate(part["records"]):
        validate_record(record, path, index)
        if record["study"] != part["study"]:
            raise _bad(path, f"record {index} is of study {record['study']!r}, but the part says {part['study']!r}")
    return part
