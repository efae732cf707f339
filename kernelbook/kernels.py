"""Compiling the kernels in ``kernels/``: CuPy (NVRTC) on a GPU, ``nvcc`` for reports anywhere.

Compile-time parameters reach a ``.cu`` file as ``-DNAME=VALUE`` options chosen by the harness;
nobody edits a kernel file to try another tile size. Compiled modules are cached per
(file, options), so a notebook compiles each configuration once, before any timing.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import paths
from .errors import CompileError, DataError, ParameterError
from .phases import timed

NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def source_path(relpath: str) -> Path:
    """``relpath`` is relative to ``kernels/`` (e.g. ``lenet/00_baseline.cu``)."""
    path = paths.kernels_dir() / relpath
    if not path.is_file():
        raise DataError(f"Kernel source {path} does not exist.", "check the file stem in the study's step list (steps.py).")
    return path


_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


#: How a run keeps a copy of a kernel source it compiled (``candidate/<study>/<file>.gz``): a
#: compressed record of what ran, read back by ``kept_file`` and ``read_kept``, never compiled.
KEPT_SUFFIX = ".gz"


def keep_source(source: Path, folder: Path, relpath: str) -> Path:
    """Keep a copy of ``source`` in ``folder`` as ``relpath`` + ``.gz`` (gzip, no timestamp: the
    same bytes give the same file)."""
    target = Path(folder) / (relpath + KEPT_SUFFIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(gzip.compress(Path(source).read_bytes(), mtime=0))
    return target


def kept_file(relpath: str, root: Path) -> Path | None:
    """The file that holds ``relpath`` under ``root``: the file itself (``kernels/``, or a run kept
    before copies were compressed), else its compressed copy; None when neither is there."""
    for path in (Path(root) / relpath, Path(root) / (relpath + KEPT_SUFFIX)):
        if path.is_file():
            return path
    return None


def read_kept(path: Path) -> bytes:
    """The source's bytes in ``path`` (a ``kept_file``), decompressed where it is a kept copy."""
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if Path(path).name.endswith(KEPT_SUFFIX) else raw


def local_headers(relpath: str, root: Path | None = None) -> list[str]:
    """The project's headers a kernel file includes (``#include "x.cuh"``, recursively), relative
    to ``root`` (default ``kernels/``; a run's kept copies are read as ``kept_file`` finds them),
    each once, a header after those it includes: what nvcc reads of this project besides the file
    itself."""
    root = paths.kernels_dir() if root is None else Path(root)
    found: list[str] = []
    visited = {relpath}

    def walk(rel: str) -> None:
        text = read_kept(kept_file(rel, root) or root / rel).decode("utf-8", errors="replace")
        for name in _LOCAL_INCLUDE.findall(text):
            child = (Path(rel).parent / name).as_posix()
            if child in visited or kept_file(child, root) is None:
                continue
            visited.add(child)
            walk(child)
            found.append(child)

    walk(relpath)
    return found


def define_options(defines: Mapping[str, object]) -> tuple[str, ...]:
    """``{"TILE_WIDTH": 16}`` -> ``("-DTILE_WIDTH=16",)``, in a stable order."""
    options = []
    for name, value in sorted(defines.items()):
        if not NAME_RE.match(name):
            raise ParameterError(f"{name!r} is not a compile-time parameter name.", "use UPPER_CASE names such as TILE_WIDTH.")
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float, str)):
            raise ParameterError(f"Compile-time parameter {name}={value!r} is not a number.", "pass integers (or floats).")
        options.append(f"-D{name}={value}")
    return tuple(options)


@functools.lru_cache(maxsize=256)
@timed("compile")
def _module(relpath: str, options: tuple[str, ...], arch: str | None = None):
    """Compile once per (file, options, arch) and process: launches look the module up, they never
    stat or hash a file. After editing a .cu file, restart the notebook's kernel.

    ``arch`` None: NVRTC for the device's own architecture. An architecture-specific target such as
    ``sm_90a`` (wgmma, setmaxnreg exist only there) is built by nvcc into a cubin and loaded."""
    import cupy as cp

    src = source_path(relpath)
    if arch is not None:
        out, _ = nvcc_build(relpath, options, arch)
        return cp.RawModule(path=str(out))
    # -I lets a step #include the previous step's file instead of repeating its kernel.
    module = cp.RawModule(code=src.read_text(), options=("--std=c++17", f"-I{src.parent}") + options)
    try:
        module.compile()  # compile now, never inside a timed region
    except cp.cuda.compiler.CompileException as exc:
        raise CompileError(f"NVRTC could not compile kernels/{relpath} with {' '.join(options) or 'no options'}:\n"
                           f"{str(exc).strip()[-2000:]}", "fix the compile error shown above.") from exc
    return module


def get_module(relpath: str, defines: Mapping[str, object] | None = None, arch: str | None = None):
    return _module(relpath, define_options(defines or {}), arch)


def get_kernel(relpath: str, name: str, defines: Mapping[str, object] | None = None, arch: str | None = None):
    """A compiled ``cupy.RawKernel`` for ``name`` in ``kernels/<relpath>`` with ``defines`` (for
    ``arch``, e.g. ``sm_90a``, when the kernel needs an architecture-specific target): the same
    object for the same arguments, so that a function attribute set once (``steps.set_once``)
    is known to be set (``RawModule.get_function`` builds a new object on every call)."""
    return _kernel(relpath, name, define_options(defines or {}), arch)


@functools.lru_cache(maxsize=1024)
def _kernel(relpath: str, name: str, options: tuple[str, ...], arch: str | None):
    return _module(relpath, options, arch).get_function(name)


# ----------------------------------------------------------------------------- nvcc reports


@dataclass
class FunctionReport:
    """What ptxas says about one kernel function."""

    name: str
    registers: int
    shared_bytes: int
    constant_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    barriers: int = 0
    #: Why ptxas serialised this function's wgmma instructions ("" when it did not): a build that
    #: waits for every wgmma before the next, which its register count alone does not show.
    wgmma_serialized: str = ""


_FUNC_RE = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[3\]")
_SERIAL_RE = re.compile(r"wgmma\.mma_async instructions are serialized due to (.*?) (?:for|in) the function '([^']+)'")


def nvcc_path() -> str:
    nvcc = shutil.which("nvcc") or (shutil.which("nvcc", path="/usr/local/cuda/bin"))
    if not nvcc:
        raise DataError("nvcc was not found on PATH.", "install the CUDA toolkit or add its bin/ folder to PATH.")
    return nvcc


def parse_ptxas(text: str) -> list[FunctionReport]:
    """Parse ``nvcc -Xptxas -v`` output into one report per entry function."""
    reports: list[FunctionReport] = []
    current: dict | None = None
    serialized = {m.group(2): m.group(1) for m in _SERIAL_RE.finditer(text)}
    for line in text.splitlines():
        match = _FUNC_RE.search(line)
        if match:
            current = {"name": match.group(1), "registers": 0, "shared_bytes": 0, "constant_bytes": 0,
                       "stack_frame_bytes": 0, "spill_store_bytes": 0, "spill_load_bytes": 0, "barriers": 0,
                       "wgmma_serialized": serialized.get(match.group(1), "")}
            reports.append(current)  # type: ignore[arg-type]
            continue
        if current is None:
            continue
        if (match := _PROPS_RE.search(line)):
            current["stack_frame_bytes"], current["spill_store_bytes"], current["spill_load_bytes"] = map(int, match.groups())
        if (match := _USED_RE.search(line)):
            current["registers"] = int(match.group(1))
            current["barriers"] = int(match.group(2) or 0)
        if (match := _SMEM_RE.search(line)):
            current["shared_bytes"] = int(match.group(1))
        if (match := _CMEM_RE.search(line)):
            current["constant_bytes"] = int(match.group(1))
    return [FunctionReport(**r) for r in reports]  # type: ignore[arg-type]


def _target(arch: str) -> list[str]:
    """nvcc's target options: ``sm_90a`` needs the -gencode form (``-arch=sm_90a`` also runs a
    plain sm_90 pass, which rejects wgmma)."""
    return [f"-gencode=arch=compute_{arch[3:]},code={arch}"] if arch.endswith("a") else [f"-arch={arch}"]


@timed("compile")
def compile_cubin(relpath: str, defines: Mapping[str, object] | None = None, arch: str | None = "sm_90",
                  out: Path | None = None) -> tuple[Path, list[FunctionReport]]:
    """Compile with nvcc to a cubin (no GPU needed) and return it with the ptxas report (``arch``
    None: sm_90, what a step without an architecture-specific target runs on here)."""
    built, log = nvcc_build(relpath, define_options(defines or {}), arch or "sm_90")
    if out is None:
        return built, parse_ptxas(log)
    shutil.copyfile(built, out)
    return Path(out), parse_ptxas(log)


#: A folder for nvcc's builds, shared by the processes of one machine (``off``: build every time).
CACHE_ENV = "KERNELBOOK_NVCC_CACHE"


def _cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV, "")
    if value == "off":
        return None
    return Path(value) if value else Path(tempfile.gettempdir()) / f"kernelbook-nvcc-{os.getuid()}"


@functools.lru_cache(maxsize=1)
def _nvcc_version() -> str:
    return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, timeout=60).stdout


def build_key(relpath: str, options: tuple[str, ...], arch: str) -> str:
    """What decides an nvcc build: the compiler's version, the target, the options, and the text of
    the file and of every project header it includes."""
    digest = hashlib.sha256()
    for piece in (_nvcc_version(), arch, "\0".join(options), relpath):
        digest.update(piece.encode() + b"\0")
    root = paths.kernels_dir()
    for name in [relpath, *local_headers(relpath)]:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def nvcc_build(relpath: str, options: tuple[str, ...], arch: str) -> tuple[Path, str]:
    """``kernels/<relpath>`` built by nvcc into a cubin for ``arch`` with ``options``, and ptxas's
    report: one build for the timed module and the compiler's report (the same cubin), kept in a
    cache folder (``CACHE_ENV``) under its ``build_key``, so that another page, the sanitizer or a
    test of this machine loads it instead of building it again."""
    src = source_path(relpath)
    cache = _cache_dir()
    key = build_key(relpath, options, arch)
    if cache is not None:
        cubin, log = cache / key[:2] / f"{key}.cubin", cache / key[:2] / f"{key}.log"
        if cubin.is_file() and log.is_file():
            return cubin, log.read_text(encoding="utf-8")
    folder = Path(tempfile.mkdtemp(prefix="kernelbook-"))
    out = folder / f"{src.stem}.cubin"
    cmd = [nvcc_path(), *_target(arch), "-cubin", "-O3", "-std=c++17", "-Xptxas", "-v", f"-I{src.parent}",
           *options, "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise CompileError(f"nvcc could not compile kernels/{relpath} for {arch} with "
                           f"{' '.join(options) or 'no options'}:\n{proc.stderr.strip()[-2000:]}",
                           "fix the compile error shown above.")
    text = proc.stderr + proc.stdout
    if cache is None:
        return out, text
    try:   # the log first, then the cubin: a cubin in the cache always has its log
        cubin.parent.mkdir(parents=True, exist_ok=True)
        for target, write in ((log, lambda p: p.write_text(text, encoding="utf-8")),
                              (cubin, lambda p: shutil.copyfile(out, p))):
            temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            write(temporary)
            os.replace(temporary, target)
    except OSError:   # a cache that cannot be written is only slower
        return out, text
    return cubin, text


# ----------------------------------------------------------------------------- constant banks

_BANK_USERS: dict = {}  # (module id, symbol) -> (stream of the last upload, device pointer uploaded)


def upload_constant(module, symbol: str, src, nbytes: int, stream=None) -> None:
    """Copy ``nbytes`` from the device array ``src`` into the module's ``__constant__ symbol``,
    ordered on ``stream`` before the launch that reads it.

    A module's constant memory is one bank shared by every launch of that module. Launches on
    one stream are ordered, so they are safe. A launch on *another* stream must not overwrite
    weights that a kernel still queued or running on the last user's stream reads: the copy is
    then ordered after everything already enqueued there (an event on that stream, waited on by
    this one), so both launches compute with their own weights. Nothing is copied to the host
    and the host never waits.
    """
    import cupy as cp

    stream = stream or cp.cuda.get_current_stream()
    key = (id(module), symbol)
    last = _BANK_USERS.get(key)
    if last is not None and last[0] is not stream and last[0].ptr != stream.ptr and last[1] != src.data.ptr:
        if not last[0].done:  # (an idle stream, or the same weights, need no ordering)
            stream.wait_event(last[0].record())
    module.get_global(symbol).copy_from_device_async(src.data, nbytes, stream)
    _BANK_USERS[key] = (stream, src.data.ptr)
