"""The folder of executed notebooks (``_build/executed`` unless ``--out`` names another): what the
batch (``kernelbook.batch``) writes there and the build (``kernelbook.build``) reads, below both.

The lock one batch holds on the folder, what earlier batches recorded there (``batch.json``), and
whether an executed notebook still stands: the digest of everything it was executed from, and the
kernel sources it shows, unchanged since it ran.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

from . import paths, results
from .batch_report import SOURCE_METADATA, NotebookResult, source_digest
from .toc import BatchError

# ----------------------------------------------------------------------------- the folder

LOCK_NAME = ".batch.lock"


def check_writable(out_dir: Path) -> None:
    """Refuse an output folder that cannot be created or written, without creating anything."""
    existing = Path(out_dir).resolve()
    while not existing.exists():
        existing = existing.parent
    problem = None
    if not existing.is_dir():
        problem = f"{existing} is a file, not a folder"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"{existing} is not writable"
    if problem:
        raise BatchError(f"The output folder {out_dir} cannot be written ({problem}).",
                         "pass --out with a folder you can write to, or fix its permissions.")


def earlier(out_dir: Path) -> list[NotebookResult]:
    """The notebooks recorded by earlier batches into the same folder (kept in batch.json)."""
    try:
        data = json.loads((out_dir / "batch.json").read_text(encoding="utf-8"))
        known = {f.name for f in NotebookResult.__dataclass_fields__.values()}
        return [NotebookResult(**{k: v for k, v in nb.items() if k in known}) for nb in data.get("notebooks", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


class batch_lock:
    """One batch at a time per output folder: an advisory ``flock`` on ``<out>/.batch.lock``.

    The operating system releases the lock when its process ends, however it ends, so a killed
    batch never leaves a stale lock; the file only says who holds it and since when. A second
    batch (or a build, ``held_by``) is refused with that.
    """

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / LOCK_NAME
        self.handle = None

    def __enter__(self):
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until __exit__
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            held = _lock_info(handle.read())
            handle.close()
            raise BatchError(
                f"Another batch (process {held.get('pid', '?')}) is running since {held.get('since', '?')} and writes "
                f"to {self.path.parent}.",
                "wait for it to finish, or use --out DIR to execute into another folder.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "since": results.utc_now()}))
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc):
        if self.handle is not None:
            self.handle.close()  # releases the lock; the file stays, harmless
            self.handle = None
        return False


def _lock_info(text: str) -> dict:
    try:
        info = json.loads(text or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def held_by(out_dir: Path) -> dict | None:
    """Who holds the batch lock of ``out_dir`` ({"pid", "since"}), or None when no batch runs."""
    path = Path(out_dir) / LOCK_NAME
    if not path.is_file():
        return None
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            return _lock_info(handle.read()) or {"pid": "?", "since": "?"}
        return None


# ----------------------------------------------------------------------------- what a notebook was executed from

#: The package's code: a notebook executed by other code is executed again.
CODE_DIR = paths.REPO_ROOT / "kernelbook"
#: Modules that run only when the book is built, never in a notebook (the build has a digest of its own).
BUILD_ONLY = ("build.py", "publish.py")
#: Folders of ``data/`` that no page reads as an input: derived arrays (rebuilt from the data),
#: development runs.
_NOT_INPUTS = ("cache", "dev")


def tree_digest(digest, root: Path, label: str, pattern: str = "**/*", skip: tuple = ()) -> None:
    """Feed every file under ``root`` (its path below ``root`` and its bytes) into ``digest``."""
    if not root.is_dir():
        digest.update(f"{label}: none\n".encode())
        return
    for path in sorted(root.glob(pattern)):
        rel = path.relative_to(root)
        if not path.is_file() or rel.parts[0] in skip or any(part.startswith(".") for part in rel.parts) \
                or "__pycache__" in rel.parts:
            continue
        digest.update(f"{label}/{rel.as_posix()} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())


def shared_inputs(mode: str, kernel_name: str) -> dict:
    """What every notebook of a replaying batch is executed from besides its own source: the
    package's code, the data (the recorded runs it replays included), the environment variables
    the notebooks read, and each study's kernel sources (by folder)."""
    common = hashlib.sha256(f"mode={mode} kernel={kernel_name}\n".encode())
    tree_digest(common, CODE_DIR, "kernelbook", "**/*.py", skip=BUILD_ONLY)
    data = paths.data_dir()
    tree_digest(common, data, "data", skip=_NOT_INPUTS + ("results",))
    tree_digest(common, paths.results_dir(), "results")
    for name in sorted(os.environ):
        if name.startswith("KERNELBOOK_") and name != "KERNELBOOK_PARAMS":  # the parameters count on their own
            common.update(f"env {name}={os.environ[name]}\n".encode())
    kernels = {}
    every = hashlib.sha256()
    root = paths.kernels_dir()
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        one = hashlib.sha256()
        tree_digest(one, folder, folder.name)
        kernels[folder.name] = one.hexdigest()
        every.update(f"{folder.name} {kernels[folder.name]}\n".encode())
    return {"common": common.hexdigest(), "kernels": kernels, "all_kernels": every.hexdigest()}


def inputs_digest(shared: dict, entry: NotebookResult, source: Path, book_root: Path, injected: dict) -> str:
    """The digest of everything ``entry``'s notebook is executed from: ``shared_inputs``, its own
    source, its study's kernel sources (every study's, for a page outside the studies' folders),
    and the parameters it is given."""
    folder = entry.name.partition("/")[0] if "/" in entry.name else None
    kernels = shared["kernels"].get(folder) if folder else None
    text = json.dumps({"common": shared["common"], "name": entry.name, "source": entry.source_sha256,
                       "kernels": kernels or shared["all_kernels"], "parameters": injected},
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- whether it still stands


def unchanged(before: NotebookResult | None, entry: NotebookResult, output: Path) -> bool:
    """Whether the notebook's last execution can stand: it ended ok from the same inputs, its
    executed file is the one that batch wrote, and the kernel sources it shows are unchanged."""
    if before is None or before.status != "ok" or not before.inputs_sha256 or not before.notebook_sha256:
        return False
    if before.inputs_sha256 != entry.inputs_sha256 or not output.is_file():
        return False
    raw = output.read_bytes()
    if hashlib.sha256(raw).hexdigest() != before.notebook_sha256:
        return False
    try:
        cells = json.loads(raw).get("cells") or []
    except (ValueError, AttributeError):
        return False
    return not stale_sources(SimpleNamespace(cells=cells), paths.REPO_ROOT)


def stale_sources(nb, root: Path) -> list[str]:
    """The kernel sources an executed notebook shows (``report.show_source`` puts each one's path
    and sha256 in its output's metadata) that have changed, or gone, since it was executed."""
    stale = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for meta in (output.get("metadata") or {}).values():
                shown = meta.get(SOURCE_METADATA) if isinstance(meta, dict) else None
                if not isinstance(shown, dict) or not isinstance(shown.get("path"), str):
                    continue
                headers = shown.get("headers")
                for shown_path, digest in [(shown["path"], shown.get("sha256")),
                                           *(headers.items() if isinstance(headers, dict) else ())]:
                    path = root / str(shown_path)
                    if (source_digest(path) if path.is_file() else None) != digest:
                        stale.append(str(shown_path))
    return sorted(set(stale))
