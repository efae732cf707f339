"""Where things live. Every location can be moved with an environment variable (tests do)."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (what a message or a record
    shows, portable from machine to machine), else whole."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).resolve() if value else default


def data_dir() -> Path:
    return _env_path("KERNELBOOK_DATA_DIR", REPO_ROOT / "data")


def results_dir() -> Path:
    """Recorded runs: ``data/results/<run_id>/``."""
    return _env_path("KERNELBOOK_RESULTS_DIR", data_dir() / "results")


def dev_results_dir() -> Path:
    """Development runs (``kernelbook try``): ``data/dev/<run_id>/``, laid out like the results
    store and git-ignored; a run reaches ``results_dir()`` only by ``kernelbook promote``."""
    return _env_path("KERNELBOOK_DEV_DIR", data_dir() / "dev")


def cache_dir() -> Path:
    """Derived data (the 86x86 arrays); safe to delete."""
    return _env_path("KERNELBOOK_CACHE_DIR", data_dir() / "cache")


def kernels_dir() -> Path:
    return REPO_ROOT / "kernels"


def book_dir() -> Path:
    return REPO_ROOT / "book"


def build_dir() -> Path:
    return _env_path("KERNELBOOK_BUILD_DIR", REPO_ROOT / "_build")
