"""compute-sanitizer over real kernels (GPU machine only: `pytest -m gpu`)."""

import pytest

from kernelbook.evidence import sanitizer, tools
from kernelbook.lenet import STUDY

pytestmark = pytest.mark.gpu


def _sanitize(tool, step):
    if tools.sanitizer_path() is None:
        pytest.skip("compute-sanitizer is not installed here")
    try:
        return sanitizer.run_sanitizer(STUDY, tool, step, size=2, timeout=300)
    except tools.ProfilerUnavailable as exc:
        if "cannot use this GPU" in exc.message:
            pytest.skip(exc.message)
        raise


@pytest.mark.parametrize("step", ["baseline", "tiled"])
def test_memcheck_finds_no_errors(step):
    summary = _sanitize("memcheck", step)
    assert summary["errors"] == 0 and summary["rc"] == 0, summary["log_tail"]


def test_racecheck_finds_no_shared_memory_hazards_in_the_tiled_kernel():
    summary = _sanitize("racecheck", "tiled")
    assert summary["errors"] == 0 and summary["rc"] == 0, summary["log_tail"]
