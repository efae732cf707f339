"""The profilers' plumbing: finding the tools, running them on a target, reading failures.

Nsight Compute and compute-sanitizer profile a separate process, ``python -m
kernelbook.evidence.target``, which launches one step of one study once per case and nothing
else (see ``target.py``), so the notebook's own CUDA context, memory pool and timings are
untouched. What can be missing (no tool, no GPU, no permission to read counters, as in
containers and CI) is never an exception in a notebook: the status says why and the recorded
evidence is shown instead.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Iterable

from .. import paths
from ..errors import KernelbookError

NOT_RECORDED = "not recorded yet"


class ProfilerUnavailable(KernelbookError, RuntimeError):
    """A profiler cannot be used here (not installed, no GPU, no permission to read counters)."""


def profiling_enabled(profile: bool = True) -> bool:
    """``profile`` unless ``KERNELBOOK_PROFILE`` is 0/off/false (a batch-wide switch for quick runs)."""
    env = os.environ.get("KERNELBOOK_PROFILE", "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    return bool(profile)


def target_command(study, step: str, case_params: dict, size: int, cases: Iterable[str]) -> list[str]:
    """The profiled program: ``python -m kernelbook.evidence.target --study MODULE ...``."""
    source = getattr(study, "candidate_source", None)  # a development candidate standing in for the step
    return [sys.executable, "-m", "kernelbook.evidence.target", "--study", study.module, "--step", step,
            "--cases", ",".join(cases), "--size", str(size),
            "--case-params", json.dumps(case_params, sort_keys=True), *(["--source", source] if source else [])]


def _find_tool(name: str, extra_globs: Iterable[str] = ()) -> str | None:
    found = shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    if found:
        return found
    for pattern in extra_globs:
        for candidate in sorted(glob.glob(pattern), reverse=True):  # newest version first
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def ncu_path() -> str | None:
    """Nsight Compute's CLI: PATH, then /usr/local/cuda/bin, then /opt/nvidia/nsight-compute/*/ncu."""
    return _find_tool("ncu", ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu"))


def sanitizer_path() -> str | None:
    """compute-sanitizer: PATH, then /usr/local/cuda/bin (and its compute-sanitizer/ folder)."""
    return _find_tool("compute-sanitizer", ("/usr/local/cuda/compute-sanitizer/compute-sanitizer",
                                            "/usr/local/cuda-*/bin/compute-sanitizer"))


def ncu_version(ncu: str | None = None) -> str:
    ncu = ncu or ncu_path()
    return _ncu_version(ncu) if ncu else "not installed"


@functools.lru_cache(maxsize=4)
def _ncu_version(ncu: str) -> str:
    try:
        text = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    match = re.search(r"Version\s+(\S+)", text)
    return match.group(1) if match else (text.strip().splitlines() or ["unknown"])[-1]


def _child_env() -> dict:
    """The profiled Python finds this checkout's kernelbook even when it is not installed."""
    env = dict(os.environ)
    root = str(paths.REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env




_PERMISSION = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")
_NO_PROFILER = ("LibraryNotLoaded", "Failed to initialize the profiler", "Device not supported",
                "No supported CUDA devices", "ERR_NVGPUCTRBUSY")


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def classify_failure(output: str) -> str | None:
    """Why a profiler could not run at all (permission, no GPU), or None for other failures."""
    if any(marker in output for marker in _PERMISSION):
        return ("no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM: usual in "
                "containers and CI)")
    for marker in _NO_PROFILER:
        if marker in output:
            return f"the profiler cannot use this GPU ({marker})"
    return None


def _run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=paths.REPO_ROOT,
                              env=_child_env())
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise ProfilerUnavailable(f"`{' '.join(cmd[:3])} ...` did not finish within {timeout:.0f} s.\n{_tail(out)}",
                                  "raise timeout=, or profile fewer layers.") from exc
    except OSError as exc:
        raise ProfilerUnavailable(f"{cmd[0]} could not be started ({exc}).", "check the installation.") from exc
    return proc.returncode, proc.stdout, proc.stderr


