"""Nsight Compute's numbers: which metrics we read, and how its raw CSV becomes records.

Why the ``ncu`` command line with ``--csv --page raw`` rather than a Python binding: the CLI is
what the device image ships; it needs no extra package carried to a machine without network;
and its raw page is one row per kernel with every requested metric. The price is parsing CSV,
done here defensively (header and units rows, quoted values, thousands separators, ``n/a``) and
tested without a GPU. Kernels are attributed to a case by the NVTX range ``kb:<step>:<case>``
that the profiled target pushes around each case's launch.
"""

from __future__ import annotations

import csv
import io
import math
import re
import subprocess
from dataclasses import dataclass
from typing import Iterable

from .. import paths, results
from ..atomic import write_text_atomic
from .tools import ProfilerUnavailable, ncu_path, ncu_version


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
#: Every metric a chapter's prose may cite is a row of its table (the book test checks the prose).
COMPARED = ("duration_ms", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l1_hit_pct", "l2_hit_pct",
            "dram_bytes", "achieved_occupancy_pct", "theoretical_occupancy_pct", "active_threads_per_warp",
            "registers_per_thread", "shared_mem_per_block", "shared_bank_conflicts", "instructions", "tensor_pipe_pct")


def metric_definitions():
    """Our metric names, the ncu metrics they are read from, and how kernels are combined."""
    import pandas as pd

    how = {"sum": "summed over the layer's kernels", "max": "largest of the layer's kernels",
           "wmean": "mean weighted by kernel duration"}
    rows = [{"Metric": spec.name, "Shown as": spec.title, "Unit": spec.unit,
             "Nsight Compute metric(s), first available": " | ".join(
                 (" + " if spec.combine == "sum" else " or max ").join(alt) for alt in spec.alternatives),
             "Over a layer's kernels": how[spec.aggregate]} for spec in METRICS]
    from ..report import styled

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
                write_text_atomic(cache, "\n".join(sorted(names)) + "\n")
            except OSError:
                pass  # a read-only cache costs a query next time, nothing else
            return names
    return None


def _device_name() -> str:
    from .. import gpu

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


_RANGE = re.compile(r"kb:([^:\s\"/]+):([^:\s\"/]+)")


def kernel_range(row: dict, nvtx_columns: list[str]) -> tuple[str, str] | None:
    """(step, layer) of the innermost ``kb:<step>:<layer>`` range around a kernel."""
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


def layer_records(study: str, step: str, layer: str, size: int, kernels: list[dict],
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
        records.append(results.record(study, step, layer, size, name, value, unit=SPECS[name].unit, **extra))
    return records


def records_from_csv(text: str, study: str, step: str, size: int, chosen: dict[str, tuple[str, ...]],
                     layers: Iterable[str], only_layer: str | None = None) -> tuple[list[dict], list[dict]]:
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
        raise ProfilerUnavailable(f"{len(unplaced)} profiled kernel(s) carry no kb:{step}:<layer> NVTX range "
                                  f"({', '.join(sorted(set(unplaced))[:3])}).",
                                  "profile one layer per ncu run (done automatically).")
    records = []
    for layer in layers:
        mine = [k for k in kernels if k["layer"] == layer]
        if mine:
            records += layer_records(study, step, layer, size, mine, chosen)
    return records, kernels


