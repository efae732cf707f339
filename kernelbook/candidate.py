"""A development candidate standing in for a step: the step's implementation with another source
file and compile-time parameters (``kernelbook try``, see ``kernelbook.develop``), and where its
run keeps the files it compiled (``FILES_DIR``, each with its sha256).

Here, below the loop, so that the profilers' separate process (``evidence.target --source``)
builds the same stand-in as the process that checked and timed it, and so that a chapter that
shows a candidate's source and ``kernelbook promote`` find its files where ``kernelbook try`` put them.
"""

from __future__ import annotations

import copy
import hashlib
from contextlib import contextmanager
from pathlib import Path

from .errors import ParameterError
from .kernels import NAME_RE, define_options

#: Where a candidate's files are copied inside its run folder.
FILES_DIR = "candidate"


def sha256(path: Path) -> str:
    """The sha256 of a file's bytes: what a candidate's run records of each file it compiles."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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
