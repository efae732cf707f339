"""A study's profiles page: the device's ceilings and the vendor library measured (or replayed)
together, then every step against the floor, the roofline, the Nsight Compute overview and the
sanitizer, all read from the run the ceilings come from when it holds them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ceilings as ceilings_mod
from . import floor, ncu, roofline, sanitizer
from . import vendor as vendor_mod


@dataclass
class ProfilesPage:
    study: object
    found_ceilings: ceilings_mod.Ceilings
    found_vendor: object
    prefer: str | None

    def banner(self):
        from IPython.display import Markdown

        from ..escape import md_text

        return Markdown(f"> **Ceilings:** {md_text(self.found_ceilings.status)} "
                        f"\\[{md_text(self.found_ceilings.short_label)}\\]\n>\n"
                        f"> **{self.study.vendor_name}:** {md_text(self.found_vendor.status)} "
                        f"\\[{md_text(self.found_vendor.short_label)}\\]")

    def ceilings_table(self):
        return ceilings_mod.ceilings_table(self.found_ceilings)

    def floor_table(self, size: int):
        return floor.floor_table(self.study, size, found_ceilings=self.found_ceilings, found_vendor=self.found_vendor,
                                 prefer_run=self.prefer)

    def points(self, size: int | None = None):
        return roofline.points(self.study, size, self.prefer, self.found_vendor)

    def maths(self) -> dict:
        """Each step's arithmetic per case ((step, case) -> ``math_for`` of its recorded parameters),
        for the notes on points above a roof: one step may run its cases on different units."""
        from ..stepdata import load_recorded

        out = {}
        for slug in self.study.steps.slugs():
            chapter = load_recorded(self.study, slug, prefer_run=self.prefer)
            if chapter is None:
                continue
            for case in self.study.cases:
                try:
                    out[(slug, case)] = floor.step_math(chapter, case)
                except Exception:  # a step whose parameters cannot be rebuilt here: no note for it
                    continue
        return out

    def roofline(self, size: int | None = None):
        from IPython.display import display

        frame = self.points(size)
        where = (f"at {self.study.size_header.lower()} {size or self.study.profile_size}"
                 if self.study.rows != "cases" else "each case at its own size")
        fig = roofline.roofline(frame, self.found_ceilings, title=f"Roofline: {self.study.title}, {where}",
                                maths=self.maths())
        display(fig)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return roofline.above_roof_note(fig)

    def environment(self):
        """Per run this page reads: the device, driver, CUDA runtime, libraries, clocks and cache
        state as its manifest and records hold them; "not recorded" where a run did not record one."""
        from IPython.display import display

        for table in environment_tables(self.study, self.prefer, self.found_ceilings, self.found_vendor):
            display(table)

    def points_table(self, size: int | None = None):
        return roofline.point_table(self.points(size), self.study.size_header, self.study.case_header)

    def ncu_overview(self):
        return ncu.ncu_overview(self.study, prefer_run=self.prefer)

    def sanitizer_table(self):
        return sanitizer.sanitizer_table(self.study, prefer_run=self.prefer)


def study_run(study, replay_run: str | None = None) -> str | None:
    """The run a replayed profiles page reads: ``replay_run``, else the newest run that holds this
    study's vendor recording (then its final step, then its baseline), so that the ceilings come from
    the same study's run and never from another study's."""
    from .. import results

    if replay_run:
        return replay_run
    for name in (vendor_mod.part(study), study.part(study.steps.slugs()[-1]), study.part(study.steps.baseline.slug)):
        run = results.run_with(name)
        if run is not None:   # (None: not recorded, try the next)
            return run.run_id
    return None


def open_page(study, mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
              vendor_sizes=None, repeats: int = 10, device: str | None = None) -> ProfilesPage:
    """Measure the ceilings and the vendor library into one run (or replay them: from the book's
    recording of the study on ``device`` when there is one, else from the same study's run:
    ``study_run``)."""
    from ..bookrecording import replay_target

    given = replay_run
    mode, replay_run = replay_target(study, mode, replay_run, device)
    if replay_run is not None and given is None:   # the book's run: read from it alone (pinned),
        return _open(study, mode, run_id, None, vendor_sizes, repeats, prefer=replay_run)
    return _open(study, mode, run_id, replay_run, vendor_sizes, repeats)


def _open(study, mode, run_id, replay_run, vendor_sizes, repeats, prefer: str | None = None) -> ProfilesPage:
    found_ceilings = ceilings_mod.ceilings(mode=mode, run_id=run_id, replay_run=replay_run, repeats=repeats,
                                           prefer_run=None if mode == "measure" else prefer or study_run(study, replay_run))
    if found_ceilings.recording.measuring:
        run_id = found_ceilings.session.run.run_id  # the vendor timings join the run of the ceilings
    found_vendor = vendor_mod.vendor(study, mode=mode, run_id=run_id, replay_run=replay_run, sizes=vendor_sizes,
                                     repeats=repeats,
                                     prefer_run=None if found_ceilings.recording.measuring else
                                     (found_ceilings.session.run.run_id if found_ceilings.recording.found else None))
    prefer = found_ceilings.session.run.run_id if found_ceilings.recording.found else (prefer or replay_run)
    return ProfilesPage(study, found_ceilings, found_vendor, prefer)


#: What a run's environment is made of, and where each fact is read from in its manifest or records.
ENVIRONMENT_ROWS = ("Device", "Driver (CUDA version it supports)", "CUDA runtime", "Libraries", "Vendor library",
                    "cuDNN algorithm and layout", "Clocks", "L2 cache between timed launches", "Host", "Commit")


def _environment_column(run, vendor_parameters: dict | None) -> dict:
    from .tools import NOT_RECORDED

    m = run.manifest
    dev, soft = m.get("device") or {}, m.get("software") or {}
    env = m.get("environment") or {}
    libs = ", ".join(f"{k} {v}" for k, v in sorted(soft.items())) or NOT_RECORDED
    vendor_text = ((vendor_parameters or {}).get("library") or (vendor_parameters or {}).get("torch")
                   or (f"PyTorch {soft['torch']}, cuDNN {soft.get('cudnn', '?')}" if soft.get("torch") else NOT_RECORDED))
    vendor_text = _CUDNN_CODE.sub(lambda found: f"cuDNN {_cudnn_version(int(found.group(1)))}", str(vendor_text))
    clock = dev.get("clock_khz")
    clocks = env.get("clocks") or (f"{NOT_RECORDED} (the device's maximum SM clock: {clock / 1e6:.2f} GHz)"
                                   if clock else NOT_RECORDED)
    return {
        "Device": f"{dev.get('name', NOT_RECORDED)} (compute capability {dev.get('compute_capability', '?')}, "
                  f"{dev.get('multiprocessors', '?')} SMs, L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB)",
        "Driver (CUDA version it supports)": dev.get("cuda_driver") or NOT_RECORDED,
        "CUDA runtime": dev.get("cuda_runtime") or NOT_RECORDED,
        "Libraries": libs,
        "Vendor library": vendor_text,
        "cuDNN algorithm and layout": env.get("cudnn_algorithm") or
        f"{NOT_RECORDED} (PyTorch chose; {(vendor_parameters or {}).get('layouts', 'NCHW tensors')})",
        "Clocks": clocks,
        "L2 cache between timed launches": env.get("l2_state") or
        f"{NOT_RECORDED} (launches run back to back, so inputs that fit in L2 stay warm)",
        "Host": f"{m.get('host', '?')}, {m.get('platform', '?')}",
        "Commit": m.get("commit", NOT_RECORDED),
    }


def environment_tables(study, prefer: str | None, found_ceilings, found_vendor) -> list:
    """One two-column table per run the page reads (the ceilings' and the vendor library's, then the
    step runs'): every fact of its environment, or "not recorded"."""
    import pandas as pd

    from .. import session as session_mod
    from ..report import styled

    runs: dict[str, tuple[object, str]] = {}
    for rec, what in ((found_ceilings, "the ceilings"), (found_vendor, f"{study.vendor_name}")):
        session = getattr(rec, "session", None)
        if session is not None:
            run, why = runs.get(session.run.run_id, (session.run, ""))
            runs[session.run.run_id] = (run, ", ".join(w for w in (why, what) if w))
    for slug in study.steps.slugs():
        found = session_mod.replayed(study.part(slug), study.name, prefer)   # the run this page reads it from
        if not found.found:
            continue
        run = found.session.run
        old, why = runs.get(run.run_id, (run, ""))
        runs[run.run_id] = (old, why + (", " if why else "") + f"step {slug}")
    vendor_session = getattr(found_vendor, "session", None)
    tables = []
    for run_id, (run, what) in runs.items():
        mine = vendor_session is not None and vendor_session.run.run_id == run_id
        layouts = ({"layouts": "NCHW tensors, and channels_last tensors for the …-channels-last rows"}
                   if mine and any(str(r.get("step", "")).endswith("channels-last") for r in found_vendor.records)
                   else {})
        column = _environment_column(run, {**found_vendor.parameters, **found_vendor.extra, **layouts} if mine else None)
        if study.vendor_name != "cudnn":   # a study whose library calls no convolution: no cuDNN choice to report
            column.pop("cuDNN algorithm and layout", None)
        frame = pd.DataFrame({"Fact": list(column), "Value": list(column.values())})
        tables.append(styled(frame, f"Environment of run {run_id} (read here for: {what}).", wrap=True))
    return tables


_CUDNN_CODE = re.compile(r"cuDNN (\d{4,6})\b")


def _cudnn_version(code: int) -> str:
    """cuDNN's version as ``torch.backends.cudnn.version()`` encodes it, in dotted form: from 9 on,
    major·10000 + minor·100 + patch (91900 -> 9.19.0); before, major·1000 + minor·100 + patch."""
    if code >= 90000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
