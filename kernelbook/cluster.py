"""Where the batch's notebooks execute: in this process, one after another, or on Dask workers.

``kernelbook.batch`` decides *what* runs (which notebooks, with which parameters, in which order)
and is the only writer of the results store and of the executed notebooks. This module decides
*where*: an :class:`Engine` takes tasks (one notebook each) and hands back what
``kernelbook.notebook_task.execute``, the one function that executes a notebook wherever it runs,
returned for them.

- :class:`Sequential`: in this process, in table-of-contents order (``--workers 1``, and a
  measured batch on one GPU without ``--gpus``).
- :class:`DaskEngine`: a ``distributed.LocalCluster`` of N processes (``--workers N``), dask-cuda's
  ``LocalCUDACluster`` with one worker per GPU (``--gpus``), or a running cluster reached by
  address (``--scheduler``).

The batch validates all that ``execute`` hands back and writes it atomically.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from .devices import check_one_model, gpu_label, list_gpus, visible_gpu
from .notebook_task import TOPIC, execute
from .toc import BatchError

#: How long a ``--scheduler`` address may take to answer, and a cluster to show a worker.
CONNECT_TIMEOUT_S = 5
WORKERS_TIMEOUT_S = 30
#: How long a worker process of a local cluster may take to end cleanly before its nanny kills it.
WORKER_CLOSE_S = 60
QUIET_ENV = "DASK_LOGGING__DISTRIBUTED"
INSTALL_GPUS = "pip install -e '.[gpus]'  (or: pip install dask-cuda)"


# ----------------------------------------------------------------------------- engines


class Sequential:
    """One notebook after another, in this process: what ``kernelbook run`` always did."""

    name = "sequential"
    dashboard = None

    def __init__(self, measuring: bool):
        self.measuring = measuring
        self.queue: list[dict] = []
        self.gpus = {"local": visible_gpu()} if measuring else {"local": None}
        self.started: dict[str, tuple[str, str, str, float]] = {}
        self.lock = threading.Lock()

    @property
    def workers(self) -> list[str]:
        return ["local"]

    def submit(self, task: dict, avoid: str | None = None) -> None:
        self.queue.append(task)

    def next_result(self) -> tuple[dict, dict | None, BaseException | None]:
        task = self.queue.pop(0)
        with self.lock:
            self.started[task["key"]] = (task["name"], "local", gpu_label(self.gpus["local"]) if self.measuring else "",
                                         time.time())
        try:
            return task, execute(task), None
        finally:
            with self.lock:
                self.started.pop(task["key"], None)

    def pending(self) -> int:
        return len(self.queue)

    def running(self) -> dict[str, tuple[str, str, str, float]]:
        """The notebooks running now: key -> (name, worker, GPU, started at)."""
        with self.lock:
            return dict(self.started)

    def close(self) -> None:
        self.queue.clear()


class DaskEngine:
    """Notebooks as Dask tasks: a local cluster of processes, one worker per GPU, or a running cluster.

    A worker of a local cluster executes one notebook at a time (one thread). A GPU worker
    executes ``per_gpu`` side by side (default 2): while one compiles, starts its kernel or draws,
    the other checks, times or profiles; the phases that use the GPU take turns on a lock per GPU
    (``kernelbook.phases.GPU_PHASES``), so no timing, Nsight Compute profile or device ceiling
    shares its GPU with another notebook's work.
    """

    def __init__(self, *, workers: int | None = None, gpus: str | None = None, scheduler: str | None = None,
                 measuring: bool = False, per_gpu: int = 2, log=print):
        import dask

        self.cluster = None
        self.client = None
        self.futures: dict = {}
        self.tasks: dict = {}
        self.started: dict[str, tuple[str, str, str, float]] = {}
        self.starts: dict[str, list[str]] = {}  # key -> the workers that started it, in order
        self.lock = threading.Lock()
        self.measuring = measuring
        # A worker that dies is reported at once (KilledWorker): the batch retries the notebook
        # itself, elsewhere, once; and a worker takes a task only when its thread is free.
        self._config = dask.config.set({"distributed.scheduler.allowed-failures": 0,
                                        "distributed.scheduler.worker-saturation": 1.0})
        self._config.__enter__()
        try:
            if scheduler:
                self.name = f"scheduler {scheduler}"
                self.client = _connect(scheduler)
            elif gpus is not None:
                self.cluster = _cuda_cluster(gpus, per_gpu)
                self.name = (f"dask-cuda LocalCUDACluster ({len(self.cluster.workers)} GPU worker(s), "
                             f"{per_gpu} notebook(s) per GPU taking turns for its GPU phases)")
            else:
                from distributed import LocalCluster

                try:
                    # ":0": the scheduler's HTTP server (health, metrics; the dashboard with bokeh) on a
                    # free port, never "Port 8787 is already in use" when another cluster runs.
                    with _quiet_workers():
                        self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                    dashboard_address=":0")
                except RuntimeError as exc:  # "Nanny failed to start"
                    raise BatchError(
                        f"The {workers} Dask worker processes did not start ({exc}; the reason is printed above).",
                        "if a script of yours calls run_batch, put the call under `if __name__ == '__main__':` "
                        "(workers are started by spawning, which runs the main script again); or pass "
                        "--workers 1.") from None
                self.name = f"Dask LocalCluster ({workers} worker process(es))"
            if self.client is None:
                from distributed import Client

                self.client = Client(self.cluster, set_as_default=False)
            try:
                self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
            except Exception:
                raise BatchError(f"The Dask cluster ({self.name}) has no worker after {WORKERS_TIMEOUT_S} s.",
                                 "start workers for it (`dask worker ADDRESS --nthreads 1`), then run again.") from None
            self.client.subscribe_topic(TOPIC, self._on_event)
            self._probe()
        except BaseException:
            self.close()
            raise

    # -- set-up

    @property
    def dashboard(self) -> str | None:
        if not _has_bokeh():
            return None
        try:
            return self.client.dashboard_link
        except Exception:
            return None

    @property
    def workers(self) -> list[str]:
        return sorted(self.gpus)

    def describe(self) -> str:
        """One line when the cluster is up: what it is, its scheduler, its dashboard."""
        try:
            address = self.client.scheduler.address
        except Exception:
            address = "?"
        dashboard = self.dashboard or "none (install bokeh>=3.1 for one)"
        gpus = "; ".join(f"worker {w}: {gpu_label(g)}" for w, g in sorted(self.gpus.items()) if g) if self.measuring else ""
        return (f"{self.name}, scheduler {address}, Dask dashboard: {dashboard}" + (f"; {gpus}" if gpus else ""))

    def _probe(self) -> dict[str, dict | None]:
        """Each worker's name -> its GPU (None for a CPU worker)."""
        info = self.client.scheduler_info()["workers"]
        self.names = {address: str(w.get("name", address)) for address, w in info.items()}
        found = self.client.run(visible_gpu)
        self.gpus = {self.names.get(address, address): gpu for address, gpu in found.items()}
        if self.measuring:
            self.require_measuring()
        return self.gpus

    def require_measuring(self) -> None:
        """Refuse workers that cannot measure: no GPU, two on one GPU, mixed models. A worker of
        several threads executes that many notebooks side by side on its GPU; they take turns for
        the GPU's phases on a lock of the worker's machine (``kernelbook.phases``)."""
        missing = sorted(name for name, gpu in self.gpus.items() if gpu is None)
        if missing:
            raise BatchError(f"Worker(s) {', '.join(missing)} have no GPU, and this batch measures.",
                             "start the workers on GPU machines (one per GPU), or pass --mode replay.")
        check_one_model(self.gpus)
        uuids = [gpu["uuid"] for gpu in self.gpus.values()]
        shared = sorted({u for u in uuids if uuids.count(u) > 1})
        if shared:
            raise BatchError(f"Several workers would time on the same GPU ({', '.join(shared)}).",
                             "start one worker per GPU (dask-cuda's `dask cuda worker` does).")

    def _on_event(self, event) -> None:
        _, msg = event
        with self.lock:
            if msg.get("key") in self.futures:
                self.started[msg["key"]] = (self.tasks[msg["key"]]["name"], msg.get("name", "?"),
                                            msg.get("gpu", "") if self.measuring else "", msg.get("at", time.time()))
                # A scheduler that is not ours (--scheduler) may run a task again by itself when its
                # worker dies: every start is counted, so that such a retry is reported too.
                self.starts.setdefault(msg["key"], []).append(msg.get("name", "?"))

    # -- tasks

    def submit(self, task: dict, avoid: str | None = None) -> None:
        """Queue ``task``; ``avoid`` (a worker name) is where it failed before: elsewhere if possible."""
        # Elsewhere means elsewhere: the retry is pinned to the workers the scheduler has now whose name
        # is not the failed one's (a worker that its nanny restarts keeps its name under a new
        # address), so a busy scheduler cannot put it back where it failed. With no other worker it
        # may run anywhere (the restarted one).
        with _ctrl_c_between_calls():
            current = self.client.scheduler_info()["workers"]  # address -> info, as the scheduler sees it now
            others = [info.get("name", a) for a, info in current.items()
                      if str(info.get("name", a)) != avoid] if avoid else []
            if avoid:  # a new key: the scheduler keeps the failed one's state under the old key
                task = {**task, "key": f"{task['key']}-again"}
            placement = {"workers": others, "allow_other_workers": False} if others else {}
            future = self.client.submit(execute, task, key=task["key"], pure=False, priority=-task["index"],
                                        **placement)
        with self.lock:
            self.futures[task["key"]] = future
            self.tasks[task["key"]] = task

    def pending(self) -> int:
        with self.lock:
            return len(self.futures)

    def running(self) -> dict[str, tuple[str, str, str, float]]:
        """The notebooks running now: key -> (name, worker, GPU, started at)."""
        with self.lock:
            return dict(self.started)

    def next_result(self) -> tuple[dict, dict | None, BaseException | None]:
        """The next notebook that ended: (task, result or None, the error when its worker died)."""
        from distributed import wait

        with _ctrl_c_between_calls() as caught:
            while not caught:
                with self.lock:
                    futures = list(self.futures.values())
                with self.client.as_current():
                    try:
                        done = wait(futures, timeout=1, return_when="FIRST_COMPLETED").done
                    except TimeoutError:
                        done = set()
                if done:
                    break
        with _ctrl_c_between_calls():  # a Ctrl-C now: this result is dropped, its notebook's earlier file stays
            future = next(iter(done))
            with self.lock:
                self.futures.pop(future.key, None)
                task = self.tasks.pop(future.key)
                where = self.started.pop(future.key, None)
                starts = self.starts.pop(future.key, [])
            if len(starts) > 1:  # the scheduler ran it again itself: on these workers first, which died
                task = {**task, "lost_on": starts[:-1]}
            self.names = {a: str(w.get("name", a)) for a, w in self.client.scheduler_info()["workers"].items()} \
                or self.names
            if future.status == "finished":
                return task, future.result(), None
            error = future.exception()
            if where:
                task = {**task, "died_on": where[1]}
            return task, None, error

    def close(self) -> None:
        with self.lock:
            futures = list(self.futures.values())
            self.futures.clear()
        for closer in (lambda: self.client.cancel(futures) if futures else None,
                       lambda: self.client.run(_quiet_at_close, wait=True),
                       lambda: self.client.unsubscribe_topic(TOPIC),
                       lambda: self.client.close(timeout=10),
                       self._close_workers,
                       lambda: self.cluster.close(timeout=10) if self.cluster is not None else None):
            if self.client is None:
                break
            try:
                closer()
            except Exception:
                pass
        self.client = None
        self.cluster = None
        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None


    def _close_workers(self) -> None:
        """Let the worker processes of a cluster this batch started end on their own: a nanny
        kills a worker that takes more than 4 s (on a busy machine, a clean one may), and a killed
        worker leaks its semaphores (a warning at exit) and logs a warning of its own."""
        cluster = self.cluster
        if cluster is None or not getattr(cluster, "workers", None):
            return
        import asyncio

        async def close_all() -> None:
            await asyncio.gather(*(worker.close(timeout=WORKER_CLOSE_S) for worker in list(cluster.workers.values())),
                                 return_exceptions=True)

        cluster.sync(close_all)


def _quiet_at_close() -> None:
    """Run in every worker as the batch ends, its notebooks done and recorded: a worker whose
    heartbeat meets the scheduler already closing logs "Failed to communicate with scheduler" at
    ERROR level, which is the shutdown's order and no fault of the batch (its own report says
    what failed)."""
    import logging

    logging.getLogger("distributed").setLevel(logging.CRITICAL)


@contextmanager
def _ctrl_c_between_calls():
    """A Ctrl-C while Dask's client waits takes effect once the wait returns (within a second),
    as a KeyboardInterrupt raised here: raised inside the client's ``sync``, it leaves a callback of
    Dask's that fails with a traceback of its own (``NameError: ... 'future'``)."""
    import signal

    caught: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signal.SIGINT, None)  # one that defers it too (the batch, while it writes a notebook)
        else:
            raise KeyboardInterrupt


@contextmanager
def _quiet_workers():
    """Start worker processes that leave Ctrl-C to the batch and say only what is an error.

    A Ctrl-C at the terminal reaches every process of its group: the workers would each print a
    traceback, and the batch, which stops them itself, prints the one line that matters. Worker
    processes spawned meanwhile inherit an ignored SIGINT (Python keeps it ignored) and Dask's log
    level (``DASK_LOGGING__DISTRIBUTED``, read when they import Dask): the notebooks a stopped
    batch cancels are its to report, not a warning each."""
    import signal

    saved_env = os.environ.get(QUIET_ENV)
    os.environ[QUIET_ENV] = "error"
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        if saved_env is None:
            os.environ.pop(QUIET_ENV, None)
        else:
            os.environ[QUIET_ENV] = saved_env


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def _connect(address: str):
    """A client of the running cluster at ``address``, or a clear error within seconds.

    The address is tried first with one handshake of Dask's own protocol (a port where something
    else answers is refused as well as a closed one), so that a failed Client, whose clean-up
    would take its own timeout again at exit, is never made."""
    import asyncio

    from distributed import Client
    from distributed.comm import connect

    async def handshake() -> None:
        comm = await connect(address, timeout=CONNECT_TIMEOUT_S)
        await comm.close()

    try:
        asyncio.run(asyncio.wait_for(handshake(), CONNECT_TIMEOUT_S + 1))
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, a bad address, an answer that is not Dask's
        raise BatchError(
            f"Cannot reach a Dask scheduler at {address} within {CONNECT_TIMEOUT_S} s "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}).",
            "check the address (e.g. tcp://host:8786) and that `dask scheduler` runs there; or leave "
            "--scheduler out to start a local cluster.") from None


def parse_gpus(spec: str) -> tuple[int | None, str | None]:
    """``--gpus 2`` -> (2, None): the first two GPUs; ``--gpus 0,2`` (or UUIDs) -> (None, "0,2")."""
    spec = str(spec).strip()
    if spec.isdigit() and "," not in spec:
        count = int(spec)
        if count < 1:
            raise BatchError(f"--gpus {spec} asks for no GPU.", "pass a count (--gpus 2) or device ids (--gpus 0,2).")
        return count, None
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    if not ids or not all(s.isdigit() or s.startswith(("GPU-", "MIG-")) for s in ids):
        raise BatchError(f"--gpus {spec!r} is neither a count nor a list of device ids.",
                         "pass --gpus 2 (the first two GPUs) or --gpus 0,2 (indices or GPU-... UUIDs).")
    if len(set(ids)) != len(ids):
        raise BatchError(f"--gpus {spec!r} names a GPU twice.", "name each GPU once.")
    return None, ",".join(ids)


def require_dask_cuda() -> None:
    """Refuse ``--gpus`` at once, before anything is written, where dask-cuda is missing."""
    import importlib.util

    if importlib.util.find_spec("dask_cuda") is None:
        raise BatchError("--gpus needs dask-cuda, which is not installed.", f"install it: {INSTALL_GPUS}.")


def _cuda_cluster(spec: str, per_gpu: int = 2):
    """dask-cuda's LocalCUDACluster: one worker per GPU, ``per_gpu`` notebooks at a time each."""
    require_dask_cuda()
    from dask_cuda import LocalCUDACluster
    count, ids = parse_gpus(spec)
    found = list_gpus()
    if not found:
        raise BatchError("--gpus needs NVIDIA GPUs, and nvidia-smi lists none here.",
                         "run on a GPU machine, or leave --gpus out to replay on CPU workers.")
    if count is not None:
        if count > len(found):
            raise BatchError(f"--gpus {count} asks for more GPUs than this machine has ({len(found)}).",
                             f"pass --gpus {len(found)} or fewer.")
        ids = ",".join(str(g["index"]) for g in found[:count])
    known = {str(g["index"]) for g in found}
    unknown = [i for i in ids.split(",") if i.isdigit() and i not in known]
    if unknown:
        raise BatchError(f"--gpus names GPU(s) {', '.join(unknown)}, which this machine does not have "
                         f"(it has {', '.join(sorted(known))}).", "pass indices that nvidia-smi lists.")
    chosen = [visible_gpu(i, found) for i in ids.split(",")]
    check_one_model({f"GPU {i}": g for i, g in zip(ids.split(","), chosen)})
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=ids, threads_per_worker=per_gpu,
                            dashboard_address=":0" if _has_bokeh() else None)


def describe_failure(error: BaseException) -> str:
    """One line for a task that ended without a result (its worker died or left)."""
    text = " ".join(str(error).split())[:240]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
