"""`kernelbook compare`: two recorded runs side by side, noise-aware."""

from __future__ import annotations

from kernelbook import cli, results
from kernelbook.compare import compare_runs, render
from kernelbook.measure import Measured

from conftest import DEVICE


def _run(run_id, c1, c3, device=DEVICE):
    run = results.create_run({"device": device, "commit": "c0ffee", "host": "h"}, run_id=run_id)
    run.write_part("lenet-baseline", "lenet", [
        results.record("lenet", "baseline", "C1", 1000, "op_time_ms", Measured(c1)),
        results.record("lenet", "baseline", "C3", 1000, "op_time_ms", Measured(c3)),
        results.record("lenet", "baseline", "network", 1000, "accuracy", 0.9),
    ])
    return run


def test_a_run_against_itself_is_all_same_and_exits_0(results_root, capsys):
    run = _run("20260101T0000Z-aaaaaa", [1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    header, rows = compare_runs(run.run_id, run.run_id)
    assert rows and all(r.verdict == "same" for r in rows)
    assert cli.main(["compare", run.run_id, run.run_id]) == 0
    assert "3 same" in capsys.readouterr().out


def test_differences_beyond_the_spread_are_faster_or_slower_and_count_as_regressions(results_root, capsys):
    a = _run("20260101T0000Z-aaaaaa", [1.0, 1.05, 0.95], [2.0, 2.02, 1.98])
    b = _run("20260102T0000Z-bbbbbb", [1.5, 1.55, 1.45], [2.01, 2.03, 1.99])   # C1 slower, C3 within noise
    header, rows = compare_runs(a.run_id, b.run_id, study="lenet")
    verdicts = {(r.key[2], r.key[4]): r.verdict for r in rows}
    assert verdicts[("C1", "op_time_ms")] == "slower" and verdicts[("C3", "op_time_ms")] == "same"
    c1 = next(r for r in rows if r.key[2] == "C1")
    assert abs(c1.ratio - 1.5) < 1e-9 and abs(c1.spread_a - 0.1) < 1e-9
    assert cli.main(["compare", a.run_id, b.run_id]) == 1          # one regression
    assert cli.main(["compare", b.run_id, a.run_id]) == 0          # the other way round: faster
    assert "faster" in capsys.readouterr().out
    assert "study,step,case" in render(header, rows, "csv")


def test_runs_of_different_devices_are_compared_with_a_warning(results_root):
    a = _run("20260101T0000Z-aaaaaa", [1.0], [2.0])
    b = _run("20260102T0000Z-bbbbbb", [0.8], [1.6], device={"name": "Other GPU"})
    header, rows = compare_runs(a.run_id, b.run_id)
    assert any("different devices" in line for line in header)
    assert {r.verdict for r in rows if r.key[4] == "op_time_ms"} == {"faster"}


def test_the_recorded_runs_compare(results_root):
    import shutil

    from kernelbook import paths

    real = paths.REPO_ROOT / "data" / "results"
    for run_id in ("20261122T0559Z-9192d2", "20261122T1134Z-0a1b70"):
        shutil.copytree(real / run_id, results_root / run_id)
    header, rows = compare_runs("20261122T0559Z-9192d2", "20261122T1134Z-0a1b70", study="lenet")
    assert len(rows) > 20 and "different devices" not in " ".join(header)
    assert {r.verdict for r in rows} <= {"same", "faster", "slower", "better", "worse", "higher", "lower"}


def test_records_that_share_a_metric_stay_apart(results_root):
    run = results.create_run({"device": DEVICE, "commit": "c", "host": "h"}, run_id="20260101T0000Z-aaaaaa")
    run.write_part("lenet-sanitizer", "lenet", [
        results.record("lenet", "tiled", "C1", 4, "sanitizer_errors", 0, tool="memcheck"),
        results.record("lenet", "tiled", "C1", 4, "sanitizer_errors", 0, tool="racecheck")])
    header, rows = compare_runs(run.run_id, run.run_id)
    assert sorted(r.key[-1] for r in rows) == ["memcheck", "racecheck"]
