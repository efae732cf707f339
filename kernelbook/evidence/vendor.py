"""What a user would pick instead: the vendor library (cuDNN, cuBLAS through PyTorch), timed in
the same run as the steps. Each study says what its vendor comparison is (``Study.vendor``);
this module measures it when PyTorch with CUDA is usable, or replays the recording.
"""

from __future__ import annotations

import os

from .. import results
from .. import session as session_mod
from ..measure import check_repeats


def torch_cuda_status() -> tuple[bool, str]:
    """(True, versions) when PyTorch with CUDA and cuDNN can run here, else (False, why not)."""
    if os.environ.get("KERNELBOOK_NO_GPU") == "1":
        return False, "KERNELBOOK_NO_GPU=1 is set"
    try:
        import torch
    except Exception as exc:
        return False, f"PyTorch cannot be imported ({type(exc).__name__}: {exc})"
    try:
        if not torch.cuda.is_available():
            return False, f"PyTorch {torch.__version__} sees no CUDA device"
        if not torch.backends.cudnn.is_available():
            return False, f"PyTorch {torch.__version__} has no cuDNN"
    except Exception as exc:
        return False, f"PyTorch's CUDA is unusable ({type(exc).__name__}: {exc})"
    return True, f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"


def part(study) -> str:
    return results.part_name(study.name, study.vendor_name)


def sizes_parameter(study) -> str:
    """The profiles page's parameter that lists the vendor's sizes: ``cudnn_batch_sizes`` (the
    vendor's name, then the study's ``size_name``), as its errors name it."""
    return f"{study.vendor_name}_{study.size_name}"


def vendor(study, mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
           sizes=None, repeats: int = 10, warmup: int = 3, prefer_run: str | None = None,
           sizes_name: str | None = None) -> session_mod.Recording:
    """Measure the study's vendor comparison now (GPU and PyTorch with CUDA) or replay it
    (``sizes_name``: the page's parameter that gave ``sizes``, default ``sizes_parameter``)."""
    sizes = study.sizes(list(study.default_sizes) if sizes is None else sizes,
                        name=sizes_name or sizes_parameter(study))
    check_repeats(repeats, warmup)  # in every mode: a replay refuses what a measurement would

    def measure() -> session_mod.Measurement:
        # The library's versions go into the part, for the profiles pages' environment section.
        return session_mod.Measurement(study.vendor(sizes, repeats, warmup), extra={"library": torch_cuda_status()[1]})

    found = session_mod.recorded(part(study), study.name, measure,
                                 parameters={study.size_name: sizes, "repeats": repeats}, mode=mode, run_id=run_id,
                                 replay_run=replay_run, prefer_run=prefer_run or run_id, available=torch_cuda_status,
                                 required=False, compare={})
    return renamed(study, found)


def renamed(study, found: session_mod.Recording) -> session_mod.Recording:
    """Vendor rows are named ``<library>-<precision>[-<layout>]``; runs recorded before that rule
    used other names (``cudnn`` for cuDNN FP32, ``pytorch-fp32``), mapped here when read, so the
    recorded data stays as it was written (``Study.old_vendor_names``)."""
    old = getattr(study, "old_vendor_names", {}) or {}
    if any(r.get("step") in old for r in found.records):
        found.records = [{**r, "step": old[r["step"]]} if r.get("step") in old else r
                         for r in found.records]
    return found
