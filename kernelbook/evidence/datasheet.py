"""The vendor's datasheet peaks of the devices the book is recorded on, as data with their source.

A datasheet peak is a limit no kernel passes (at the boost clock it is quoted for); a measured
ceiling (``evidence.ceilings``: a copy, a streaming read, a large square GEMM) is what the device
delivered to one program, and a kernel may beat it. The floor (``evidence.floor``) is therefore
drawn at the higher of the two for each unit, so that no step can sit above 100 % of it, and both
are shown side by side (``peaks_table``).

Rates are dense: the datasheets quote the tensor rates "with sparsity", twice the dense rate, and
the dense rate is what a dense convolution or matrix product can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Metric names shared with ``evidence.ceilings`` (so a peak and a ceiling line up by name).
BANDWIDTH = "copy_gbs"
PEAK_TITLES = {"fp32_gflops": "FP32 (CUDA cores)", "tf32_tensor_gflops": "TF32 tensor, dense",
               "fp16_tensor_gflops": "FP16 / BF16 tensor, dense", BANDWIDTH: "HBM bandwidth"}
#: The measured ceilings each peak stands beside (bandwidth: the copy and the streaming read).
MEASURED_AS = {"fp32_gflops": (("", "fp32_gflops"),), "tf32_tensor_gflops": (("", "tf32_tensor_gflops"),),
               "fp16_tensor_gflops": (("", "fp16_tensor_gflops"),), BANDWIDTH: (("copy", "copy_gbs"), ("read", "read_gbs"))}
PEAK_UNITS = {"fp32_gflops": "GFLOP/s", "tf32_tensor_gflops": "GFLOP/s", "fp16_tensor_gflops": "GFLOP/s",
              BANDWIDTH: "GB/s"}


@dataclass(frozen=True)
class Datasheet:
    """One device's datasheet peaks (GFLOP/s, GB/s) and the document they are read from."""

    model: str
    names: tuple[str, ...]        # what the driver calls the device (``gpu.device_info()["name"]``)
    peaks: dict
    source: str

    def matches(self, name: str) -> bool:
        return name.strip() in self.names


_SPARSE = "the datasheet's tensor rates are quoted with sparsity; the dense rate is half"
DATASHEETS = (
    Datasheet("H100 SXM", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"),
              {"fp32_gflops": 67_000.0, "tf32_tensor_gflops": 989_000.0 / 2, "fp16_tensor_gflops": 1_979_000.0 / 2,
               BANDWIDTH: 3_350.0},
              f"NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column ({_SPARSE})"),
    Datasheet("H200 SXM", ("NVIDIA H200",),
              {"fp32_gflops": 67_000.0, "tf32_tensor_gflops": 989_000.0 / 2, "fp16_tensor_gflops": 1_979_000.0 / 2,
               BANDWIDTH: 4_800.0},
              f"NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column ({_SPARSE})"),
    Datasheet("H200 NVL", ("NVIDIA H200 NVL",),
              {"fp32_gflops": 60_000.0, "tf32_tensor_gflops": 835_000.0 / 2, "fp16_tensor_gflops": 1_671_000.0 / 2,
               BANDWIDTH: 4_800.0},
              f"NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column ({_SPARSE})"),
    Datasheet("A100 SXM 80GB", ("NVIDIA A100-SXM4-80GB",),
              {"fp32_gflops": 19_500.0, "tf32_tensor_gflops": 156_000.0, "fp16_tensor_gflops": 312_000.0,
               BANDWIDTH: 2_039.0},
              "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column (dense rates; the datasheet gives "
              "sparsity's beside them)"),
)


def datasheet_for(device: str | dict | None) -> Datasheet | None:
    """The datasheet of ``device`` (its driver name, or a manifest's device dict), None when the
    book holds none for it (then the floor stands on the measured ceilings alone)."""
    name = device.get("name") if isinstance(device, dict) else device
    if not name:
        return None
    return next((d for d in DATASHEETS if d.matches(str(name))), None)


def limit(metric: str, measured: dict, sheet: Datasheet | None) -> tuple[float | None, str]:
    """The limit for ``metric`` and where it comes from: the higher of the datasheet peak and what
    was measured (for bandwidth, the copy and the streaming read both count)."""
    candidates = [(f"measured {what}".strip(), measured.get(m)) for what, m in MEASURED_AS[metric]]
    if sheet is not None:
        candidates.append((f"datasheet: {sheet.model}", sheet.peaks.get(metric)))
    have = [(value, where) for where, value in candidates if value]
    if not have:
        return None, "not recorded"
    value, where = max(have)
    return value, where


def limits(measured: dict, device=None) -> dict:
    """Every unit's limit (``limit``) as a dict of values by ceiling metric, for ``floor_ms``."""
    sheet = datasheet_for(device)
    out = {}
    for metric in PEAK_TITLES:
        value, _ = limit(metric, measured, sheet)
        if value is not None:
            out[metric] = value
    return out


def peaks_table(measured: dict, device=None, heading: str = ""):
    """The datasheet peaks beside the measured ceilings, and which one the floor stands on."""
    import pandas as pd

    from ..report import styled

    sheet = datasheet_for(device)
    name = device.get("name") if isinstance(device, dict) else device
    rows = []
    for metric, title in PEAK_TITLES.items():
        unit = PEAK_UNITS[metric]
        peak = sheet.peaks.get(metric) if sheet is not None else None
        shown = [(what, measured.get(m)) for what, m in MEASURED_AS[metric] if measured.get(m)]
        best = max((v for _, v in shown), default=None)
        value, where = limit(metric, measured, sheet)
        rows.append({"Unit": title, "Datasheet": f"{peak:,.0f} {unit}" if peak else "–",
                     "Measured": ", ".join(f"{what} {v:,.0f}".strip() for what, v in shown) + f" {unit}" if shown
                     else "not recorded",
                     "Measured / datasheet": f"{best / peak * 100:.0f} %" if peak and best else "–",
                     "The floor uses": "–" if value is None else f"{value:,.0f} {unit} ({where})"})
    source = (f"Datasheet: {sheet.source}." if sheet is not None else
              f"No datasheet is held for {name or 'this device'} (kernelbook/evidence/datasheet.py lists those "
              "that are): the floor stands on the measured ceilings alone.")
    return styled(pd.DataFrame(rows), f"{heading}The device's limits: the datasheet's peaks beside the ceilings measured on "
                                      f"it. The floor of every step stands on the higher of the two. {source}",
                  wrap=True)
