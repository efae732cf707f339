"""A development candidate standing in for a step: the step's implementation with another source
file and compile-time parameters (``kernelbook try``, see ``kernelbook.develop``): which file it
is, which step it stands in for, and where its run keeps the files it compiled (``FILES_DIR``,
each compressed, ``kernels.keep_source``, with the sha256 of its bytes in the manifest).

Here, below the loop, so that the profilers' separate process (``evidence.target --source``)
builds the same stand-in as the process that checked and timed it, and so that a chapter that
shows a candidate's source and ``kernelbook promote`` find its files where ``kernelbook try`` put them.
"""

from __future__ import annotations

import copy
import hashlib
import re
from contextlib import contextmanager
from pathlib import Path

from . import paths
from .batch_report import source_digest
from .errors import ParameterError, StepError
from .kernels import NAME_RE, define_options, keep_source, kept_file, local_headers, read_kept

#: Where a candidate's files are copied inside its run folder.
FILES_DIR = "candidate"
_ATTRIBUTE = re.compile(r"__(?:launch_bounds|cluster_dims)__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)")
_KERNEL = re.compile(r"__global__\s+void\s+([A-Za-z_]\w*)\s*\(")
_STEP_FILE = re.compile(r"^\d{2}_")


#: The sha256 of a file's bytes, as the batch records a page's shown sources: what a candidate's
#: run records of each file it compiles.
sha256 = source_digest


def keep_files(run_root: Path, files) -> None:
    """Keep a copy of each of ``files`` (relative to ``kernels/``) in the run, compressed."""
    for rel in files:
        keep_source(paths.kernels_dir() / rel, Path(run_root) / FILES_DIR, rel)


def kept_problems(run_root: Path, spec) -> list[str]:
    """Each file a candidate's manifest (``spec``) names that its run does not keep as it ran:
    missing, or whose bytes differ from the sha256 recorded when it ran (empty: all kept)."""
    files = spec.get("files") if isinstance(spec, dict) else None
    problems = []
    for rel, digest in (files if isinstance(files, dict) else {}).items():
        path = kept_file(rel, Path(run_root) / FILES_DIR)
        if path is None or hashlib.sha256(read_kept(path)).hexdigest() != digest:
            problems.append(f"The candidate's file {FILES_DIR}/{rel} in run {Path(run_root).name} is missing or "
                            "differs from the sha256 recorded when it ran")
    return problems


def candidate_impl(study, step: str, source: str, defines: dict | None = None):
    """A new instance of ``step``'s implementation class whose build is ``kernels/<source>``
    with the step's own defines plus every UPPER_CASE parameter (``defines`` are their defaults).
    Everything else (launches, arguments, checks) is the step's."""
    base = study.impl(step)
    cls = type(base)
    own = set(cls.defaults)
    given = dict(defines or {})
    bad = sorted(n for n in given if not NAME_RE.match(n) or n in own)
    if bad:
        raise ParameterError(f"-D {', '.join(bad)}: not a compile-time parameter name of a candidate.",
                             "use UPPER_CASE names the step does not take as parameters (its parameters: "
                             f"{', '.join(sorted(own)) or 'none'}, set with -P name=value).")
    define_options(given)  # numbers or text, nothing else

    def compile_time(params: dict) -> dict:
        return {k: v for k, v in params.items() if k not in own and NAME_RE.match(k)}

    class Stand(cls):  # (a class per candidate: the source is the class's, as a step's is its Step's)
        defaults = {**cls.defaults, **given}

        @property
        def source(self) -> str:
            return source

        def params(self, **overrides) -> dict:
            upper = compile_time(overrides)
            define_options(upper)
            merged = super().params(**{k: v for k, v in overrides.items() if k not in upper})
            merged.update(upper)
            return merged

        def defines(self, params, problem) -> dict:
            extra = compile_time(params)
            found = dict(super().defines({k: v for k, v in params.items() if k not in extra}, problem))
            found.update(extra)
            return found

    Stand.__name__ = Stand.__qualname__ = f"Candidate{cls.__name__}"
    impl = Stand()
    impl.step, impl.step_list = base.step, base.step_list
    impl.candidate_source = source
    return impl


def candidate_study(study, impl):
    """The study as the loop sees it with ``impl`` standing in for its step: a shallow copy whose
    ``impl(slug)`` answers the candidate for that step (and the study's own for the others), so the
    harness, the sweep and the profilers' launch all reach the candidate through ``study.impl``."""
    view = copy.copy(study)
    own = study.impl
    view.impl = lambda slug: impl if slug == impl.slug else own(slug)
    view.candidate_source = impl.candidate_source
    return view


@contextmanager
def standing_in(study, impl):
    """Inside: the study's step list answers ``impl`` for its step everywhere in this process, so a
    study's own look-ups by slug (a network that runs a step's layers, a public ``forward``) reach the
    candidate as the harness does; the step's own implementation is put back afterwards."""
    impls = study.steps._impls
    own = impls[impl.slug]
    impls[impl.slug] = impl
    try:
        yield
    finally:
        impls[impl.slug] = own


# ------------------------------------------------------------------------------ which step it stands for


def resolve_source(study, source: str | Path) -> str:
    """The candidate's file relative to ``kernels/`` (``vgg/x.cu``); it must lie beside the steps."""
    given = Path(source)
    folder = (paths.kernels_dir() / study.name).resolve()
    tried = [given, paths.kernels_dir() / given]
    if not given.is_absolute() and given.parts[:1] == ("kernels",):  # kernels/<study>/x.cu, wherever kernels/ is
        tried.insert(0, paths.kernels_dir().joinpath(*given.parts[1:]))
    found = [p for p in tried if p.is_file()]
    if not found:
        raise ParameterError(f"The candidate source {source} does not exist.",
                             f"pass a .cu file beside the steps, e.g. kernels/{study.name}/my_candidate.cu.")
    path = found[0].resolve()
    if path.suffix != ".cu" or path.parent != folder:
        raise ParameterError(f"The candidate source {source} is not a .cu file in kernels/{study.name}/.",
                             f"put it beside the steps it stands in for: kernels/{study.name}/<name>.cu "
                             "(it may include their headers).")
    relpath = f"{study.name}/{path.name}"
    if _STEP_FILE.match(path.name) and relpath not in {s.source for s in study.steps}:
        raise ParameterError(f"kernels/{relpath} is numbered like a step but is none of the {study.name} steps.",
                             "name a new candidate without the two-digit prefix (e.g. kernels/"
                             f"{study.name}/{_STEP_FILE.sub('', path.name)}); numbered files are the book's steps.")
    return relpath


def compiled_files(relpath: str) -> list[str]:
    """The file and the local headers it includes (``#include "x.cuh"``, recursively), relative to
    ``kernels/``: what its build reads from this project."""
    if not (paths.kernels_dir() / relpath).is_file():
        return []
    return [relpath, *local_headers(relpath)]


def kernel_names(relpath: str) -> set[str]:
    """The ``__global__`` functions the file and its local headers define."""
    names: set[str] = set()
    for rel in compiled_files(relpath):
        text = _ATTRIBUTE.sub(" ", (paths.kernels_dir() / rel).read_text(encoding="utf-8", errors="replace"))
        names.update(_KERNEL.findall(text))
    return names


def choose_step(study, relpath: str, step: str | None = None) -> str:
    """The step a candidate stands in for (the rule in ``kernelbook.develop``'s docstring)."""
    if step:
        return study.steps.get(step).slug
    for entry in study.steps:
        if entry.source == relpath:
            return entry.slug
    defined = kernel_names(relpath)
    matching = [s.slug for s in study.steps if study.impl(s.slug).kernel_names
                and set(study.impl(s.slug).kernel_names) <= defined]
    if len(matching) == 1:
        return matching[0]
    what = f"kernels/{relpath} defines the kernels {', '.join(sorted(defined)) or '(none found)'}"
    if not matching:
        raise StepError(f"{what}, which are all of no {study.name} step's kernels.",
                        f"pass --step SLUG, the step it stands in for: one of {', '.join(study.steps.slugs())}.")
    raise StepError(f"{what}: the kernels of {len(matching)} steps ({', '.join(matching)}).",
                    f"pass --step SLUG, the step it stands in for: one of {', '.join(matching)}.")
