"""The program that Nsight Compute and compute-sanitizer run: one step of one study, launched once
per case, and nothing else.

    python -m kernelbook.evidence.target --study kernelbook.lenet --step tiled --cases C1,C3 \
        --size 1000 --case-params '{"C1": {"tile_width": 16}, "C3": {"tile_width": 8}}'

A profiler attributes everything the GPU runs inside the process, so this program launches
nothing but the step's kernels: the study's ``launch_once`` draws inputs with NumPy, uploads
them with plain copies (memcpy, not kernels) and compiles before anything is launched; then each
case's launch runs exactly once inside an NVTX push/pop range named ``kb:<step>:<case>`` and is
synchronised. Nsight Compute filters on those ranges and its raw CSV names the range of every
kernel, which is how kernels are attributed to cases.

``--study`` names the study's module (its ``STUDY`` object is used); the core never imports a
study by itself, the caller says which. It prints nothing on stdout on success (the profilers'
own output must stay parseable) and one line on stderr per case; a refused shape or parameter
exits with status 2 and the reason.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

NVTX_PREFIX = "kb"


def range_name(step: str, case: str) -> str:
    """The NVTX push/pop range around one case's launch (``kb:tiled:C1``)."""
    return f"{NVTX_PREFIX}:{step}:{case}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kernelbook.evidence.target",
        description="Launch one step of a study once per case (for ncu and compute-sanitizer).")
    parser.add_argument("--study", required=True, help="the study's module, e.g. kernelbook.lenet")
    parser.add_argument("--step", required=True, help="a step of the study, e.g. baseline")
    parser.add_argument("--cases", default="", help="comma-separated cases (default: all of the study's)")
    parser.add_argument("--size", type=int, default=None, help="the size per case (default: the study's)")
    parser.add_argument("--case-params", default="{}", help='JSON: {"<case>": {...}}, each case\'s parameters')
    parser.add_argument("--seed", type=int, default=0, help="seed of the NumPy inputs")
    parser.add_argument("--sanitizer-shape", action="store_true",
                        help="launch each case's sanitizer problem (study.sanitizer_problem) instead of its own")
    parser.add_argument("--source", default=None,
                        help="a development candidate's .cu file (relative to kernels/) standing in for the step "
                        "(kernelbook try); its compile-time parameters come with --case-params")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from ..errors import KernelbookError

    try:
        module = importlib.import_module(args.study)
        study = module.STUDY
    except (ImportError, AttributeError) as exc:
        print(f"error: {args.study!r} is no study module with a STUDY object ({exc}).", file=sys.stderr)
        return 2
    try:
        cases = [c.strip() for c in args.cases.split(",") if c.strip()] or list(study.cases)
        unknown = [c for c in cases if c not in study.cases]
        if unknown:
            print(f"error: unknown case(s) {unknown}; use {', '.join(study.cases)}.", file=sys.stderr)
            return 2
        per_case = json.loads(args.case_params)
        if not isinstance(per_case, dict):
            raise ValueError("not a JSON object")
        if args.source:  # this process launches the candidate only: it stands in for the step throughout
            from ..candidate import candidate_impl, candidate_study

            stand = candidate_impl(study, study.steps.get(args.step).slug, args.source)
            study.steps._impls[stand.slug] = stand
            study = candidate_study(study, stand)
        impl = study.impl(args.step)
        size = args.size or study.profile_size
        launches = [(case, study.launch_once(impl.slug, case, size, impl.params(**(per_case.get(case) or {})),
                                             seed=args.seed,
                                             shape=study.sanitizer_problem(case) if args.sanitizer_shape else None))
                    for case in cases]
    except ValueError as exc:
        if isinstance(exc, KernelbookError):
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"error: --case-params is not a JSON object ({exc}).", file=sys.stderr)
        return 2
    except KernelbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import cupy as cp
    from cupy.cuda import nvtx

    cp.cuda.Device().synchronize()
    for case, launch in launches:
        nvtx.RangePush(range_name(impl.slug, case))
        try:
            launch()
            cp.cuda.Device().synchronize()
        finally:
            nvtx.RangePop()
        print(f"target: {study.name} {impl.slug} {case} size {size} launched", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
