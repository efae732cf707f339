"""Correctness gates timing: the check machinery every study uses.

A check draws fresh random inputs (never zeros), poisons the output with NaN before the launch,
runs the kernel once and compares with a float64 reference by the relative L2 error
||out - ref|| / ||ref||. An unwritten element stays NaN, and NaN never passes. A study supplies
the inputs, the launch and the reference; this module supplies the verdict, so that every study
means the same thing by "passed".

A shape a step refuses must be refused by its ``validate``, before any launch (the studies'
tests check each limit).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from .errors import KernelbookError


@dataclass
class CheckResult:
    label: str                       # the case ("C1", "5x5") or "random"
    shape: dict
    passed: bool
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    unwritten: int | None = None
    tolerance: float | None = None
    error: str | None = None
    measure: str = "rel_l2"          # what ``tolerance`` bounds (a study may define another)
    measured: float | None = None    # the value of ``measure`` (rel. L2 error unless said otherwise)

    def as_dict(self) -> dict:
        return asdict(self)


def claims_fp32_range(impl) -> bool:
    """Whether a step claims FP32 accuracy over float's whole range (relative L2 error <= 1e-5 for
    any finite float32 data whose products and sums stay finite): then its checks include the
    study's range test (inputs and weights from 1e-6 to 1e6), in every study alike."""
    return impl.tolerance <= 1e-5 and impl.full_range


def poisoned(shape, xp=None, dtype="float32"):
    """An output array full of NaN: what a kernel does not write stays visibly unwritten."""
    if xp is None:
        import cupy as xp  # noqa: N813
    return xp.full(shape, xp.nan, dtype=dtype)


def compare(got, ref, tolerance: float, label: str, shape: dict) -> CheckResult:
    """Relative L2 error of ``got`` (any float array) against the float64 ``ref``."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return CheckResult(label, shape, False, tolerance=tolerance,
                           error=f"output shape {got.shape} differs from the reference's {ref.shape}")
    unwritten = int(np.isnan(got).sum())
    diff = np.nan_to_num(got - ref, nan=np.inf)
    denom = float(np.linalg.norm(ref)) or 1.0
    rel = float(np.linalg.norm(diff) / denom)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    passed = unwritten == 0 and np.isfinite(rel) and rel <= tolerance
    return CheckResult(label, shape, bool(passed), rel, max_abs, unwritten, tolerance, measured=rel)


def run_check(label: str, shape: dict, tolerance: float, launch: Callable[[], object],
              reference: Callable[[], np.ndarray]) -> CheckResult:
    """Launch once (``launch`` returns the device output, poisoned before the launch) and compare.

    A launch that raises is a failed check with the error's words, never a crashed notebook.
    """
    try:
        out = launch()
        got = out.get() if hasattr(out, "get") else np.asarray(out)
    except Exception as exc:  # noqa: BLE001 - a failed launch is a failed check, shown as such
        message = exc.message if isinstance(exc, KernelbookError) else str(exc)
        return CheckResult(label, shape, False, tolerance=tolerance, error=f"{type(exc).__name__}: {message}")
    return compare(got, reference(), tolerance, label, shape)


def all_passed(results: list[CheckResult]) -> bool:
    return bool(results) and all(r.passed for r in results)
