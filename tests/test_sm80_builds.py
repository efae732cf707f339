"""Every step an Ampere GPU can run compiles for it: nvcc builds each step's kernels for sm_80,
exactly as the step builds them for the case it launches (its ``.cu`` and its defines), to a cubin
(no GPU needed). The Hopper-only steps (``capability.required``: sm_90a, the TMA) are left out:
an older GPU shows their recording. The builds run in parallel, one nvcc per core."""

from __future__ import annotations

import concurrent.futures
import importlib
import os

import pytest

from kernelbook import capability, harness, kernels
from kernelbook.errors import CompileError

ARCH = "sm_80"


def builds() -> dict:
    """{(source, defines): 'study step case'}: each distinct build of a non-Hopper step, once."""
    out: dict = {}
    for name in ("lenet", "mlp", "vgg"):
        study = importlib.import_module(f"kernelbook.{name}").STUDY
        for slug in study.steps.slugs():
            impl = study.impl(slug)
            if capability.required(impl) is not None:
                continue
            case_params = study.case_params(impl, None, None)
            for case, size in harness.problems(study, study.sizes(list(study.default_sizes))):
                problem, params = study.problem(case, study.size_of(case, size)), case_params[case]
                key = (impl.source_for(params, problem), tuple(sorted(impl.defines(params, problem).items())))
                out.setdefault(key, f"{name} {slug} {case}")
    return out


@pytest.mark.slow
def test_every_step_that_needs_no_hopper_compiles_for_sm80(tmp_path):
    jobs = builds()
    assert len(jobs) > 40   # every study's non-Hopper steps, each build once

    def build(item):
        (source, defines), who = item
        out = tmp_path / f"{abs(hash((source, defines)))}.cubin"
        try:
            kernels.compile_cubin(source, dict(defines), arch=ARCH, out=out)
        except CompileError as exc:
            return f"{who} ({source}): {exc.message.splitlines()[1] if len(exc.message.splitlines()) > 1 else exc}"
        return None

    workers = max(1, min(8, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        failed = [f for f in pool.map(build, jobs.items()) if f]
    assert not failed, f"{len(failed)} build(s) do not compile for {ARCH}:\n" + "\n".join(failed)


def test_a_hopper_only_step_does_not_compile_for_sm80(tmp_path):
    """The exclusion is real: step 19 of the MLP (wgmma) is refused by nvcc for sm_80."""
    from kernelbook.mlp import STUDY

    impl = STUDY.impl("wgmma-full-range")
    assert capability.required(impl)[0] == (9, 0)
    problem = STUDY.problem("100x100")
    params = impl.params()
    with pytest.raises(CompileError):
        kernels.compile_cubin(impl.source_for(params, problem), impl.defines(params, problem), arch=ARCH,
                              out=tmp_path / "k.cubin")
