import pytest
from conftest import fabricate_chapter

from kernelbook import report, session
from kernelbook.chapter import run_chapter
from kernelbook.errors import GPUUnavailable, ParameterError, ResultsError, StepError
from kernelbook.lenet import STUDY
from kernelbook.lenet.tables import expectations, reported, reported_table

LENET_COLUMNS = ["Batch Size", "Op Time 1", "Op Time 2", "Layer Time 1", "Layer Time 2",
                 "Total Execution Time", "Accuracy"]


def test_auto_mode_without_gpu_replays_and_says_so(results_root, no_gpu):
    run = fabricate_chapter(results_root)
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="auto")
    assert chapter.session.mode == "replay"
    assert "Replayed" in chapter.label and "not measured now" in chapter.label
    assert "Test GPU 9000" in chapter.label and "abc123def456" in chapter.label and run.run_id in chapter.label
    frame = report.milestone_frame(chapter)
    assert list(frame.columns) == LENET_COLUMNS
    assert frame["Batch Size"].tolist() == [100, 1000]
    assert frame.loc[1, "Op Time 2"] == "20.000 ms"  # 0.01 * 1000 * 2, the median of the samples
    html = report.milestone_table(chapter).to_html()
    assert "replayed" in html and "Test GPU 9000" in html
    banner = chapter.banner().data
    assert banner.count("Test GPU 9000") == 1 and run.run_id in banner and "abc123def456" in banner
    shown = chapter.session._repr_markdown_()   # what a notebook cell showing a recording prints
    assert shown.count("Replayed") == 1 and shown.startswith("**Replayed recording**") and run.run_id in shown.replace("\\", "")


def _never():
    raise AssertionError("measured without a GPU")


def _record(part, **kw):
    return session.recorded(part, "lenet", _never, parameters={}, **kw)


def test_measure_mode_without_gpu_is_refused_with_fix(results_root, no_gpu):
    with pytest.raises(GPUUnavailable, match="mode='replay'"):
        _record("lenet-baseline", mode="measure")


def test_unknown_mode_and_missing_replay_are_clear(results_root, no_gpu):
    with pytest.raises(ParameterError, match="auto"):
        _record("lenet-baseline", mode="fast")
    with pytest.raises(ResultsError, match="No recorded run"):
        _record("lenet-baseline", mode="replay")
    run = fabricate_chapter(results_root)
    with pytest.raises(ResultsError, match="holds no measurements"):
        _record("lenet-tiled", mode="replay", replay_run=run.run_id)


def test_failed_variant_shows_failed_and_no_times(results_root, no_gpu):
    fabricate_chapter(results_root, correct=False)
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    assert not chapter.correct
    frame = report.milestone_frame(chapter)
    assert (frame["Op Time 1"] == "FAILED check").all()
    assert report.throughput(chapter).empty
    assert "failed" in expectations(chapter)[0]


def test_bad_chapter_parameters_are_rejected_before_anything_runs(results_root, no_gpu):
    with pytest.raises(ParameterError, match="0, which is not a positive integer"):
        run_chapter(STUDY, "baseline", sizes=[0])
    with pytest.raises(ParameterError, match="10000"):
        run_chapter(STUDY, "baseline", sizes=[20000])
    with pytest.raises(ParameterError, match="tile_width"):
        run_chapter(STUDY, "baseline", params={"tile_size": 8})
    with pytest.raises(ParameterError, match="repeats"):
        run_chapter(STUDY, "baseline", repeats=0)
    with pytest.raises(StepError, match="baseline"):
        run_chapter(STUDY, "warp-speed")


@pytest.mark.parametrize("value, words", [("abc", "not a list"), (100, "not a list"), ([100, "x"], "'x'"),
                                          ([], "empty"), ([True], "True")])
def test_bad_sizes_get_a_message_with_an_example_in_every_mode(results_root, no_gpu, value, words):
    fabricate_chapter(results_root)
    for mode in ("auto", "replay"):
        with pytest.raises(ParameterError, match="batch_sizes") as info:
            run_chapter(STUDY, "baseline", sizes=value, mode=mode)
        assert words in info.value.message and "e.g. batch_sizes=[" in info.value.fix


def test_expectations_are_computed_from_the_numbers(results_root, no_gpu):
    fabricate_chapter(results_root)
    chapter = run_chapter(STUDY, "baseline", sizes=[100, 1000], mode="replay")
    lines = expectations(chapter)
    assert any("C1: 10× the images took 10.0× the op time" in line for line in lines)
    assert any("C3 does 2.89× C1's arithmetic and took 2.00× its time" in line for line in lines)
    assert any("68%" in line for line in lines)  # layer time 3.15x op time


def test_reported_numbers_are_labelled_with_seed_and_gpu():
    frame = reported("baseline")
    assert set(frame["seed"]) >= {"000_5388518cb9c15bca.txt", "003_4c82151979bc1aa8.txt"}
    html = reported_table("baseline").to_html()
    assert "Reported" in html and "TITAN V" in html


def _pretend_gpu(monkeypatch):
    from kernelbook import gpu

    monkeypatch.setattr(gpu, "availability", lambda: (True, "Test GPU 9000"))
    monkeypatch.setattr(gpu, "device_info", lambda: {"name": "Test GPU 9000", "compute_capability": "9.0"})


def test_a_part_keeps_its_own_parameters_and_progress_is_written_as_it_goes(results_root, monkeypatch):
    from kernelbook import results

    _pretend_gpu(monkeypatch)
    seen = []

    def measure(progress):
        progress([results.record("lenet", "baseline", "C1", 1, "op_time_ms", 1.0)])
        seen.append(results.load_run("20261123T0000Z-aaaaaa").read_part("lenet-sanitizer")["records"])  # written already
        return session.Measurement([results.record("lenet", "baseline", "C1", 1, "op_time_ms", 2.0)])

    first = session.recorded("lenet-sanitizer", "lenet", measure, parameters={"batch": 4}, mode="measure",
                             run_id="20261123T0000Z-aaaaaa")
    second = session.recorded("lenet-cudnn", "lenet", lambda: session.Measurement([]), parameters={"repeats": 7},
                              mode="measure", run_id="20261123T0000Z-aaaaaa")
    assert [r["value"] for r in seen[0]] == [1.0]
    run = results.load_run("20261123T0000Z-aaaaaa")
    assert run.read_part("lenet-sanitizer")["records"][0]["value"] == 2.0 == first.records[0]["value"]
    assert run.read_part("lenet-sanitizer")["parameters"] == {"batch": 4}
    assert run.read_part("lenet-cudnn")["parameters"] == {"repeats": 7} == second.parameters
    assert run.manifest["parameters"] == {}  # no part's parameters pass for the whole run's
