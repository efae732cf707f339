"""One notebook of a batch, executed with papermill wherever it runs: in the batch's own process
(``kernelbook.cluster.Sequential``) or as a task on a Dask worker (``DaskEngine``).

``execute`` never writes the results store or the output folder: the kernel records into a private
staging folder (the environment variable ``KERNELBOOK_STAGING_DIR``, read by ``kernelbook.session``),
and ``execute`` returns the executed notebook, the staged manifests and parts (as text), the
shown-instead notes, and which worker and GPU ran it; ``kernelbook.dispatch`` takes them in.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from . import phases
from .devices import gpu_label, visible_gpu
from .toc import BatchError

#: Environment variables the kernel of a batch notebook reads (same names as kernelbook.session's).
NOTES_ENV = "KERNELBOOK_NOTES_FILE"
STAGING_ENV = "KERNELBOOK_STAGING_DIR"
#: The Dask event topic on which a worker says that it started a notebook (for the live lines).
TOPIC = "kernelbook-batch"
#: What the kernel's own log says: only what is critical (a notebook's errors are in its outputs).
KERNEL_LOG_LEVEL = "CRITICAL"


def _kernel_manager(env: dict[str, str]):
    """A kernel manager class that starts the kernel with ``env`` added to this process's
    environment. The environment is handed to the kernel alone, never set in this process, so
    that two notebooks executing side by side in one worker (``--per-gpu 2``) cannot take each
    other's staging folder or GPU."""
    from jupyter_client.manager import AsyncKernelManager

    class TaskKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw["env"] = {**os.environ, **(kw.get("env") or {}), **env}
            return await super().start_kernel(**kw)

    return TaskKernelManager


def _ipc_config(folder: Path, env: dict[str, str] | None = None):
    """The kernel talks to papermill over Unix sockets (IPC), not unencrypted TCP on localhost:
    nothing to eavesdrop on, and ipykernel's "running over TCP without encryption" warning,
    once per notebook, has no cause any more. The sockets live in the task's private folder
    (left to itself, jupyter_client would put them in the notebook's folder, where two kernels
    running side by side would take each other's)."""
    from traitlets.config import Config

    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(folder / "kernel")
    # jupyter_client interrupts a kernel before it shuts it down (SIGINT, then a shutdown request);
    # a kernel caught between two messages logs "KeyboardInterrupt caught in kernel" at ERROR on
    # the batch's stderr, for a notebook that ended well. A notebook's own errors are in its
    # outputs, so the kernel's log says only what is critical.
    config.NotebookClient.extra_arguments = [f"--IPKernelApp.log_level={KERNEL_LOG_LEVEL}"]
    if env:
        config.NotebookClient.kernel_manager_class = _kernel_manager(env)
    return config


def _worker_name() -> str:
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return "local"
    return str(worker.name)


def _announce(task: dict, gpu: dict | None) -> None:
    """Tell the client, through the scheduler, that this worker started the notebook."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(TOPIC, {"key": task["key"], "name": str(worker.name), "gpu": gpu_label(gpu), "at": time.time()})


def _read_staged(staging: Path) -> list[dict]:
    """What the kernel recorded: [{"run_id", "manifest": text, "parts": {name: text}}]."""
    staged = []
    if not staging.is_dir():
        return staged
    for folder in sorted(staging.iterdir()):
        manifest = folder / "manifest.json"
        if not folder.is_dir() or not manifest.is_file():
            continue
        parts = {p.stem: p.read_text(encoding="utf-8") for p in sorted((folder / "parts").glob("*.json"))
                 if not p.name.startswith(".")}
        staged.append({"run_id": folder.name, "manifest": manifest.read_text(encoding="utf-8"), "parts": parts})
    return staged


def execute(task: dict) -> dict:
    """Execute one notebook with papermill and hand back everything it produced.

    ``task``: ``key``, ``name``, ``notebook`` (the ipynb as JSON text), ``cwd``, ``parameters``,
    ``kernel_name``, ``measuring``, ``progress_bar``. Runs in this process or on a Dask worker;
    in both cases the kernel sees exactly one GPU when measuring (``CUDA_VISIBLE_DEVICES`` set to
    its UUID), records into a private staging folder, and nothing outside a temporary folder is
    written. A notebook that raises is a result (``status`` failed), never an exception.
    """
    import papermill

    from .batch_report import short_error

    gpu = visible_gpu() if task.get("measuring") else None
    _announce(task, gpu)
    tmp = Path(tempfile.mkdtemp(prefix="kernelbook-nb-"))
    result: dict[str, Any] = {"key": task["key"], "worker": _worker_name(), "host": socket.gethostname(),
                              "gpu": gpu, "status": "failed", "error": None, "notebook": None,
                              "staged": [], "notes": [], "seconds": 0.0, "phases": {}}
    env = {NOTES_ENV: str(tmp / "notes.jsonl"), STAGING_ENV: str(tmp / "staging"),
           phases.PHASES_ENV: str(tmp / "phases.json")}
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu["uuid"]  # dask-cuda leaves the other GPUs visible: not here
        # notebooks sharing this GPU take turns for the phases that use it (kernelbook.phases)
        env[phases.GPU_LOCK_ENV] = str(phases.gpu_lock_path(gpu["uuid"]))
    started = time.perf_counter()
    try:
        if not Path(task["cwd"]).is_dir():
            raise BatchError(f"The folder {task['cwd']} of notebook {task['name']} does not exist on "
                             f"{socket.gethostname()}.",
                             "run the workers where the repository is at the same path (a shared file system).")
        source = tmp / "notebook.ipynb"
        output = tmp / "executed.ipynb"
        source.write_text(task["notebook"], encoding="utf-8")
        papermill.execute_notebook(str(source), str(output), parameters=task["parameters"],
                                   kernel_name=task["kernel_name"], progress_bar=task.get("progress_bar", False),
                                   cwd=task["cwd"], config=_ipc_config(tmp, env))
    except Exception as exc:  # one broken chapter must not stop the others
        result["error"] = short_error(exc)
    else:
        result["status"] = "ok"
    finally:
        result["seconds"] = round(time.perf_counter() - started, 2)
        try:
            output = tmp / "executed.ipynb"
            result["notebook"] = output.read_text(encoding="utf-8") if output.is_file() else None
            result["staged"] = _read_staged(tmp / "staging")
            notes = tmp / "notes.jsonl"
            result["notes"] = notes.read_text(encoding="utf-8").splitlines() if notes.is_file() else []
            result["phases"] = phases.with_other(phases.read(tmp / "phases.json"), result["seconds"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def notes_entries(lines: list[str]) -> list:
    """[part, name, asked for, shown] for every value a replayed page showed instead of the asked one."""
    found = []
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        found += [[item["part"], *m] for m in item.get("mismatches", [])]
    return found
