"""One way to write a file: whole or not at all.

Every file kernelbook writes (results, manifests, batch reports, caches, weights) goes through
``write_atomic``: the bytes go to a temporary file beside the target (named ``.<name>.*.tmp``,
which no reader ever takes for a result), are flushed to disk, made world-readable (0644, like
the data files: ``mkstemp`` would leave 0600) and then renamed over the target. Readers see the
old file or the complete new one, never a partial file, even if the writer is killed or two
processes race.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

TEMP_SUFFIX = ".tmp"
FILE_MODE = 0o644


def is_temporary(path: Path) -> bool:
    """A leftover of an interrupted write (or one in progress): never read as a result."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``write(f)`` into a temporary file beside it, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, payload: bytes) -> None:
    write_atomic(path, lambda handle: handle.write(payload))


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, payload: Any) -> None:
    text = json.dumps(payload, indent=1, sort_keys=True, allow_nan=True) + "\n"
    write_text_atomic(path, text)
