"""The devices page (book/devices.md, kernelbook/crossdevice.py) on a store made here: one H100 and
one H200 run of the whole LeNet study, whose speed-ups and intensities are chosen so that every
band of the page's sentences is known in advance."""

from __future__ import annotations

import pytest

from kernelbook import crossdevice, crossdevice_figure, results
from kernelbook.lenet import STUDY, layer_shape
from kernelbook.measure import Measured

H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0"}
RATES = {"fp32_gflops": 60_000.0, "tf32_tensor_gflops": 400_000.0, "fp16_tensor_gflops": 800_000.0}
SIZE = 10_000
#: Steps whose Nsight Compute DRAM bytes put them under every ridge (one FLOP per byte); the others
#: are at 2,000 FLOP per byte, above every ridge.
BYTES_BOUND = {"baseline", "tiled", "cublas", "index-reuse"}
#: The H200's speed-up per step: the bytes-bound ones move with the bandwidth (1.43x) but one,
#: which moves by less; the others do not move, but one that takes longer and one that moves with
#: the bandwidth all the same.
SPEEDUP = {slug: (1.43 if slug in BYTES_BOUND else 1.0) for slug in STUDY.steps.slugs()}
SPEEDUP["index-reuse"] = 1.2
SPEEDUP["sweep"] = 0.8
SPEEDUP["streams"] = 1.43


def _run(root, device, copy_gbs, speedup=None, ceilings=True, steps=None, unprofiled=()):
    """A run of ``device`` holding every LeNet step (or ``steps``), their Nsight Compute DRAM bytes
    and, when ``ceilings``, the device's measured ceilings."""
    run = results.create_run({"device": device, "commit": "abc123def456", "host": "test"}, root=root)
    for slug in steps or STUDY.steps.slugs():
        i = STUDY.steps.slugs().index(slug)
        recs, ncu = [], []
        for layer in STUDY.cases:
            recs.append(results.record("lenet", slug, layer, None, "correct", 1.0))
            for size in (100, SIZE):
                base = 0.001 * size * (i + 1) * (2 if layer == "C3" else 1)
                time = base / (speedup or {}).get(slug, 1.0)
                shape = layer_shape(layer, size)
                recs.append(results.record("lenet", slug, layer, size, "op_time_ms", Measured([time, time * 1.01]),
                                           flops=shape.flops, min_bytes=shape.min_bytes))
            profiled = layer_shape(layer, 1000)
            per_byte = 1.0 if slug in BYTES_BOUND else 2000.0
            ncu.append(results.record("lenet", slug, layer, 1000, "dram_bytes", profiled.flops / per_byte, unit="bytes"))
        params = {"step": slug, "batch_sizes": [100, SIZE], "params": {}}
        run.write_part(STUDY.part(slug), "lenet", recs, parameters=params)
        if slug not in unprofiled:
            run.write_part(STUDY.part(slug, "ncu"), "lenet", ncu)
    if ceilings:
        values = {**RATES, "copy_gbs": copy_gbs}
        run.write_part("device-ceilings", "device",
                       [results.record("device", "ceilings", None, None, metric, value, unit="x")
                        for metric, value in values.items()])
    return run


@pytest.fixture
def two_devices(results_root):
    h100 = _run(results_root, H100, 3000.0)
    h200 = _run(results_root, H200, 4290.0, SPEEDUP)
    return h100, h200


def _row(frame, slug, case="C1"):
    return frame[(frame["step"] == slug) & (frame["case"] == case)].iloc[0]


def test_each_row_holds_both_times_their_ratio_and_the_h100_bound(two_devices):
    h100, h200 = two_devices
    view = crossdevice.compare(STUDY)
    assert (view.base.run.run_id, view.other.run.run_id) == (h100.run_id, h200.run_id)
    frame = view.frame
    assert len(frame) == 2 * len(STUDY.steps.slugs())        # every step, both layers
    assert set(frame["size"]) == {SIZE}                      # the largest size both runs timed
    assert list(zip(frame["number"], frame["case"]))[:3] == [(0, "C1"), (0, "C3"), (1, "C1")]
    row = _row(frame, "tiled", "C3")
    base = 0.001 * SIZE * (STUDY.steps.slugs().index("tiled") + 1) * 2
    assert row["base_ms"] == pytest.approx(base * 1.005)     # the median of the two samples
    assert row["speedup"] == pytest.approx(1.43)
    assert row["other_ms"] == pytest.approx(row["base_ms"] / 1.43)
    for slug in STUDY.steps.slugs():
        assert _row(frame, slug)["bound"] == ("bytes" if slug in BYTES_BOUND else "arithmetic"), slug
    # The ridge is the rate of the step's own unit over the bandwidth: FP32 for the baseline,
    # half a product per product for __half2 (fp16 step), three for 3xFP16 (wgmma-final).
    assert _row(frame, "baseline")["ridge"] == pytest.approx(60_000 / 3000)
    assert _row(frame, "fp16")["ridge"] == pytest.approx(60_000 / (0.5 * 3000))
    assert _row(frame, "wgmma-final")["ridge"] == pytest.approx(800_000 / (3 * 3000))
    assert view.ratio == pytest.approx(1.43)
    assert "No H200 recording" not in crossdevice.banner(view).data
    assert view.base.sources["copy_gbs"] == f"measured in run {h100.run_id}"


def test_the_sentences_name_each_row_in_its_band_and_agree_with_the_table(two_devices):
    view = crossdevice.compare(STUDY)
    lines = view.lines()
    text = "\n".join(lines)
    moved = next(line for line in lines if crossdevice.BAND_WORDS["bandwidth"] in line)
    assert moved == ("8 of the 34 rows timed on both devices moved by about the bandwidth ratio: 00 baseline "
                     "(C1 1.43×, C3 1.43×), 03 tiled (C1 1.43×, C3 1.43×), 05 streams (C1 1.43×, C3 1.43×), "
                     "08 cublas (C1 1.43×, C3 1.43×).")
    assert "11 index-reuse (C1 1.20×, C3 1.20×)" in next(line for line in lines if crossdevice.BAND_WORDS["less"] in line)
    assert "02 sweep (C1 0.80×, C3 0.80×)" in next(line for line in lines if crossdevice.BAND_WORDS["slower"] in line)
    # Per bound, the rows that went against it: bytes-bound rows that did not move with the
    # bandwidth, arithmetic-bound ones that did.
    assert ("Of the 8 rows bound by bytes on the H100, 6 moved by about the bandwidth ratio; the others: "
            "11 index-reuse (C1 1.20×, C3 1.20×).") in text
    assert ("Of the 26 rows bound by arithmetic on the H100, 2 moved by about the bandwidth ratio: "
            "05 streams (C1 1.43×, C3 1.43×).") in text


@pytest.mark.parametrize("edit, why", [
    (lambda line: line.replace("00 baseline (C1 1.43×", "00 baseline (C1 1.50×"), "the table gives"),
    (lambda line: line.replace("03 tiled (C1 1.43×", "03 tiled (C2 1.43×"), "not a row of the table"),
    (lambda line: line.replace("8 of the 34", "7 of the 34"), "counts"),
    (lambda line: line.replace("05 streams (C1 1.43×, C3 1.43×), ", ""), "counts"),
])
def test_a_sentence_that_contradicts_the_table_fails(two_devices, edit, why):
    view = crossdevice.compare(STUDY)
    lines = view.lines()
    i = next(i for i, line in enumerate(lines) if crossdevice.BAND_WORDS["bandwidth"] in line)
    lines[i] = edit(lines[i])
    with pytest.raises(crossdevice.ClaimMismatch, match=why):
        crossdevice.check_lines(view.frame, lines, view.ratio)


def test_a_row_in_the_wrong_band_or_left_out_fails(two_devices):
    view = crossdevice.compare(STUDY)
    frame = view.frame.copy()
    lines = view.lines()
    # The table now says the baseline's C1 did not move: the sentence that puts it with the
    # bandwidth contradicts it.
    at = frame.index[(frame["step"] == "baseline") & (frame["case"] == "C1")][0]
    frame.loc[at, "speedup"] = 1.0
    with pytest.raises(crossdevice.ClaimMismatch):
        crossdevice.check_lines(frame, lines, view.ratio)
    dropped = [line for line in lines if crossdevice.BAND_WORDS["slower"] not in line]
    with pytest.raises(crossdevice.ClaimMismatch, match="left out"):
        crossdevice.check_lines(view.frame, dropped, view.ratio)
    for old, new in (("Of the 8 rows bound by bytes", "Of the 9 rows bound by bytes"),
                     ("; the others: 11 index-reuse (C1 1.20×, C3 1.20×)", ""),
                     ("the others: 11 index-reuse (C1 1.20×, C3 1.20×)", "the others: 11 index-reuse (C1 1.20×)"),
                     (": 05 streams (C1 1.43×, C3 1.43×).", ": 05 streams (C1 1.43×, C3 1.43×), "
                                                            "03 tiled (C1 1.43×)."),
                     ("2 moved by about the bandwidth ratio: 05", "1 moved by about the bandwidth ratio: 05")):
        wrong = [line.replace(old, new) for line in lines]
        assert wrong != lines, old
        with pytest.raises(crossdevice.ClaimMismatch, match="rows bound by"):
            crossdevice.check_lines(view.frame, wrong, view.ratio)


def test_without_an_h200_run_the_page_says_so_and_shows_the_h100(results_root):
    h100 = _run(results_root, H100, 3000.0)
    view = crossdevice.compare(STUDY)
    assert view.base.run.run_id == h100.run_id and not view.other.found
    assert view.lines() == [view.lines()[0]] and "No H200 recording" in view.lines()[0]
    assert view.frame["other_ms"].isna().all() and view.ratio is None
    html = view.table().to_html()
    assert "H100 / H200" not in html and "no H200 run recorded" in html
    assert crossdevice_figure.speedup_figure(view) is None
    assert "No H200 recording exists yet" in crossdevice_figure.figure(view).data
    assert "no recording of this study exists yet" in crossdevice.banner(view).data
    assert "No H200 recording exists yet." in crossdevice.banner(view).data


def test_with_no_run_at_all_the_page_says_so(results_root):
    view = crossdevice.compare(STUDY)
    assert view.frame.empty and view.lines() == ["No H100 recording of this study exists yet."]
    assert "No H100 recording" in view.table().to_html()
    assert crossdevice.rates_frame(view.base, view.other).empty
    assert "No H100 or H200 recording of a study exists yet." in crossdevice.banner(view).data


def test_rates_fall_back_to_the_datasheet_and_say_so(results_root):
    _run(results_root, H100, 3000.0)
    _run(results_root, H200, 4290.0, SPEEDUP, ceilings=False)
    view = crossdevice.compare(STUDY)
    assert view.other.sources["copy_gbs"] == "datasheet: H200 SXM"
    assert view.ratio == pytest.approx(4800.0 / 3000.0)
    table = crossdevice.rates_frame(view.base, view.other)
    assert table.iloc[1]["Source of the rates"] == "datasheet: H200 SXM"
    assert table.iloc[0]["Source of the rates"] == "measured in this run"
    assert table.iloc[1]["Bandwidth"] == "4,800 GB/s"
    import matplotlib.pyplot as plt

    fig = crossdevice_figure.speedup_figure(view)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "H200 ridge, FP32 (CUDA cores): 14 FLOP/byte (datasheet)" in labels
    assert "bandwidth ratio 1.60× (datasheet / measured)" in labels
    plt.close(fig)


def test_a_run_missing_one_ceiling_takes_that_one_from_the_datasheet():
    rates, sources = crossdevice.device_rates({**RATES}, H200["name"], "20261127T0700Z-abcdef")
    assert rates["copy_gbs"] == 4800.0 and rates["fp32_gflops"] == RATES["fp32_gflops"]
    rec = crossdevice.DeviceRecording("H200", None, rates=rates, sources=sources)
    assert crossdevice._where(rec) == "measured in this run; bandwidth from the datasheet: H200 SXM"
    assert crossdevice.device_rates({}, "A GPU the book holds no datasheet for", None) == ({}, {})


def test_a_step_without_a_profile_is_placed_by_its_fewest_bytes_and_says_so(results_root):
    from kernelbook.evidence.floor import floor_ms

    _run(results_root, H100, 3000.0, unprofiled=("baseline",))
    _run(results_root, H200, 4290.0, SPEEDUP)
    view = crossdevice.compare(STUDY)
    row = _row(view.frame, "baseline")
    shape = layer_shape("C1", SIZE)
    assert row["bytes_source"] == "fewest bytes" and row["intensity"] == pytest.approx(shape.flops / shape.min_bytes)
    # The bound is the larger of the floor's two terms (evidence.floor: bytes over bandwidth, FLOPs
    # over the unit's rate), read with the same rates.
    rates = view.base.rates
    by_bytes = shape.min_bytes / (rates["copy_gbs"] * 1e9) * 1e3
    assert floor_ms(shape, rates) == pytest.approx(max(by_bytes, shape.flops / (rates["fp32_gflops"] * 1e9) * 1e3))
    assert row["bound"] == ("bytes" if floor_ms(shape, rates) == pytest.approx(by_bytes) else "arithmetic")
    assert f"{row['intensity']:.2f} (fewest bytes)" in view.table().to_html()


def test_an_h200_run_missing_a_step_says_so_in_its_cell(results_root):
    _run(results_root, H100, 3000.0)
    steps = [s for s in STUDY.steps.slugs() if s != "tiled"]
    h200 = _run(results_root, H200, 4290.0, SPEEDUP, steps=steps)   # not the book's run: a step is missing
    base = crossdevice.recorded_on(STUDY, "H100")
    other = crossdevice.recorded_on(STUDY, "H200", run=h200)
    view = crossdevice.Comparison(STUDY, base, other)
    assert other.run.run_id == h200.run_id and "tiled" not in other.chapters
    assert _row(view.frame, "tiled").isna()["speedup"]
    assert "not in its run" in view.table().to_html()
    other.chapters["sweep"].recording.records[0]["value"] = 0.0       # its check failed
    view = crossdevice.Comparison(STUDY, base, other)
    assert _row(view.frame, "sweep").isna()["speedup"] and "failed its check" in view.table().to_html()
    lines = crossdevice.moved_lines(view.frame, view.ratio)
    crossdevice.check_lines(view.frame, lines, view.ratio)
    assert "03 tiled" not in "\n".join(lines) and "02 sweep" not in "\n".join(lines)
    assert "of the 30 rows" in "\n".join(lines)
    one = view.frame[view.frame["step"] == "index-reuse"].head(1)          # a table of one row
    assert crossdevice.moved_lines(one, view.ratio)[1:] == [
        "1 of the 1 row timed on both devices moved by less than the bandwidth ratio: 11 index-reuse (C1 1.20×).",
        "Of the 1 row bound by bytes on the H100, 0 moved by about the bandwidth ratio; the others: "
        "11 index-reuse (C1 1.20×)."]
    crossdevice.check_lines(one, crossdevice.moved_lines(one, view.ratio), view.ratio)


def test_the_figure_draws_both_ridges_and_the_bandwidth_ratio(two_devices):
    import matplotlib.pyplot as plt

    from kernelbook.plots import figure_faults

    view = crossdevice.compare(STUDY)
    fig = crossdevice_figure.speedup_figure(view)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert ax.get_xscale() == "log"
    # FP32, TF32 and FP16 units are among the steps: three ridges per device.
    assert sum(label.startswith("H100 ridge") for label in labels) == 3
    assert sum(label.startswith("H200 ridge") for label in labels) == 3
    ridge = next(line for line in ax.get_lines() if line.get_label().startswith("H200 ridge, FP32"))
    assert ridge.get_xdata()[0] == pytest.approx(60_000 / 4290)
    assert ridge.get_label() == "H200 ridge, FP32 (CUDA cores): 14 FLOP/byte (measured)"
    ratio = next(line for line in ax.get_lines() if line.get_label().startswith("bandwidth ratio"))
    assert ratio.get_label() == "bandwidth ratio 1.43× (measured / measured)"
    assert ratio.get_ydata()[0] == pytest.approx(1.43)
    assert figure_faults(fig) == []
    plt.close(fig)


@pytest.mark.slow
def test_the_page_runs_on_the_two_runs_and_shows_the_checked_figure(two_devices, tmp_path):
    """book/devices.md executed by the batch on the store made here: the figure drawn without a
    fault, and the computed sentences on the page."""
    import json
    import shutil

    from kernelbook import paths
    from kernelbook.batch import run_batch

    h100, h200 = two_devices
    (tmp_path / "book").mkdir()
    for page in ("intro.md", "devices.md"):
        shutil.copy(paths.book_dir() / page, tmp_path / "book" / page)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/devices\n")
    lines = []
    report = run_batch(only="devices", mode="replay", out_dir=tmp_path / "executed", log=lines.append,
                       progress_bar=False, toc=tmp_path / "_toc.yml", book_root=tmp_path / "book")
    assert not report.failed, lines
    cells = json.loads((tmp_path / "executed" / "devices.ipynb").read_text())["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    figures = [o["metadata"]["text/html"]["kernelbook_figure"] for o in outputs
               if "kernelbook_figure" in o.get("metadata", {}).get("text/html", {})]
    assert len(figures) == 1 and figures[0]["faults"] == []
    text = json.dumps(outputs)
    assert crossdevice.BAND_WORDS["bandwidth"] in text and h100.run_id in text and h200.run_id in text
    assert "No H200 recording" not in text


def test_without_a_whole_run_each_step_comes_from_its_devices_newest_run_and_the_banner_names_them(results_root):
    """Where no run of a device holds every step, the page (and it alone) reads each step from the
    newest run of that device holding it, never from another device's, and names every run."""
    slugs = STUDY.steps.slugs()
    first = _run(results_root, H100, 3000.0, steps=slugs[:5])
    second = _run(results_root, H100, 3100.0, steps=slugs[5:], ceilings=False)
    _run(results_root, H200, 4290.0, SPEEDUP, steps=slugs[:3])
    base = crossdevice.recorded_on(STUDY, "H100")
    assert set(base.runs) == {first.run_id, second.run_id} and set(base.chapters) == set(slugs)
    assert base.chapters[slugs[5]].session.run.run_id == second.run_id
    assert base.rates["copy_gbs"] == 3000.0 and first.run_id in base.sources["copy_gbs"]   # the run that measured them
    other = crossdevice.recorded_on(STUDY, "H200")
    assert set(other.chapters) == set(slugs[:3]) and all(
        c.session.run.device == H200["name"] for c in other.chapters.values())
    text = crossdevice.banner(crossdevice.Comparison(STUDY, base, other)).data
    assert "no run holds every step" in text and first.run_id in text and second.run_id in text


def test_the_row_the_roofline_leaves_unexplained_is_set_beside_its_two_profiles():
    """The devices page's step-14 table shows each GPU's own Nsight Compute rows from its book run,
    and the generated lines print those values with the direction each moved and the step's rank by
    speed-up (read here from the records themselves)."""
    from kernelbook import crossdevice_profile
    from kernelbook.vgg import STUDY as VGG

    view = crossdevice.compare(VGG)
    if not (view.base.found and view.other.found and view.base.ncu.get("hopper-split")
            and view.other.ncu.get("hopper-split")):
        pytest.skip("no profiled VGG recording on both GPUs")

    def value(recording, metric):
        return next(r["value"] for r in recording.ncu["hopper-split"] if r["metric"] == metric and r["layer"] == "B1")

    lines = crossdevice_profile.profile_lines(view, "hopper-split", "B1")
    t0, t1 = value(view.base, "tensor_pipe_pct"), value(view.other, "tensor_pipe_pct")
    s0, s1 = value(view.base, "stall_long_scoreboard"), value(view.other, "stall_long_scoreboard")
    assert f"{t1:.1f} %" in lines[1] and f"{t0:.1f} %" in lines[1]
    assert lines[1].endswith("busier on the H200.") == (t1 > t0 * 1.02)
    assert ("less busy on" in lines[1]) == (t1 < t0 / 1.02)
    assert f"{s1:.2f}" in lines[2] and ("shorter waits" in lines[2]) == (s1 < s0 / 1.02)
    rows = view.frame[(view.frame["case"] == "B1") & view.frame["speedup"].notna()]
    ranked = rows.sort_values("speedup", ascending=False)
    top = float(ranked["speedup"].iloc[0])
    tied = [s for s, v in zip(ranked["step"], ranked["speedup"]) if v * 1.02 >= top]
    assert ("within 2 % of each other" in lines[0]) == ("hopper-split" in tied and len(tied) > 1)
    assert ("it is the largest" in lines[0]) == (tied == ["hopper-split"])
    table = crossdevice_profile.profile_pair(view, "hopper-split", "B1").data
    assert list(table.columns[1:]) == [f"{r.label} (run {r.run.run_id})" for r in (view.base, view.other)]
    assert "not recorded" not in set(table.iloc[:, 1]) | set(table.iloc[:, 2])
