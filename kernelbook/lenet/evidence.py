"""What the compiler did with each step: ptxas resources and the SASS instruction mix.

Recorded with the run (part ``lenet-<variant>-compiler``) so that a replay shows the evidence of
the build that was timed. ``nvcc`` makes the cubin for sm_90 (the H100's architecture) with the
parameters each layer used; ``cuobjdump -sass`` disassembles it where it is installed (on the
device machine; the report says when it was not).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess

from .. import kernels, results, session as session_mod
from . import LAYERS, get_variant, layer_shape

STUDY = "lenet"
SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\b")
SHOWN_OPCODES = ("FFMA", "FMUL", "FADD", "HFMA2", "HMMA", "IMAD", "IADD3", "LDG", "LDS", "LDC", "ULDC", "LDL",
                 "STG", "STS", "STL", "BAR", "BRA")


def cuobjdump_path() -> str | None:
    return shutil.which("cuobjdump") or shutil.which("cuobjdump", path="/usr/local/cuda/bin")


def sass_counts(cubin) -> dict[str, collections.Counter]:
    """Opcode counts per kernel function in a cubin (static counts, not executed ones)."""
    tool = cuobjdump_path()
    if tool is None:
        return {}
    text = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True, timeout=120).stdout
    counts: dict[str, collections.Counter] = {}
    current = None
    for line in text.splitlines():
        if "Function :" in line:
            current = counts.setdefault(line.split("Function :", 1)[1].strip(), collections.Counter())
            continue
        match = SASS_LINE.search(line)
        if match and current is not None:
            current[match.group(1)] += 1
    return counts


def collect(variant: str, layer_params: dict) -> list[dict]:
    """Compile each layer's configuration with nvcc and describe every kernel in it."""
    impl = get_variant(variant)
    records = []
    for layer in LAYERS:
        params = impl.params(**layer_params.get(layer, {}))
        cubin, report = kernels.compile_cubin(impl.source, impl.defines(params, layer_shape(layer, 1)))
        sass = sass_counts(cubin)
        for fn in report:
            base = {"kernel": fn.name}
            for metric in ("registers", "shared_bytes", "constant_bytes", "stack_frame_bytes",
                           "spill_store_bytes", "spill_load_bytes"):
                records.append(results.record(STUDY, variant, layer, None, metric, getattr(fn, metric), **base))
            for opcode, count in sorted(sass.get(fn.name, {}).items()):
                records.append(results.record(STUDY, variant, layer, None, f"sass_{opcode}", count, **base))
    return records


def for_chapter(chapter):
    """The compiler evidence of a chapter's build: recorded into its run when it measures,
    read from its run (or the newest run that has it) when it replays."""
    import pandas as pd

    name = f"{STUDY}-{chapter.variant}-compiler"
    run = chapter.session.run
    layer_params = chapter.parameters.get("layer_params") or {}
    if chapter.session.measuring:
        records = collect(chapter.variant, _layer_params(chapter))
        run.write_part(name, STUDY, records, parameters={"layer_params": layer_params,
                                                         "sass": cuobjdump_path() is not None})
        sess = chapter.session
    else:
        source = results.run_with(name, run.run_id)
        if source is None:
            return None, pd.DataFrame()
        records = source.read_part(name)["records"]
        sess = session_mod.Session(name, "replay", source, chapter.session.reason)
    return sess, pd.DataFrame([{k: v for k, v in r.items() if k != "samples"} for r in records])


def _layer_params(chapter) -> dict:
    params = chapter.parameters.get("params") or {}
    per_layer = chapter.parameters.get("layer_params") or {}
    return {layer: {**params, **per_layer.get(layer, {})} for layer in LAYERS}


def evidence_table(sess, frame):
    """Registers, shared memory and spills, then the SASS mix, per kernel and layer."""
    from ..report import message_table, styled

    if sess is None or frame.empty:
        return message_table("no kernels", "No compiler evidence was recorded for this step.")
    wide = frame.pivot_table(index=["kernel", "layer"], columns="metric", values="value", aggfunc="first")
    keep = [c for c in ("registers", "shared_bytes", "spill_store_bytes", "stack_frame_bytes") if c in wide]
    keep += [f"sass_{op}" for op in SHOWN_OPCODES if f"sass_{op}" in wide]
    wide = wide[keep].fillna(0).astype(int).reset_index()
    wide.columns = [c.replace("sass_", "") for c in wide.columns]
    note = "" if any(c.startswith("sass_") for c in frame["metric"]) else " (no SASS: cuobjdump was not installed where this was recorded)"
    return styled(wide, f"ptxas report and static SASS instruction counts, sm_90{note}. {sess.label}")
