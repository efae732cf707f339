"""Where a measurement came from: device, software, commit, host, time."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys

from . import paths


def git_commit() -> str:
    """The commit of this checkout, with ``+dirty`` when tracked files differ from it.

    The device machine receives a copy of the working tree without ``.git``; the command that
    starts a run there passes the commit in ``KERNELBOOK_COMMIT``.
    """
    if os.environ.get("KERNELBOOK_COMMIT"):
        return os.environ["KERNELBOOK_COMMIT"]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=paths.REPO_ROOT, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=paths.REPO_ROOT, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}+dirty" if dirty else sha


def software_versions() -> dict:
    versions = {"python": platform.python_version()}
    torch = sys.modules.get("torch")  # only when a page already imported it (importing it is slow)
    if torch is not None:
        versions["torch"] = getattr(torch, "__version__", "?")
        try:
            versions["cudnn"] = str(torch.backends.cudnn.version())
            versions["torch_cuda"] = str(torch.version.cuda)
        except Exception:
            pass
    for module in ("numpy", "cupy", "pandas"):
        mod = sys.modules.get(module)
        if mod is None:
            try:
                mod = __import__(module)
            except Exception:
                continue
        versions[module] = getattr(mod, "__version__", "?")
    return versions


def manifest_fields(device: dict, parameters: dict | None = None) -> dict:
    """The manifest of a new run, minus what ``results.create_run`` adds itself."""
    return {
        "device": device,
        "software": software_versions(),
        "commit": git_commit(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "parameters": parameters or {},
        # How the timings ran, for the profiles pages' "Environment" section: nothing locks the
        # clocks and nothing flushes L2 between the timed launches of one measurement.
        "environment": {"clocks": "not locked: the GPU's own boost behaviour (ncu --clock-control none)",
                        "l2_state": "warm: repeats run back to back, L2 not flushed between them"},
    }
