"""Which steps this GPU can run: the reader's own GPU, Hopper or older.

The book is recorded on Hopper (compute capability 9.0), and some steps exist only there: they
are built for ``sm_90a`` (``StepImpl.arch``: ``wgmma``, ``setmaxnreg``) or read through the TMA
(``StepImpl.min_capability``). On an older GPU (7.0 to 8.9) a measuring batch times every step
that GPU can run and shows the recording of each one it cannot, its banner saying why
(``chapter.run_chapter`` asks ``runs_here`` before it measures). A step whose launches need more
than this GPU offers (shared memory per block, threads) is shown from the recording the same way.
"""

from __future__ import annotations

import re

from . import gpu, limits
from .errors import CompileError, LaunchLimitError

#: The architecture the book is recorded on; below it, a step is compiled before it is trusted to run.
HOPPER = (9, 0)

#: What an architecture-specific target gives a step, for the banner's words.
ARCH_WORDS = {"sm_90a": "Hopper's architecture-specific instructions (wgmma, setmaxnreg, the TMA)"}


def arch_capability(arch: str) -> tuple[int, int]:
    """``sm_90a`` -> (9, 0), ``sm_86`` -> (8, 6)."""
    found = re.fullmatch(r"sm_(\d+?)(\d)a?", arch or "")
    if found is None:
        raise ValueError(f"{arch!r} is not an architecture name like sm_90a or sm_86")
    return int(found.group(1)), int(found.group(2))


def required(impl) -> tuple[tuple[int, int], str] | None:
    """The compute capability ``impl`` needs and why, or None when any GPU the book supports runs it."""
    arch = getattr(impl, "arch", None)
    if arch:
        return arch_capability(arch), f"is built for {arch} ({ARCH_WORDS.get(arch, 'an architecture-specific target')})"
    needs = getattr(impl, "min_capability", None)
    if needs:
        major, minor = needs
        return (major, minor), getattr(impl, "min_capability_why", f"needs compute capability {major}.{minor}")
    return None


def runs_here(impl, problems_params) -> tuple[bool, str]:
    """``(True, "")`` when this process's GPU can run ``impl`` on every ``(problem, params)``;
    else ``(False, why)``, in words for a banner. Checked in turn: the capability the step needs
    (``required``), its launches against this GPU's limits, and, below Hopper, that its kernels
    compile for this GPU (a TF32 ``mma`` on a 7.x GPU fails there). Without a GPU nothing is
    decided here (True): the page replays anyway."""
    if not gpu.available():
        return True, ""
    device = limits.current()
    have = ".".join(map(str, device.compute_capability))
    needed = required(impl)
    if needed is not None and device.compute_capability < needed[0]:
        (major, minor), why = needed
        return False, (f"step {impl.slug} {why}, which needs compute capability {major}.{minor}; "
                       f"{device.name} has {have}, so the recorded run is shown")
    for problem, params in problems_params:
        try:
            impl.validate(problem, params)
        except LaunchLimitError as exc:
            return False, f"{device.name} (compute capability {have}) cannot launch step {impl.slug}: {exc.message}"
    if device.compute_capability < HOPPER:   # an instruction the older GPU lacks fails in its compiler
        for problem, params in problems_params:
            try:
                for name in impl.kernels_for(params, problem) or impl.kernel_names:
                    impl.kernel(name, params, problem)
            except CompileError as exc:
                first = next((line for line in exc.message.splitlines() if "error" in line), exc.message.splitlines()[0])
                return False, (f"step {impl.slug} does not compile for {device.name} (compute capability {have}): "
                               f"{first.strip()}")
    return True, ""
