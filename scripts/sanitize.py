#!/usr/bin/env python3
"""compute-sanitizer memcheck and racecheck over every step of a study, recorded into a run.

    python scripts/sanitize.py                      # LeNet: every step, both layers, new run
    python scripts/sanitize.py --study kernelbook.mlp --run-id 20261122T0430Z-3f9c1a
    python scripts/sanitize.py --steps baseline,tiled --tools memcheck --size 2

Each (step, case, tool) is one process: ``compute-sanitizer --tool T --error-exitcode 1
python -m kernelbook.evidence.target --study S --step V --cases L --size N``, which launches the
step's kernels for that case once and nothing else. The "ERROR SUMMARY: N errors" line is
recorded as metric ``sanitizer_errors`` (field ``tool``) in part ``<study>-sanitizer``, with the
log tail in ``extra``; the study's profiles page shows it. Each case runs with the parameters of
the step's newest recorded chapter (the configuration that was timed), else the defaults.

Exit status: 0 when every check ran and found nothing, 1 when any found errors or could not run,
0 with a message when there is no GPU or no compute-sanitizer here (nothing to check, nothing
written; --strict makes that 3).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOOLS = ("memcheck", "racecheck")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default="kernelbook.lenet", help="the study's module (default kernelbook.lenet)")
    parser.add_argument("--run-id", help="write into this run (created if missing); default: a new run")
    parser.add_argument("--steps", help="comma-separated steps (default: every registered one)")
    parser.add_argument("--layers", default="", help="comma-separated cases (default: all of the study's)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="compute-sanitizer tools (default memcheck,racecheck)")
    parser.add_argument("--size", "--batch", dest="size", type=int, default=None, help="size per launch (default: the study's small size)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per sanitizer process")
    parser.add_argument("--jobs", type=int, default=1,
                        help="sanitizer processes side by side on the GPU (default 1; nothing is timed here)")
    parser.add_argument("--default-params", action="store_true",
                        help="use each step's default parameters, not its recorded chapter's")
    parser.add_argument("--strict", action="store_true", help="exit 3 when nothing can be checked here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import importlib

    from kernelbook import gpu, paths, results, session
    from kernelbook.chapter import load_recorded
    from kernelbook.evidence import sanitizer
    from kernelbook.evidence import tools as profiler_tools

    study = importlib.import_module(args.study).STUDY
    tool = profiler_tools.sanitizer_path()
    ok, why = gpu.availability()
    if tool is None or not ok:
        reason = "compute-sanitizer is not installed" if tool is None else f"there is no usable GPU ({why})"
        print(f"sanitize: not available here: {reason}; nothing checked, nothing recorded.")
        return 3 if args.strict else 0

    steps = [v.strip() for v in args.steps.split(",")] if args.steps else study.steps.slugs()
    for v in steps:
        study.steps.get(v)  # an unknown name fails here, before anything runs
    layers = [layer.strip() for layer in args.layers.split(",") if layer.strip()] or list(study.cases)
    size = args.size or getattr(study, "sanitizer_size", sanitizer.SANITIZER_SIZE)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]

    started = time.monotonic()
    parameters = {"size": size, "tools": tools, "layers": layers, "steps": steps,
                  "recorded_params": not args.default_params}
    part = sanitizer.part(study)
    kept_records, kept_logs = [], {}
    if args.run_id and (paths.results_dir() / args.run_id / "manifest.json").is_file():  # keep what this call does not re-check
        run = results.load_run(args.run_id)
        if run.has_part(part):
            old = run.read_part(part)
            kept_records, kept_logs = old["records"], (old.get("extra") or {}).get("logs", {})
    bad = 0

    def merged(new_records, new_logs):
        done = {(r["step"], r["layer"], r.get("tool")) for r in new_records}
        return ([r for r in kept_records if (r["step"], r["layer"], r.get("tool")) not in done] + new_records,
                {"logs": {**kept_logs, **new_logs}})

    def check(step, layer_params, layer, name) -> tuple[dict, dict]:
        t0 = time.monotonic()
        try:
            summary = sanitizer.run_sanitizer(study, name, step, layer_params, size, [layer], args.timeout)
        except profiler_tools.ProfilerUnavailable as exc:
            summary = {"errors": None, "rc": None, "passed": False, "log_tail": str(exc), "command": ""}
        record = sanitizer.sanitizer_record(study, name, step, layer, size, summary)
        record["params"] = layer_params.get(layer, {})
        record["seconds"] = round(time.monotonic() - t0, 1)
        return record, summary

    def measure(progress) -> session.Measurement:
        nonlocal bad
        from concurrent.futures import ThreadPoolExecutor, as_completed

        jobs = []   # (order, step, its recorded parameters, case, tool)
        for step in steps:
            chapter = None if args.default_params else load_recorded(study, step, prefer_run=args.run_id)
            layer_params = chapter.case_params() if chapter is not None else {}
            for layer in layers:
                for name in tools:
                    jobs.append((len(jobs), step, layer_params, layer, name))
        done: dict[int, dict] = {}
        logs = {}
        # Each check is its own compute-sanitizer process; --jobs runs several at once (the results
        # are recorded in this thread, in the study's order, after every one that ends).
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(check, step, lp, layer, name): (order, step, layer, name)
                       for order, step, lp, layer, name in jobs}
            for future in as_completed(futures):
                order, step, layer, name = futures[future]
                record, summary = future.result()
                done[order] = record
                logs[f"{step}/{layer}/{name}"] = {"command": summary.get("command", ""),
                                                     "log_tail": summary.get("log_tail", "")}
                verdict = ("did not run" if summary["errors"] is None else
                           "pass" if summary["passed"] else f"FAIL ({summary['errors']} errors)")
                bad += verdict != "pass"
                print(f"sanitize: {step:18s} {layer} {name:10s} {verdict} ({record['seconds']} s)", flush=True)
                if verdict != "pass":
                    print("  " + summary.get("log_tail", "").replace("\n", "\n  ")[-3000:], flush=True)
                all_records, extra = merged([done[k] for k in sorted(done)], logs)
                progress(all_records, [], extra)  # after every check: a timeout keeps what finished
        all_records, extra = merged([done[k] for k in sorted(done)], logs)
        return session.Measurement(all_records, [], extra)

    found = session.recorded(part, study.name, measure, parameters=parameters, mode="measure", run_id=args.run_id)
    print(f"sanitize: {len(found.records)} results in run {found.session.run.run_id} part {part} "
          f"({time.monotonic() - started:.0f} s); {bad} not passed.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
