"""`kernelbook compare`: two recorded runs side by side, noise-aware."""

from __future__ import annotations

from conftest import DEVICE

from kernelbook import cli, results
from kernelbook.compare import compare_runs, render
from kernelbook.measure import Measured


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


def test_exit_status_is_1_for_any_number_of_regressions_and_2_for_a_refusal(results_root, capsys):
    a = _run("20260101T0000Z-aaaaaa", [1.0, 1.05, 0.95], [2.0, 2.02, 1.98])
    b = _run("20260102T0000Z-bbbbbb", [1.5, 1.55, 1.45], [3.0, 3.02, 2.98])  # both slower
    assert cli.main(["compare", a.run_id, b.run_id]) == 1
    assert "2 regression(s)" in capsys.readouterr().err
    assert cli.main(["compare", a.run_id, "20260109T0000Z-ffffff"]) == 2  # no such run: refused


def test_an_unknown_study_is_a_refusal(results_root, capsys):
    a = _run("20260101T0000Z-aaaaaa", [1.0], [2.0])
    assert cli.main(["compare", a.run_id, a.run_id, "--study", "nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "'nonexistent'" in err and "lenet" in err


def test_single_samples_use_the_minimum_noise_band(results_root):
    from kernelbook.compare import MIN_NOISE

    a = _run("20260101T0000Z-aaaaaa", [1.000], [2.0])
    b = _run("20260102T0000Z-bbbbbb", [1.002], [2.0 * (1 + 2 * MIN_NOISE)])  # C1 +0.2 %, C3 +4 %
    _, rows = compare_runs(a.run_id, b.run_id)
    verdicts = {r.key[2]: r.verdict for r in rows if r.key[4] == "op_time_ms"}
    assert verdicts == {"C1": "same", "C3": "slower"}
    assert "2%" in render([], rows, "md")  # the band is stated


def test_csv_is_plain_csv(results_root, capsys):
    import csv
    import io

    a = _run("20260101T0000Z-aaaaaa", [1.0, 1.1], [2.0])
    assert cli.main(["compare", a.run_id, a.run_id, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert not out.startswith("#") and "#" not in out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 3 and rows[0]["study"] == "lenet" and rows[0]["verdict"] == "same"
    assert all("None" not in v and "(" not in v for row in rows for v in row.values())


def test_runs_with_nothing_in_common_are_a_refusal(results_root, capsys):
    """A CI gate that compared nothing has not passed: exit 2 with what each run holds."""
    a = _run("20260101T0000Z-aaaaaa", [1.0], [2.0])
    b = results.create_run({"device": DEVICE, "commit": "c0ffee", "host": "h"}, run_id="20260102T0000Z-bbbbbb")
    b.write_part("mlp-baseline", "mlp", [results.record("mlp", "baseline", "5x5", 25, "op_time_ms", Measured([1.0]))])
    for fmt in ("md", "csv"):
        assert cli.main(["compare", a.run_id, b.run_id, "--format", fmt]) == 2
        err = capsys.readouterr().err
        assert "nothing in common" in err and "lenet" in err and "mlp" in err and "Fix:" in err


TERMINAL = "\x1b]0;owned\x07\x1b[2J\x9b1m"


def test_what_compare_prints_never_holds_terminal_escapes(results_root, capsys):
    a = _run("20260101T0000Z-aaaaaa", [1.0], [2.0], device={"name": "GPU" + TERMINAL})
    b = _run("20260102T0000Z-bbbbbb", [1.5], [2.0])
    b.write_part("lenet-tiled", "lenet", [results.record("lenet", "tiled" + TERMINAL, "C1" + TERMINAL, 1, "m", 1.0)])
    a.write_part("lenet-tiled", "lenet", [results.record("lenet", "tiled" + TERMINAL, "C1" + TERMINAL, 1, "m", 1.0)])
    for fmt in ("md", "csv"):
        assert cli.main(["compare", a.run_id, b.run_id, "--format", fmt]) == 1
        captured = capsys.readouterr()
        for text in (captured.out, captured.err):
            assert not any(ch in text for ch in "\x1b\x07\x9b"), text
        assert "\\x1b" in captured.out + captured.err  # written out, not dropped
