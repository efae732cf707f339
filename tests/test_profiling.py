"""Profiler evidence without a GPU: ncu CSV parsing, metric choice and aggregation, replay,
the floor, the roofline figure and the sanitizer summary, all from fabricated data."""

from __future__ import annotations

import csv
import io

import matplotlib
import pytest

matplotlib.use("Agg")

from conftest import DEVICE, fabricate_chapter  # noqa: E402

from kernelbook import results, session  # noqa: E402
from kernelbook.chapter import run_chapter  # noqa: E402
from kernelbook.errors import GPUUnavailable  # noqa: E402
from kernelbook.evidence import ceilings as ceilings_mod  # noqa: E402
from kernelbook.evidence import floor, ncu, ncu_metrics, roofline, sanitizer, tools, vendor  # noqa: E402
from kernelbook.lenet import (
    STUDY,  # noqa: E402
    layer_shape,  # noqa: E402
)

NVTX = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", NVTX, "Kernel Name", "Context", "Stream",
           "Block Size", "Grid Size", "Device", "CC",
           "dram__bytes.sum", "gpu__time_duration.sum", "l1tex__t_sector_hit_rate.pct",
           "launch__registers_per_thread", "launch__shared_mem_per_block_dynamic",
           "launch__shared_mem_per_block_static", "lts__t_sector_hit_rate.pct",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active",
           "smsp__thread_inst_executed_per_inst_executed.ratio",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"]
UNITS = ["", "", "", "", "", "", "", "", "", "", "", "",
         "byte", "nsecond", "%", "register/thread", "byte/block", "byte/block", "%", "%", "%", "%", "",
         "", "", "", ""]


def _range(step, layer):
    return f'4242  "<default domain>:kb:{step}:{layer}:none:none:none:none:none:none"'


def kernel_row(i, step, layer, name, dram, ns, l1, regs, dyn, static, l2, sm, mem, occ, threads, stalls):
    return [str(i), "4242", "python3.12", "device-host", _range(step, layer), name, "1", "7",
            "(16, 16, 4)", "(25, 4, 250)", "0", "9.0", dram, ns, l1, regs, dyn, static, l2, sm, mem, occ,
            threads, *stalls]


def fabricated_csv(step="unroll-matmul", chatter=True) -> str:
    """What `ncu --csv --page raw --print-units base` prints: chatter, header, units, kernels.

    C1 has one kernel; C3 has two (an unroll kernel and a matmul), so C3 is aggregated. Values
    carry thousands separators, one L1 hit rate is n/a, the range cell holds quoted quotes.
    """
    rows = [COLUMNS, UNITS,
            kernel_row(0, step, "C1", "conv_forward(float *, const float *, int)", "31,457,280", "120,512",
                       "85.5", "40", "7,744", "0", "60.1", "45.2", "70.0", "80.5", "31.9",
                       ["10.5", "2.0", "0.5", "1.0"]),
            kernel_row(1, step, "C3", "unroll_kernel", "1,000,000", "100", "n/a", "32", "0", "1,024",
                       "50.0", "40.0", "90.0", "60.0", "32",
                       ["4.0", "8.0", "1.0", "2.0"]),
            kernel_row(2, step, "C3", "matmul_kernel", "3,000,000", "300", "75.0", "64", "16,384", "0",
                       "70.0", "80.0", "30.0", "40.0", "28.0",
                       ["12.0", "0", "6.0", "1.0"])]
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    text = buffer.getvalue()
    if chatter:
        text = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
                '==PROF== Profiling "conv_forward" - 0: 0%....50%....100% - 9 passes\n'
                "==PROF== Disconnected from process 4242\n" + text +
                "==WARNING== one line of chatter after the table\n")
    return text


# ----------------------------------------------------------------------------- CSV parsing


def test_csv_parser_skips_chatter_reads_units_and_keeps_quoted_commas():
    table = ncu_metrics.parse_ncu_csv(fabricated_csv())
    assert len(table.rows) == 3
    assert table.units["gpu__time_duration.sum"] == "nsecond"
    assert table.units["dram__bytes.sum"] == "byte"
    assert table.nvtx_columns() == [NVTX]
    assert table.rows[0]["Kernel Name"] == "conv_forward(float *, const float *, int)"
    assert '"<default domain>:kb:unroll-matmul:C1:' in table.rows[0][NVTX]
    assert ncu_metrics.parse_number(table.rows[0]["dram__bytes.sum"]) == 31457280.0


def test_real_h100_capture_is_parsed_and_attributed():
    """tests/data/ncu_raw_tiled_h100.txt: stdout of `ncu_command(... "tiled" ...)` on the H100
    (Nsight Compute 2025.3.1, 326 columns: device attributes, both NVTX columns, units "ns")."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "ncu_raw_tiled_h100.txt").read_text()
    table = ncu_metrics.parse_ncu_csv(text)
    assert len(table.header) == 326 and len(table.rows) == 2
    assert table.units["gpu__time_duration.sum"] == "ns"
    _, chosen, _ = ncu_metrics.resolve_metrics(None)
    records, kernels = ncu_metrics.records_from_csv(text, "lenet", "tiled", 1000, chosen, ("C1", "C3"))
    assert [(k["layer"], k["kernel"]) for k in kernels] == [("C1", "conv_forward_tiled"), ("C3", "conv_forward_tiled")]
    assert _get(records, "C1", "duration_ms")["value"] == pytest.approx(0.798176)
    assert _get(records, "C3", "duration_ms")["value"] == pytest.approx(3.450176)
    assert _get(records, "C1", "dram_bytes")["value"] == 112_126_464
    assert _get(records, "C1", "registers_per_thread")["value"] == 40
    assert _get(records, "C1", "sm_throughput_pct")["value"] == pytest.approx(70.91)
    assert len([r for r in records if r["layer"] == "C3" and r.get("stall_rank")]) == 3


def test_parser_without_table_returns_nothing():
    assert ncu_metrics.parse_ncu_csv("==PROF== No kernels were profiled.\n").rows == []
    assert ncu_metrics.parse_ncu_csv("").rows == []


@pytest.mark.parametrize("cell, expected", [("1,234.5", 1234.5), ("  42 ", 42.0), ("n/a", None), ("", None),
                                            ("N/A", None), ("abc", None), ("nan", None), ('"7"', 7.0)])
def test_parse_number(cell, expected):
    assert ncu_metrics.parse_number(cell) == expected


def test_units_are_converted_to_ms_and_bytes():
    assert ncu_metrics.to_base_unit(2.0, "usecond") == pytest.approx(2e-6)
    assert ncu_metrics.to_base_unit(3.0, "Mbyte") == 3e6
    assert ncu_metrics.to_base_unit(50.0, "%") == 50.0
    chosen = {"duration_ms": ("gpu__time_duration.sum",), "dram_bytes": ("dram__bytes.sum",)}
    text = fabricated_csv().replace('"nsecond"', '"usecond"').replace('"byte","usecond"', '"Kbyte","usecond"')
    c1 = ncu_metrics.kernel_rows(ncu_metrics.parse_ncu_csv(text), chosen)[0]
    assert c1["duration_ms"] == pytest.approx(120.512)        # 120,512 us
    assert c1["dram_bytes"] == pytest.approx(31457280e3)      # Kbyte


# ----------------------------------------------------------------------------- aggregation


def _records(text=None, step="unroll-matmul"):
    _, chosen, _ = ncu_metrics.resolve_metrics(None)
    return ncu_metrics.records_from_csv(text or fabricated_csv(step), "lenet", step, 1000, chosen, ("C1", "C3"))


def _get(records, layer, metric):
    found = [r for r in records if r["layer"] == layer and r["metric"] == metric]
    assert len(found) <= 1
    return found[0] if found else None


def test_one_kernel_layer_maps_every_metric():
    records, kernels = _records()
    assert [k["layer"] for k in kernels] == ["C1", "C3", "C3"]
    c1 = {r["metric"]: r["value"] for r in records if r["layer"] == "C1"}
    assert c1["duration_ms"] == pytest.approx(0.120512)
    assert c1["dram_bytes"] == 31457280
    assert c1["shared_mem_per_block"] == 7744              # static + dynamic
    assert c1["registers_per_thread"] == 40
    assert c1["sm_throughput_pct"] == pytest.approx(45.2)
    assert c1["memory_throughput_pct"] == pytest.approx(70.0)
    assert c1["l1_hit_pct"] == pytest.approx(85.5) and c1["l2_hit_pct"] == pytest.approx(60.1)
    assert c1["achieved_occupancy_pct"] == pytest.approx(80.5)
    assert c1["active_threads_per_warp"] == pytest.approx(31.9)
    assert all(r["study"] == "lenet" and r["size"] == 1000 and r["kernel_count"] == 1
               for r in records if r["layer"] == "C1")
    assert _get(records, "C1", "tensor_pipe_pct") is None  # not in this CSV: not recorded


def test_two_kernels_are_summed_weighted_and_maxed():
    records, _ = _records()
    c3 = {r["metric"]: r["value"] for r in records if r["layer"] == "C3"}
    assert c3["duration_ms"] == pytest.approx(400e-6)                      # 100 ns + 300 ns
    assert c3["dram_bytes"] == 4_000_000
    assert c3["sm_throughput_pct"] == pytest.approx((40 * 100 + 80 * 300) / 400)  # duration-weighted
    assert c3["l1_hit_pct"] == pytest.approx(75.0)                          # n/a kernel left out
    assert c3["registers_per_thread"] == 64
    assert c3["shared_mem_per_block"] == 16384
    assert _get(records, "C3", "duration_ms")["kernel_count"] == 2


def test_top_three_stalls_are_ranked():
    records, _ = _records()
    ranked = sorted((r["stall_rank"], r["metric"]) for r in records if r["layer"] == "C3" and r.get("stall_rank"))
    # long scoreboard (4*100+12*300)/400 = 10, barrier 2, mio 4.75, wait 1.25
    assert ranked == [(1, "stall_long_scoreboard"), (2, "stall_mio_throttle"), (3, "stall_barrier")]
    assert _get(records, "C3", "stall_long_scoreboard")["value"] == pytest.approx(10.0)
    assert _get(records, "C3", "stall_wait").get("stall_rank") is None


def test_kernel_without_range_is_refused_unless_the_layer_is_known():
    text = fabricated_csv().replace("kb:unroll-matmul:C3", "something-else")
    with pytest.raises(tools.ProfilerUnavailable, match="NVTX"):
        _records(text)
    _, chosen, _ = ncu_metrics.resolve_metrics(None)
    records, kernels = ncu_metrics.records_from_csv(text, "lenet", "unroll-matmul", 1000, chosen, ["C3"], only_layer="C3")
    assert {k["layer"] for k in kernels} == {"C3"}
    assert _get(records, "C3", "duration_ms")["kernel_count"] == 3


# ----------------------------------------------------------------------------- metric names


def test_missing_metrics_are_not_requested_and_are_listed():
    available = {"sm__throughput", "gpu__time_duration", "dram__bytes_read", "dram__bytes_write",
                 "launch__registers_per_thread", "launch__shared_mem_per_block",
                 "smsp__average_warp_latency_issue_stalled_barrier",
                 "sm__pipe_tensor_op_gmma_cycles_active"}
    requested, chosen, missing = ncu_metrics.resolve_metrics(available)
    assert chosen["dram_bytes"] == ("dram__bytes_read.sum", "dram__bytes_write.sum")   # second alternative
    assert chosen["shared_mem_per_block"] == ("launch__shared_mem_per_block",)
    assert chosen["stall_barrier"] == ("smsp__average_warp_latency_issue_stalled_barrier.ratio",)
    assert chosen["tensor_pipe_pct"] == ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",)
    assert "l1_hit_pct" in missing and "stall_long_scoreboard" in missing and "memory_throughput_pct" in missing
    assert "l1tex__t_sector_hit_rate.pct" not in requested
    assert all(ncu_metrics.base_name(m) in available for m in requested)


def test_launch_attributes_are_trusted_when_the_list_has_none():
    _, chosen, missing = ncu_metrics.resolve_metrics({"sm__throughput"})
    assert chosen["registers_per_thread"] == ("launch__registers_per_thread",)
    assert chosen["theoretical_occupancy_pct"] == ("sm__maximum_warps_per_active_cycle_pct",)
    assert "registers_per_thread" not in missing and "sm_throughput_pct" not in missing


def test_every_required_metric_has_a_spec_and_is_requested_on_trust():
    requested, chosen, missing = ncu_metrics.resolve_metrics(None)
    assert not missing
    assert set(ncu_metrics.REQUIRED) <= set(chosen)
    assert "tensor_pipe_pct" in chosen and "stall_long_scoreboard" in chosen
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in requested


def test_query_metrics_output_is_parsed():
    text = ("Device NVIDIA H100 80GB HBM3 (GH100)\n---------\nMetric Name                 Metric Description\n"
            "dram__bytes                 # of bytes accessed in DRAM\n"
            "sm__throughput              SM throughput\n  lts__t_sector_hit_rate      hit rate\n\n")
    assert ncu_metrics.parse_query_metrics(text) == {"dram__bytes", "sm__throughput", "lts__t_sector_hit_rate"}


def test_ncu_command_line_filters_on_the_layer_ranges():
    cmd = ncu.ncu_command("/x/ncu", STUDY, "tiled", {"C1": {"tile_width": 8}}, 1000, ["C1", "C3"], ["a.sum", "b.pct"])
    text = " ".join(cmd)
    assert cmd[:3] == ["/x/ncu", "--clock-control", "none"]
    assert "--csv --page raw --print-units base --metrics a.sum,b.pct --nvtx" in text
    assert "--nvtx-include kb:tiled:C1/ --nvtx-include kb:tiled:C3/" in text
    assert "-m kernelbook.evidence.target --study kernelbook.lenet --step tiled --cases C1,C3 --size 1000" in text
    assert '{"C1": {"tile_width": 8}}' in cmd
    assert "--nvtx" not in ncu.ncu_command("ncu", STUDY, "tiled", {}, 10, ["C1"], ["a"], nvtx=False)


def test_permission_and_missing_profiler_are_recognised():
    msg = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert "ERR_NVGPUCTRPERM" in tools.classify_failure(msg)
    assert "cannot use this GPU" in tools.classify_failure("Failed to initialize the profiler: LibraryNotLoaded")
    assert tools.classify_failure("==PROF== Disconnected") is None


def test_rejected_metric_names_are_found_in_errors():
    out = "==ERROR== Failed to find metric regex:^sm__bogus(\\.|$)\n"
    assert ncu._unknown_metrics(out, ["sm__bogus.sum", "dram__bytes.sum"]) == ["sm__bogus.sum"]


def test_profile_target_refuses_bad_arguments_before_touching_a_gpu(capsys):
    from kernelbook.evidence import target

    lenet = ["--study", "kernelbook.lenet"]
    assert target.main(lenet + ["--step", "warp-speed"]) == 2
    assert target.main(["--study", "kernelbook.nothing", "--step", "baseline"]) == 2
    assert target.main(lenet + ["--step", "baseline", "--cases", "C2"]) == 2
    assert target.main(lenet + ["--step", "baseline", "--case-params", "{nope"]) == 2
    assert target.main(lenet + ["--step", "baseline", "--case-params", '{"C1": {"tile_size": 3}}']) == 2
    assert "tile_size" in capsys.readouterr().err
    assert target.range_name("tiled", "C3") == "kb:tiled:C3"


# ----------------------------------------------------------------------------- chapters


def _write_ncu(run, step, scale=1.0):
    records, kernels = _records(step=step)
    for r in records:
        r["value"] *= scale
    run.write_part(STUDY.part(step, "ncu"), "lenet", records, extra={"kernels": kernels})
    return records


def test_replay_without_any_recorded_profile_says_not_recorded(results_root, no_gpu):
    fabricate_chapter(results_root)
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="auto")
    found = ncu.for_chapter(chapter)
    assert not found.found and found.records == []
    assert "not recorded yet" in found.status and "baseline" in found.status
    html = ncu.ncu_comparison(chapter).to_html()   # its run holds no profile at all: it says so
    run_id = chapter.session.run.run_id
    assert f"run {run_id} was measured without Nsight Compute" in html
    assert f"run {run_id} was measured without Nsight Compute" in ncu.stall_table(chapter).to_html()


def test_replay_reads_the_chapters_run(results_root, no_gpu):
    run = fabricate_chapter(results_root)
    _write_ncu(run, "baseline")
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    found = ncu.for_chapter(chapter)
    assert found.found and found.session.run.run_id == run.run_id and not found.measuring
    assert {r["metric"] for r in found.records} >= {"duration_ms", "sm_throughput_pct", "stall_barrier"}
    assert run.run_id in found.status


def test_measuring_without_ncu_writes_nothing_and_shows_the_recording(results_root, no_gpu, monkeypatch):
    older = fabricate_chapter(results_root)
    _write_ncu(older, "baseline")
    now = fabricate_chapter(results_root)
    measuring = _measuring_chapter(now, monkeypatch)
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    found = ncu.for_chapter(measuring)
    assert "Not measured now" in found.status and "not installed" in found.status
    assert not now.has_part(STUDY.part("baseline", "ncu"))
    assert found.session.run.run_id == older.run_id and not found.measuring
    assert found.records
    monkeypatch.setenv("KERNELBOOK_PROFILE", "0")
    assert "off" in ncu.for_chapter(measuring).status


def test_measuring_with_a_profile_writes_the_part(results_root, no_gpu, monkeypatch):
    run = fabricate_chapter(results_root)
    measuring = _measuring_chapter(run, monkeypatch)
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/fake/ncu")
    fake = _records(step="baseline")
    calls = []
    monkeypatch.setattr(ncu, "run_ncu", lambda study, v, lp, size, cases, timeout: calls.append((v, lp, size)) or (
        fake[0], {"kernels": fake[1], "missing_metrics": ["tensor_pipe_pct"], "ncu_version": "2025.3.1.0",
                  "attribution": "nvtx"}))
    found = ncu.for_chapter(measuring, size=500)
    assert calls == [("baseline", {"C1": {}, "C3": {}}, 500)]
    assert found.measuring and run.has_part("lenet-baseline-ncu")
    assert "Profiled now" in found.status and "tensor_pipe_pct" in found.status


def _measuring_chapter(run, monkeypatch):
    """A chapter that says it measures into ``run`` (no GPU here: the session is made by hand)."""
    from kernelbook import gpu
    from kernelbook.chapter import Chapter

    part = run.read_part("lenet-baseline")
    recording = session.Recording("lenet-baseline", session.Session("lenet-baseline", "measure", run, "test"),
                                  part["records"], part["checks"], {}, part["parameters"])
    # Evidence measured into the chapter's run needs 'measure' to be allowed: pretend a GPU.
    import functools

    monkeypatch.setattr(gpu, "availability", functools.lru_cache(maxsize=1)(lambda: (True, "Test GPU 9000")))
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Test GPU 9000"})
    return Chapter(STUDY, STUDY.steps.get("baseline"), recording)


def test_comparison_shows_change_against_previous_and_baseline(results_root, no_gpu):
    run = fabricate_chapter(results_root, step="baseline")
    fabricate_chapter(results_root, step="tiled", run_id=run.run_id)
    fabricate_chapter(results_root, step="restrict-unroll", run_id=run.run_id)
    _write_ncu(run, "baseline", scale=2.0)
    _write_ncu(run, "tiled", scale=1.25)
    _write_ncu(run, "restrict-unroll", scale=1.0)
    chapter = run_chapter(STUDY, "restrict-unroll", sizes=[100, 1000], mode="replay")
    steps = ncu._steps(chapter)
    assert list(steps) == ["baseline", "previous step", "this step"]
    frame = ncu.comparison_frame(steps, STUDY.cases)
    row = frame[(frame["Layer"] == "C1") & (frame["Metric"] == "SM [%]")].iloc[0]
    assert row["This step (restrict-unroll)"] == "45.2 %"
    assert row["Baseline (baseline)"] == "90.4 %"
    assert row["vs baseline"] == "-50.0 %" and row["vs previous step"] == "-20.0 %"
    stalls = ncu.stall_frame(steps, STUDY.cases)
    assert stalls[stalls["Layer"] == "C3"]["Stall reason"].tolist()[0] == "long scoreboard"
    assert "(#1)" in stalls.iloc[0]["This step (restrict-unroll)"]
    html = ncu.ncu_comparison(chapter).to_html()
    assert "Test GPU 9000" in html and "replayed" in html
    overview = ncu.ncu_overview(STUDY, ["baseline", "tiled", "sweep"]).to_html()
    assert "Not recorded yet: sweep" in overview and "long scoreboard" in overview


def test_the_overview_gives_a_case_no_step_was_profiled_on_no_row(results_root, no_gpu):
    run = fabricate_chapter(results_root)
    records, kernels = _records(step="baseline")
    run.write_part(STUDY.part("baseline", "ncu"), "lenet", [r for r in records if r["layer"] == "C1"],
                   extra={"kernels": kernels})
    frame = ncu.ncu_overview(STUDY, ["baseline"]).data
    assert set(frame["Layer"]) == {"C1"}   # no C3 rows, not even a row of dashes for its stalls
    assert (frame["Metric"] == "Top stalls (cycles/instr)").sum() == 1


def test_change_formatting():
    assert ncu.change(150.0, 100.0) == "+50.0 %"
    assert ncu.change(None, 1.0) == "–" and ncu.change(1.0, 0.0) == "–"
    # a base near zero: a factor, never "+68257.1 %"
    assert ncu.change(6.8, 0.00996) == "×683" and ncu.change(0.5, 0.1) == "+400.0 %"
    assert ncu.change(0.01, 6.8) == "÷680" and ncu.change(1.0, 4.0) == "-75.0 %"
    assert ncu.change(12.49999, 12.5) == "0.0 %" and ncu.change(12.5, 12.49999) == "0.0 %"   # no signed zero
    assert ncu.format_metric("dram_bytes", 31457280) == "31.5 MB"
    assert ncu.format_metric("duration_ms", 0.1205) == "120.5 µs"


# ----------------------------------------------------------------------------- ceilings, floor


CEILINGS = {"copy_gbs": 1000.0, "fp32_gflops": 10000.0, "fp16_tensor_gflops": 400000.0,
            "tf32_tensor_gflops": 200000.0}


def test_floor_is_the_slower_of_bytes_and_flops():
    shape = layer_shape("C1", 1000)
    # bytes: 4 * (1000*86*86 + 4*49 + 1000*4*80*80) = 131,984,784 -> 0.13198 ms at 1000 GB/s
    # FLOPs: 2 * 1000*4*1*49*80*80 = 2,508,800,000 -> 0.25088 ms at 10,000 GFLOP/s
    assert shape.min_bytes == 131_984_784 and shape.flops == 2_508_800_000
    assert floor.floor_ms(shape, CEILINGS) == pytest.approx(0.25088)
    assert floor.floor_ms(shape, {**CEILINGS, "copy_gbs": 100.0}) == pytest.approx(1.31984784)
    assert floor.floor_ms(shape, {"copy_gbs": 1000.0}) is None
    # on tensor cores: 400,000 GFLOP/s FP16 -> bytes-bound; 3xFP16 spends three products per product
    assert floor.floor_ms(shape, CEILINGS, "fp16") == pytest.approx(0.131984784)
    assert floor.floor_ms(shape, {**CEILINGS, "fp16_tensor_gflops": 2000.0}, "3xfp16") == pytest.approx(3.7632)
    fake = session.Recording("device-ceilings", None, [results.record("device", "ceilings", None, None, m, v)
                                                        for m, v in CEILINGS.items()])
    assert floor.floor_ms(shape, ceilings_mod.Ceilings(fake)) == pytest.approx(0.25088)


def _cudnn_records(batch=1000):
    recs = []
    for step, factor in (("cudnn", 1.0), ("cudnn-tf32", 0.5)):
        for layer, t in (("C1", 1.0), ("C3", 2.0)):
            s = layer_shape(layer, batch)
            recs.append(results.record("lenet", step, layer, batch, "op_time_ms", t * factor,
                                       flops=s.flops, min_bytes=s.min_bytes))
    return recs


def test_floor_frame_against_the_floor_and_cudnn(results_root, no_gpu):
    fabricate_chapter(results_root, batches=(100, 1000))
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    frame = floor.floor_frame(STUDY, {"baseline": chapter, "tiled": None}, CEILINGS, _cudnn_records(), 1000)
    row = frame[(frame["Layer"] == "C1") & (frame["Step"] == "baseline")].iloc[0]
    # op time C1 at 1000 = 10 ms (0.01 * 1000); floor 0.25088 ms -> 2.5 %; cuDNN 1 ms / 10 ms
    assert row["Time"] == "10.000 ms" and row["% of its floor"] == "2.5 %" and row["Unit"] == "fp32"
    assert row["vs cudnn"] == "0.10×" and row["vs cudnn-tf32"] == "0.05×"
    assert row["GFLOP/s"] == "251"
    assert (frame[frame["Step"] == "tiled"]["Time"] == "not recorded yet").all()
    assert set(frame["Step"]) == {"baseline", "tiled", "cudnn", "cudnn-tf32"}
    # a library timed in another run than the step: the ratio says so
    other = floor.floor_frame(STUDY, {"baseline": chapter}, CEILINGS, _cudnn_records(), 1000, vendor_run="another")
    same = floor.floor_frame(STUDY, {"baseline": chapter}, CEILINGS, _cudnn_records(), 1000,
                             vendor_run=chapter.session.run.run_id)
    pick = lambda f: f[(f["Layer"] == "C1") & (f["Step"] == "baseline")].iloc[0]["vs cudnn"]  # noqa: E731
    assert pick(other) == "0.10× †" and pick(same) == "0.10×"


def test_ceilings_and_cudnn_replay_when_nothing_is_recorded(results_root, no_gpu):
    found = ceilings_mod.ceilings(mode="auto")
    assert found.session is None and "not recorded yet" in found.status
    assert "not recorded yet" in ceilings_mod.ceilings_table(found).to_html()
    with pytest.raises(GPUUnavailable):  # measuring is refused in plain words without a GPU
        ceilings_mod.ceilings(mode="measure")
    got = vendor.vendor(STUDY, mode="auto")
    assert got.records == [] and got.session is None and "not recorded yet" in got.status
    assert "not recorded yet" in sanitizer.sanitizer_table(STUDY).to_html()
    assert "not recorded yet" in ncu.ncu_overview(STUDY, ["baseline"]).to_html()


def test_ceilings_are_read_back_from_the_run_or_the_newest(results_root, no_gpu):
    run = results.create_run({"device": DEVICE, "commit": "abc", "host": "h"})
    run.write_part(ceilings_mod.PART, "device",
                   [results.record("device", "ceilings", None, None, m, v, unit="x") for m, v in CEILINGS.items()])
    other = fabricate_chapter(results_root)
    found = ceilings_mod.ceilings_for(other)   # the chapter's run has none: the newest that does
    assert found.values == CEILINGS and found.session.run.run_id == run.run_id
    assert ceilings_mod.ceilings(mode="replay").values["copy_gbs"] == 1000.0
    assert "1,000 GB/s" in ceilings_mod.ceilings_table(ceilings_mod.ceilings_for(run.run_id)).to_html()


def test_torch_without_cuda_is_reported_not_raised(monkeypatch):
    ok, why = vendor.torch_cuda_status()
    if ok:
        pytest.skip("this machine has PyTorch with CUDA")
    assert isinstance(why, str) and why


# ----------------------------------------------------------------------------- roofline


def test_roofline_builds_from_fabricated_records(results_root, no_gpu):
    run = fabricate_chapter(results_root, step="baseline")
    fabricate_chapter(results_root, step="tiled", run_id=run.run_id)
    _write_ncu(run, "tiled")
    chapters = {v: run_chapter(STUDY, v, sizes=[100, 1000], mode="replay") for v in ("baseline", "tiled")}
    chapters["sweep"] = None
    profiles = {"tiled": ncu.load_ncu(STUDY, "tiled").records, "baseline": []}
    frame = roofline.points_from(STUDY, chapters, profiles, _cudnn_records(), size=1000, vendor_label="cuDNN")
    assert len(frame) == 8  # (baseline, tiled, cudnn, cudnn-tf32) x (C1, C3)
    tiled_c1 = frame[(frame["step"] == "tiled") & (frame["layer"] == "C1")].iloc[0]
    assert tiled_c1["bytes_source"] == "dram (ncu)"
    assert tiled_c1["intensity"] == pytest.approx(layer_shape("C1", 1000).flops / 31457280)
    assert tiled_c1["gflops"] == pytest.approx(layer_shape("C1", 1000).flops / 0.01 / 1e9)
    base_c3 = frame[(frame["step"] == "baseline") & (frame["layer"] == "C3")].iloc[0]
    assert base_c3["bytes_source"] == "fewest bytes" and bool(base_c3["replayed"])
    fig = roofline.roofline(frame, CEILINGS)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]  # one key under the panels
    assert any("FP32" in t and "10,000 GFLOP/s" in t for t in labels)
    assert any("copy bandwidth 1,000 GB/s" in t for t in labels)
    assert any("hollow" in t for t in labels)
    assert any(f"REPLAYED from run(s) {run.run_id}" in t.get_text() for t in fig.texts)
    numbers = dict(zip(frame["step"], frame["number"]))
    annotations = [c.get_text() for a in fig.axes for c in a.texts]
    assert str(numbers["tiled"]) in annotations and str(numbers["cudnn-tf32"]) in annotations
    assert numbers["tiled"] == "03" and numbers["cudnn"] == "V1"  # chapter numbers; the library's are V1, V2
    assert f"{numbers['tiled']} tiled" in labels  # the legend names each number once
    assert "tiled" in roofline.point_table(frame).to_html()
    assert "<th" in (html := roofline.point_table(frame, "Columns", "Test case").to_html()) and ">Test case<" in html


def test_no_two_roofline_steps_share_a_colour_and_marker():
    styles = [roofline.step_style(i) for i in range(40)]
    assert len(set(styles)) == len(styles)


def test_a_point_above_its_roof_gets_a_note_and_the_reason():
    import pandas as pd

    frame = pd.DataFrame([{"number": "09", "step": "winograd", "layer": "B1", "batch": 1, "flops": 1.0,
                           "op_time_ms": 1.0, "gflops": 60000.0, "intensity": 500.0, "bytes": 1.0,
                           "bytes_source": "dram (ncu)", "provenance": "", "replayed": True, "run_id": "r"},
                          {"number": "07", "step": "tf32", "layer": "B1", "batch": 1, "flops": 1.0,
                           "op_time_ms": 1.0, "gflops": 60000.0, "intensity": 500.0, "bytes": 1.0,
                           "bytes_source": "dram (ncu)", "provenance": "", "replayed": True, "run_id": "r"}])
    notes = roofline.above_roofs(frame, CEILINGS, {"winograd": "fp32", "tf32": "tf32"})
    assert len(notes) == 1 and "09 (winograd" in notes[0] and "fewer multiplications" in notes[0]


def test_roofline_with_nothing_recorded_still_draws(results_root, no_gpu):
    frame = roofline.points(STUDY, 1000, steps=["baseline"])
    assert frame.empty
    fig = roofline.roofline(frame, ceilings_mod.ceilings_for(None))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "device ceilings not recorded yet" in texts and "no step recorded yet" in texts
    assert "not recorded yet" in roofline.point_table(frame).to_html()


# ----------------------------------------------------------------------------- sanitizer


MEMCHECK_CLEAN = """========= COMPUTE-SANITIZER
target: lenet baseline C1 size 4 launched
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_DIRTY = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at conv_forward_baseline+0x1b0
=========     by thread (3,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1,024 errors
"""
RACECHECK_CLEAN = """========= COMPUTE-SANITIZER
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)

target: lenet tiled C1 size 4 launched
"""  # as compute-sanitizer 2025.3 printed it on the H100: no ERROR SUMMARY line
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at conv_forward_tiled+0x2a0
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
========= ERROR SUMMARY: 2 errors
"""


def test_sanitizer_summary_parser():
    assert sanitizer.parse_sanitizer_summary(MEMCHECK_CLEAN) == {"errors": 0}
    assert sanitizer.parse_sanitizer_summary(MEMCHECK_DIRTY)["errors"] == 1024
    race = sanitizer.parse_sanitizer_summary(RACECHECK)
    assert race == {"errors": 2, "hazards": 3, "hazard_errors": 2, "hazard_warnings": 1}
    assert sanitizer.parse_sanitizer_summary(RACECHECK_CLEAN) == {"errors": 0, "hazards": 0, "hazard_errors": 0,
                                                                  "hazard_warnings": 0}
    assert sanitizer.parse_sanitizer_summary(RACECHECK_CLEAN.replace("(0 errors", "(5 errors"))["errors"] == 5
    assert sanitizer.parse_sanitizer_summary("Device not supported")["errors"] is None
    assert sanitizer.parse_sanitizer_summary("========= ERROR SUMMARY: 1 error")["errors"] == 1


def test_sanitizer_results_are_recorded_and_shown(results_root, no_gpu):
    run = results.create_run({"device": DEVICE, "commit": "abc", "host": "h"})
    recs = [sanitizer.sanitizer_record(STUDY, tool, "baseline", layer, 4,
                                       {"errors": errors, "rc": 0 if not errors else 1, "passed": not errors})
            for tool, errors in (("memcheck", 0), ("racecheck", 3)) for layer in ("C1", "C3")]
    recs.append(sanitizer.sanitizer_record(STUDY, "memcheck", "tiled", "C1", 4, {"errors": None, "rc": None, "passed": False}))
    run.write_part(sanitizer.part(STUDY), "lenet", recs, parameters={"batch": 4})
    table = sanitizer.sanitizer_table(STUDY)
    html = table.to_html()
    assert "pass (0 errors)" in html and "FAIL (3 errors)" in html and "did not run" in html
    assert "Test GPU 9000" in html
    frame = table.data   # every step and case has a row, in the step list's order; one never checked says so
    assert list(zip(frame["Step"], frame["Layer"])) == [(s, c) for s in STUDY.steps.slugs() for c in STUDY.cases]
    never = frame[frame["Step"] == STUDY.steps.steps[-1].slug]
    assert set(never["memcheck"]) == set(never["racecheck"]) == {"not recorded yet"}


def test_sanitizer_command_uses_error_exitcode():
    cmd = sanitizer.sanitizer_command(STUDY, "racecheck", "tiled", {"C1": {}}, 4, ["C1"], "/cs")
    assert cmd[:5] == ["/cs", "--tool", "racecheck", "--error-exitcode", "1"]
    assert "kernelbook.evidence.target" in cmd


def test_a_study_whose_layer_is_too_large_to_sanitize_launches_its_smaller_problem_by_the_same_route(monkeypatch):
    from kernelbook import limits
    from kernelbook.errors import ShapeError
    from kernelbook.evidence import target
    from kernelbook.vgg import STUDY as VGG
    from kernelbook.vgg.final import on_hopper

    assert "--sanitizer-shape" not in sanitizer.sanitizer_command(STUDY, "memcheck", "tiled", {"C1": {}}, 4, ["C1"], "/cs")
    cmd = sanitizer.sanitizer_command(VGG, "memcheck", "winograd", {"B1": {}}, 1, ["B1"], "/cs")
    assert cmd[-1] == "--sanitizer-shape" and "kernelbook.evidence.target" in cmd
    small = VGG.sanitizer_problem("B2")
    own = VGG.problem("B2")
    assert (small.B, small.K) == (own.B, own.K) and small.H * small.W * 30 < own.H * own.W
    assert small.C * small.M * 20 < own.C * own.M and small.C % 16 and small.M % 64   # partial channel tiles
    record = sanitizer.sanitizer_record(VGG, "memcheck", "final", "B2", 1, {"errors": 0, "rc": 0, "passed": True})
    assert record["shape"] == small.as_dict()
    for device in (limits.H100, limits.of_recording({"name": "an older GPU", "compute_capability": "8.6"})):
        with limits.assumed(device):
            for slug in VGG.steps.slugs():   # every step takes it, by the route it takes for the case's own
                impl = VGG.impl(slug)
                if impl.arch == "sm_90a" and not on_hopper():
                    continue
                impl.validate(small, impl.params())
                if hasattr(impl, "routed"):
                    mine, theirs = impl.routed(small), impl.routed(own)
                    assert (mine and mine[0].slug) == (theirs and theirs[0].slug)
    seen = []

    def launch_once(study, slug, case, size, params, seed=0, shape=None):
        seen.append(shape)
        raise ShapeError("stop here: nothing to launch without a GPU", "none")

    monkeypatch.setattr("kernelbook.harness.launch_once", launch_once)
    assert target.main(["--study", "kernelbook.vgg", "--step", "baseline", "--cases", "B1", "--sanitizer-shape"]) == 2
    assert target.main(["--study", "kernelbook.vgg", "--step", "baseline", "--cases", "B1"]) == 2
    assert seen == [VGG.sanitizer_problem("B1"), None]


def test_the_mlp_s_large_case_is_sanitized_on_fewer_columns_by_the_same_kernels():
    """compute-sanitizer checks the 100x100 case on fewer columns that run every step's same
    kernels (above the switch to the large-problem kernels, a multiple of 4, a partial last tile);
    the 5x5 case on its own; the record names the columns."""
    from kernelbook import limits
    from kernelbook.mlp import STUDY as MLP

    own, small = MLP.problem("100x100"), MLP.sanitizer_problem("100x100")
    assert MLP.sanitizer_problem("5x5") is None
    assert 8 * small.N <= own.N and small.N % 4 == 0 and small.N % 64
    cmd = sanitizer.sanitizer_command(MLP, "memcheck", "baseline", {"100x100": {}}, MLP.sanitizer_size, ["100x100"], "/cs")
    assert cmd[-1] == "--sanitizer-shape"
    record = sanitizer.sanitizer_record(MLP, "memcheck", "final", "100x100", MLP.sanitizer_size,
                                        {"errors": 0, "rc": 0, "passed": True})
    assert record["shape"] == {"N": small.N}
    with limits.assumed(limits.H100):
        for slug in MLP.steps.slugs():
            impl = MLP.impl(slug)
            params = impl.params()
            if "switch_columns" in params:
                assert small.N > params["switch_columns"], slug
            impl.validate(small, params)
            assert impl.kernels_for(params, small) == impl.kernels_for(params, own), slug


def test_tools_missing_here_are_reported_not_raised(monkeypatch):
    monkeypatch.setattr(sanitizer, "sanitizer_path", lambda: None)
    with pytest.raises(tools.ProfilerUnavailable, match="not installed"):
        sanitizer.run_sanitizer(STUDY, "memcheck", "baseline")
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    with pytest.raises(tools.ProfilerUnavailable, match="not installed"):
        ncu.run_ncu(STUDY, "baseline")


# ----------------------------------------------------------------------------- the page


@pytest.mark.slow
def test_profiles_page_executes_in_replay_with_nothing_recorded(results_root, no_gpu, tmp_path):
    import jupytext
    from nbclient import NotebookClient

    from kernelbook import paths

    nb = jupytext.read(paths.book_dir() / "lenet" / "90_profiles.md")
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(str(o.get("data", {}).get("text/html", "")) + str(o.get("text", ""))
                     + str(o.get("data", {}).get("text/markdown", ""))
                     for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "not recorded yet" in text
    assert not any(o.get("output_type") == "error" for cell in nb.cells if cell.cell_type == "code"
                   for o in cell.outputs)


def test_a_split_step_is_judged_against_its_own_units_roof():
    """A step on one TF32 and two BF16 products (``tf32+2xbf16``) above the TF32 roof but under the
    FP16 one gets the note that its rate counts the problem's FLOPs; a library row there gets none."""
    import pandas as pd

    row = {"layer": "B1", "batch": 1, "flops": 1.0, "op_time_ms": 1.0, "gflops": 250000.0, "intensity": 500.0,
           "bytes": 1.0, "bytes_source": "dram (ncu)", "provenance": "", "replayed": True, "run_id": "r"}
    frame = pd.DataFrame([{**row, "number": "14", "step": "hopper-split"},
                          {**row, "number": "V1", "step": "cudnn-tf32"}])
    notes = roofline.above_roofs(frame, CEILINGS, {"hopper-split": "tf32+2xbf16"})
    assert len(notes) == 1 and "14 (hopper-split" in notes[0] and "TF32" in notes[0]


def test_the_compiler_report_describes_the_kernels_each_case_launches(monkeypatch):
    """The report compiles each case at the case's own size: the MLP's step 18 runs its TMA
    kernels at both test cases (ring at 5x5, stages at 100x100), never step 14's fallback, and
    step 15 its small kernel at 5x5 and its large one at 100x100."""
    from kernelbook import kernels
    from kernelbook.evidence import compiler
    from kernelbook.kernels import FunctionReport
    from kernelbook.mlp import STUDY

    names = ("tmaRingHalfKernel", "tmaStagesHalfKernel", "fusedTensorCoreHalfKernel", "fusedTensorCore3xFP16Kernel",
             "fusedTensorCore3xTF32Kernel")
    built = []

    def fake_compile(source, defines, arch="sm_90"):
        built.append((source, dict(defines)))
        return None, [FunctionReport(n, 100 + len(built), 0, 0, 0, 0, 0) for n in names]

    monkeypatch.setattr(kernels, "compile_cubin", fake_compile)
    monkeypatch.setattr(compiler, "sass_counts", lambda cubin: {})
    records = compiler.collect(STUDY, "tensor-core-fp16-tma", {})
    by_case = {case: {r["kernel"] for r in records if r["layer"] == case} for case in STUDY.cases}
    assert by_case == {"5x5": {"tmaRingHalfKernel"}, "100x100": {"tmaStagesHalfKernel"}}
    assert all(src.endswith("18_tensor_core_fp16_tma.cu") for src, _ in built)
    built.clear()
    final = compiler.collect(STUDY, "final", {})
    regs = {case: {r["value"] for r in final if r["layer"] == case and r["metric"] == "registers"} for case in STUDY.cases}
    assert len(built) == 2 and regs["5x5"] != regs["100x100"]     # two builds: the small and the large kernel


def test_rows_of_an_older_compiler_report_built_for_another_kernel_are_not_shown():
    """A recording made before the report compiled each case at its own size carries no
    ``built_for``; where one item builds other kernels or defines than the case runs (the MLP's
    step 18 at both cases, step 15 at 100x100), those rows are left out and the caption says why;
    where the build is the same (step 16), they stay."""
    from types import SimpleNamespace

    from kernelbook.evidence import compiler
    from kernelbook.mlp import STUDY

    def chapter(step):
        return SimpleNamespace(study=STUDY, slug=step, case_params=lambda: {}, parameters={})

    old = [{"layer": case, "kernel": "fusedTensorCoreHalfKernel", "metric": "registers", "value": 1.0}
           for case in STUDY.cases]
    assert compiler.stale_cases(chapter("tensor-core-fp16-tma"), old) == list(STUDY.cases)
    assert compiler.launched(chapter("tensor-core-fp16-tma"), old) == []
    assert compiler.stale_cases(chapter("final"), old) == ["100x100"]
    assert compiler.stale_cases(chapter("fp32-register-tiled"), old) == []
    new = [dict(r, built_for=STUDY.size_of(r["layer"], 1), kernel="tmaStagesHalfKernel") for r in old]
    assert compiler.stale_cases(chapter("tensor-core-fp16-tma"), new) == []


@pytest.mark.parametrize("study_module", ["kernelbook.lenet", "kernelbook.vgg", "kernelbook.mlp"])
def test_no_recorded_step_beats_its_floor(study_module):
    """A floor is the least time a case can take at the device's measured rates. The rates are
    measured (a library GEMM, a copy), so a kernel may beat them by a few percent (VGG's Hopper
    TF32 step beats the measured TF32 GEMM rate by about 2 %); a step more than a tenth under its
    floor means a wrong ceiling or a wrong operation count: a graph-captured memcpy once measured
    the copy engines' rate and put the FP16 floor 14 % above step 18's time, and Winograd's floor
    counted the direct convolution's products."""
    import importlib

    from kernelbook.evidence.ceilings import ceilings_for
    from kernelbook.evidence.floor import floor_ms, step_math
    from kernelbook.report import ANY_SIZE, find_record
    from kernelbook.stepdata import load_recorded
    from kernelbook.summary import evaluate_targets

    study = importlib.import_module(study_module).STUDY
    checked = 0
    for t in evaluate_targets(study):
        if t["best"] is None:
            continue
        chapter = load_recorded(study, t["best"][0])
        for case in t.get("cases") or [t["case"]]:
            rec = find_record(chapter.records, study.time_metric, case, t["size"] if t.get("size") else ANY_SIZE)
            floor = floor_ms(study.problem(case, rec["size"]), ceilings_for(t["best"][2]), step_math(chapter, case))
            if floor is not None:
                checked += 1
                assert rec["value"] >= 0.9 * floor, (t["what"], case, rec["value"], floor)
    assert checked or study_module != "kernelbook.mlp"
