"""scripts/sanitize.py without a GPU: compute-sanitizer stood in for, checks run side by side."""

from __future__ import annotations

import importlib.util
import threading
import time

from kernelbook import gpu, paths, results
from kernelbook.evidence import sanitizer
from kernelbook.evidence import tools as profiler_tools


def _script():
    spec = importlib.util.spec_from_file_location("sanitize_script", paths.REPO_ROOT / "scripts" / "sanitize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checks_side_by_side_are_recorded_whole_and_in_the_study_s_order(results_root, monkeypatch):
    running, most = [0], [0]
    lock = threading.Lock()

    def stand_in(study, tool, step, layer_params, size, layers, timeout):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.15 if step == "baseline" else 0.02)   # the first checks end last
        with lock:
            running[0] -= 1
        errors = 3 if (step, tool) == ("tiled", "racecheck") else 0
        return {"errors": errors, "rc": int(bool(errors)), "passed": not errors, "log_tail": "", "command": "cs"}

    monkeypatch.setattr(sanitizer, "run_sanitizer", stand_in)
    monkeypatch.setattr(profiler_tools, "sanitizer_path", lambda: "/usr/bin/true")
    monkeypatch.setattr(gpu, "availability", lambda: (True, ""))
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Test GPU 9000", "compute_capability": "9.0"})
    run = results.create_run({"device": {"name": "Test GPU 9000"}, "commit": "abc123def456", "host": "t"})
    code = _script().main(["--steps", "baseline,tiled", "--layers", "C1,C3", "--jobs", "4",
                           "--run-id", run.run_id])
    assert code == 1                       # one check found errors: the exit status says so
    assert most[0] > 1                     # they did run side by side
    records = results.load_run(run.run_id).read_part("lenet-sanitizer")["records"]
    order = [(r["step"], r["layer"], r["tool"]) for r in records]
    assert order == [(s, c, t) for s in ("baseline", "tiled") for c in ("C1", "C3")
                     for t in ("memcheck", "racecheck")]
    failing = [r for r in records if r["value"]]
    assert [(r["step"], r["tool"]) for r in failing] == [("tiled", "racecheck")] * 2
