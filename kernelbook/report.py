"""Tables and sentences for the book, built from recorded records only.

Every table carries its provenance in the caption (measured now, or replayed with device, date
and commit). Numbers the seeds report live in ``data/reported/`` and are always labelled
"reported" with the seed's file name and GPU.
"""

from __future__ import annotations

import html

import pandas as pd

from . import paths
from .errors import DataError

MILESTONE_COLUMNS = ["Batch Size", "Op Time 1", "Op Time 2", "Layer Time 1", "Layer Time 2",
                     "Total Execution Time", "Accuracy"]
_CELLS = {
    "Op Time 1": ("op_time_ms", "C1"),
    "Op Time 2": ("op_time_ms", "C3"),
    "Layer Time 1": ("layer_time_ms", "C1"),
    "Layer Time 2": ("layer_time_ms", "C3"),
    "Total Execution Time": ("total_time_ms", "network"),
}


def format_ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value / 1000:.3f} s"
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.1f} µs"


ANY_BATCH = object()


def find_record(records: list[dict], metric: str, layer: str, batch=ANY_BATCH) -> dict | None:
    """The first record of ``metric`` for ``layer`` (and ``batch``, unless left out)."""
    for r in records:
        if r["metric"] == metric and r["layer"] == layer and (batch is ANY_BATCH or r["batch"] == batch):
            return r
    return None


def record_value(records: list[dict], metric: str, layer: str, batch=ANY_BATCH) -> float | None:
    found = find_record(records, metric, layer, batch)
    return None if found is None else found["value"]


def message_table(text: str, caption: str):
    """A one-cell table, where a table would stand if there were something to show."""
    return styled(pd.DataFrame({"": [text]}), caption)


def _cell(r: dict | None, spread: bool) -> str:
    if r is None or r["value"] is None:
        return "–"
    text = format_ms(r["value"])
    if spread and r.get("min") is not None:
        text += f" ({format_ms(r['min'])}–{format_ms(r['max'])})"
    return text


def milestone_frame(chapter, spread: bool = False) -> pd.DataFrame:
    """Batch Size | Op Time 1 | Op Time 2 | Layer Time 1 | Layer Time 2 | Total | Accuracy.

    A variant that failed its check shows ``FAILED check`` instead of any time.
    """
    records = chapter.records
    batches = chapter.parameters.get("batch_sizes") or sorted({r["batch"] for r in records if r["batch"]})
    rows = []
    for batch in batches:
        row = {"Batch Size": batch}
        for column, (metric, layer) in _CELLS.items():
            row[column] = _cell(find_record(records, metric, layer, batch), spread) if chapter.correct else "FAILED check"
        acc = find_record(records, "accuracy", "network", batch)
        row["Accuracy"] = f"{acc['value']:.4f}" if acc and chapter.correct else "–"
        rows.append(row)
    return pd.DataFrame(rows, columns=MILESTONE_COLUMNS)


def styled(frame: pd.DataFrame, caption: str):
    """A pandas Styler with the provenance caption, index hidden (renders as an HTML table)."""
    return (frame.style.hide(axis="index").set_caption(html.escape(caption))
            .set_table_attributes('class="kernelbook-table"'))


def milestone_table(chapter, spread: bool = True):
    title = f"{chapter.variant}: times are medians (min–max) over the repeats. {chapter.label}"
    return styled(milestone_frame(chapter, spread=spread), title)


def check_frame(chapter) -> pd.DataFrame:
    rows = []
    for c in chapter.checks:
        s = c["shape"]
        rows.append({
            "Layer": c.get("layer", ""),
            "Shape": c["label"],
            "B×C×H×W → M maps, K": f"{s['B']}×{s['C']}×{s['H']}×{s['W']} → {s['M']}, K={s['K']}",
            "rel. L2 error": "–" if c["rel_l2_error"] is None else f"{c['rel_l2_error']:.2e}",
            "unwritten": "–" if c["unwritten"] is None else c["unwritten"],
            "Result": "pass" if c["passed"] else f"FAIL {c.get('error') or ''}".strip(),
        })
    return pd.DataFrame(rows)


def check_table(chapter):
    n = len(chapter.checks)
    ok = sum(1 for c in chapter.checks if c["passed"])
    caption = (f"Correctness against float64 on fresh random inputs, output poisoned with NaN: "
               f"{ok}/{n} passed. {chapter.label}")
    return styled(check_frame(chapter), caption)


# ----------------------------------------------------------------------------- seeds


def reported(step: str | None = None, study: str = "lenet") -> pd.DataFrame:
    """What the seeds report (``data/reported/<study>.csv``), optionally for one step."""
    path = paths.data_dir() / "reported" / f"{study}.csv"
    if not path.is_file():
        raise DataError(f"{path} is missing.", "restore it with `git checkout -- data/reported/`.")
    frame = pd.read_csv(path)
    return frame[frame["step"] == step].reset_index(drop=True) if step else frame


def reported_table(step: str, study: str = "lenet"):
    frame = reported(step, study)
    if frame.empty:
        return message_table(f"No seed write-up reports the {step} step.", "Reported by the seeds")
    out = pd.DataFrame({
        "Source (seed, GPU)": frame["seed"] + ", " + frame["gpu"],
        "What": frame["seed_label"],
        "Batch Size": frame["batch"],
        "Op Time 1": frame["op_time_1_ms"].map(_maybe_ms),
        "Op Time 2": frame["op_time_2_ms"].map(_maybe_ms),
        "Layer Time 1": frame["layer_time_1_ms"].map(_maybe_ms),
        "Layer Time 2": frame["layer_time_2_ms"].map(_maybe_ms),
        "Total Execution Time": frame["total_time_s"].map(lambda s: "–" if pd.isna(s) else f"{s:.3f} s"),
        "Accuracy": frame["accuracy"].map(lambda a: "–" if pd.isna(a) else f"{a:g}"),
    })
    if frame[["layer_time_1_ms", "layer_time_2_ms"]].isna().all().all():
        out = out.drop(columns=["Layer Time 1", "Layer Time 2"])
    return styled(out, "Reported by the seed write-ups (their GPUs, their whole-program times; not measured here).")


def _maybe_ms(value) -> str:
    return "–" if pd.isna(value) else format_ms(float(value))


def show_source(relpath: str, start: str | None = None):
    """The kernel source from ``kernels/`` as a highlighted block (never pasted into a notebook)."""
    from IPython.display import Markdown

    path = paths.kernels_dir() / relpath
    if not path.is_file():
        raise DataError(f"Kernel source {path} does not exist.", "check the path relative to kernels/.")
    text = path.read_text()
    if start:
        index = text.find(start)
        text = text[index:] if index >= 0 else text
    return Markdown(f"`kernels/{relpath}`\n\n```cuda\n{text}\n```")


def speedup_sentence(chapter, reported_frame: pd.DataFrame, batch: int = 10000) -> str:
    """Ours against each seed's report at ``batch``, per layer, in words."""
    if not chapter.correct:
        return f"The {chapter.variant} kernel failed its correctness check, so it is not compared."
    parts = []
    for layer, column in (("C1", "op_time_1_ms"), ("C3", "op_time_2_ms")):
        ours = find_record(chapter.records, "op_time_ms", layer, batch)
        if ours is None:
            continue
        for _, row in reported_frame[reported_frame["batch"] == batch].iterrows():
            theirs = row[column]
            if pd.isna(theirs):
                continue
            ratio = float(theirs) / ours["value"]
            parts.append(f"{layer}: {format_ms(ours['value'])} here against {format_ms(float(theirs))} "
                         f"reported in `{row['seed']}` ({row['gpu']}; {row['seed_label']}), {ratio:.1f}× "
                         f"{'faster' if ratio >= 1 else 'slower'}")
    if not parts:
        return f"No seed reports batch {batch} for this step."
    return f"At batch {batch}: " + "; ".join(parts) + "."


def throughput(chapter) -> pd.DataFrame:
    """GFLOP/s and GB/s (fewest bytes a kernel must move) per layer and batch, from op times."""
    rows = []
    for r in chapter.records:
        if r["metric"] != "op_time_ms" or r["value"] is None:
            continue
        seconds = r["value"] / 1000
        rows.append({"layer": r["layer"], "batch": r["batch"], "op_time_ms": r["value"],
                     "gflops": r["flops"] / seconds / 1e9, "gbytes_per_s": r["min_bytes"] / seconds / 1e9})
    return pd.DataFrame(rows)



def throughput_table(chapter):
    frame = throughput(chapter)
    if frame.empty:
        return message_table("no timings (the check failed)", chapter.label)
    out = pd.DataFrame({
        "Layer": frame["layer"],
        "Batch Size": frame["batch"],
        "Op time": frame["op_time_ms"].map(format_ms),
        "GFLOP/s": frame["gflops"].map(lambda v: f"{v:,.0f}"),
        "GB/s (fewest bytes)": frame["gbytes_per_s"].map(lambda v: f"{v:,.1f}"),
    })
    return styled(out, f"Achieved throughput from op times. {chapter.label}")


def expectations(chapter) -> list[str]:
    """Sentences that judge the run from its own numbers (no number typed in by hand)."""
    if not chapter.correct:
        return ["The kernel failed its correctness check; nothing was timed."]
    lines = []
    frame = throughput(chapter)
    batches = sorted(frame["batch"].unique())
    small, large = batches[0], batches[-1]
    for layer, group in frame.groupby("layer"):
        t = dict(zip(group["batch"], group["op_time_ms"]))
        if large > small:
            growth = t[large] / t[small]
            work = large / small
            verdict = ("about linear: the GPU was already busy at the smallest batch"
                       if growth >= 0.7 * work else
                       "less than linear: the smallest batch could not fill the GPU, so fixed "
                       "costs (launch, tail, latency) weigh on it")
            lines.append(f"{layer}: {work:g}× the images took {growth:.1f}× the op time "
                         f"({format_ms(t[small])} → {format_ms(t[large])}), {verdict}.")
    at_large = frame[frame["batch"] == large].set_index("layer")
    if {"C1", "C3"} <= set(at_large.index):
        flop_ratio = (at_large.loc["C3", "gflops"] * at_large.loc["C3", "op_time_ms"]) / (
            at_large.loc["C1", "gflops"] * at_large.loc["C1", "op_time_ms"])
        time_ratio = at_large.loc["C3", "op_time_ms"] / at_large.loc["C1", "op_time_ms"]
        lines.append(f"At batch {large}, C3 does {flop_ratio:.2f}× C1's arithmetic and took "
                     f"{time_ratio:.2f}× its time: C1 runs at {at_large.loc['C1', 'gflops']:,.0f} "
                     f"GFLOP/s and C3 at {at_large.loc['C3', 'gflops']:,.0f} GFLOP/s.")
    for layer in ("C1", "C3"):
        op = find_record(chapter.records, "op_time_ms", layer, large)
        lay = find_record(chapter.records, "layer_time_ms", layer, large)
        if op and lay and lay["value"]:
            share = 1 - op["value"] / lay["value"]
            lines.append(f"{layer} layer time at batch {large}: {format_ms(lay['value'])}, of which "
                         f"{share:.0%} is copying between host and device rather than computing.")
    acc = find_record(chapter.records, "accuracy", "network", large)
    if acc:
        lines.append(f"Accuracy on the first {large} test images: {acc['value']:.4f} with this book's "
                     "own trained weights (the seeds used the course's weights).")
    return lines


def delta_table(steps: dict):
    """Op time of this step beside the baseline's and the previous step's, with the speedups."""
    names = list(steps)
    current = steps[names[-1]]
    rows = []
    for layer in ("C1", "C3"):
        batches = sorted({r["batch"] for r in current.records if r["metric"] == "op_time_ms" and r["layer"] == layer})
        for batch in batches:
            row = {"Layer": layer, "Batch Size": batch}
            mine = find_record(current.records, "op_time_ms", layer, batch)
            for name in names:
                chapter = steps[name]
                found = find_record(chapter.records, "op_time_ms", layer, batch) if chapter.correct else None
                row[name.split(":")[0].capitalize()] = format_ms(found["value"]) if found else "–"
                if name != names[-1] and found and mine:
                    row[f"speedup vs {name.split(':')[0]}"] = f"{found['value'] / mine['value']:.2f}×"
            rows.append(row)
    caption = " | ".join(f"{name}: {ch.session.short_label}" for name, ch in steps.items())
    return styled(pd.DataFrame(rows), f"Op time against earlier steps (medians). {caption}")


def best_config_table(grid, layers=("C1", "C3")):
    rows = [{"Layer": layer, "Best configuration": ", ".join(f"{k}={v}" for k, v in grid.best(layer).items())}
            for layer in layers]
    return styled(pd.DataFrame(rows), f"Fastest correct configuration per layer at the largest batch. {grid.label}")


def step_verdict(steps: dict, batch: int | None = None, metric: str = "op_time_ms") -> list[str]:
    """Did this step pay off? Its ``metric`` against the baseline's and the previous step's, per layer."""
    names = list(steps)
    current = steps[names[-1]]
    if not current.correct:
        return ["This step failed its correctness check, so it takes no part in the comparison."]
    batch = batch or max(r["batch"] for r in current.records if r["metric"] == metric)
    what = metric.replace("_ms", "").replace("_", " ")
    lines = []
    for layer in ("C1", "C3"):
        mine = find_record(current.records, metric, layer, batch)
        for name in names[:-1]:
            other = steps[name]
            theirs = find_record(other.records, metric, layer, batch) if other.correct else None
            if not (mine and theirs):
                continue
            ratio = theirs["value"] / mine["value"]
            if ratio >= 1.05:
                word = f"{ratio:.2f}× faster than"
            elif ratio <= 0.95:
                word = f"{1 / ratio:.2f}× slower than"
            else:
                word = "within 5 % of"
            lines.append(f"{layer} {what} at batch {batch}: {format_ms(mine['value'])}, {word} the "
                         f"{name.split(':')[0]} ({other.variant}, {format_ms(theirs['value'])}).")
    return lines or [f"No earlier step is recorded at batch {batch} to compare with."]


def accuracy_change(steps: dict):
    """Accuracy per batch size of this step against the baseline's (FP16 and tensor-core steps)."""
    names = list(steps)
    current, base = steps[names[-1]], steps[names[0]]
    rows = []
    for r in current.records:
        if r["metric"] != "accuracy":
            continue
        ref = find_record(base.records, "accuracy", "network", r["batch"])
        rows.append({"Batch Size": r["batch"],
                     f"Accuracy, {base.variant}": "–" if ref is None else f"{ref['value']:.4f}",
                     f"Accuracy, {current.variant}": f"{r['value']:.4f}",
                     "Change (images)": "–" if ref is None else
                     f"{round((r['value'] - ref['value']) * r['batch']):+d}"})
    caption = (f"Top-1 accuracy on the first B test images, {current.variant} against {base.variant}. "
               f"{current.session.short_label}")
    return styled(pd.DataFrame(rows), caption)


def workspace_table(variant: str, chapter):
    """The unrolled matrix per layer and batch: whole batch, and the chunk the variant uses."""
    from .lenet import get_variant, layer_shape

    impl = get_variant(variant)
    per_layer = chapter.parameters.get("layer_params") or {}
    rows = []
    for layer in ("C1", "C3"):
        params = impl.params(**{**(chapter.parameters.get("params") or {}), **per_layer.get(layer, {})})
        for batch in chapter.parameters.get("batch_sizes", []):
            shape = layer_shape(layer, batch)
            whole = impl.workspace_bytes(shape, dict(params, workspace_mib=None))
            chunk = impl.chunk_images(shape, params)
            rows.append({"Layer": layer, "Batch Size": batch,
                         "Unrolled matrix, whole batch": f"{whole / 2**30:.2f} GiB",
                         "Images per chunk": chunk,
                         "Workspace used": f"{impl.workspace_bytes(shape, params) / 2**20:.0f} MiB",
                         "Chunks": -(-batch // chunk)})
    return styled(pd.DataFrame(rows), f"Computed from the shapes and workspace_mib={params['workspace_mib']}.")


def grid_table(grid):
    """Every configuration of a grid: its status and its time per layer and batch."""
    frame = grid.frame()
    metric = grid.parameters["metric"]
    frame = frame[frame["metric"] == metric]
    rows = []
    for (label, layer), group in frame.groupby(["config_label", "layer"], sort=False):
        row = {"Configuration": label, "Layer": layer, "Check": group["status"].iloc[0]}
        for _, r in group.sort_values("batch").iterrows():
            row[f"B={r['batch']}"] = format_ms(r["value"]) if r["value"] == r["value"] and r["value"] is not None else "–"
        rows.append(row)
    what = metric.replace("_ms", "").replace("_", " ")
    return styled(pd.DataFrame(rows), f"{grid.variant}: {what} (median) of every configuration. {grid.label}")
