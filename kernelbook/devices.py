"""The GPUs of a batch: which ones the machine has, which one a worker uses, and the rule that
one batch (one run) measures on one GPU model. Asked through nvidia-smi, never through CUDA, so
that listing a GPU creates no CUDA context in a process that times nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from . import results
from .errors import KernelbookError
from .toc import BatchError

_SMI_FIELDS = ("index", "uuid", "name", "driver_version", "memory.total", "clocks.max.sm",
               "clocks.max.memory", "clocks.applications.graphics", "pci.bus_id")
_KEYS = ("index", "uuid", "name", "driver", "memory_mib", "max_sm_clock_mhz", "max_memory_clock_mhz",
         "application_sm_clock_mhz", "pci_bus_id")


def list_gpus() -> list[dict]:
    """Every NVIDIA GPU of this host (nvidia-smi's physical order), or [] when there is none.

    nvidia-smi is asked rather than CUDA so that listing a GPU never creates a CUDA context in a
    process that does not time anything (the client, a worker between notebooks).
    """
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(_KEYS):
            continue
        gpu: dict[str, Any] = {}
        for key, cell in zip(_KEYS, cells):
            if key in ("index", "memory_mib") or key.endswith("_mhz"):
                try:
                    gpu[key] = int(float(cell))
                except ValueError:
                    gpu[key] = None  # "[N/A]"
            else:
                gpu[key] = cell
        gpus.append(gpu)
    return gpus


def visible_gpu(visible: str | None = None, gpus: list[dict] | None = None) -> dict | None:
    """The GPU a process uses: the first of its ``CUDA_VISIBLE_DEVICES`` (an index or a UUID), or
    device 0 when the variable is unset. None when there is no GPU (or the entry names none)."""
    gpus = list_gpus() if gpus is None else gpus
    if not gpus:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None and not visible.strip():
        return None  # CUDA_VISIBLE_DEVICES="" hides every GPU
    first = (visible or "0").split(",")[0].strip()
    for gpu in gpus:
        if first == str(gpu["index"]) or (first.startswith(("GPU-", "MIG-")) and gpu["uuid"].startswith(first)):
            return gpu
    return None


def gpu_label(gpu: dict | None) -> str:
    return f"GPU {gpu['index']} {gpu['uuid'][:12]}" if gpu else "no GPU"


def check_one_model(gpus: dict[str, dict | None]) -> None:
    """Refuse a batch whose workers hold GPUs of more than one model: one batch is one run, and a
    run's numbers come from one kind of device."""
    models: dict[str, list[str]] = {}
    for worker, gpu in gpus.items():
        if gpu:
            models.setdefault(gpu["name"], []).append(worker)
    if len(models) > 1:
        which = "; ".join(f"{name} on {', '.join(sorted(workers))}" for name, workers in sorted(models.items()))
        raise BatchError(
            f"This batch would mix GPU models in one run ({which}); a run's numbers must come from one model.",
            "pick GPUs of one model (e.g. --gpus 0,2), or run one batch per model (each one is its own run; "
            "`kernelbook compare` puts them side by side).")


def batch_gpus(gpus: dict) -> list[dict]:
    """The batch's GPUs, once each, with the worker that uses each (for the manifest)."""
    listed: dict[str, dict] = {}
    for worker, gpu in sorted(gpus.items()):
        if gpu:
            listed.setdefault(gpu["uuid"], {**gpu, "workers": []})["workers"].append(worker)
    return list(listed.values())


def refuse_other_model(run_id: str, batch_gpus: list[dict]) -> None:
    try:
        run = results.load_run(run_id)
    except KernelbookError:
        return
    names = {g["name"] for g in batch_gpus}
    if names and run.device not in names:
        raise BatchError(f"Run {run_id} was measured on {run.device}; this batch measures on "
                         f"{', '.join(sorted(names))}: one run holds the numbers of one GPU model.",
                         "leave the run id out (a new run), or measure on the run's GPU model.")
