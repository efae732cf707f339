"""The reader's own GPU, older than Hopper: a measuring batch times every step it can run and
shows the recorded H100 run for the others, each such page saying why; the summary keeps the
book's device in its tables and puts the reader's run beside it in a column of its own.

Tested on a faked sm_86 (``fake_gpu``: an RTX 3090's compute capability and limits, the
measurement stood in for by the recording, slowed)."""

from __future__ import annotations

import importlib
import os
import shutil

import fake_gpu
import pytest

from kernelbook import capability, harness, paths, results

STUDIES = ("lenet", "mlp", "vgg")


def study_of(name):
    return importlib.import_module(f"kernelbook.{name}").STUDY


def problems_params(study, impl):
    case_params = study.case_params(impl, None, None)
    return [(study.problem(case, study.size_of(case, size)), case_params[case])
            for case, size in harness.problems(study, study.sizes(list(study.default_sizes)))]


def test_an_architecture_names_its_capability():
    assert capability.arch_capability("sm_90a") == (9, 0) and capability.arch_capability("sm_86") == (8, 6)
    with pytest.raises(ValueError):
        capability.arch_capability("hopper")


@pytest.mark.parametrize("name", STUDIES)
def test_an_sm86_runs_every_step_but_those_it_lacks_the_hardware_or_room_for(name, monkeypatch):
    fake_gpu.install(monkeypatch)
    study = study_of(name)
    for slug in study.steps.slugs():
        impl = study.impl(slug)
        ok, why = capability.runs_here(impl, problems_params(study, impl))
        hopper_only = capability.required(impl) is not None
        if hopper_only:   # sm_90a (wgmma) or the TMA
            assert not ok and "needs compute capability 9.0" in why and fake_gpu.NAME in why, (slug, why)
        elif not ok:      # only a launch this GPU cannot make: shared memory per block, threads
            assert "cannot launch" in why and (str(fake_gpu.SM86.smem_per_block_optin) in why or "threads" in why), (slug, why)
    sm90a = [s for s in study.steps.slugs() if study.impl(s).arch == "sm_90a"]
    assert all(capability.required(study.impl(s)) is not None for s in sm90a)


def test_without_a_gpu_nothing_is_decided_here(no_gpu):
    impl = study_of("vgg").impl("hopper-tf32")
    assert capability.runs_here(impl, []) == (True, "")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A copy of the recorded store (the faked run is written into it, never into the project's)."""
    root = tmp_path / "results"
    shutil.copytree(paths.results_dir(), root)
    monkeypatch.setenv("KERNELBOOK_RESULTS_DIR", str(root))
    return root


#: A small batch: steps the sm_86 runs, one it cannot launch, and Hopper's.
BATCH = [("mlp", "best"), ("mlp", "tensor-core-fp16"), ("mlp", "tensor-core-fp16-tma"), ("mlp", "wgmma-full-range"),
         ("vgg", "tf32"), ("vgg", "3xtf32"), ("vgg", "hopper-tf32"), ("lenet", "hopper-final"),
         ("lenet", "wgmma-final")]


def test_a_faked_sm86_runs_the_batch_to_the_end_with_the_hopper_steps_from_the_recording(store, monkeypatch):
    from IPython.display import Markdown

    from kernelbook import summary
    from kernelbook.chapter import run_chapter

    studies = {name: study_of(name) for name in STUDIES}
    fake_gpu.install(monkeypatch, studies=studies.values())
    from kernelbook.bookrecording import DEFAULT_DEVICE

    recorded = {run.device for run in results.list_runs()}   # a Hopper page replays the newest recording of its step
    book_device = next(d for d in recorded if DEFAULT_DEVICE in d)
    run_id = results.new_run_id()
    shown = {}
    for name, slug in BATCH:
        study = studies[name]
        chapter = run_chapter(study, slug, run_id=run_id)
        banner = chapter.banner().data.replace("\\", "")   # the Markdown escapes dropped
        lines = chapter.verdict_lines()
        assert isinstance(chapter.verdict(), Markdown) and lines  # every sentence whole (whole_sentence)
        shown[slug] = (chapter, banner)
        impl = study.impl(slug)
        if capability.required(impl) is not None:   # Hopper's: the H100 recording, and why
            assert not chapter.session.measuring and chapter.session.run.device in recorded
            assert "Replayed (not measured now: step " in banner and "needs compute capability 9.0" in banner
            assert fake_gpu.NAME in banner
        elif slug == "3xtf32":                        # more shared memory per block than the sm_86 has
            assert not chapter.session.measuring and "cannot launch step 3xtf32" in banner
        else:                                         # measured now, on the faked GPU, into this batch's run
            assert chapter.session.measuring and chapter.session.run.run_id == run_id
            assert chapter.session.run.device == fake_gpu.NAME and "Measured now" in banner
            # its comparisons never draw a ratio with the H100's recording
            assert not any("faster than" in line and "H100" in line for line in lines), lines
    run = results.load_run(run_id)
    assert run.device == fake_gpu.NAME
    assert {p.stem for p in (run.root / "parts").glob("*.json")} == {
        study_of(name).part(slug) for name, slug in BATCH if shown[slug][0].session.measuring}

    # The summary: the book's device in every table, the reader's run in a column of its own.
    mlp = studies["mlp"]
    assert summary.book_device(mlp) == book_device
    frame, runs = summary.leaderboard_frame(mlp)
    assert run_id not in runs and run_id not in set(frame["Run"])
    assert run_id not in set(summary.verdict_frame(mlp)["Run"])
    devices = summary.devices(mlp).to_html()
    assert fake_gpu.NAME in devices and book_device in devices
    assert "×" not in devices   # side by side, never a ratio across devices


PAGES = ["book/mlp/14_tensor_core_fp16", "book/mlp/16_fp32_register_tiled", "book/mlp/19_wgmma_full_range",
         "book/vgg/11_hopper_tf32", "book/summary", "book/devices"]   # the summary links to the devices page


@pytest.mark.book
def test_a_faked_sm86_batch_of_real_pages_ends_and_the_strict_build_passes(store, tmp_path, monkeypatch):
    """The done-when of the older-GPU path, on a few of the book's own pages: `kernelbook run`
    on a faked sm_86 (the notebook kernels see it through ``fake_site``) measures what the GPU can
    run into one run, shows Hopper's pages from the recording with the reason in their banners,
    and the strict build of those pages passes."""
    import json

    import nbformat

    from kernelbook.batch import run_batch
    from kernelbook.build import build_book

    root = tmp_path / "book-root"
    (root / "book").mkdir(parents=True)
    (root / "book" / "intro.md").write_text("# A few pages of the book, measured on an older GPU\n")
    for page in PAGES + ["book/glossary"]:
        (root / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.REPO_ROOT / f"{page}.md", root / f"{page}.md")
    shutil.copytree(paths.book_dir() / "_static", root / "book" / "_static")
    shutil.copytree(paths.kernels_dir(), root / "kernels")   # the strict build compares the sources shown
    shutil.copy(paths.REPO_ROOT / "_config.yml", root / "_config.yml")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - caption: A few pages\n    chapters:\n"
                                   + "".join(f"      - file: {p}\n" for p in PAGES + ["book/glossary"]))
    monkeypatch.setenv("KERNELBOOK_FAKE_SM86", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(paths.REPO_ROOT / "tests" / "fake_site"),
                                                                     os.environ.get("PYTHONPATH")])))
    fake_gpu.install(monkeypatch)   # the batch process too: it resolves the mode and names the run's GPU
    run_id = results.new_run_id()
    lines: list[str] = []
    report = run_batch(out_dir=tmp_path / "executed", run_id=run_id, log=lines.append, toc=root / "_toc.yml",
                       book_root=root / "book", progress_bar=False, workers=1)
    assert report.ok, "\n".join(lines)
    banners = {}
    for nb in report.notebooks:
        executed = nbformat.read(tmp_path / "executed" / f"{nb.name}.ipynb", as_version=4)
        text = json.dumps([c.get("outputs") for c in executed.cells if c.cell_type == "code"])
        banners[nb.name] = text.replace("\\\\", "")
    assert "Measured now" in banners["mlp/14_tensor_core_fp16"] and fake_gpu.NAME in banners["mlp/14_tensor_core_fp16"]
    for page in ("mlp/19_wgmma_full_range", "vgg/11_hopper_tf32"):
        assert "needs compute capability 9.0" in banners[page], page
    assert "cannot launch step fp32-register-tiled" in banners["mlp/16_fp32_register_tiled"]
    assert results.load_run(run_id).device == fake_gpu.NAME
    html = build_book(executed_dir=tmp_path / "executed", path_output=tmp_path / "site", toc=root / "_toc.yml",
                      book_root=root / "book", log=lines.append)
    assert (html / "book" / "summary.html").is_file()
    assert fake_gpu.NAME in (html / "book" / "summary.html").read_text()   # the reader's column
