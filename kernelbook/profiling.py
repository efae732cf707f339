"""Profiler evidence: Nsight Compute metrics, the device's ceilings, cuDNN, the floor, the sanitizer.

The seeds justified every step with Nsight Compute numbers (SM %, memory %, L1 %, duration,
occupancy, stall reasons). Here those numbers are part of the run: a chapter that measures also
profiles its variant (part ``lenet-<variant>-ncu``) and a replay reads them back, with the run's
device, date and commit in every caption.

Why the ``ncu`` command line with ``--csv --page raw`` rather than the ``nsight-python`` package:
the CLI is what the device image ships (Nsight Compute 2025.3); it needs no extra Python package
carried to a machine without network; it profiles a separate process, so the notebook's own CUDA
context, memory pool and timings are untouched; and its raw page is one row per kernel with
every requested metric, which is all the book needs. The price is parsing CSV, which is done
here defensively (header and units rows, quoted values, thousands separators, ``n/a``) and is
tested without a GPU.

What can be missing, and what happens then (never an exception in a notebook):

- no ``ncu`` / ``compute-sanitizer`` / GPU / counter permission (``ERR_NVGPUCTRPERM``, usual in
  containers and CI): nothing is written, the status says why, the recorded evidence is shown;
- a metric this ``ncu`` or GPU does not know: it is not requested (the tool's
  ``--query-metrics`` list is read once and cached) and the part lists it as missing;
- nothing recorded anywhere: the tables say "not recorded yet".

Profiling is a parameter of a run: ``for_chapter(chapter, profile=...)``; the environment
variable ``KERNELBOOK_PROFILE=0`` turns it off for a whole batch (quick runs).
"""

from __future__ import annotations

import csv
import functools
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Iterable

from . import paths, results
from . import session as session_mod
from .errors import KernelbookError
from .report import message_table, record_value, styled

STUDY = "lenet"
NCU_BATCH = 1000
LAYERS = ("C1", "C3")
NCU_TIMEOUT_S = 300
SANITIZER_BATCH = 4
CEILINGS_PART = "device-ceilings"
CUDNN_PART = f"{STUDY}-cudnn"
SANITIZER_PART = f"{STUDY}-sanitizer"
NOT_RECORDED = "not recorded yet"


class ProfilerUnavailable(KernelbookError, RuntimeError):
    """A profiler cannot be used here (not installed, no GPU, no permission to read counters)."""


def ncu_part(variant: str) -> str:
    return f"{STUDY}-{variant}-ncu"


def profiling_enabled(profile: bool = True) -> bool:
    """``profile`` unless ``KERNELBOOK_PROFILE`` is 0/off/false (a batch-wide switch for quick runs)."""
    env = os.environ.get("KERNELBOOK_PROFILE", "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    return bool(profile)


# ----------------------------------------------------------------------------- tools


def _find_tool(name: str, extra_globs: Iterable[str] = ()) -> str | None:
    found = shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    if found:
        return found
    for pattern in extra_globs:
        for candidate in sorted(glob.glob(pattern), reverse=True):  # newest version first
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def ncu_path() -> str | None:
    """Nsight Compute's CLI: PATH, then /usr/local/cuda/bin, then /opt/nvidia/nsight-compute/*/ncu."""
    return _find_tool("ncu", ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu"))


def sanitizer_path() -> str | None:
    """compute-sanitizer: PATH, then /usr/local/cuda/bin (and its compute-sanitizer/ folder)."""
    return _find_tool("compute-sanitizer", ("/usr/local/cuda/compute-sanitizer/compute-sanitizer",
                                            "/usr/local/cuda-*/bin/compute-sanitizer"))


def ncu_version(ncu: str | None = None) -> str:
    ncu = ncu or ncu_path()
    return _ncu_version(ncu) if ncu else "not installed"


@functools.lru_cache(maxsize=4)
def _ncu_version(ncu: str) -> str:
    try:
        text = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    match = re.search(r"Version\s+(\S+)", text)
    return match.group(1) if match else (text.strip().splitlines() or ["unknown"])[-1]


def _child_env() -> dict:
    """The profiled Python finds this checkout's kernelbook even when it is not installed."""
    env = dict(os.environ)
    root = str(paths.REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def target_command(variant: str, layer_params: dict, batch: int, layers: Iterable[str]) -> list[str]:
    """The profiled program: ``python -m kernelbook.lenet.profile_target ...``."""
    return [sys.executable, "-m", "kernelbook.lenet.profile_target", "--variant", variant,
            "--layers", ",".join(layers), "--batch", str(batch),
            "--layer-params", json.dumps(layer_params, sort_keys=True)]


# ----------------------------------------------------------------------------- metric names


@dataclass(frozen=True)
class MetricSpec:
    """One metric of ours and the ncu metric(s) it is read from.

    ``alternatives`` are tried in order (names change between ncu versions and GPUs); each is a
    tuple of ncu metrics combined per kernel by ``combine`` (``sum``, or ``max`` where any subset
    will do). Over a layer's kernels the values are aggregated by ``aggregate``: ``sum``,
    ``max``, or ``wmean`` (weighted by each kernel's duration: a percentage of a 1 µs kernel
    must not count like one of a 1 ms kernel).
    """

    name: str
    alternatives: tuple[tuple[str, ...], ...]
    aggregate: str = "wmean"
    unit: str = ""
    label: str = ""
    combine: str = "sum"

    @property
    def title(self) -> str:
        return self.label or self.name


STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "math_pipe_throttle",
                 "barrier", "wait", "not_selected", "no_instruction", "branch_resolving", "dispatch_stall",
                 "tex_throttle", "membar", "drain", "imc_miss", "sleeping")
TOP_STALLS = 3


def _stall(reason: str) -> MetricSpec:
    return MetricSpec(
        f"stall_{reason}",
        ((f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio",),
         (f"smsp__average_warp_latency_issue_stalled_{reason}.ratio",)),
        "wmean", "cycles/instr", f"stall {reason.replace('_', ' ')}")


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("duration_ms", (("gpu__time_duration.sum",),), "sum", "ms", "Duration"),
    MetricSpec("sm_throughput_pct", (("sm__throughput.avg.pct_of_peak_sustained_elapsed",),),
               "wmean", "%", "SM [%]"),
    MetricSpec("memory_throughput_pct", (("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),),
               "wmean", "%", "Memory [%]"),
    MetricSpec("dram_throughput_pct", (("dram__throughput.avg.pct_of_peak_sustained_elapsed",),),
               "wmean", "%", "DRAM [%]"),
    MetricSpec("dram_bytes", (("dram__bytes.sum",), ("dram__bytes_read.sum", "dram__bytes_write.sum")),
               "sum", "bytes", "DRAM bytes"),
    MetricSpec("l1_hit_pct", (("l1tex__t_sector_hit_rate.pct",),), "wmean", "%", "L1 hit [%]"),
    MetricSpec("l2_hit_pct", (("lts__t_sector_hit_rate.pct",),), "wmean", "%", "L2 hit [%]"),
    MetricSpec("achieved_occupancy_pct", (("sm__warps_active.avg.pct_of_peak_sustained_active",),),
               "wmean", "%", "Achieved occupancy [%]"),
    MetricSpec("theoretical_occupancy_pct", (("sm__maximum_warps_per_active_cycle_pct",),),
               "wmean", "%", "Theoretical occupancy [%]"),  # a launch statistic: trusted, see _known
    MetricSpec("registers_per_thread", (("launch__registers_per_thread",),), "max", "registers", "Registers/thread"),
    MetricSpec("shared_mem_per_block",
               (("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"),
                ("launch__shared_mem_per_block",)), "max", "bytes", "Shared mem/block"),
    MetricSpec("active_threads_per_warp", (("smsp__thread_inst_executed_per_inst_executed.ratio",),),
               "wmean", "threads", "Active threads/warp"),
    MetricSpec("tensor_pipe_pct",
               (("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                 "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                 "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),),
               "wmean", "%", "Tensor pipe [%]", combine="max"),
    MetricSpec("instructions", (("smsp__inst_executed.sum",),), "sum", "warp instr.", "Warp instructions"),
    MetricSpec("shared_bank_conflicts", (("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",),),
               "sum", "conflicts", "Shared bank conflicts"),
) + tuple(_stall(reason) for reason in STALL_REASONS)

SPECS = {spec.name: spec for spec in METRICS}
REQUIRED = ("sm_throughput_pct", "memory_throughput_pct", "dram_bytes", "l1_hit_pct", "l2_hit_pct",
            "achieved_occupancy_pct", "registers_per_thread", "shared_mem_per_block", "duration_ms")
COMPARED = ("duration_ms", "sm_throughput_pct", "memory_throughput_pct", "l1_hit_pct", "l2_hit_pct",
            "dram_bytes", "achieved_occupancy_pct", "active_threads_per_warp", "registers_per_thread",
            "shared_mem_per_block", "tensor_pipe_pct")


def metric_definitions():
    """Our metric names, the ncu metrics they are read from, and how kernels are combined."""
    import pandas as pd

    how = {"sum": "summed over the layer's kernels", "max": "largest of the layer's kernels",
           "wmean": "mean weighted by kernel duration"}
    rows = [{"Metric": spec.name, "Shown as": spec.title, "Unit": spec.unit,
             "Nsight Compute metric(s), first available": " | ".join(
                 (" + " if spec.combine == "sum" else " or max ").join(alt) for alt in spec.alternatives),
             "Over a layer's kernels": how[spec.aggregate]} for spec in METRICS]
    return styled(pd.DataFrame(rows), "The metrics this book records from Nsight Compute.")


def base_name(metric: str) -> str:
    """``sm__throughput.avg.pct_of_peak_sustained_elapsed`` -> ``sm__throughput`` (what --query-metrics lists)."""
    return metric.split(".", 1)[0]


TRUSTED_PREFIXES = ("launch__", "sm__maximum_warps_per_active_cycle")


def _known(metric: str, available: set | None) -> bool:
    """Whether ``metric`` can be requested. Launch attributes and launch statistics (theoretical
    occupancy) are not in ``--query-metrics`` (2025.3 lists none) but always exist; they are
    trusted unless the list does name some of them."""
    if available is None:
        return True
    if metric.startswith(TRUSTED_PREFIXES) and not any(name.startswith(TRUSTED_PREFIXES) for name in available):
        return True
    return base_name(metric) in available


def resolve_metrics(available: set | None, specs: Iterable[MetricSpec] = METRICS):
    """Choose, per metric of ours, the first alternative this ncu knows.

    Returns ``(requested ncu names, {ours: chosen tuple}, [ours that are missing])``. With
    ``available=None`` (the list could not be read) the first alternative is taken on trust.
    """
    chosen: dict[str, tuple[str, ...]] = {}
    missing: list[str] = []
    for spec in specs:
        pick = None
        for alternative in spec.alternatives:
            present = tuple(m for m in alternative if _known(m, available))
            if present and (len(present) == len(alternative) or spec.combine == "max"):
                pick = present
                break
        if pick is None:
            missing.append(spec.name)
        else:
            chosen[spec.name] = pick
    requested = sorted({m for names in chosen.values() for m in names})
    return requested, chosen, missing


_QUERY_NAME = re.compile(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)\b")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from ``ncu --query-metrics`` output (one per line, name first)."""
    return {m.group(1) for line in text.splitlines() if (m := _QUERY_NAME.match(line))}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "unknown"


def available_metrics(ncu: str | None = None, chip: str | None = None, refresh: bool = False) -> set | None:
    """The metric base names this ncu offers for this GPU, asked once and cached in data/cache/.

    Asks the attached device first (``ncu --query-metrics``), then ``--chip gh100`` (the H100's
    and H200's chip). None when neither answers: the caller then requests names on trust.
    """
    ncu = ncu or ncu_path()
    if not ncu:
        return None
    cache = paths.cache_dir() / f"ncu-metrics-{_slug(ncu_version(ncu))}-{_slug(chip or _device_name())}.txt"
    if cache.is_file() and not refresh:
        names = set(cache.read_text().split())
        if names:
            return names
    attempts = [["--query-metrics", "--chip", chip]] if chip else [["--query-metrics"],
                                                                   ["--query-metrics", "--chip", "gh100"]]
    for args in attempts:
        try:
            proc = subprocess.run([ncu, *args], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        names = parse_query_metrics(proc.stdout)
        if len(names) >= 50:
            try:
                cache.parent.mkdir(parents=True, exist_ok=True)
                results.write_json_atomic(cache.with_suffix(".json"), {"args": args, "count": len(names)})
                cache.write_text("\n".join(sorted(names)) + "\n")
            except OSError:
                pass  # a read-only cache costs a query next time, nothing else
            return names
    return None


def _device_name() -> str:
    from . import gpu

    ok, why = gpu.availability()
    return why if ok else "nodevice"


# ----------------------------------------------------------------------------- the CSV


_TIME_SCALE = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
               "second": 1.0, "s": 1.0}
_BYTE_SCALE = {"byte": 1.0, "bytes": 1.0, "B": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
               "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3}


def parse_number(cell) -> float | None:
    """``"1,234.5"`` -> 1234.5; ``""``, ``n/a`` and anything non-numeric -> None."""
    if cell is None:
        return None
    text = str(cell).strip().strip('"').replace(",", "").replace("\u202f", "").replace(" ", "")
    if not text or text.lower() in ("n/a", "na", "nan", "-", "--"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def to_base_unit(value: float | None, unit: str) -> float | None:
    """Time in seconds, sizes in bytes; every other unit unchanged."""
    if value is None:
        return None
    unit = (unit or "").strip()
    if unit in _TIME_SCALE:
        return value * _TIME_SCALE[unit]
    if unit in _BYTE_SCALE:
        return value * _BYTE_SCALE[unit]
    return value


@dataclass
class NcuTable:
    """The raw page: column names, their units, and one dict of cells per kernel."""

    header: list[str]
    units: dict[str, str]
    rows: list[dict[str, str]]

    def nvtx_columns(self) -> list[str]:
        return [c for c in self.header if "Push/Pop_Range" in c or "Start/Stop_Range" in c]


def parse_ncu_csv(text: str) -> NcuTable:
    """Parse ``ncu --csv --page raw`` output: a header row (``"ID",...``), a units row, then kernels.

    Lines before the header and lines starting with ``==`` (``==PROF==``, ``==WARNING==``) are
    the tool's chatter and are skipped; rows of another width are ignored.
    """
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip("\ufeff").startswith('"ID"')), None)
    if start is None:
        return NcuTable([], {}, [])
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    table = list(csv.reader(io.StringIO("\n".join(body))))
    header = [h.strip() for h in table[0]]
    units: dict[str, str] = {}
    rows: list[dict[str, str]] = []
    id_col = header.index("ID")
    for cells in table[1:]:
        if len(cells) != len(header):
            continue
        if not cells[id_col].strip():
            if not units:
                units = dict(zip(header, (c.strip() for c in cells)))
            continue
        rows.append(dict(zip(header, cells)))
    return NcuTable(header, units, rows)


_RANGE = re.compile(r"kb:([^:\s\"/]+):([A-Za-z0-9_]+)")


def kernel_range(row: dict, nvtx_columns: list[str]) -> tuple[str, str] | None:
    """(variant, layer) of the innermost ``kb:<variant>:<layer>`` range around a kernel."""
    for column in nvtx_columns:
        found = _RANGE.findall(row.get(column) or "")
        if found:
            return found[-1]
    return None


def kernel_rows(table: NcuTable, chosen: dict[str, tuple[str, ...]]) -> list[dict]:
    """One dict per profiled kernel: identity, NVTX range, and our metrics (base units converted)."""
    nvtx = table.nvtx_columns()
    out = []
    for row in table.rows:
        where = kernel_range(row, nvtx)
        item = {"id": int(parse_number(row.get("ID")) or 0), "kernel": (row.get("Kernel Name") or "").strip(),
                "block": (row.get("Block Size") or "").strip(), "grid": (row.get("Grid Size") or "").strip(),
                "range_variant": where[0] if where else None, "layer": where[1] if where else None}
        for ours, names in chosen.items():
            spec = SPECS[ours]
            values = [to_base_unit(parse_number(row.get(n)), table.units.get(n, "")) for n in names]
            values = [v for v in values if v is not None]
            if not values or (spec.combine == "sum" and len(values) != len(names)):
                item[ours] = None
                continue
            value = max(values) if spec.combine == "max" else sum(values)
            if ours == "duration_ms":
                unit = table.units.get(names[0], "")
                # seconds after conversion; a unit-less column is ncu's base unit, nanoseconds
                value = value * 1e3 if unit in _TIME_SCALE else value * 1e-6
            item[ours] = value
        out.append(item)
    return out


def aggregate(kernels: list[dict], specs: Iterable[MetricSpec] = METRICS) -> dict[str, float | None]:
    """A layer's metrics from its kernels: sums, maxima, or duration-weighted means."""
    agg: dict[str, float | None] = {}
    durations = [k.get("duration_ms") for k in kernels]
    weighted = all(d is not None and d > 0 for d in durations)
    for spec in specs:
        pairs = [(k.get(spec.name), (k.get("duration_ms") if weighted else 1.0)) for k in kernels]
        pairs = [(v, w) for v, w in pairs if v is not None]
        if not pairs:
            agg[spec.name] = None
        elif spec.aggregate == "sum":
            agg[spec.name] = float(sum(v for v, _ in pairs))
        elif spec.aggregate == "max":
            agg[spec.name] = float(max(v for v, _ in pairs))
        else:
            total = sum(w for _, w in pairs)
            agg[spec.name] = float(sum(v * w for v, w in pairs) / total) if total > 0 else None
    return agg


def top_stalls(agg: dict[str, float | None], n: int = TOP_STALLS) -> list[tuple[str, float]]:
    """The ``n`` largest stall reasons (name without ``stall_``, cycles per issued instruction)."""
    stalls = [(name[len("stall_"):], value) for name, value in agg.items()
              if name.startswith("stall_") and value is not None and value > 0]
    return sorted(stalls, key=lambda item: -item[1])[:n]


def layer_records(variant: str, layer: str, batch: int, kernels: list[dict],
                  chosen: dict[str, tuple[str, ...]]) -> list[dict]:
    """Tidy records of one layer: every metric of ours that was read, the top stalls ranked."""
    agg = aggregate(kernels, [SPECS[name] for name in chosen])
    ranks = {name: i + 1 for i, (name, _) in enumerate(top_stalls(agg))}
    records = []
    for name, value in agg.items():
        if value is None:
            continue
        extra = {"kernel_count": len(kernels), "source": "ncu", "ncu_metric": "+".join(chosen[name])}
        if name.startswith("stall_") and name[len("stall_"):] in ranks:
            extra["stall_rank"] = ranks[name[len("stall_"):]]
        records.append(results.record(STUDY, variant, layer, batch, name, value, unit=SPECS[name].unit, **extra))
    return records


def records_from_csv(text: str, variant: str, batch: int, chosen: dict[str, tuple[str, ...]],
                     layers: Iterable[str] = LAYERS, only_layer: str | None = None) -> tuple[list[dict], list[dict]]:
    """Records and per-kernel rows from one ncu CSV.

    Kernels are attributed to layers by their NVTX range; ``only_layer`` attributes every kernel
    to that layer (a run that launched one layer only). Raises ``ProfilerUnavailable`` when a
    kernel cannot be attributed, so the caller can fall back to one run per layer.
    """
    kernels = kernel_rows(parse_ncu_csv(text), chosen)
    if only_layer:
        for k in kernels:
            k["layer"] = only_layer
    unplaced = [k["kernel"] for k in kernels if k["layer"] not in layers]
    if unplaced:
        raise ProfilerUnavailable(f"{len(unplaced)} profiled kernel(s) carry no kb:{variant}:<layer> NVTX range "
                                  f"({', '.join(sorted(set(unplaced))[:3])}).",
                                  "profile one layer per ncu run (done automatically).")
    records = []
    for layer in layers:
        mine = [k for k in kernels if k["layer"] == layer]
        if mine:
            records += layer_records(variant, layer, batch, mine, chosen)
    return records, kernels


# ----------------------------------------------------------------------------- running ncu


_PERMISSION = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")
_NO_PROFILER = ("LibraryNotLoaded", "Failed to initialize the profiler", "Device not supported",
                "No supported CUDA devices", "ERR_NVGPUCTRBUSY")


def ncu_command(ncu: str, variant: str, layer_params: dict, batch: int, layers: Iterable[str],
                metrics: Iterable[str], nvtx: bool = True) -> list[str]:
    """The exact command: one ncu process over the variant's layers, raw page as CSV on stdout."""
    layers = list(layers)
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "--print-units", "base", "--metrics", ",".join(metrics)]
    if nvtx:
        from .lenet.profile_target import range_name

        cmd += ["--nvtx"]
        for layer in layers:  # push/pop ranges are matched with a trailing '/'; several includes OR
            cmd += ["--nvtx-include", f"{range_name(variant, layer)}/"]
    return cmd + target_command(variant, layer_params, batch, layers)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def classify_failure(output: str) -> str | None:
    """Why a profiler could not run at all (permission, no GPU), or None for other failures."""
    if any(marker in output for marker in _PERMISSION):
        return ("no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM: usual in "
                "containers and CI)")
    for marker in _NO_PROFILER:
        if marker in output:
            return f"the profiler cannot use this GPU ({marker})"
    return None


def _unknown_metrics(output: str, requested: list[str]) -> list[str]:
    bad = []
    for line in output.splitlines():
        if "==ERROR==" in line and "metric" in line.lower():
            bad += [m for m in requested if m in line or base_name(m) in line]
    return sorted(set(bad))


def _run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=paths.REPO_ROOT,
                              env=_child_env())
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise ProfilerUnavailable(f"`{' '.join(cmd[:3])} ...` did not finish within {timeout:.0f} s.\n{_tail(out)}",
                                  "raise timeout=, or profile fewer layers.") from exc
    except OSError as exc:
        raise ProfilerUnavailable(f"{cmd[0]} could not be started ({exc}).", "check the installation.") from exc
    return proc.returncode, proc.stdout, proc.stderr


def _ncu_once(ncu, variant, layer_params, batch, layers, metrics, nvtx, timeout):
    """One ncu process; drops metrics the tool rejects and retries once."""
    cmd = ncu_command(ncu, variant, layer_params, batch, layers, metrics, nvtx)
    rc, out, err = _run(cmd, timeout)
    both = out + "\n" + err
    why = classify_failure(both)
    if why:
        raise ProfilerUnavailable(f"Nsight Compute could not profile here: {why}.\n{_tail(both, 8)}",
                                  "run on a machine where ncu may read counters (as root, or with "
                                  "NVreg_RestrictProfilingToAdminUsers=0); the book shows the recorded evidence meanwhile.")
    rejected = _unknown_metrics(both, list(metrics)) if rc != 0 or "==ERROR==" in both else []
    if rejected:
        metrics = [m for m in metrics if m not in rejected]
        cmd = ncu_command(ncu, variant, layer_params, batch, layers, metrics, nvtx)
        rc, out, err = _run(cmd, timeout)
        both = out + "\n" + err
    if rc != 0 and '"ID"' not in out:
        raise ProfilerUnavailable(f"ncu exited with status {rc} for {variant}:\n{_tail(both, 20)}",
                                  "read the log above; the target is `python -m kernelbook.lenet.profile_target`, "
                                  "which can be run alone to reproduce.")
    return cmd, out, both, rejected


def run_ncu(variant: str, layer_params: dict | None = None, batch: int = NCU_BATCH,
            layers: Iterable[str] = LAYERS, timeout: float = NCU_TIMEOUT_S) -> tuple[list[dict], dict]:
    """Profile ``variant`` with Nsight Compute: every kernel it launches for each layer at ``batch``.

    One ncu process covers the layers; kernels are attributed to layers by NVTX range. When that
    fails (the filter profiled nothing, or a kernel has no range), one ncu process per layer
    runs without NVTX filtering (the target launches that layer's kernels only). Returns
    ``(records, extra)``; ``extra`` keeps the per-kernel rows, the command and what was missing.
    Raises ``ProfilerUnavailable`` when ncu is missing or cannot read counters.
    """
    from .lenet import check_batch, get_variant

    impl = get_variant(variant)
    check_batch(batch)
    layers = list(layers)
    per_layer = {layer: impl.params(**((layer_params or {}).get(layer) or {})) for layer in layers}
    ncu = ncu_path()
    if not ncu:
        raise ProfilerUnavailable("Nsight Compute (ncu) is not installed here.",
                                  "install Nsight Compute or add its folder to PATH; the book shows the recorded evidence.")
    available = available_metrics(ncu)
    requested, chosen, missing = resolve_metrics(available)
    cmd, out, log, rejected = _ncu_once(ncu, variant, per_layer, batch, layers, requested, True, timeout)
    commands = [cmd]
    chosen = {k: v for k, v in chosen.items() if not set(v) & set(rejected)}
    missing = sorted(set(missing) | (set(SPECS) - set(chosen)))
    attribution = "nvtx"
    try:
        records, kernels = records_from_csv(out, impl.slug, batch, chosen, layers)
        if not kernels:
            raise ProfilerUnavailable("the NVTX filter profiled no kernel.", "fall back to one run per layer.")
    except ProfilerUnavailable:
        attribution = "one ncu run per layer"
        records, kernels, logs = [], [], []
        for layer in layers:
            cmd, out, log_one, _ = _ncu_once(ncu, variant, {layer: per_layer[layer]}, batch, [layer],
                                             [m for m in requested if m not in rejected], False, timeout)
            commands.append(cmd)
            logs.append(log_one)
            recs, ks = records_from_csv(out, impl.slug, batch, chosen, [layer], only_layer=layer)
            records += recs
            kernels += ks
        log = "\n".join(logs)
        if not kernels:
            raise ProfilerUnavailable(f"ncu profiled no kernel of {variant}.\n{_tail(log, 20)}",
                                      "run `python -m kernelbook.lenet.profile_target --variant "
                                      f"{variant}` alone to see whether it launches anything.")
    extra = {"kernels": kernels, "requested_metrics": requested, "chosen": {k: list(v) for k, v in chosen.items()},
             "missing_metrics": missing, "rejected_metrics": rejected, "metric_list": available is not None,
             "commands": [" ".join(c) for c in commands], "attribution": attribution,
             "ncu_version": ncu_version(ncu), "batch": batch, "layer_params": per_layer, "log_tail": _tail(log, 30)}
    return records, extra


# ----------------------------------------------------------------------------- chapters


def chapter_layer_params(chapter) -> dict:
    """The parameters each layer was timed with (chapter-wide ``params`` under per-layer ones)."""
    params = chapter.parameters.get("params") or {}
    per_layer = chapter.parameters.get("layer_params") or {}
    return {layer: {**params, **(per_layer.get(layer) or {})} for layer in LAYERS}


def _replay_source(name: str, prefer_run: str | None):
    """The run holding part ``name``: ``prefer_run`` when it has it, else the newest; or None."""
    return results.run_with(name, prefer_run)


def _frame(records: list[dict]):
    import pandas as pd

    return pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in records])


def load_ncu(variant: str, prefer_run: str | None = None, reason: str = "recorded earlier"):
    """(session, records, extra) of a variant's recorded ncu part, or (None, [], {})."""
    name = ncu_part(variant)
    run = _replay_source(name, prefer_run)
    if run is None:
        return None, [], {}
    part = run.read_part(name)
    return session_mod.Session(name, "replay", run, reason), part["records"], part.get("extra") or {}


def for_chapter(chapter, profile: bool = True, batch: int = NCU_BATCH, timeout: float = NCU_TIMEOUT_S):
    """A chapter's Nsight Compute evidence: ``(session or None, frame, status)``.

    Measuring with ``profile`` on and a working ncu: profile now, write part
    ``lenet-<variant>-ncu`` into the chapter's run. Otherwise (replaying, profiling off, ncu
    missing or refused): read the part from the chapter's run, else the newest run that has it,
    and say why in ``status``. Never raises for a missing tool or recording.
    """
    variant = chapter.variant
    run = chapter.session.run
    status = ""
    if chapter.session.measuring:
        if not profiling_enabled(profile):
            status = "Profiling was off for this run (profile=False or KERNELBOOK_PROFILE=0)."
        elif not chapter.correct:
            status = "Not profiled: the kernel failed its correctness check."
        else:
            try:
                records, extra = run_ncu(variant, chapter_layer_params(chapter), batch=batch, timeout=timeout)
            except ProfilerUnavailable as exc:
                status = f"Nsight Compute is not available here: {exc.message}"
            except KernelbookError as exc:
                status = f"Profiling {variant} was refused: {exc}"
            else:
                run.write_part(ncu_part(variant), STUDY, records, extra=extra,
                               parameters={"variant": variant, "batch": batch,
                                           "layer_params": chapter_layer_params(chapter)})
                missing = extra["missing_metrics"]
                note = f" Not available from this ncu/GPU: {', '.join(missing)}." if missing else ""
                return (chapter.session, _frame(records),
                        f"Profiled now with Nsight Compute {extra['ncu_version']} at batch {batch} "
                        f"({extra['attribution']}).{note}")
    reason = chapter.session.reason if not chapter.session.measuring else "shown from the recording"
    sess, records, extra = load_ncu(variant, prefer_run=run.run_id, reason=reason)
    if sess is None:
        tail = f"No Nsight Compute metrics are recorded for {variant} ({NOT_RECORDED})."
        return None, _frame([]), f"{status} {tail}".strip()
    shown = f"Showing the recording of run {sess.run.run_id} ({sess.run.device}, {sess.run.created_utc[:10]})."
    return sess, _frame(records), f"{status} {shown}".strip()


def format_metric(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    if metric == "duration_ms":
        from .report import format_ms

        return format_ms(value)
    if metric in ("dram_bytes", "shared_mem_per_block"):
        for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= size:
                return f"{value / size:.3g} {unit}"
        return f"{value:.0f} B"
    if metric in ("registers_per_thread", "instructions", "shared_bank_conflicts"):
        return f"{value:,.0f}"
    if metric.endswith("_pct"):
        return f"{value:.1f} %"
    return f"{value:.3g}"


def change(new: float | None, old: float | None) -> str:
    """Relative change in % (``+12.3 %``); ``–`` when either side is missing or zero."""
    if new is None or old is None or old == 0:
        return "–"
    return f"{(new - old) / abs(old) * 100:+.1f} %"


def _steps(chapter, previous: str | None, evidence=None) -> dict:
    """{role: (session, records)} for baseline, previous step and this step (what is recorded)."""
    run_id = chapter.session.run.run_id
    steps = {}
    for role, slug in (("baseline", "baseline"), ("previous step", previous)):
        if slug and slug != chapter.variant and all(slug != s for s, _, _ in steps.values()):
            sess, records, _ = load_ncu(slug, prefer_run=run_id, reason="recorded earlier, shown for comparison")
            if sess is not None:
                steps[role] = (slug, sess, records)
    if evidence is not None and evidence[0] is not None:
        frame = evidence[1]
        records = [{k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
                   for row in (frame.to_dict("records") if not frame.empty else [])]
        steps["this step"] = (chapter.variant, evidence[0], records)
    else:
        sess, records, _ = load_ncu(chapter.variant, prefer_run=run_id)
        if sess is not None:
            steps["this step"] = (chapter.variant, sess, records)
    return steps


def comparison_frame(steps: dict, metrics: Iterable[str] = COMPARED, layers: Iterable[str] = LAYERS):
    """Rows (layer, metric); a column per step; then the change against previous and baseline."""
    import pandas as pd

    rows = []
    this = steps.get("this step")
    for layer in layers:
        for metric in metrics:
            values = {role: record_value(records, metric, layer) for role, (_, _, records) in steps.items()}
            if all(v is None for v in values.values()):
                continue
            row = {"Layer": layer, "Metric": SPECS[metric].title if metric in SPECS else metric}
            for role, (slug, _, _) in steps.items():
                row[f"{role.capitalize()} ({slug})"] = format_metric(metric, values[role])
            if this is not None:
                for role in ("previous step", "baseline"):
                    if role in steps:
                        row[f"vs {role}"] = change(values["this step"], values[role])
            rows.append(row)
    return pd.DataFrame(rows)


def ncu_comparison(chapter, previous: str | None = None, evidence=None, metrics: Iterable[str] = COMPARED):
    """The seeds' profiler table: this step's metrics per layer, changes vs previous step and baseline.

    ``evidence`` is what ``for_chapter`` returned (else the recorded part is read). Baseline and
    previous step come from the chapter's run when it holds them, else from their newest runs.
    """
    steps = _steps(chapter, previous, evidence)
    if "this step" not in steps:
        return message_table(f"No Nsight Compute metrics recorded for {chapter.variant} ({NOT_RECORDED}).",
                              "Nsight Compute")
    frame = comparison_frame(steps, metrics)
    batch = next((r["batch"] for r in steps["this step"][2] if r.get("batch")), NCU_BATCH)
    labels = " | ".join(f"{role}: {sess.short_label}" for role, (_, sess, _) in steps.items())
    caption = (f"Nsight Compute (ncu --clock-control none), one launch per layer at batch {batch}; changes are "
               f"relative (this step against the other). {labels}")
    return styled(frame, caption)


def stall_frame(steps: dict, layers: Iterable[str] = LAYERS):
    """Rows (layer, stall reason) for the top reasons of every step; cycles per issued instruction."""
    import pandas as pd

    rows = []
    for layer in layers:
        reasons: list[str] = []
        for _, _, records in steps.values():
            agg = {r["metric"]: r["value"] for r in records if r["layer"] == layer and r["metric"].startswith("stall_")}
            reasons += [name for name, _ in top_stalls(agg) if name not in reasons]
        for reason in reasons:
            row = {"Layer": layer, "Stall reason": reason.replace("_", " ")}
            for role, (slug, _, records) in steps.items():
                value = record_value(records, f"stall_{reason}", layer)
                rank = next((int(r["stall_rank"]) for r in records if r["metric"] == f"stall_{reason}"
                             and r["layer"] == layer and r.get("stall_rank")), None)  # may be a float from pandas
                row[f"{role.capitalize()} ({slug})"] = ("–" if value is None else
                                                        f"{value:.2f}" + (f" (#{rank})" if rank else ""))
            rows.append(row)
    return pd.DataFrame(rows)


def stall_table(chapter, previous: str | None = None, evidence=None):
    """Top warp-stall reasons per layer: cycles a warp spends stalled per issued instruction."""
    steps = _steps(chapter, previous, evidence)
    if "this step" not in steps:
        return message_table(f"No warp-stall reasons recorded for {chapter.variant} ({NOT_RECORDED}).",
                              "Warp stalls")
    labels = " | ".join(f"{role}: {sess.short_label}" for role, (_, sess, _) in steps.items())
    return styled(stall_frame(steps), "Top warp-stall reasons (warp cycles stalled per issued instruction, "
                                       f"#rank within the step). {labels}")


def show_chapter(chapter, previous: str | None = None, profile: bool = True, batch: int = NCU_BATCH):
    """One notebook cell: profile (or replay), then the status line, the metric and stall tables."""
    from IPython.display import Markdown, display

    evidence = for_chapter(chapter, profile=profile, batch=batch)
    display(Markdown(f"*{evidence[2]}*"))
    display(ncu_comparison(chapter, previous, evidence))
    display(stall_table(chapter, previous, evidence))
    return evidence


def ncu_overview(variants: Iterable[str] | None = None, prefer_run: str | None = None,
                 metrics: Iterable[str] = COMPARED):
    """Every recorded step's metrics side by side: rows (layer, metric), a column per step.

    Steps without a recorded profile are named in the caption (a column of "not recorded yet"
    per step would bury the ones that are)."""
    import pandas as pd

    from .lenet import variant_names

    variants = list(variants or variant_names())
    found = {v: load_ncu(v, prefer_run=prefer_run) for v in variants}
    recorded = {v: f for v, f in found.items() if f[0] is not None}
    absent = [v for v in variants if v not in recorded]
    if not recorded:
        return message_table(f"No Nsight Compute metrics are recorded for any step ({NOT_RECORDED}).",
                              "Nsight Compute, every step")
    rows = []
    for layer in LAYERS:
        for metric in metrics:
            row = {"Layer": layer, "Metric": SPECS[metric].title}
            row.update({v: format_metric(metric, record_value(f[1], metric, layer)) for v, f in recorded.items()})
            if any(row[v] != "–" for v in recorded):
                rows.append(row)
        row = {"Layer": layer, "Metric": "Top stalls (cycles/instr)"}
        for v, f in recorded.items():
            agg = {r["metric"]: r["value"] for r in f[1] if r["layer"] == layer}
            row[v] = ", ".join(f"{n.replace('_', ' ')} {x:.1f}" for n, x in top_stalls(agg)) or "–"
        rows.append(row)
    labels = "; ".join(f"{v}: {f[0].short_label}" for v, f in recorded.items())
    missing = f" Not recorded yet: {', '.join(absent)}." if absent else ""
    return styled(pd.DataFrame(rows), f"Nsight Compute metrics of every profiled step (each from its newest "
                                       f"recording{' or run ' + prefer_run if prefer_run else ''}).{missing} {labels}")


# ----------------------------------------------------------------------------- ceilings


FMA_CHAINS = 16
FMA_SOURCE = r"""
extern "C" __global__ void fp32_fma_peak(float* out, int iters, float a, float b) {
    float v[%(chains)d];
#pragma unroll
    for (int j = 0; j < %(chains)d; ++j) v[j] = threadIdx.x * 1e-3f + j;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < %(chains)d; ++j) v[j] = fmaf(v[j], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < %(chains)d; ++j) s += v[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
""" % {"chains": FMA_CHAINS}

CEILING_METRICS = {"copy_gbs": "GB/s", "fp32_gflops": "GFLOP/s", "fp16_tensor_gflops": "GFLOP/s",
                   "tf32_tensor_gflops": "GFLOP/s"}
CEILING_TITLES = {"copy_gbs": "Copy bandwidth (device to device, read + write)",
                  "fp32_gflops": "FP32 FMA rate (CUDA cores)",
                  "fp16_tensor_gflops": "FP16 tensor rate (cuBLAS, 8192³)",
                  "tf32_tensor_gflops": "TF32 tensor rate (cuBLAS, 8192³)"}


def _ceiling(metric: str, value: float, measured, **extra) -> dict:
    return results.record("device", "ceilings", None, None, metric, value, unit=CEILING_METRICS[metric],
                          time_ms=measured.median, time_ms_min=measured.min, time_ms_max=measured.max,
                          time_ms_samples=list(measured.samples), **extra)


def measure_ceilings(repeats: int = 10, warmup: int = 2, copy_bytes: int = 2**30, matrix: int = 8192,
                     fma_iters: int = 65536) -> list[dict]:
    """The device's ceilings, measured now: copy bandwidth, FP32 FMA rate, FP16 and TF32 tensor rates.

    Each is the median of ``repeats`` CUDA-event timings after ``warmup`` runs. A ceiling that
    cannot be measured (e.g. TF32 compute type refused) is recorded with value None and why.
    """
    import cupy as cp

    from .measure import time_gpu

    records = []
    src = cp.empty(copy_bytes, dtype=cp.uint8)
    dst = cp.empty_like(src)
    src.data.memset_async(1, copy_bytes)
    copy = time_gpu(lambda: dst.data.copy_from_device_async(src.data, copy_bytes), repeats, warmup)
    records.append(_ceiling("copy_gbs", 2 * copy_bytes / (copy.median / 1e3) / 1e9, copy, bytes_moved=2 * copy_bytes,
                            how="cudaMemcpyAsync device to device; bytes read + written"))
    del src, dst

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    blocks, threads = int(props["multiProcessorCount"]) * 8, 256
    kernel = cp.RawKernel(FMA_SOURCE, "fp32_fma_peak")
    out = cp.empty(blocks * threads, dtype=cp.float32)
    args = (out, cp.int32(fma_iters), cp.float32(0.999), cp.float32(0.001))
    fma = time_gpu(lambda: kernel((blocks,), (threads,), args), max(3, repeats // 2), warmup)
    flops = 2 * FMA_CHAINS * fma_iters * blocks * threads
    records.append(_ceiling("fp32_gflops", flops / (fma.median / 1e3) / 1e9, fma, flops=flops,
                            how=f"{FMA_CHAINS} independent FMA chains per thread, {blocks}x{threads} threads, 2 FLOP per FMA"))
    del out

    n = matrix
    flops = 2 * n**3
    a = cp.random.random((n, n), dtype=cp.float32)
    b = cp.random.random((n, n), dtype=cp.float32)
    ah, bh = a.astype(cp.float16), b.astype(cp.float16)
    ch = cp.empty((n, n), dtype=cp.float16)
    half = time_gpu(lambda: cp.matmul(ah, bh, out=ch), repeats, warmup)
    records.append(_ceiling("fp16_tensor_gflops", flops / (half.median / 1e3) / 1e9, half, flops=flops,
                            how=f"cupy.matmul of {n}x{n} float16 matrices (cuBLAS, tensor cores)"))
    del ah, bh, ch
    c = cp.empty((n, n), dtype=cp.float32)
    try:
        from cupy._core import _routines_linalg as linalg

        old = linalg.get_compute_type(cp.float32)
        linalg.set_compute_type(cp.float32, linalg.COMPUTE_TYPE_TF32)
        try:
            tf32 = time_gpu(lambda: cp.matmul(a, b, out=c), repeats, warmup)
        finally:
            linalg.set_compute_type(cp.float32, old)
        records.append(_ceiling("tf32_tensor_gflops", flops / (tf32.median / 1e3) / 1e9, tf32, flops=flops,
                                how=f"cupy.matmul of {n}x{n} float32 matrices with COMPUTE_TYPE_TF32"))
    except Exception as exc:  # a CuPy without the switch: say so, keep the other ceilings
        records.append(results.record("device", "ceilings", None, None, "tf32_tensor_gflops", None,
                                      unit="GFLOP/s", how=f"not measured: {type(exc).__name__}: {exc}"))
    del a, b, c
    cp.get_default_memory_pool().free_all_blocks()
    return records


@dataclass
class Ceilings:
    """Measured ceilings and where they come from (``session`` None: nothing recorded)."""

    values: dict
    session: session_mod.Session | None = None
    status: str = ""
    records: list = field(default_factory=list)

    def get(self, metric: str) -> float | None:
        return self.values.get(metric)

    @property
    def label(self) -> str:
        return self.session.label if self.session else f"Device ceilings: {NOT_RECORDED}."

    @property
    def short_label(self) -> str:
        return self.session.short_label if self.session else NOT_RECORDED


def _ceilings_from(run, reason: str, records=None, mode: str = "replay") -> Ceilings:
    records = records if records is not None else run.read_part(CEILINGS_PART)["records"]
    values = {r["metric"]: r["value"] for r in records if r["value"] is not None}
    return Ceilings(values, session_mod.Session(CEILINGS_PART, mode, run, reason), "", records)


def ceilings_for(source=None) -> Ceilings:
    """Recorded ceilings for a run (a Run, run id, Session or chapter): that run's, else the newest."""
    run_id = None
    if source is not None:
        run = getattr(getattr(source, "session", None), "run", None) or getattr(source, "run", None) or source
        run_id = run if isinstance(run, str) else getattr(run, "run_id", None)
    run = _replay_source(CEILINGS_PART, run_id)
    if run is None:
        return Ceilings({}, None, f"No device ceilings are recorded ({NOT_RECORDED}).")
    return _ceilings_from(run, "recorded earlier")


def _page_mode(mode: str) -> tuple[str, str]:
    from .errors import GPUUnavailable

    try:
        return session_mod.resolve_mode(mode)
    except GPUUnavailable as exc:
        return "replay", f"measuring was asked for, but {exc.message}"


def ceilings(mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
             repeats: int = 10) -> Ceilings:
    """Measure the ceilings (GPU, written as part ``device-ceilings``) or replay the recorded ones."""
    mode, reason = _page_mode(mode)
    if mode == "measure":
        sess = session_mod.start(CEILINGS_PART, "measure", run_id=run_id, parameters={"repeats": repeats})
        records = measure_ceilings(repeats=repeats)
        sess.run.write_part(CEILINGS_PART, "device", records, parameters={"repeats": repeats})
        found = _ceilings_from(sess.run, reason, records, mode="measure")
        found.status = "Measured now."
        return found
    run = _replay_source(CEILINGS_PART, replay_run)
    if run is None:
        return Ceilings({}, None, f"No device ceilings are recorded anywhere ({NOT_RECORDED}); "
                                  "run this page on a GPU to measure them.")
    found = _ceilings_from(run, reason)
    found.status = f"Replayed from run {run.run_id}."
    return found


def ceilings_table(found: Ceilings):
    import pandas as pd

    rows = []
    by_metric = {r["metric"]: r for r in found.records}
    for metric, title in CEILING_TITLES.items():
        r = by_metric.get(metric)
        value = None if r is None else r["value"]
        text = NOT_RECORDED if r is None else ("not measured" if value is None else
                                               f"{value:,.0f} {CEILING_METRICS[metric]}")
        rows.append({"Ceiling": title, "Value": text, "How": (r or {}).get("how", "")})
    return styled(pd.DataFrame(rows), f"Measured ceilings of the device. {found.label}")


# ----------------------------------------------------------------------------- cuDNN


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


def measure_cudnn(batch_sizes=(100, 1000, 10000), repeats: int = 10, warmup: int = 3, seed: int = 0) -> list[dict]:
    """cuDNN (through ``torch.nn.functional.conv2d``) on the network's two layers at each batch.

    Variants: ``cudnn`` (FP32, TF32 forbidden) and ``cudnn-tf32`` (TF32 allowed), each with
    ``cudnn.benchmark`` on so cuDNN picks its fastest algorithm during the warm-up. Timed with
    CUDA events per call (median of ``repeats``), checked against float64 (rel. L2 error).
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    from .lenet import check_batch, layer_shape
    from .measure import Measured

    flags = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    rng = np.random.default_rng(seed)
    records = []
    device = torch.device("cuda")
    try:
        torch.backends.cudnn.benchmark = True
        for variant, tf32 in (("cudnn", False), ("cudnn-tf32", True)):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for batch in batch_sizes:
                check_batch(batch)
                for layer in LAYERS:
                    shape = layer_shape(layer, batch)
                    x = torch.from_numpy(rng.uniform(0, 1, size=shape.x_shape).astype(np.float32)).to(device)
                    w = torch.from_numpy(rng.uniform(-1, 1, size=shape.k_shape).astype(np.float32)).to(device)
                    y = F.conv2d(x, w)
                    ref = F.conv2d(x.double(), w.double())
                    err = float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))
                    del ref
                    for _ in range(warmup):
                        F.conv2d(x, w)
                    torch.cuda.synchronize()
                    samples = []
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    for _ in range(repeats):
                        start.record()
                        F.conv2d(x, w)
                        stop.record()
                        stop.synchronize()
                        samples.append(float(start.elapsed_time(stop)))
                    records.append(results.record(STUDY, variant, layer, batch, "op_time_ms",
                                                  Measured(samples, extra={"timing": "torch-events"}),
                                                  flops=shape.flops, min_bytes=shape.min_bytes,
                                                  rel_l2_error=err, tf32=tf32))
                    records.append(results.record(STUDY, variant, layer, batch, "rel_l2_error", err))
                    del x, w, y
            torch.cuda.empty_cache()
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = flags
    return records


@dataclass
class Recorded:
    """A recorded part (records) with its provenance, or nothing and a status line."""

    records: list
    session: session_mod.Session | None
    status: str = ""

    @property
    def label(self) -> str:
        return self.session.label if self.session else self.status

    @property
    def short_label(self) -> str:
        return self.session.short_label if self.session else NOT_RECORDED


def cudnn(mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
          batch_sizes=(100, 1000, 10000), repeats: int = 10) -> Recorded:
    """Measure cuDNN now (GPU + PyTorch with CUDA; part ``lenet-cudnn``) or replay the recording."""
    mode, reason = _page_mode(mode)
    status = ""
    if mode == "measure":
        ok, why = torch_cuda_status()
        if ok:
            sess = session_mod.start(CUDNN_PART, "measure", run_id=run_id,
                                     parameters={"batch_sizes": list(batch_sizes), "repeats": repeats})
            records = measure_cudnn(batch_sizes, repeats=repeats)
            sess.run.write_part(CUDNN_PART, STUDY, records,
                                parameters={"batch_sizes": list(batch_sizes), "repeats": repeats, "torch": why})
            return Recorded(records, sess, f"Measured now ({why}).")
        status = f"cuDNN was not measured: {why}."
        reason = why
    run = _replay_source(CUDNN_PART, replay_run or run_id)
    if run is None:
        return Recorded([], None, f"{status} No cuDNN timings are recorded ({NOT_RECORDED}).".strip())
    sess = session_mod.Session(CUDNN_PART, "replay", run, reason)
    return Recorded(run.read_part(CUDNN_PART)["records"], sess, f"{status} Replayed from run {run.run_id}.".strip())


# ----------------------------------------------------------------------------- the floor


def floor_ms(shape, ceilings) -> float | None:
    """The least time a layer can take on this device: max(fewest bytes / copy bandwidth,
    FLOPs / FP32 rate), in ms. ``ceilings`` is a ``Ceilings`` or a dict; None when one is missing."""
    values = ceilings.values if isinstance(ceilings, Ceilings) else ceilings
    bandwidth, rate = values.get("copy_gbs"), values.get("fp32_gflops")
    if not bandwidth or not rate:
        return None
    return max(shape.min_bytes / (bandwidth * 1e9), shape.flops / (rate * 1e9)) * 1e3


def floor_frame(steps: dict, ceilings, cudnn_records: list[dict], batch: int = 10000):
    """Every step's op time at ``batch`` per layer, its GFLOP/s, % of the floor and ratio to cuDNN.

    ``steps`` maps a variant to its ChapterResult (or None: shown as not recorded).
    """
    import pandas as pd

    from .lenet import layer_shape
    from .report import format_ms

    rows = []
    cudnn_time = {(v, layer): record_value([r for r in cudnn_records if r["variant"] == v], "op_time_ms", layer, batch)
                  for v in ("cudnn", "cudnn-tf32") for layer in LAYERS}
    entries = [(v, ch.records if ch is not None and ch.correct else None,
                ch.session.short_label if ch is not None else NOT_RECORDED) for v, ch in steps.items()]
    for v in ("cudnn", "cudnn-tf32"):
        recs = [r for r in cudnn_records if r["variant"] == v]
        entries.append((v, recs if recs else None, "cuDNN via PyTorch" if recs else NOT_RECORDED))
    for layer in LAYERS:
        shape = layer_shape(layer, batch)
        floor = floor_ms(shape, ceilings)
        for variant, records, where in entries:
            op = record_value(records, "op_time_ms", layer, batch) if records is not None else None
            row = {"Layer": layer, "Step": variant,
                   "Op time": format_ms(op) if op is not None else (NOT_RECORDED if records is None else "–"),
                   "GFLOP/s": f"{shape.flops / (op / 1e3) / 1e9:,.0f}" if op else "–",
                   "Floor": format_ms(floor) if floor else "–",
                   "% of floor": f"{floor / op * 100:.1f} %" if op and floor else "–"}
            for ref, title in (("cudnn", "vs cuDNN"), ("cudnn-tf32", "vs cuDNN TF32")):
                theirs = cudnn_time[(ref, layer)]
                row[title] = f"{theirs / op:.2f}×" if op and theirs else "–"
            row["Recorded"] = where
            rows.append(row)
    return pd.DataFrame(rows)


def floor_table(variants: Iterable[str] | None = None, batch: int = 10000, found_ceilings: Ceilings | None = None,
                found_cudnn: Recorded | None = None, prefer_run: str | None = None):
    """The step-by-step table of the profiles page (floor = max(bytes/bandwidth, FLOPs/FP32 rate);
    "% of floor" = floor / op time; "vs cuDNN" = cuDNN's time / the step's, >1 is faster)."""
    from .lenet import variant_names
    from .lenet.study import load_recorded

    variants = list(variants or variant_names())
    steps = {v: load_recorded(v, prefer_run=prefer_run) for v in variants}
    found_ceilings = found_ceilings or ceilings_for(prefer_run)
    found_cudnn = found_cudnn or cudnn("replay", replay_run=prefer_run)
    frame = floor_frame(steps, found_ceilings, found_cudnn.records, batch)
    caption = (f"Op time at batch {batch} against the floor (the larger of fewest bytes / copy bandwidth and FLOPs / "
               f"FP32 rate; % of floor = floor / op time) and cuDNN (cuDNN's time / the step's; above 1 is faster). "
               f"Ceilings: {found_ceilings.short_label}. cuDNN: {found_cudnn.short_label}. Steps: each from its "
               f"newest recording{' or run ' + prefer_run if prefer_run else ''} (column Recorded).")
    return styled(frame, caption)


# ----------------------------------------------------------------------------- sanitizer


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([\d,]+)\s+errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s*([\d,]+)\s+hazards? displayed\s*\(([\d,]+)\s+errors?,\s*([\d,]+)\s+warnings?\)")


def parse_sanitizer_summary(text: str) -> dict:
    """``ERROR SUMMARY: N errors`` -> {"errors": N}; racecheck's ``RACECHECK SUMMARY: H hazards displayed
    (E errors, W warnings)`` adds hazards and gives E errors when no ERROR SUMMARY line is printed (as
    compute-sanitizer 2025.x's racecheck does); errors None when neither line is there."""
    found = _SUMMARY.findall(text)
    summary: dict = {"errors": int(found[-1].replace(",", "")) if found else None}
    hazards = _HAZARDS.findall(text)
    if hazards:
        shown, errors, warnings = (int(v.replace(",", "")) for v in hazards[-1])
        summary.update(hazards=shown, hazard_errors=errors, hazard_warnings=warnings)
        if summary["errors"] is None:  # racecheck (2025.x) prints only its own summary line
            summary["errors"] = errors
    return summary


def sanitizer_command(tool: str, variant: str, layer_params: dict, batch: int, layers: Iterable[str],
                      sanitizer: str | None = None) -> list[str]:
    return [sanitizer or sanitizer_path() or "compute-sanitizer", "--tool", tool, "--error-exitcode", "1",
            "--print-limit", "20", *target_command(variant, layer_params, batch, layers)]


def run_sanitizer(tool: str, variant: str, layer_params: dict | None = None, batch: int = SANITIZER_BATCH,
                  layers: Iterable[str] = LAYERS, timeout: float = 600) -> dict:
    """Run compute-sanitizer ``tool`` (memcheck, racecheck, ...) over one variant's launches.

    Returns {"errors", "rc", "passed", "command", "log_tail", ...}; raises ``ProfilerUnavailable``
    when compute-sanitizer is missing or cannot use the GPU.
    """
    sanitizer = sanitizer_path()
    if not sanitizer:
        raise ProfilerUnavailable("compute-sanitizer is not installed here.",
                                  "install the CUDA toolkit (it ships compute-sanitizer) or add it to PATH.")
    layers = list(layers)
    cmd = sanitizer_command(tool, variant, {l: (layer_params or {}).get(l) or {} for l in layers}, batch, layers,
                            sanitizer)
    rc, out, err = _run(cmd, timeout)
    text = out + "\n" + err
    summary = parse_sanitizer_summary(text)
    if summary["errors"] is None:
        why = classify_failure(text) or f"it printed no ERROR SUMMARY (exit status {rc})"
        raise ProfilerUnavailable(f"compute-sanitizer --tool {tool} did not check {variant}: {why}.\n{_tail(text, 12)}",
                                  "run the command alone on the GPU machine to see why.")
    summary.update(rc=rc, passed=summary["errors"] == 0 and rc == 0, command=" ".join(cmd), log_tail=_tail(text, 30))
    return summary


def sanitizer_record(tool: str, variant: str, layer: str, batch: int, summary: dict) -> dict:
    return results.record(STUDY, variant, layer, batch, "sanitizer_errors", summary["errors"], unit="errors",
                          tool=tool, rc=summary["rc"], passed=summary["passed"],
                          **{k: summary[k] for k in ("hazards", "hazard_errors", "hazard_warnings") if k in summary})


def sanitizer_table(prefer_run: str | None = None):
    """The recorded sanitizer results (part ``lenet-sanitizer``), variant by layer by tool."""
    import pandas as pd

    run = _replay_source(SANITIZER_PART, prefer_run)
    if run is None:
        return message_table(f"No compute-sanitizer results are recorded ({NOT_RECORDED}); run "
                              "`python scripts/sanitize.py` on the GPU machine.", "compute-sanitizer")
    part = run.read_part(SANITIZER_PART)
    frame = _frame(part["records"])
    rows = []
    for (variant, layer), group in frame.groupby(["variant", "layer"], sort=False):
        row = {"Step": variant, "Layer": layer}
        for _, r in group.iterrows():
            value = r["value"]
            row[r["tool"]] = ("did not run" if value is None or value != value else
                              ("pass (0 errors)" if value == 0 else f"FAIL ({int(value)} errors)"))
        rows.append(row)
    sess = session_mod.Session(SANITIZER_PART, "replay", run, "recorded by scripts/sanitize.py")
    batch = part.get("parameters", {}).get("batch", SANITIZER_BATCH)
    return styled(pd.DataFrame(rows), f"compute-sanitizer over every kernel, one launch per layer at batch {batch}. "
                                       f"{sess.label}")
