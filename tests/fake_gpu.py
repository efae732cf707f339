"""An older GPU, faked on a machine without one: an RTX 3090's compute capability (8.6) and
limits (99 KiB of shared memory per block, 1,536 threads per SM, 82 SMs), for the tests of the
older-GPU path. Nothing runs on it: a step's measurement is stood in for by its recorded H100
measurement, slowed by ``SLOWER`` (so the faked run's numbers differ from the recording's), and
its kernels are not compiled (``test_sm80_builds`` compiles them for an older GPU with nvcc).
"""

from __future__ import annotations

import copy
import types

from kernelbook import gpu, kernels, limits

NAME = "NVIDIA GeForce RTX 3090 (faked)"
SM86 = limits.DeviceLimits(name=NAME, compute_capability=(8, 6), static_smem_per_block=48 * 1024,
                           smem_per_block_optin=99 * 1024, smem_per_sm=100 * 1024, max_threads_per_sm=1536,
                           max_blocks_per_sm=16)
DEVICE = {"name": NAME, "compute_capability": "8.6", "multiprocessors": 82, "memory_gib": 24.0,
          "l2_bytes": 6 * 2**20, "shared_per_block_optin": 99 * 1024, "constant_bytes": 65536,
          "clock_khz": 1695000, "cuda_driver": "12.4", "cuda_runtime": "12.4"}
SLOWER = 2.5


def recorded_measurement(study, impl):
    """The step's newest recording (check rows and records), its times slowed by ``SLOWER``."""
    from kernelbook.stepdata import load_recorded

    found = load_recorded(study, impl.slug)
    assert found is not None, f"{impl.slug}: the faked device stands in with a recording, and none exists"
    records = copy.deepcopy(found.records)
    for r in records:
        r.pop("run_id", None)
        r.pop("gpu", None)
        if r.get("unit") == "ms" and isinstance(r.get("value"), (int, float)):
            for key in ("value", "min", "max"):
                if isinstance(r.get(key), (int, float)):
                    r[key] *= SLOWER
            if isinstance(r.get("samples"), list):
                r["samples"] = [v * SLOWER for v in r["samples"]]
    return records, copy.deepcopy(found.checks)


def install(monkeypatch, studies=()):
    """Fake the sm_86 device in this process: availability, device_info, SM count, limits, and
    ``check``/``measure`` of ``studies`` (their recorded H100 measurement, slowed)."""
    monkeypatch.setattr(gpu, "availability", lambda: (True, NAME))
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "device_info", lambda: dict(DEVICE))
    monkeypatch.setattr(gpu, "multiprocessors", lambda: DEVICE["multiprocessors"])
    monkeypatch.setattr(limits, "_current", lambda: SM86)   # (limits.assumed still applies over it)

    # nothing is compiled for it (tests/test_sm80_builds.py compiles every such build with nvcc)
    monkeypatch.setattr(kernels, "_module", lambda relpath, options, arch=None: types.SimpleNamespace(
        get_function=lambda name: types.SimpleNamespace()))
    for study in studies:
        monkeypatch.setattr(study, "check", lambda impl, case_params, n, seed, s=study:
                            _checks(s, impl))
        monkeypatch.setattr(study, "measure", lambda impl, case_params, sizes, repeats, warmup, options, s=study:
                            [r for r in recorded_measurement(s, impl)[0] if r["metric"] != "correct"])


def _checks(study, impl):
    records, checks = recorded_measurement(study, impl)
    return [r for r in records if r["metric"] == "correct"], checks


def install_everywhere():
    """``install`` for a whole process (a notebook kernel of a test batch: ``fake_site``), with
    every study's measurement stood in for."""
    import importlib

    from _pytest.monkeypatch import MonkeyPatch

    install(MonkeyPatch(), studies=[importlib.import_module(f"kernelbook.{name}").STUDY
                                    for name in ("lenet", "mlp", "vgg")])
