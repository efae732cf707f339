"""The book's recording of a study on a GPU: one whole run per (study, device), read alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelbook import bookrun, results, session
from kernelbook.errors import ParameterError

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
SLUGS = ("baseline", "tiled", "final")


class Steps:
    def __init__(self, slugs):
        self.steps = [SimpleNamespace(slug=s) for s in slugs]

    def slugs(self):
        return [s.slug for s in self.steps]


TOY = SimpleNamespace(name="toy", title="toy study", steps=Steps(SLUGS), part=lambda slug, *more: "-".join(("toy", slug, *more)))


def recorded(root, device, slugs, when, extra=(), commit="abc123def456"):
    """A run on ``device`` created at ``when`` holding ``slugs`` (and the parts ``extra``)."""
    run = results.create_run({"device": device, "commit": commit, "host": "test"}, root=root)
    run.manifest["created_utc"] = when
    (run.root / "manifest.json").write_text(__import__("json").dumps(run.manifest))
    for slug in slugs:
        run.write_part(TOY.part(slug), "toy", [results.record("toy", slug, "all", None, "correct", 1.0)])
    for name in extra:
        run.write_part(name, "toy", [results.record("toy", "final", "all", None, "correct", 1.0)])
    return run


@pytest.fixture
def store(results_root, no_gpu):
    yield results_root
    session.pin(None)


def test_the_book_run_is_the_newest_whole_run_of_the_device(store):
    old = recorded(store, H200, SLUGS, "2026-11-20T00:00:00Z")
    h100 = recorded(store, H100, SLUGS, "2026-11-21T00:00:00Z")
    recorded(store, H200, ("final",), "2026-11-22T00:00:00Z")   # newer, but not the whole study
    assert bookrun.book_run(TOY).run_id == old.run_id            # the default GPU: the H200
    assert bookrun.book_run(TOY, "h100").run_id == h100.run_id   # part of the name, any case
    assert bookrun.book_run(TOY, "A100") is None
    assert bookrun.recorded_devices(TOY) == [H200["name"], H100["name"]]


def test_of_the_newest_commit_s_whole_runs_the_book_reads_the_fullest(store):
    """Two whole runs of one commit (one with Nsight Compute, one without, made later): the book
    reads the one with the profiles; a whole run of an older commit is not read, however full."""
    recorded(store, H200, SLUGS, "2026-11-20T00:00:00Z", extra=("toy-final-ncu", "toy-sanitizer"),
             commit="0ld0ld0ld0ld")
    profiled = recorded(store, H200, SLUGS, "2026-11-21T00:00:00Z", extra=("toy-final-ncu",))
    later = recorded(store, H200, SLUGS, "2026-11-22T00:00:00Z")
    assert bookrun.book_run(TOY).run_id == profiled.run_id
    plain = recorded(store, H200, SLUGS, "2026-11-23T00:00:00Z")   # as full as ``later``: the newer
    plain.write_part("toy-final-ncu", "toy", [results.record("toy", "final", "all", None, "correct", 1.0)])
    assert bookrun.book_run(TOY).run_id == plain.run_id
    assert later.run_id != plain.run_id


def test_a_page_replays_the_chosen_gpus_run_and_reads_nothing_from_another(store):
    h200 = recorded(store, H200, SLUGS, "2026-11-20T00:00:00Z")
    h100 = recorded(store, H100, SLUGS, "2026-11-21T00:00:00Z")
    recorded(store, H200, ("final",), "2026-11-22T00:00:00Z", extra=("toy-final-ncu",))  # a profile elsewhere
    mode, run_id = bookrun.replay_target(TOY, "auto", None, None)
    assert (mode, run_id) == ("auto", h200.run_id) and session.pinned()[0] == h200.run_id
    assert "H100" in session.pinned()[1]   # the banner names the other GPU's recording
    profile = session.replayed("toy-final-ncu", "toy")
    assert not profile.found and h200.run_id in profile.status   # never filled in from the newer run
    assert session.replayed("toy-tiled", "toy").session.run.run_id == h200.run_id

    mode, run_id = bookrun.replay_target(TOY, "auto", None, "H100")
    assert (mode, run_id) == ("replay", h100.run_id)
    assert session.replayed("toy-baseline", "toy").session.run.run_id == h100.run_id
    with session.pinned_to(None):   # outside the pin, the newest run holding the part, as before
        assert session.replayed("toy-final-ncu", "toy").found
    assert session.pinned()[0] == h100.run_id


def test_without_a_whole_recording_each_part_comes_from_its_newest_run(store):
    recorded(store, H200, ("baseline",), "2026-11-20T00:00:00Z")
    newest = recorded(store, H200, ("final",), "2026-11-21T00:00:00Z")
    assert bookrun.replay_target(TOY, "replay", None, None) == ("replay", None)
    assert session.pinned()[0] is None
    assert session.replayed("toy-final", "toy").session.run.run_id == newest.run_id


def test_a_gpu_without_a_recording_or_two_choices_are_refused_with_the_fix(store):
    recorded(store, H200, SLUGS, "2026-11-20T00:00:00Z")
    with pytest.raises(ParameterError, match="recorded on: NVIDIA H200") as err:
        bookrun.replay_target(TOY, "auto", None, "A100")
    assert "device=" in err.value.fix
    with pytest.raises(ParameterError, match="mode='measure'"):
        bookrun.replay_target(TOY, "measure", None, "H200")
    with pytest.raises(ParameterError, match="both pick a recording"):
        bookrun.replay_target(TOY, "auto", "20261120T0000Z-abcdef", "H200")
    with pytest.raises(ParameterError, match="must name a GPU"):
        bookrun.replay_target(TOY, "auto", None, "  ")
    with pytest.raises(ParameterError, match="No study has a whole recording"):
        bookrun.choose("A100", [TOY])



def test_the_default_gpu_without_a_whole_recording_is_not_replaced_by_another(store):
    recorded(store, H200, ("baseline", "final"), "2026-11-20T00:00:00Z")   # the default GPU: not whole
    h100 = recorded(store, H100, SLUGS, "2026-11-21T00:00:00Z")
    assert bookrun.book_run(TOY) is None and bookrun.book_run(TOY, "H100").run_id == h100.run_id
    assert bookrun.replay_target(TOY, "auto", None, None) == ("auto", None)   # each part's newest
    assert bookrun.replay_target(TOY, "auto", None, "H100") == ("replay", h100.run_id)


def test_without_a_whole_recording_a_page_keeps_to_its_gpus_runs(store):
    old = recorded(store, H200, ("baseline", "tiled"), "2026-11-19T00:00:00Z")
    recorded(store, H200, ("final",), "2026-11-20T00:00:00Z")
    h100 = recorded(store, H100, ("baseline", "tiled"), "2026-11-21T00:00:00Z")   # newer, another GPU
    assert bookrun.replay_target(TOY, "replay", None, None) == ("replay", None)
    assert "newest run of that GPU" in session.pinned()[1]
    assert session.replayed("toy-tiled", "toy").session.run.run_id == old.run_id   # never the H100's
    assert bookrun.replay_target(TOY, "replay", None, "H100") == ("replay", None)
    assert session.replayed("toy-tiled", "toy").session.run.run_id == h100.run_id
    missing = session.replayed("toy-final", "toy")   # the H100 never ran it
    assert not missing.found and "No run of a GPU named 'h100' holds 'toy-final'" in missing.status
    with pytest.raises(ParameterError, match="No run of the toy study was made on a GPU named 'A100'"):
        bookrun.replay_target(TOY, "replay", None, "A100")


def test_the_sanitizer_table_merges_only_the_runs_of_the_page_s_gpu(store):
    """The sanitizer's table merges runs itself: on a page kept to one GPU it reads that GPU's
    runs only, and a tool never run on a case says so instead of a blank."""
    from kernelbook.evidence import sanitizer
    from kernelbook.lenet import STUDY

    def checked(device, when, done):
        run = results.create_run({"device": device, "commit": "abc123def456", "host": "test"}, root=store)
        run.manifest["created_utc"] = when
        (run.root / "manifest.json").write_text(__import__("json").dumps(run.manifest))
        run.write_part(sanitizer.part(STUDY), "lenet", [
            {**results.record("lenet", "baseline", case, 2, "sanitizer_errors", 0.0), "tool": tool}
            for case, tool in done])
        return run

    h200 = checked(H200, "2026-11-20T00:00:00Z", [("C1", "memcheck"), ("C3", "racecheck")])
    h100 = checked(H100, "2026-11-21T00:00:00Z", [("C1", "memcheck"), ("C1", "racecheck")])
    with session.pinned_to(None):
        session.pin_device("H200")
        html = sanitizer.sanitizer_table(STUDY).to_html()
    assert h200.run_id in html and h100.run_id not in html and "NVIDIA H100" not in html
    assert "not recorded yet" in html and "nan" not in html   # racecheck never ran on the H200
    assert h100.run_id in sanitizer.sanitizer_table(STUDY).to_html()   # unpinned: the newest of all


def test_a_run_measured_without_nsight_compute_says_so_where_a_profile_would_be(store):
    from kernelbook.evidence import ncu

    plain = recorded(store, H200, SLUGS, "2026-11-20T00:00:00Z")
    profiled = recorded(store, H100, SLUGS, "2026-11-21T00:00:00Z", extra=("toy-tiled-ncu",))
    assert ncu.unprofiled(TOY, plain) and not ncu.unprofiled(TOY, profiled)
    said = ncu._absent(TOY, plain, "final")
    assert plain.run_id in said and "without Nsight Compute" in said
    assert "not recorded yet" in ncu._absent(TOY, profiled, "final")   # profiled, but not this step
