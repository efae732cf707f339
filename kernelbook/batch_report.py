"""What a batch records about its notebooks (``batch.json``): each notebook's outcome, the batch's
report, the source a page was executed from, and the key under which a page records each kernel
source it shows. Below the batch, its engines and the pages' tables, which all use it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import paths
from .errors import KernelbookError


@dataclass
class NotebookResult:
    """How one notebook of the batch ended (``running`` left behind means the batch was killed)."""

    name: str
    path: str
    output: str
    status: str = "pending"  # pending, running, ok, failed, interrupted
    seconds: float | None = None
    error: str | None = None
    source_sha256: str | None = None  # of the source that was executed: a later edit makes the page stale
    run_id: str | None = None
    finished_utc: str | None = None
    shown_instead: list = field(default_factory=list)  # [part, name, asked for, shown] of replayed pages
    worker: str | None = None  # where it ran ("local": in the batch's own process)
    gpu: str | None = None  # the UUID of the GPU that measured it (None: replayed)
    attempts: list = field(default_factory=list)  # every try: {worker, gpu, status, error, seconds}
    notebook_sha256: str | None = None  # of the executed file the batch wrote: the strict build checks it
    inputs_sha256: str | None = None  # of everything it was executed from (``kernelbook.executed.inputs_digest``)
    kept: bool = False  # not executed by this batch: its inputs were unchanged since it last ran
    phases: dict = field(default_factory=dict)  # seconds per phase (``kernelbook.phases``) of the last try


@dataclass
class BatchReport:
    """What ``run_batch`` did; ``batch.json`` is this object as JSON.

    ``run_id`` is the run the batch recorded into, or None for a replay batch (which records
    nothing, so announces no run)."""

    run_id: str | None
    mode: str
    parameters: dict
    out_dir: str
    started_utc: str
    finished_utc: str | None = None
    notebooks: list[NotebookResult] = field(default_factory=list)
    engine: str = "sequential"
    workers: int = 1
    gpus: list = field(default_factory=list)  # every GPU of the batch (measuring), as in the run's manifest
    seconds: float | None = None
    interrupted: bool = False
    measuring: bool = False

    earlier: list[NotebookResult] = field(default_factory=list)  # notebooks of earlier batches, kept

    @property
    def failed(self) -> list[NotebookResult]:
        return [nb for nb in self.notebooks if nb.status != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def recorded(self) -> bool:
        """Whether the batch's run exists in the store (a measured batch wrote at least one part)."""
        return bool(self.run_id) and (paths.results_dir() / self.run_id / "manifest.json").is_file()

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("earlier")
        # The record the build reads: every notebook's latest execution, this batch's first. A
        # notebook this batch has not finished (queued, running, or cut short by Ctrl-C or a kill)
        # keeps its earlier record: its earlier executed file is only replaced once the new one is
        # whole, so the earlier page stays buildable.
        earlier = {nb.name: nb for nb in self.earlier}
        mine = []
        for nb in self.notebooks:
            before = earlier.get(nb.name)
            unfinished = nb.status in UNFINISHED
            mine.append(asdict(before) if unfinished and before is not None and before.status == "ok" else asdict(nb))
        names = {nb.name for nb in self.notebooks}
        data["notebooks"] = mine + [asdict(nb) for nb in self.earlier if nb.name not in names]
        return data


#: Output-metadata key of a shown kernel source (``report.show_source`` writes it, with the file's path
#: and sha256; ``executed.stale_sources`` reads it).
SOURCE_METADATA = "kernelbook_source"

#: The states of a notebook that a batch has not finished: its earlier executed file is untouched.
UNFINISHED = ("pending", "running", "interrupted")


def short_error(exc: BaseException, limit: int = 300) -> str:
    """One line for the progress log: the exception type, and the notebook's own error inside it."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        detail = f"{exc.ename}: {exc.evalue}"
        if exc.exec_count is not None:
            detail = f"cell [{exc.exec_count}] {detail}"
    elif isinstance(exc, KernelbookError):
        detail = f"{exc.message} Fix: {exc.fix}"
    else:
        detail = str(exc)
    detail = " ".join(detail.split())
    if len(detail) > limit:
        detail = detail[: limit - 3] + "..."
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def source_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def text_digest(text: str) -> str:
    """The sha256 of ``text`` as the batch writes it (UTF-8): an executed notebook's digest."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_source(nb, source: Path) -> None:
    """Point papermill's ``input_path`` at the MyST source, and show the parameters once.

    Papermill adds a cell of injected parameters after the ``parameters`` cell; a reader would see
    two cells of parameters, one of them stale. The values that were used are folded into the
    ``parameters`` cell (a line per injected name replaced, new names appended) and the injected
    cell is hidden.
    """
    nb.metadata.setdefault("papermill", {})["input_path"] = paths.relative(source)
    injected = next((c for c in nb.cells if "injected-parameters" in (c.get("metadata", {}).get("tags") or [])), None)
    original = next((c for c in nb.cells if "parameters" in (c.get("metadata", {}).get("tags") or [])), None)
    if injected is not None and original is not None:
        values = {}
        for line in injected.source.splitlines():
            name, sep, _ = line.partition(" = ")
            if sep and name.isidentifier():
                values[name] = line
        lines = []
        for line in original.source.splitlines():
            name = line.split("=", 1)[0].strip()
            if name in values:
                comment = line[line.index("#"):] if "#" in line else ""
                lines.append(values.pop(name) + (f"  {comment}" if comment else ""))
            else:
                lines.append(line)
        original.source = "\n".join(lines + list(values.values()))
        injected.metadata.setdefault("tags", []).append("remove-cell")
