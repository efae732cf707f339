"""The papermill batch: execute every notebook of the book, once, with shared parameters.

Why a batch of its own instead of letting Jupyter Book execute the pages: a measured book must
put all of its numbers into *one* recorded run (one run id, one device, one commit), a crash in
one chapter must not hide the results of the others, and the executed notebooks must survive as
files that the build (``kernelbook.build``) and the device round trip
(``scripts/device_run.sh``) can pick up. Papermill gives us parameter injection into the
``parameters``-tagged cell and keeps the partially executed notebook when a cell raises.

The notebooks are MyST Markdown files (jupytext text notebooks); each one is converted to
``.ipynb`` in memory, executed in its own folder, and written to
``<out_dir>/<path relative to book/>.ipynb``. ``<out_dir>/batch.json`` says what ran, where, how
it ended and with which parameters.

This module prepares a batch (notebooks, parameters, mode, where they run) and owns its report;
``kernelbook.cluster`` executes notebooks (in this process or on Dask workers) and
``kernelbook.dispatch`` takes their results in and writes them: this process is the only writer
of the results store and of ``out_dir``, wherever the notebooks ran.
"""

from __future__ import annotations

import ast
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, TextIO

from . import executed, paths, results
from .batch_report import BatchReport, NotebookResult, source_digest
from .errors import KernelbookError
from .toc import BatchError, book_notebooks, notebook_name, select  # noqa: F401  (re-exported)

#: Parameters every notebook defines; the batch always passes them, so they are never "unknown".
ALWAYS_PASSED = ("mode", "run_id")
#: What ``mode`` may be (the same words as ``kernelbook.session.MODES``, kept here so that the
#: batch does not import the GPU-probing session module just to validate a string).
MODES = ("auto", "measure", "replay")


# ----------------------------------------------------------------------------- parameters


def parse_parameter(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` -> ``(NAME, value)``: a Python literal when VALUE is one, else the string.

    ``batch_sizes=[100,1000]`` gives a list, ``repeats=20`` an int, ``step=tiled`` the
    string ``'tiled'`` (so shells need no extra quoting for plain words).
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise BatchError(
            f"-p {text!r} is not NAME=VALUE with NAME a Python identifier.",
            "write it as NAME=VALUE, e.g. -p mode=replay (each notebook's parameters cell lists the names it takes).",
        )
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = raw
    return name, value


def parse_parameters(items: list[str] | None) -> dict:
    """Several ``-p`` options into one dict (a repeated name keeps its last value)."""
    return dict(parse_parameter(item) for item in items or [])


def _load_source(path: Path):
    """The notebook as an nbformat node, converted from MyST by jupytext when needed."""
    import jupytext
    import nbformat

    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
    else:
        nb = jupytext.read(path)
        # The executed copy is an artifact, not a paired notebook: drop the pairing metadata.
        nb.metadata.pop("jupytext", None)
    return nb


def _has_parameters_cell(nb) -> bool:
    return any("parameters" in (cell.get("metadata", {}).get("tags") or []) for cell in nb.cells)


def _check_parameters(name: str, source: Path, ipynb: Path, nb, parameters: dict) -> None:
    """Refuse names the notebook's ``parameters`` cell does not define (papermill only warns)."""
    from papermill import inspect_notebook

    if not _has_parameters_cell(nb):
        raise BatchError(
            f"Notebook {name} ({source}) has no cell tagged 'parameters'.",
            "tag its first code cell with `:tags: [parameters]` and define mode and run_id there.",
        )
    defined = set(inspect_notebook(str(ipynb)))
    unknown = sorted(set(parameters) - defined - set(ALWAYS_PASSED))
    if unknown:
        valid = ", ".join(sorted(defined | set(ALWAYS_PASSED)))
        raise BatchError(
            f"Notebook {name} does not define the parameter(s) {', '.join(unknown)}; "
            f"its parameters are: {valid}.",
            "pass only those names with -p, or narrow the batch with --only to notebooks that define them.",
        )



# ----------------------------------------------------------------------------- the batch


def run_batch(
    only: str | None = None,
    parameters: dict | None = None,
    mode: str = "auto",
    out_dir: Path | None = None,
    run_id: str | None = None,
    log: Callable[[str], Any] = print,
    *,
    toc: Path | None = None,
    book_root: Path | None = None,
    kernel_name: str = "python3",
    progress_bar: bool = True,
    workers: int | None = 1,
    gpus: str | None = None,
    scheduler: str | None = None,
    live: TextIO | None = None,
    force: bool = False,
    per_gpu: int = 2,
) -> BatchReport:
    """Execute the book's notebooks (or those matching ``only``) with papermill.

    Every notebook gets ``{**parameters, "mode": mode, "run_id": run_id}``; one run id is shared
    by the whole batch so that a measured batch lands in one recorded run. A notebook that
    raises is recorded as failed (its partially executed copy is kept) and the batch goes on.
    Problems that would make every notebook fail (unknown parameter names, a pattern that
    matches nothing, a bad mode, an empty store to replay from) are raised before anything runs.

    Where the notebooks execute (``kernelbook.cluster``): ``workers=1`` in this process, one after
    another; ``workers=N`` on a Dask ``LocalCluster`` of N processes (replaying only: timings
    taken side by side on one GPU would disturb each other); ``workers=None``: the machine's cores
    when replaying, else 1; ``gpus`` ("2" or "0,2"): one dask-cuda worker per GPU, executing
    ``per_gpu`` notebooks side by side that take turns for the GPU (``kernelbook.phases``);
    ``scheduler``: the running Dask cluster at that address. Wherever they run, this process is
    the only writer of the results store and of ``out_dir``. On a cluster, a notebook that fails
    or whose worker dies is tried once more, on another worker when there is one.

    ``log`` gets one line per notebook when it ends and a summary; ``live`` (a terminal) also
    shows one line per running notebook (worker, GPU, seconds so far), redrawn each second.

    A replaying batch keeps a notebook whose inputs (``inputs_digest``: its source, its study's
    kernel sources, the parameters, the package's code and the data it replays) are those it
    last executed from, and whose executed file is the one that batch wrote ("lenet/00_baseline
    unchanged, kept"); ``force`` executes every notebook. A measuring batch executes them all:
    its numbers must come from its own run.
    """
    import nbformat

    from . import cluster, devices, gpu

    parameters = dict(parameters or {})
    # ``-p mode=...`` / ``-p run_id=...`` are accepted as spellings of the dedicated arguments.
    if "mode" in parameters:
        given = str(parameters.pop("mode"))
        if mode not in ("auto", given):
            raise BatchError(f"mode={mode!r} and -p mode={given!r} disagree.", "pass the mode once, with --mode.")
        mode = given
    if "run_id" in parameters:
        given_id = parameters.pop("run_id")
        if run_id and given_id != run_id:
            raise BatchError(f"run_id={run_id!r} and -p run_id={given_id!r} disagree.", "pass the run id once.")
        run_id = given_id
    if mode == "auto" and os.environ.get("KERNELBOOK_MODE"):  # the notebooks honour it: so does the batch
        mode = os.environ["KERNELBOOK_MODE"]
    if mode not in MODES:
        raise BatchError(f"mode={mode!r} is not one of {', '.join(MODES)}.", "pass --mode auto, measure or replay.")
    given_run_id = bool(run_id)
    run_id = results.validate_run_id(run_id) if run_id else results.new_run_id()
    if gpus is not None and scheduler:
        raise BatchError("--gpus starts a cluster on this machine and --scheduler uses a running one.",
                         "pass one of them.")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise BatchError(f"--workers {workers!r} is not a positive number of processes.",
                         "pass --workers 1 (in this process, one after another) or more.")
    if not isinstance(per_gpu, int) or isinstance(per_gpu, bool) or not 1 <= per_gpu <= 8:
        raise BatchError(f"--per-gpu {per_gpu!r} is not a number of notebooks from 1 to 8.",
                         "pass --per-gpu 1 (one notebook per GPU at a time) or 2 (the default).")
    if gpus is not None:
        cluster.parse_gpus(gpus)  # a malformed --gpus costs nothing
        cluster.require_dask_cuda()  # refused before anything is written

    toc = Path(toc) if toc else paths.REPO_ROOT / "_toc.yml"
    book_root = Path(book_root) if book_root else paths.book_dir()
    out_dir = Path(out_dir) if out_dir else paths.build_dir() / "executed"
    notebooks = select(book_notebooks(toc), only, book_root)

    local_ok, why = gpu.availability()
    if gpus is not None:
        measuring = mode != "replay"
    elif scheduler:
        measuring = mode == "measure"  # auto: decided once the workers said whether they have GPUs
    else:
        if mode == "measure" and not local_ok:  # refuse in seconds, before any page could quietly replay
            raise BatchError(f"--mode measure needs a CUDA GPU, but {why}.",
                             "run on a machine with an NVIDIA GPU, or use --mode replay (or auto) to show the "
                             "recorded runs.")
        measuring = mode == "measure" or (mode == "auto" and local_ok)
        cores = os.cpu_count() or 1
        if workers is None:
            workers = 1 if measuring else max(1, min(cores, len(notebooks)))
        elif workers > max(cores, 1) and not measuring:  # more processes than cores only thrash
            log(f"--workers {workers} is more than this machine's {cores} core(s): using {min(cores, len(notebooks))} "
                "worker process(es).")
            workers = max(1, min(cores, len(notebooks)))
        elif workers > len(notebooks) and not measuring:
            workers = len(notebooks)
        if workers > 1 and measuring:
            raise BatchError(f"--workers {workers} would time {workers} notebooks on one GPU at once, and each "
                             "would disturb the others' timings.",
                             "measure with --gpus N (one worker per GPU), or replay with --mode replay --workers N.")
    executed.check_writable(out_dir)

    with tempfile.TemporaryDirectory(prefix="kernelbook-batch-") as tmp:
        injected_for_inputs = {**parameters, "mode": mode, "run_id": run_id if given_run_id else None}
        replaying = not measuring and not scheduler  # a cluster's workers may measure: decided below
        shared = executed.shared_inputs(mode, kernel_name) if replaying else None
        entries = []
        for source in notebooks:
            name = notebook_name(source, book_root)
            entry = NotebookResult(name=name, path=paths.relative(source),
                                   output=paths.relative(out_dir / f"{name}.ipynb"), source_sha256=source_digest(source))
            if shared is not None:
                entry.inputs_sha256 = executed.inputs_digest(shared, entry, source, book_root, injected_for_inputs)
            entries.append(entry)
        prepared: list = [None] * len(notebooks)

        def keeps(earlier: list[NotebookResult]) -> dict[int, NotebookResult]:
            """The notebooks whose last execution stands (their inputs and executed files unchanged)."""
            if force or shared is None:
                return {}
            by_name = {entry.name: entry for entry in earlier}
            return {index: by_name[entry.name] for index, entry in enumerate(entries)
                    if executed.unchanged(by_name.get(entry.name), entry, out_dir / f"{entry.name}.ipynb")}

        def prepare(indices) -> None:
            """Convert and check the notebooks to execute (a kept one ran with these very parameters)."""
            for index in indices:
                if prepared[index] is not None:
                    continue
                source, name = notebooks[index], entries[index].name
                nb = _load_source(source)
                ipynb = Path(tmp) / f"{name}.ipynb"
                ipynb.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, ipynb)
                _check_parameters(name, source, ipynb, nb, parameters)
                prepared[index] = (source, ipynb, out_dir / f"{name}.ipynb")

        # Convert and check every notebook to execute first: a typo in -p should cost seconds, not
        # a half-measured batch.
        before_lock = executed.earlier(out_dir)
        foreseen = keeps(before_lock)
        prepare(i for i in range(len(notebooks)) if i not in foreseen)
        if not measuring and not scheduler:
            _refuse_empty_store(notebooks)

        out_dir.mkdir(parents=True, exist_ok=True)
        lock = executed.batch_lock(out_dir).__enter__()
        engine = None
        try:
            earlier = executed.earlier(out_dir)  # read again under the lock: no batch finishes in between
            kept = foreseen if earlier == before_lock else keeps(earlier)
            prepare(i for i in range(len(notebooks)) if i not in kept)  # one another batch changed meanwhile
            for index in kept:
                prepared[index] = (notebooks[index], None, out_dir / f"{entries[index].name}.ipynb")
            if kept and len(kept) == len(entries):  # nothing to execute: no cluster to start
                gpus, scheduler, workers = None, None, 1
            elif kept and workers is not None and gpus is None and not scheduler:
                workers = max(1, min(workers, len(entries) - len(kept)))
            if gpus is not None or scheduler or (workers or 1) > 1:
                engine = cluster.DaskEngine(workers=workers, gpus=gpus, scheduler=scheduler, measuring=measuring,
                                            per_gpu=per_gpu)
                if scheduler and mode == "auto":
                    measuring = bool(engine.gpus) and all(engine.gpus.values())
                    engine.measuring = measuring
                if scheduler and measuring:
                    engine.require_measuring()
                if scheduler and not measuring:
                    _refuse_empty_store(notebooks)
            else:
                engine = cluster.Sequential(measuring)
            batch_gpus = devices.batch_gpus(engine.gpus) if measuring else []
            if measuring and given_run_id:
                devices.refuse_other_model(run_id, batch_gpus)
            report = BatchReport(
                run_id=run_id if measuring or given_run_id else None, mode=mode, parameters=parameters,
                out_dir=paths.relative(out_dir), started_utc=results.utc_now(), notebooks=entries,
                engine=engine.name, workers=len(engine.workers), gpus=batch_gpus, measuring=measuring,
            )
            # Notebooks that will replay write nothing, so a generated run id is not passed to them:
            # a reader of a replayed page must not see the id of a run that was never recorded.
            injected = {**parameters, "mode": mode, "run_id": report.run_id}
            report.earlier = earlier
            tasks = []
            for index, ((source, ipynb, output), entry) in enumerate(zip(prepared, entries)):
                if index in kept:
                    before = kept[index]
                    report.notebooks[index] = NotebookResult(**{**before.__dict__, "kept": True,
                                                                "inputs_sha256": entry.inputs_sha256})
                    log(f"[{index + 1}/{len(entries)}] {entry.name} unchanged, kept")
                    continue
                tasks.append({"key": f"kernelbook-{report.run_id or 'replay'}-{index}-{entry.name}",
                              "index": index, "name": entry.name,
                              "notebook": ipynb.read_text(encoding="utf-8"), "cwd": str(source.parent.resolve()),
                              "parameters": injected, "kernel_name": kernel_name, "measuring": measuring,
                              "progress_bar": progress_bar and isinstance(engine, cluster.Sequential) and live is None})
            if not isinstance(engine, cluster.Sequential):
                log(engine.describe())
            from .dispatch import execute_all

            execute_all(engine, tasks, prepared, report, out_dir / "batch.json", measuring, log, live)
        finally:
            if engine is not None:
                engine.close()
            lock.__exit__()
    return report


def _refuse_empty_store(notebooks: list[Path]) -> None:
    """A replay batch over pages that read the store, with no run in it: refuse at once, instead
    of letting every page fail one by one with "not recorded" (pages that never mention kernelbook,
    like the tests' tiny books, read no store)."""
    if any("kernelbook" in nb.read_text(encoding="utf-8") for nb in notebooks):
        try:
            results.require_runs()
        except KernelbookError as exc:
            raise BatchError(f"This batch replays (no GPU measures): {exc.message}", exc.fix) from None
