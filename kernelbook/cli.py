"""The ``kernelbook`` command line: run the notebooks, build the book, list the results.

::

    kernelbook run [--only PATTERN] [-p NAME=VALUE]... [--mode auto|measure|replay] [--out DIR]
                   [--workers N | --gpus N|IDS | --scheduler ADDRESS]
    kernelbook build [--out DIR] [--executed DIR] [--no-strict]
    kernelbook results [--format jsonl|csv] [--run ID]... [--runs] [--check]
    kernelbook compare RUN_A RUN_B [--study S] [--format md|csv]
    kernelbook try STUDY SOURCE [-D NAME=VALUE]... [-P name=value]... [--sweep NAME=V1,V2]... [--step SLUG]
                   [--sizes S1,S2] [--repeats N] [--profile]
    kernelbook promote RUN_ID

Exit status: 0 when all went well; 1 when a notebook of the batch failed, ``results --check``
found a problem, ``compare`` found a regression, or ``try``'s candidate failed its checks; 2 when
kernelbook refused to go on (a ``KernelbookError``: its message and its fix are printed, no
traceback, because the fix is the useful part).
"""

from __future__ import annotations

import argparse
import csv
import errno
import json
import sys
from pathlib import Path
from typing import TextIO

from .errors import KernelbookError

#: Columns every ``kernelbook results`` row has, in this order; other keys follow, sorted.
RESULT_COLUMNS = (
    "run_id", "device", "study", "step", "layer", "size", "metric", "value",
    "unit", "min", "max", "n_samples", "part",
)
MODES = ("auto", "measure", "replay")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kernelbook")
    except Exception:  # not installed (run from a checkout with python -m kernelbook)
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelbook",
        description="GPU kernel optimizations, measured: execute the book's notebooks, build the book, "
        "and read the recorded results.",
    )
    parser.add_argument("--version", action="version", version=f"kernelbook {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="execute the notebooks with papermill (measure on a GPU, replay without one)",
        description="Execute the book's notebooks with papermill into _build/executed/. "
        "All notebooks of one batch share one run id, so a measured batch is one recorded run.",
    )
    run.add_argument("--only", metavar="PATTERN",
                     help="fnmatch pattern on the notebook path under book/, e.g. 'lenet/*' or '*baseline*'")
    run.add_argument("-p", "--parameter", dest="parameters", action="append", default=[], metavar="NAME=VALUE",
                     help="override a parameter of the notebooks' parameters cell; VALUE is a Python "
                     "literal (e.g. [100,1000]) or else a string; repeatable")
    run.add_argument("--mode", choices=MODES, default="auto",
                     help="auto: measure when a GPU is usable, else replay the newest recorded run")
    run.add_argument("--out", type=Path, metavar="DIR",
                     help="where the executed notebooks go (default _build/executed; `build --executed DIR` reads them)")
    run.add_argument("--force", action="store_true",
                     help="execute every notebook, even those whose inputs are unchanged since they last ran "
                     "(a replaying batch keeps those by default)")
    run.add_argument("--no-progress", dest="progress", action="store_false",
                     help="no live lines (on a terminal: one per running notebook); one line per notebook only")
    where = run.add_argument_group(
        "where the notebooks run (Dask)",
        "Replaying, the notebooks run side by side on a local Dask cluster of one process per core; "
        "measuring, one after another on this machine's GPU, or one per GPU with --gpus. The batch "
        "itself (this process) is the only writer of data/results and of the executed notebooks.")
    where.add_argument("--workers", type=int, metavar="N",
                       help="N worker processes on this machine (default: the cores when replaying, 1 when "
                       "measuring); 1 runs every notebook in this process, one after another")
    where.add_argument("--gpus", metavar="N|IDS",
                       help="measure on several GPUs: one dask-cuda worker per GPU, e.g. --gpus 2 or --gpus 0,2 "
                       "(needs the extra: pip install -e '.[gpus]')")
    where.add_argument("--per-gpu", type=int, default=2, metavar="K",
                       help="with --gpus: K notebooks side by side on each GPU (default 2); they take turns for "
                       "checking, timing, profiling and the library rows (a lock per GPU), so no timing shares "
                       "its GPU; 1: one notebook at a time")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="submit to a running Dask cluster, e.g. tcp://host:8786 (workers need this "
                       "repository at the same path; for measuring, one worker per GPU)")

    build = commands.add_parser(
        "build", help="build the HTML book from the executed notebooks",
        description="Stage the book with the executed notebooks of `kernelbook run` and build it with "
        "Jupyter Book into DIR/_build/html.",
    )
    build.add_argument("--out", type=Path, metavar="DIR",
                       help="output root: the HTML goes to DIR/_build/html (default: the project). Not `run --out`, "
                       "which is where the executed notebooks go: pass that folder as --executed")
    build.add_argument("--executed", type=Path, metavar="DIR",
                       help="the executed notebooks, i.e. `run --out` (default _build/executed)")
    build.add_argument("--no-strict", dest="strict", action="store_false",
                       help="do not turn Sphinx warnings into errors")

    nbk = commands.add_parser(
        "notebook", help="write chapters as .ipynb beside their MyST source (for papermill and Jupyter)",
        description="Write each named chapter (e.g. lenet/00, 'mlp/*') as a real .ipynb beside its .md source, "
        "with the kernelbook kernel in its metadata, and print a papermill command that runs it. The .ipynb "
        "files are not tracked (the .md is the source); re-run this after editing the .md.",
    )
    nbk.add_argument("chapters", nargs="+", metavar="CHAPTER", help="study/NN, study/NN_name or a pattern like 'lenet/*'")

    res = commands.add_parser(
        "results", help="print the recorded measurements (or the recorded runs)",
        description="Print every recorded measurement, one per line, or with --runs one line per recorded run.",
    )
    res.add_argument("--format", choices=("jsonl", "csv"), default=None,
                     help="jsonl (default for measurements) or csv; --runs without it prints a table")
    res.add_argument("--run", dest="runs_selected", action="append", metavar="ID",
                     help="only this run id (repeatable)")
    res.add_argument("--runs", action="store_true", help="list the recorded runs instead of their measurements")
    res.add_argument("--check", action="store_true",
                     help="validate every run and part of the store; list each problem (exit 1 if any)")

    res.add_argument("--dev", action="store_true",
                     help="the development store (data/dev: `kernelbook try` runs) instead of data/results")

    tr = commands.add_parser(
        "try", help="check, time and record a development candidate the way its step's chapter does",
        description="A .cu file beside a study's steps (a step's own file with other -D values, or a new one) "
        "stands in for a step: same launches and parameters, its source and defines replaced. It is checked "
        "against float64 (with the range test where the study has one), timed with the book's timer and "
        "recorded in the development store (data/dev, git-ignored) under the step's part names, so `kernelbook "
        "compare` lines it up with a book run; `kernelbook promote RUN_ID` copies it into data/results. "
        "Needs a CUDA GPU.",
    )
    tr.add_argument("study", metavar="STUDY", help="lenet, mlp or vgg")
    tr.add_argument("source", metavar="SOURCE", help="the candidate's .cu file, e.g. kernels/vgg/12_hopper_fp16.cu")
    tr.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                    help="a compile-time parameter of the candidate's build (UPPER_CASE); repeatable")
    tr.add_argument("-P", dest="params", action="append", default=[], metavar="name=value",
                    help="one of the step's own parameters; repeatable")
    tr.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                    help="a declared sweep axis (an UPPER_CASE define or a step parameter); repeatable, the "
                    "configurations are the product; the chapter is then measured at the fastest correct one")
    tr.add_argument("--step", metavar="SLUG", help="the step it stands in for (default: the step whose .cu it is, "
                    "else the one step whose kernels it defines)")
    tr.add_argument("--sizes", metavar="S1,S2", help="the sizes (or, for a study with a row per case, the cases) to "
                    "time; default the study's")
    tr.add_argument("--repeats", type=int, metavar="N", help="timed repetitions (default: the study's)")
    tr.add_argument("--warmup", type=int, metavar="N", help="untimed runs first (default: the study's)")
    tr.add_argument("--check-shapes", type=int, metavar="N", help="random shapes checked besides the fixed ones")
    tr.add_argument("--seed", type=int, help="seed of the checks' random shapes")
    tr.add_argument("--profile", action="store_true", help="also profile it with Nsight Compute")

    pro = commands.add_parser(
        "promote", help="copy a development run (kernelbook try) into data/results, so a chapter can cite it",
        description="Validate a run of the development store and copy it whole into data/results. A candidate's "
        "run is never a step's newest recording: a chapter shows it only when given its run id (replay_run=).",
    )
    pro.add_argument("run_id", metavar="RUN_ID")

    cmp = commands.add_parser(
        "compare", help="compare two recorded runs, noise-aware (exit 0 same, 1 regressions, 2 refused)",
        description="For every measurement present in both runs: both medians, B/A, each one's spread from its "
        "samples, and a verdict: same unless the medians differ by more than the noise band, which is the larger "
        "spread and at least 2 %% of the larger median (a value measured once has no spread of its own). "
        "Exit status: 0 when nothing regressed, 1 when something is slower or worse, 2 when compare refused "
        "(an unknown run or study, or two runs with no measurement in common).",
    )
    cmp.add_argument("run_a", metavar="RUN_A")
    cmp.add_argument("run_b", metavar="RUN_B")
    cmp.add_argument("--study", help="only this study's measurements (e.g. lenet)")
    cmp.add_argument("--format", choices=("md", "csv"), default="md")
    return parser


# ----------------------------------------------------------------------------- commands


def _cmd_run(args: argparse.Namespace) -> int:
    import os

    from .batch import parse_parameters, run_batch
    from .params import split_assignments

    # `make PARAMS='batch_sizes=[100, 500] label="a b"'` hands its list over whole, in the environment.
    from_make = split_assignments(os.environ.get("KERNELBOOK_PARAMS", ""))
    if from_make:
        print("parameters from PARAMS: " + " ".join(f"-p {item!r}" for item in from_make), flush=True)
    parameters = parse_parameters(from_make + args.parameters)
    if args.gpus is None and not args.scheduler:  # a cluster's workers may measure where this machine cannot
        _refuse_replay_without_store(args.mode, parameters)
    live = sys.stdout if args.progress and sys.stdout.isatty() else None
    report = run_batch(only=args.only, parameters=parameters, mode=args.mode, out_dir=args.out,
                       log=lambda line: print(line, flush=True), progress_bar=False,
                       workers=args.workers, gpus=args.gpus, scheduler=args.scheduler, live=live,
                       force=args.force, per_gpu=args.per_gpu)
    done = len(report.notebooks) - len(report.failed)
    if report.recorded:
        what = f"run {report.run_id} recorded in {report.run_id and _store_path(report.run_id)}"
    elif report.measuring:
        what = f"run {report.run_id}: nothing was recorded"
    else:
        what = "replayed the recorded runs (nothing recorded)"
    print(f"{what}; {done} of {len(report.notebooks)} notebooks ok; "
          f"executed notebooks and batch.json in {report.out_dir}", flush=True)
    from .params import shown as quoted

    for entry in report.notebooks:
        for part, name, wanted, shown in entry.shown_instead:
            print(f"WARNING {entry.name}: {name}={quoted(wanted, 200)} was asked for, but the replayed recording "
                  f"({part}) shows {name}={quoted(shown, 200)}", flush=True)
    if report.failed:
        for entry in report.failed:
            print(f"FAILED {entry.name}: {entry.error} (see {entry.output})", file=sys.stderr)
        return 1
    return 0


def _store_path(run_id: str) -> str:
    from . import paths

    folder = paths.results_dir() / run_id
    try:
        return folder.relative_to(paths.REPO_ROOT).as_posix()
    except ValueError:
        return str(folder)


def _refuse_replay_without_store(mode: str, parameters: dict) -> None:
    """A batch that will replay needs recorded runs: with none, refuse at once (one line), not after
    every notebook has failed in turn."""
    import os

    from . import gpu, results

    mode = str(parameters.get("mode", mode))
    if mode == "auto":
        mode = os.environ.get("KERNELBOOK_MODE") or ("measure" if gpu.availability()[0] else "replay")
    if mode == "replay":
        results.require_runs()


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import build_book

    html = build_book(executed_dir=args.executed, path_output=args.out, strict=args.strict,
                      log=lambda line: print(line, flush=True))
    print(f"book built: {html / 'index.html'}", flush=True)
    return 0


def _columns(rows: list[dict]) -> list[str]:
    """The required columns first (so every output has them), then whatever else the rows hold."""
    extra = sorted({key for row in rows for key in row} - set(RESULT_COLUMNS))
    return list(RESULT_COLUMNS) + extra


def _write_rows(rows: list[dict], fmt: str, out: TextIO, columns: list[str] | None = None) -> None:
    """JSON lines (one object per row, missing required columns as null) or CSV with a header."""
    if fmt == "jsonl":
        for row in rows:
            keys = columns or _columns([row])
            out.write(json.dumps({key: row.get(key) for key in keys}, allow_nan=True) + "\n")
        return
    columns = columns or _columns(rows)
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_cell(row.get(key)) for key in columns})


def _csv_cell(value) -> str:
    """A CSV cell: numbers and strings as they are, null empty, anything else as JSON (never a
    Python repr such as ``{'tile_width': 16}`` or ``True``)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return json.dumps(value, sort_keys=True, default=str)
    return _printable(value) if isinstance(value, str) else value  # no escape sequence reaches a terminal


def _printable(value) -> str:
    """Text from the store as a terminal shows it: control characters (an escape sequence in a
    device name) written out, never sent to the terminal."""
    from .escape import terminal_text

    return terminal_text(value)


def _part_summary(names: list[str]) -> str:
    """``62 parts (device 1, lenet 61)``: what a run holds, in a few words."""
    from collections import Counter

    owners = Counter(name.split("-")[0] for name in names)
    return f"{len(names)} part{'s' if len(names) != 1 else ''}" + (
        " (" + ", ".join(f"{owner} {n}" for owner, n in sorted(owners.items())) + ")" if owners else "")


def _cmd_results(args: argparse.Namespace) -> int:
    import os

    from . import paths, results

    if args.dev:  # this process reads the development store as its store
        os.environ["KERNELBOOK_RESULTS_DIR"] = str(paths.dev_results_dir())

    if args.check:
        problems = results.check_store()
        for line in problems:
            print(f"problem: {_printable(line)}")
        print(f"{len(problems)} problem(s) in {paths.results_dir()}" if problems else
              f"the store at {paths.results_dir()} is valid: {len(results.list_runs())} run(s)")
        return 1 if problems else 0
    if args.runs:
        runs = results.list_runs() if not args.runs_selected else [results.load_run(r) for r in args.runs_selected]
        rows = [
            {"run_id": run.run_id, "device": run.device, "created_utc": run.created_utc,
             "commit": run.commit, "parts": ",".join(run.part_names())}
            for run in runs
        ]
        columns = ["run_id", "device", "created_utc", "commit", "parts"]
        if args.format:  # machine-readable: every part's name
            _write_rows(rows, args.format, sys.stdout, columns)
        elif not rows:
            where = paths.results_dir()
            print(f"no recorded runs under {where}" + ("" if where.is_dir() else " (the folder does not exist)"),
                  file=sys.stderr)
        else:  # for people: how many parts of which study, one short line per run
            for row, run in zip(rows, runs):
                row["parts"] = _part_summary(run.part_names())
            rows = [{c: _printable(r[c]) for c in columns} for r in rows]
            widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
            print("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
            for row in rows:
                print("  ".join(row[c].ljust(widths[c]) for c in columns).rstrip())
        return 0

    rows = list(results.iter_records(args.runs_selected))
    _write_rows(rows, args.format or "jsonl", sys.stdout)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare_runs, render
    from .escape import terminal_text

    header, rows = compare_runs(args.run_a, args.run_b, args.study, require_common=True)
    if args.format == "csv":  # the CSV holds the table only; which runs, on stderr
        for line in header:
            print(terminal_text(line), file=sys.stderr)
    sys.stdout.write(terminal_text(render(header, rows, args.format), keep_newlines=True))
    regressions = sum(1 for r in rows if r.regression)
    if regressions:
        print(f"{regressions} regression(s)", file=sys.stderr)
    return 1 if regressions else 0


def _load_study(name: str):
    """``vgg`` or ``kernelbook.vgg``: the study module's ``STUDY`` (named by the caller: the core
    imports no study by itself)."""
    import importlib

    from .errors import StepError

    module = name if "." in name else f"kernelbook.{name}"
    try:
        return importlib.import_module(module).STUDY
    except (ImportError, AttributeError):
        raise StepError(f"{name!r} is no study.", "pass lenet, mlp or vgg.") from None


def _cmd_try(args: argparse.Namespace) -> int:
    from . import develop

    study = _load_study(args.study)
    sizes = None
    if args.sizes:
        sizes = [develop.parse_value(v.strip()) for v in args.sizes.split(",") if v.strip()]
    tried = develop.try_candidate(
        study, args.source, step=args.step,
        defines=dict(develop.parse_assignment(d, "-D") for d in args.defines),
        params=dict(develop.parse_assignment(p, "-P") for p in args.params),
        sweep=dict(develop.parse_sweep(s) for s in args.sweep), sizes=sizes, repeats=args.repeats,
        warmup=args.warmup, check_shapes=args.check_shapes, seed=args.seed, profile=args.profile,
        log=lambda line: print(line, flush=True))
    return 0 if tried.chapter is not None and tried.chapter.correct else 1


def _cmd_promote(args: argparse.Namespace) -> int:
    from . import develop

    develop.promote(args.run_id, log=lambda line: print(line, flush=True))
    return 0


def _cmd_notebook(args: argparse.Namespace) -> int:
    from .notebooks import find, papermill_line, write_notebook

    written = [write_notebook(source) for source in find(args.chapters)]
    for path in written:
        print(f"wrote {path}")
    print("run one with papermill (typed values with -y YAML), e.g.:\n  " + papermill_line(written[0]))
    return 0


COMMANDS = {"run": _cmd_run, "build": _cmd_build, "results": _cmd_results, "compare": _cmd_compare,
            "notebook": _cmd_notebook, "try": _cmd_try, "promote": _cmd_promote}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kernelbook`` and ``python -m kernelbook``; returns the exit status."""
    args = _parser().parse_args(argv)
    import warnings

    from .escape import terminal_text
    from .results import StoreWarning

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {terminal_text(message)}", file=sys.stderr)

    warnings.showwarning = show  # a skipped damaged file is one plain line, not a Python warning dump
    warnings.simplefilter("always", StoreWarning)
    try:
        return COMMANDS[args.command](args)
    except KernelbookError as exc:
        sys.stdout.flush()
        print(f"error: {terminal_text(exc.message)} Fix: {terminal_text(exc.fix)}", file=sys.stderr)
        return 2
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `kernelbook results | head`: the reader left, which is fine
            try:
                sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the flush at exit
            except OSError:
                pass
            return 0
        # a full disk, a folder that cannot be written: one line that says which and what to do
        sys.stdout.flush()
        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            what, fix = "no space left on the device", "free some space (`make clean` removes _build/), then run it again."
        else:
            what = f"cannot write or read {exc.filename or 'a file'}: {exc.strerror or exc}"
            where, fix = "", "choose a folder you can write to (--out DIR), or fix its permissions, then run it again."
        print(f"error: {what}{where}. Fix: {fix}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
