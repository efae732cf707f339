"""A study's profiles page: the device's ceilings and the vendor library measured (or replayed)
together, then every step against the floor, the roofline, the Nsight Compute overview and the
sanitizer, all read from the run the ceilings come from when it holds them."""

from __future__ import annotations

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

    def roofline(self, size: int | None = None):
        frame = self.points(size)
        where = (f"at {self.study.size_header.lower()} {size or self.study.profile_size}"
                 if self.study.rows != "cases" else "for each case")
        return roofline.roofline(frame, self.found_ceilings, title=f"Roofline: {self.study.title}, {where}")

    def points_table(self, size: int | None = None):
        return roofline.point_table(self.points(size))

    def ncu_overview(self):
        return ncu.ncu_overview(self.study, prefer_run=self.prefer)

    def sanitizer_table(self):
        return sanitizer.sanitizer_table(self.study, prefer_run=self.prefer)


def open_page(study, mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
              vendor_sizes=None, repeats: int = 10) -> ProfilesPage:
    """Measure the ceilings and the vendor library into one run (or replay them)."""
    found_ceilings = ceilings_mod.ceilings(mode=mode, run_id=run_id, replay_run=replay_run, repeats=repeats)
    if found_ceilings.recording.measuring:
        run_id = found_ceilings.session.run.run_id  # the vendor timings join the run of the ceilings
    found_vendor = vendor_mod.vendor(study, mode=mode, run_id=run_id, replay_run=replay_run, sizes=vendor_sizes,
                                     repeats=repeats)
    prefer = found_ceilings.session.run.run_id if found_ceilings.recording.found else replay_run
    return ProfilesPage(study, found_ceilings, found_vendor, prefer)
