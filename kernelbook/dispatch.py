"""The batch's loop: hand the notebooks to an engine, take each one's result as it comes, and
write it — the executed notebook, and the recorded parts into the store — as the store's one
writer. Split from ``kernelbook.batch``, which prepares the batch (notebooks, parameters, mode,
engine) and owns its report."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from . import phases, results
from .atomic import write_json_atomic, write_text_atomic
from .batch_report import BatchReport, NotebookResult, record_source, short_error, text_digest
from .errors import KernelbookError


def dependencies(names: list[str]) -> list[set[int]]:
    """What a measured notebook waits for on several GPUs: a top-level page (the summary, the
    devices page) reads every page before it, so it waits for them; a chapter or a profiles page
    measures nothing another page records (its comparisons with other steps are only shown), so
    it waits for the top-level pages before it only, and the study's pages run side by side. The
    pages a parallel batch shows may therefore compare with a step of an older run where this run
    had not measured it yet: the book is built by replaying them from the whole run."""
    deps: list[set[int]] = []
    top: list[int] = []
    for index, name in enumerate(names):
        if "/" not in name:
            deps.append(set(range(index)))
            top.append(index)
        else:
            deps.append(set(top))
    return deps


def longest_first(tasks: list[dict], earlier: dict[str, float]) -> list[dict]:
    """``tasks`` with the notebooks that took longest last time first (those never timed keep
    their place after them), so that no long page starts last while the other GPUs wait idle.
    Top-level pages keep their place at the end (they wait for the others anyway)."""
    chapters = [t for t in tasks if "/" in t["name"]]
    tops = [t for t in tasks if "/" not in t["name"]]
    chapters.sort(key=lambda t: -earlier.get(t["name"], 0.0))
    return chapters + tops


def execute_all(engine, tasks, prepared, report, batch_json, measuring, log, live) -> None:
    """Hand the tasks to the engine (in dependency order when measuring on several workers),
    take each result as it comes, write it, and keep ``batch.json`` up to date."""
    from . import cluster

    parallel = not isinstance(engine, cluster.Sequential)
    if measuring and parallel:
        tasks = longest_first(tasks, {nb.name: nb.seconds for nb in report.earlier if nb.seconds})
    # Positions in ``tasks`` (a batch that keeps unchanged notebooks hands over only the others;
    # ``task["index"]`` is the notebook's place in the batch).
    deps = dependencies([t["name"] for t in tasks]) if measuring and parallel else [set() for _ in tasks]
    position = {task["index"]: p for p, task in enumerate(tasks)}
    total = len(report.notebooks)
    submitted: set[int] = set()
    done: set[int] = set()
    progress = _Progress(engine, report, log, live)
    started = time.perf_counter()

    def submit_ready() -> None:
        for at, task in enumerate(tasks):
            if at not in submitted and deps[at] <= done:
                submitted.add(at)
                if parallel:
                    starting(task["index"])
                engine.submit(task)
        write_json_atomic(batch_json, report.to_json())

    def starting(index: int) -> None:
        # Its earlier executed file stays until the new one is whole (written atomically when it
        # ends); batch.json keeps its earlier record meanwhile (BatchReport.to_json). With no earlier
        # record, "running" is left behind if the batch is killed, and the build refuses it.
        report.notebooks[index].status = "running"

    def take(task: dict, result: dict | None, error: BaseException | None) -> None:
        """One notebook's result: written (or tried again), its line printed, its dependents freed."""
        index = task["index"]
        entry = report.notebooks[index]
        for worker in task.get("lost_on") or []:  # tries the scheduler made by itself (--scheduler)
            entry.attempts.append({"worker": worker, "gpu": None, "status": "failed", "seconds": None,
                                   "error": "its worker died, and the scheduler ran it again"})
            progress.line(f"[{index + 1}/{total}] {entry.name} ... its worker {worker} died; the scheduler ran it again")
        if result is None:  # the worker died (or left) while it ran the notebook
            worker = task.get("died_on") or "?"
            attempt = {"worker": worker, "gpu": None, "status": "failed",
                       "error": f"the worker died: {cluster.describe_failure(error)}", "seconds": None}
        else:
            attempt = {"worker": result["worker"], "gpu": (result["gpu"] or {}).get("uuid"),
                       "status": result["status"], "error": result["error"], "seconds": result["seconds"],
                       "phases": result.get("phases") or {}}
            if result["status"] == "ok":
                attempt.update(_accept(result, entry, prepared[index], report, measuring))
        entry.attempts.append(attempt)
        head = f"[{index + 1}/{total}] {entry.name} ..."
        where = f"worker {attempt['worker']}" + (f", {cluster.gpu_label(result['gpu'])}"
                                                  if result is not None and result["gpu"] else "")
        if attempt["status"] != "ok" and parallel and len(entry.attempts) < 2:
            progress.line(f"{head} failed on {where} ({attempt['error']}); trying it once more"
                          + (" on another worker" if len(engine.workers) > 1 else ""))
            engine.submit(task, avoid=attempt["worker"])
            return
        if result is not None and attempt["status"] != "ok":
            attempt.update(_accept(result, entry, prepared[index], report, measuring, failed=True))
        entry.status, entry.error, entry.seconds = attempt["status"], attempt["error"], attempt["seconds"]
        entry.phases = attempt.get("phases") or {}
        entry.worker, entry.gpu = attempt["worker"], attempt["gpu"]
        entry.finished_utc = results.utc_now()
        entry.run_id = report.run_id if measuring and report.recorded else None
        suffix = f", {where}" if parallel else ""
        seconds = f"{entry.seconds:.1f} s" if entry.seconds is not None else "no time"
        if entry.status == "ok":
            spent = phases.line(entry.phases) if measuring else ""
            progress.line(f"{head} ok ({seconds}{suffix})" + (f": {spent}" if spent else ""))
        else:
            progress.line(f"{head} FAILED ({entry.error}{suffix})")
        done.add(position[index])
        submit_ready()

    try:
        submit_ready()
        progress.start()
        while engine.pending():
            if not parallel:  # in this process, one after another: this one starts now
                starting(engine.queue[0]["index"])
                write_json_atomic(batch_json, report.to_json())
            task, result, error = engine.next_result()
            with _whole():  # a Ctrl-C now takes effect once this notebook's files and its state are written
                take(task, result, error)
    except KeyboardInterrupt:
        report.interrupted = True
        started_names = {item[0] for item in engine.running().values()}
        for entry in report.notebooks:
            if entry.status == "running" and (not parallel or entry.name in started_names):
                entry.status, entry.error = "interrupted", "interrupted (Ctrl-C) while it ran; nothing of it was kept"
            elif entry.status == "running":  # queued on the cluster, never started
                entry.status = "pending"
        raise
    finally:
        progress.stop()
        report.finished_utc = results.utc_now()
        report.seconds = round(time.perf_counter() - started, 1)
        write_json_atomic(batch_json, report.to_json())
    progress.summary()


@contextmanager
def _whole():
    """A Ctrl-C (or a SIGTERM) while a notebook's result is taken in takes effect once it is: a
    notebook is kept whole (its executed copy, every part it recorded, its state in batch.json) or
    not at all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = {sig: signal.signal(sig, lambda number, _frame: caught.append(number))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught and caught[0] == signal.SIGTERM:
            signal.raise_signal(signal.SIGTERM)   # now, with the handler the batch had before
        if caught:
            raise KeyboardInterrupt


def _accept(result: dict, entry: NotebookResult, prepared: tuple, report: BatchReport, measuring: bool,
            failed: bool = False) -> dict:
    return _write_result(result, entry, prepared, report)


def _write_result(result: dict, entry: NotebookResult, prepared: tuple, report: BatchReport) -> dict:
    """Write what a notebook produced: its executed copy, and its recorded parts into the store
    (validated first; each file whole). Returns changes to the attempt (a refused recording
    makes the notebook fail)."""
    import nbformat

    from .notebook_task import notes_entries

    source, _, output = prepared
    if result.get("notebook"):
        try:
            nb = nbformat.reads(result["notebook"], as_version=4)
        except Exception as exc:  # noqa: BLE001 - a damaged notebook from a worker is that notebook's failure
            return {"status": "failed", "error": f"the executed notebook came back damaged ({short_error(exc)})"}
        record_source(nb, source)
        text = nbformat.writes(nb)
        write_text_atomic(Path(output), text)  # the earlier file stays until this one is whole
        entry.notebook_sha256 = text_digest(text)
    entry.shown_instead = notes_entries(result.get("notes") or [])
    try:
        for staged in result.get("staged") or []:
            write_staged(staged, result.get("gpu"), report)
    except KernelbookError as exc:
        return {"status": "failed", "error": f"its recording was refused: {exc.message} Fix: {exc.fix}"}
    return {}


def write_staged(staged: dict, gpu: dict | None, report: BatchReport) -> None:
    """Validate a run a worker staged (manifest and parts) and write it into the store."""
    run_id = results.validate_run_id(staged.get("run_id"))
    label = Path(f"<staged by a worker>/{run_id}")
    try:
        manifest = json.loads(staged["manifest"])
        parts = {name: json.loads(text) for name, text in staged["parts"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise results.ResultsError(f"The recording staged for run {run_id} is not valid JSON ({exc}).",
                                   "run the notebook again; report it if it persists.") from None
    if report.run_id and run_id != report.run_id:
        raise results.ResultsError(f"The notebook recorded into run {run_id}, not into the batch's run {report.run_id}.",
                                   "pass the batch's run_id through to every recorded() call.")
    try:  # nothing is written of a recording that is not valid whole
        results.validate_manifest(manifest, label / "manifest.json")
        if manifest["run_id"] != run_id:
            raise results.ResultsError(f"A staged manifest names run {manifest['run_id']!r} in folder {run_id}.",
                                       "run the notebook again.")
        for name, part in parts.items():
            results.validate_part(part, label / "parts" / f"{name}.json")
            if part["run_id"] != run_id or part["name"] != name:
                raise results.ResultsError(f"Staged part {name} names run {part['run_id']!r} and part {part['name']!r}.",
                                           "run the notebook again.")
    except results.ResultsError as exc:
        raise results.ResultsError(f"The recording handed back for run {run_id} is invalid: {exc.message}",
                                   "run the notebook again: the batch writes nothing of a recording it cannot "
                                   "validate.") from None
    fields = {k: v for k, v in manifest.items() if k not in ("schema", "run_id")}
    fields["gpus"] = report.gpus
    fields["batch"] = {"engine": report.engine, "workers": report.workers}
    run = results.create_run(fields, run_id=run_id)  # reopens the run when an earlier page created it
    if gpu and run.device != gpu["name"] and run.device != manifest["device"]["name"]:
        raise results.ResultsError(f"Run {run_id} holds measurements of {run.device}; this one comes from {gpu['name']}.",
                                   "one run holds one GPU model: measure into a new run.")
    for name, part in parts.items():
        if gpu:  # every record names the GPU that measured it
            part = {**part, "gpu": {k: gpu.get(k) for k in ("index", "uuid", "name")},
                    "records": [{**record, "gpu": gpu["uuid"]} for record in part["records"]]}
        results.validate_part(part, run.part_path(name))
        write_json_atomic(run.part_path(name), part)


class _Progress:
    """One line per notebook when it ends (``log``), a summary at the end, and on a terminal
    (``live``) one line per running notebook, redrawn each second: worker, GPU, seconds so far."""

    def __init__(self, engine, report: BatchReport, log, live: TextIO | None):
        self.engine, self.report, self.log, self.live = engine, report, log, live
        self.drawn = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.started = time.perf_counter()

    def start(self) -> None:
        if self.live is not None:
            self.thread = threading.Thread(target=self._tick, name="kernelbook-progress", daemon=True)
            self.thread.start()

    def _tick(self) -> None:
        while not self.stopping.wait(1.0):
            self._redraw([])

    def _redraw(self, finished: list[str]) -> None:
        with self.lock:
            if self.live is None:
                for line in finished:
                    self.log(line)
                return
            out = [f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""]
            out += [line + "\n" for line in finished]
            width = max(40, shutil.get_terminal_size((100, 20)).columns - 1)
            now = time.time()
            live = []
            if not self.stopping.is_set():
                for name, worker, gpu, since in sorted(self.engine.running().values(), key=lambda item: item[3]):
                    where = f"worker {worker}" + (f", {gpu}" if gpu else "")
                    live.append(f"  running {name} ({where}, {now - since:.0f} s)"[:width])
            out += [line + "\n" for line in live]
            self.drawn = len(live)
            self.live.write("".join(out))
            self.live.flush()

    def line(self, text: str) -> None:
        if self.live is None:
            self.log(text)
            return
        self._redraw([text])

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.live is not None:
            self._redraw([])

    def summary(self) -> None:
        report = self.report
        ok = sum(1 for nb in report.notebooks if nb.status == "ok")
        retried = sum(1 for nb in report.notebooks if len(nb.attempts) > 1)
        per_worker: dict[str, int] = {}
        for nb in report.notebooks:
            if nb.worker and not nb.kept:  # where this batch ran them
                per_worker[nb.worker] = per_worker.get(nb.worker, 0) + 1
        spread = ", ".join(f"{w}: {n}" for w, n in sorted(per_worker.items()))
        kept = sum(1 for nb in report.notebooks if nb.kept)
        self.log(f"{ok} of {len(report.notebooks)} notebooks ok" + (f" ({kept} unchanged, kept)" if kept else "")
                 + f", {len(report.notebooks) - ok} failed, "
                 f"{retried} retried, in {report.seconds:.1f} s on {report.engine}"
                 + (f" (notebooks per worker: {spread})" if len(per_worker) > 1 else ""))
        summed: dict[str, float] = {}
        for nb in report.notebooks:
            if not nb.kept:
                for name, seconds in (nb.phases or {}).items():
                    summed[name] = summed.get(name, 0.0) + seconds
        if report.measuring and summed:
            self.log(f"notebook-seconds by phase: {phases.line(summed)} "
                     f"(sum {sum(summed.values()):.1f} s over {report.workers} worker(s))")
