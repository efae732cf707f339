"""LeNet-only tables and sentences: the write-ups' reported numbers, copy shares, workspaces,
accuracy changes. Reported numbers live in ``data/reported/lenet.csv`` and are always labelled
*reported* with the seed's file name and GPU."""

from __future__ import annotations

import pandas as pd

from ..escape import md_text
from ..report import find_record, format_ms, message_table, styled, throughput


def reported(step: str | None = None) -> pd.DataFrame:
    """What the seeds report (``data/reported/lenet.csv``), optionally for one step."""
    from ..study import reported_csv

    return reported_csv("lenet", step)


def reported_table(step: str):
    frame = reported(step)
    if frame.empty:
        return message_table(f"No seed write-up reports the {step} step.", "Reported by the seeds")
    # The times first, then where they come from: the seed's name and its label are long, and on a
    # narrow page the Op Times must stay in view (tests/test_book.py's width rule).
    out = pd.DataFrame({
        "Seed": frame["seed"].str.slice(0, 3),
        "Batch Size": frame["batch"],
        "Op Time 1": frame["op_time_1_ms"].map(_maybe_ms),
        "Op Time 2": frame["op_time_2_ms"].map(_maybe_ms),
        "Layer Time 1": frame["layer_time_1_ms"].map(_maybe_ms),
        "Layer Time 2": frame["layer_time_2_ms"].map(_maybe_ms),
        "Total Execution Time": frame["total_time_s"].map(lambda s: "–" if pd.isna(s) else f"{s:.3f} s"),
        "Accuracy": frame["accuracy"].map(lambda a: "–" if pd.isna(a) else f"{a:g}"),
        "What": frame["seed_label"],
        "Source (seed, GPU)": frame["seed"] + ", " + frame["gpu"],
    })
    if frame[["layer_time_1_ms", "layer_time_2_ms"]].isna().all().all():
        out = out.drop(columns=["Layer Time 1", "Layer Time 2"])
    return styled(out, "Reported by the seed write-ups (their GPUs, their whole-program times; not measured here).")


def _maybe_ms(value) -> str:
    return "–" if pd.isna(value) else format_ms(float(value))


def speedup_sentence(chapter, reported_frame: pd.DataFrame, batch: int = 10000) -> str:
    """Ours against each seed's report at ``batch``, per layer, in words."""
    if not chapter.correct:
        return f"The {chapter.slug} kernel failed its correctness check, so it is not compared."
    parts = []
    for layer, column in (("C1", "op_time_1_ms"), ("C3", "op_time_2_ms")):
        ours = find_record(chapter.records, "op_time_ms", layer, batch)
        if ours is None:
            continue
        # The streams step's reported op times time the launches only: not comparable with kernels.
        rows = reported_frame[(reported_frame["batch"] == batch) & (reported_frame["step"] != "streams")]
        for _, row in rows.iterrows():
            theirs = row[column]
            if pd.isna(theirs):
                continue
            parts.append(f"{layer}: {format_ms(ours['value'])} here, {format_ms(float(theirs))} "
                         f"reported in `{row['seed']}` ({md_text(row['gpu'])}; {md_text(row['seed_label'])})")
    if not parts:
        streams_rows = not reported_frame[(reported_frame["batch"] == batch) & (reported_frame["step"] == "streams")].empty
        return (f"The write-ups' op times at batch {batch} for this step are not kernel times like ours (seed 001's "
                "time the asynchronous launches only, and seed 000's are many times its own kernels' in the steps "
                "before), so none is set beside ours here (the write-ups' table shows them)." if streams_rows else
                f"No seed reports batch {batch} for this step.")
    # Another GPU: the numbers are set side by side, never divided (the intro says why a ratio across
    # devices means nothing); the write-ups' table beside them is where they are compared.
    return (f"At batch {batch}, beside the write-ups (other GPUs, so no ratio is drawn): " + "; ".join(parts) + ".")


def expectations(chapter) -> list[str]:
    """Sentences that judge the run from its own numbers (no number typed in by hand)."""
    if not chapter.correct:
        return ["The kernel failed its correctness check; nothing was timed."]
    lines = []
    frame = throughput(chapter)
    batches = sorted(frame["size"].unique())
    small, large = batches[0], batches[-1]
    for layer, group in frame.groupby("layer"):
        t = dict(zip(group["size"], group["op_time_ms"]))
        if large > small:
            growth = t[large] / t[small]
            work = large / small
            verdict = ("about linear: the GPU was already busy at the smallest batch"
                       if growth >= 0.7 * work else
                       "less than linear: the smallest batch could not fill the GPU, so fixed "
                       "costs (launch, tail, latency) weigh on it")
            lines.append(f"{layer}: {work:g}× the images took {growth:.1f}× the op time "
                         f"({format_ms(t[small])} → {format_ms(t[large])}), {verdict}.")
    at_large = frame[frame["size"] == large].set_index("layer")
    if {"C1", "C3"} <= set(at_large.index):
        flop_ratio = (at_large.loc["C3", "gflops"] * at_large.loc["C3", "op_time_ms"]) / (
            at_large.loc["C1", "gflops"] * at_large.loc["C1", "op_time_ms"])
        time_ratio = at_large.loc["C3", "op_time_ms"] / at_large.loc["C1", "op_time_ms"]
        lines.append(f"At batch {large}, C3 does {flop_ratio:.2f}× C1's arithmetic and took "
                     f"{time_ratio:.2f}× its time: C1 runs at {at_large.loc['C1', 'gflops']:,.0f} "
                     f"GFLOP/s and C3 at {at_large.loc['C3', 'gflops']:,.0f} GFLOP/s.")
    overlapped = not chapter.step.impl.graph_capturable  # the streams step overlaps copies and kernels
    for layer in ("C1", "C3"):
        op = find_record(chapter.records, "op_time_ms", layer, large)
        lay = find_record(chapter.records, "layer_time_ms", layer, large)
        if not (op and lay and lay["value"]):
            continue
        if overlapped:
            lines.append(f"{layer} layer time at batch {large}: {format_ms(lay['value'])}. Copies and kernels overlap "
                         "here, so the layer time cannot be split into copying and computing by subtraction; the "
                         "timelines above show how much of each stream's time is copying.")
        else:
            share = 1 - op["value"] / lay["value"]
            lines.append(f"{layer} layer time at batch {large}: {format_ms(lay['value'])}, of which {share:.0%} is spent "
                         "outside the kernel (the copies between host and device, which do not overlap it here).")
    acc = find_record(chapter.records, "accuracy", "network", large)
    if acc:
        lines.append(f"Accuracy on the first {large} test images: {acc['value']:.4f} with this book's "
                     "own trained weights (the seeds used the course's weights).")
    return lines


def accuracy_change(steps: dict):
    """Accuracy per batch size of this step against the baseline's (FP16 and tensor-core steps)."""
    names = list(steps)
    current, base = steps[names[-1]], steps[names[0]]
    rows = []
    for r in current.records:
        if r["metric"] != "accuracy":
            continue
        ref = find_record(base.records, "accuracy", "network", r["size"])
        rows.append({"Batch Size": r["size"],
                     f"Accuracy, {base.slug}": "–" if ref is None else f"{ref['value']:.4f}",
                     f"Accuracy, {current.slug}": f"{r['value']:.4f}",
                     "Change (images)": "–" if ref is None else
                     f"{round((r['value'] - ref['value']) * r['size']):+d}"})
    caption = (f"Top-1 accuracy on the first B test images, {current.slug} against {base.slug}. "
               f"{current.session.short_label}")
    return styled(pd.DataFrame(rows), caption)


def workspace_table(step: str, chapter):
    """The unrolled matrix per layer and batch, the workspace a whole batch would need (the unrolled
    matrix and the GEMM's result), and the chunks the step uses instead."""
    from . import get_step, layer_shape

    impl = get_step(step)
    per_layer = chapter.parameters.get("layer_params") or {}
    rows = []
    for layer in ("C1", "C3"):
        params = impl.params(**{**(chapter.parameters.get("params") or {}), **per_layer.get(layer, {})})
        for batch in chapter.parameters.get("batch_sizes", []):
            shape = layer_shape(layer, batch)
            whole = impl.workspace_bytes(shape, dict(params, workspace_mib=None))
            chunk = impl.chunk_images(shape, params)
            unrolled = 4 * impl.workspace_arrays(shape, batch).get("xu", whole // 4)
            rows.append({"Layer": layer, "Batch Size": batch,
                         "Unrolled matrix, whole batch": f"{unrolled / 2**30:.2f} GiB",
                         "Workspace, whole batch (with the GEMM's result)": f"{whole / 2**30:.2f} GiB",
                         "Images per chunk": chunk,
                         "Workspace used": f"{impl.workspace_bytes(shape, params) / 2**20:.0f} MiB",
                         "Chunks": -(-batch // chunk)})
    return styled(pd.DataFrame(rows), f"Computed from the shapes and workspace_mib={params['workspace_mib']}.")




def goal_lines(chapter, goal: dict) -> list[str]:
    """The study's goal (its target, ``LeNetStudy.targets``), judged from the records: Op Time 1 +
    Op Time 2 at 10,000 images against 1.0 ms, and against cuDNN FP32 (timed in the same run
    when it holds it, else the newest)."""
    from ..evidence.vendor import vendor

    batch, limit, factor = goal["size"], goal["limit_ms"], goal["vendor_factor"]
    if not chapter.correct or chapter.slug not in goal["steps"]:
        return []
    ops = [find_record(chapter.records, "op_time_ms", layer, batch) for layer in goal["cases"]]
    if None in ops:
        return []
    total = ops[0]["value"] + ops[1]["value"]
    status = (f"meets the book's target of {limit:g} ms" if total <= limit else
              f"misses the book's target of {limit:g} ms by {total - limit:.3f} ms ({total / limit:.2f}×)")
    lines = [f"The book's target: Op Time 1 + Op Time 2 at batch {batch} = {format_ms(ops[0]['value'])} + "
             f"{format_ms(ops[1]['value'])} = {format_ms(total)}, which {status}."]
    found = vendor(chapter.study, "replay", prefer_run=chapter.session.run.run_id)
    cudnn = [find_record([r for r in found.records if r["step"] == goal["vendor"]], "op_time_ms", layer, batch)
             for layer in goal["cases"]]
    if None not in cudnn:
        theirs = cudnn[0]["value"] + cudnn[1]["value"]
        same = found.found and found.session.run.run_id == chapter.session.run.run_id
        ratio = theirs / total
        how = f"{ratio:.1f}× faster than it" if ratio >= 1 else f"{1 / ratio:.1f}× slower than it"
        lines.append(f"cuDNN FP32 takes {format_ms(theirs)} for the two layers "
                     f"({'same run' if same else 'run ' + found.session.run.run_id}): this step is {how} "
                     f"(the book's target: at least {factor:g}× faster, {'met' if ratio >= factor else 'missed'}).")
    return lines


def reported_best(study):
    """Per seed, its fastest reported Op Time 1 + Op Time 2 at the largest batch it reports (10,000;
    5,000 for seed 003), beside this book's fastest step at the same batch, or a row saying that the
    batch is not recorded yet."""
    from ..bookrun import load_recorded  # the book's recording on the chosen GPU

    frame = reported()
    # The streams step's reported op times time the launches, not the kernels: not comparable here.
    frame = frame[frame["op_time_1_ms"].notna() & frame["op_time_2_ms"].notna() & (frame["step"] != "streams")].copy()
    frame["total"] = frame["op_time_1_ms"] + frame["op_time_2_ms"]
    rows, batches = [], []
    for (seed, gpu), group in frame.groupby(["seed", "gpu"]):
        group = group[group["batch"] == group["batch"].max()]
        best = group.loc[group["total"].idxmin()]
        batches.append(int(best["batch"]))
        rows.append({"Who": f"{seed[:3]}, reported", "Batch": f"{int(best['batch']):,}",
                     "Op 1 + Op 2": format_ms(best["total"]),
                     "Op Time 1": format_ms(best["op_time_1_ms"]), "Op Time 2": format_ms(best["op_time_2_ms"]),
                     "Step": f"{best['step']} ({best['seed_label']})", "Source": f"{seed} ({gpu})"})
    for batch in sorted(set(batches), reverse=True):
        ours = []
        for slug in study.steps.slugs():
            chapter = load_recorded(study, slug)
            if chapter is None or not chapter.correct:
                continue
            ops = [find_record(chapter.records, "op_time_ms", layer, batch) for layer in ("C1", "C3")]
            if None not in ops:
                ours.append((ops[0]["value"] + ops[1]["value"], slug, ops, chapter))
        if ours:
            total, slug, ops, chapter = min(ours, key=lambda t: t[0])
            rows.append({"Who": "this book", "Batch": f"{batch:,}", "Op 1 + Op 2": format_ms(total),
                         "Op Time 1": format_ms(ops[0]["value"]), "Op Time 2": format_ms(ops[1]["value"]),
                         "Step": slug, "Source": f"{chapter.session.run.device}, run {chapter.session.run.run_id}"})
        else:
            rows.append({"Who": "this book", "Batch": f"{batch:,}", "Op 1 + Op 2": "not recorded yet",
                         "Op Time 1": "–", "Op Time 2": "–", "Step": "–",
                         "Source": f"batch {batch:,} is measured from the next recorded run on"})
    return pd.DataFrame(rows)
