"""VGG's parameter sweeps, declared as data and run by the core (``kernelbook.sweep``): the
tensor-core steps' tile shapes, and the batch sweep of the Hopper steps. Until a measured run
records them, their page section says "not recorded yet"."""

from __future__ import annotations

from ..sweep import Sweep

SWEEPS = {
    "tf32": Sweep("tf32", axes={"tile": [{"th": 8, "tw": 32}, {"th": 16, "tw": 16}]},
                  title="Pre-pool tile shape (rows x columns)"),
    "3xtf32": Sweep("3xtf32", axes={"bm": [64, 128], "tw": [16, 32]},
                    title="Output channels per block and tile width"),
}

# ----------------------------------------------------------------------------- the batch sweep
#: The batch sizes of the batch sweep, as cases "B<n>" (the study's own cases are B1 and B2).
BATCHES = ("B1", "B2", "B4", "B8", "B16")
#: The Hopper steps swept over the batch (their default parameters), each beside cuDNN with
#: channels_last tensors at the same precision (FP32-accurate: cuDNN FP32).
BATCH_STEPS = {"hopper-tf32": "cudnn-tf32-channels-last", "hopper-fp16": "cudnn-fp16-channels-last",
               "hopper-3xtf32": "cudnn-fp32-channels-last"}
BATCH_REPEATS, BATCH_WARMUP = 10, 2     # B = 16 is 16 layers per call: few repeats suffice
BATCH_SWEEPS = {step: Sweep(step, configs=({},), sizes=BATCHES, repeats=BATCH_REPEATS, warmup=BATCH_WARMUP,
                            title="Batch size (the step's default parameters)")
                for step in BATCH_STEPS}


def batch_study():
    """The VGG study with the batch sizes as its cases (``B<n>``: n images of the studied layer),
    so the core's sweep times each step at every batch size; checks as the study's."""
    from .problem import case
    from .run import vendor_runs
    from .study import VggStudy

    class BatchStudy(VggStudy):
        cases = BATCHES

        def size_of(self, name, size):
            return int(name[1:])

        def problem(self, name, size=None):
            return case(int(name[1:]))

        def vendor_runs(self, sizes, seed):
            return vendor_runs([case(int(name[1:])) for name in sizes], seed, variants=tuple(BATCH_STEPS.values()))

    return BatchStudy()


def vendor_part() -> str:
    from ..results import part_name

    return part_name("vgg", "cudnn", "batch")


def run_batch_sweep(mode: str = "auto", run_id: str | None = None, replay_run: str | None = None,
                    seed: int | None = None, prefer_run: str | None = None, device: str | None = None):
    """Measure (GPU) or replay the batch sweep: ``({step: SweepResult}, cuDNN Recording)``.
    Each step is one part ``vgg-<step>-grid`` (core sweep: checked, then timed per batch size);
    cuDNN channels_last at the three precisions is part ``vgg-cudnn-batch``, timed in the same
    run. Nothing recorded: empty results, which the table and the figure show as such."""
    from .. import harness, session
    from ..bookrecording import replay_target
    from ..evidence.vendor import torch_cuda_status
    from ..sweep import run_sweep

    study = batch_study()
    mode, replay_run = replay_target(study, mode, replay_run, device)
    steps, measured = {}, None
    for step, sweep in BATCH_SWEEPS.items():   # measured ones share one run
        steps[step] = run_sweep(study, sweep, mode=mode, run_id=measured or run_id, replay_run=replay_run, seed=seed,
                                required=False)
        if steps[step].found and steps[step].session.measuring:
            measured = steps[step].session.run.run_id

    def measure():
        return session.Measurement(harness.vendor(study, list(BATCHES), BATCH_REPEATS, BATCH_WARMUP),
                                   extra={"library": torch_cuda_status()[1]})

    vendor = session.recorded(vendor_part(), "vgg", measure,
                              parameters={"cases": list(BATCHES), "repeats": BATCH_REPEATS,
                                          "variants": list(BATCH_STEPS.values())},
                              mode=mode, run_id=measured or run_id, replay_run=replay_run,
                              prefer_run=prefer_run or measured or run_id, available=torch_cuda_status,
                              required=False, compare={})
    return steps, vendor


def _rows(steps, vendor) -> list[dict]:
    """One row per (what, batch): time and TFLOP/s (direct-convolution FLOPs)."""
    rows = []
    for step, result in steps.items():
        for r in result.records if result.found else []:
            if r["metric"] == "op_time_ms":
                batch = r.get("size") or int(str(r["layer"])[1:])  # the sweep's cases are "B<n>"
                rows.append({"what": step, "batch": batch, "ms": r["value"], "flops": r.get("flops"),
                             "status": r.get("status", "ok"), "run": result.session.run.run_id})
    for r in vendor.records if vendor.found else []:
        if r["metric"] == "op_time_ms" and r["step"] in BATCH_STEPS.values():
            rows.append({"what": r["step"], "batch": r["size"], "ms": r["value"], "flops": r.get("flops"),
                         "status": "ok", "run": vendor.session.run.run_id})
    for row in rows:
        row["tflops"] = row["flops"] / (row["ms"] * 1e9) if row["ms"] and row["flops"] else None
    return rows


def _not_recorded(steps, vendor) -> str | None:
    missing = [s for s, r in steps.items() if not r.found or not r.records] + ([] if vendor.found else ["cuDNN"])
    if len(missing) == len(steps) + 1:
        return "The batch sweep is not recorded yet: it runs with the next measured run on a GPU."
    return None


def batch_table(steps, vendor, what: str = "tflops"):
    """Each step beside cuDNN channels_last at its precision, per batch size: TFLOP/s
    (``what="tflops"``) or the median time per call (``what="time"``), one short number per cell
    so that every batch size fits the page's width."""
    import pandas as pd

    from ..errors import ParameterError
    from ..report import format_ms, message_table, styled

    if what not in ("tflops", "time"):
        raise ParameterError(f"batch_table shows 'tflops' or 'time', not {what!r}.", "pass what='tflops' or what='time'.")
    message = _not_recorded(steps, vendor)
    if message:
        return message_table(message, "Batch sweep")
    rows = _rows(steps, vendor)
    out = []
    for step, library in BATCH_STEPS.items():
        for name in (step, library):
            row = {"Kernel": name}
            for batch in (int(b[1:]) for b in BATCHES):
                found = [r for r in rows if r["what"] == name and r["batch"] == batch]
                if not found or found[0]["ms"] is None:
                    row[f"B={batch}"] = found[0]["status"] if found else "not recorded"
                elif what == "time":
                    row[f"B={batch}"] = format_ms(found[0]["ms"])
                else:
                    row[f"B={batch}"] = f"{found[0]['tflops']:.0f}" if found[0]["tflops"] else "–"
            out.append(row)
    runs = sorted({r["run"] for r in rows})
    shown = ("Median time per call" if what == "time" else
             "TFLOP/s (direct-convolution FLOPs over the median time per call)")
    return styled(pd.DataFrame(out), f"{shown} against the batch size; each Hopper step above cuDNN with "
                                     "channels_last tensors at its precision (FP32-accurate beside cuDNN FP32). "
                                     f"Run(s): {', '.join(runs)}.")


def batch_figure(steps, vendor):
    """TFLOP/s against the batch size: the three Hopper steps (solid) and cuDNN channels_last at the
    same precisions (dashed, the same colour)."""
    import matplotlib.pyplot as plt

    message = _not_recorded(steps, vendor)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    if message:
        ax.axis("off")
        ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=9, wrap=True)
        return fig
    rows = _rows(steps, vendor)
    colours = ("#0072B2", "#D55E00", "#009E73")   # Okabe-Ito
    batches = [int(b[1:]) for b in BATCHES]
    for colour, (step, library) in zip(colours, BATCH_STEPS.items()):
        for name, style, marker in ((step, "-", "o"), (library, "--", "s")):
            points = sorted((r["batch"], r["tflops"]) for r in rows if r["what"] == name and r["tflops"])
            if points:
                ax.plot(*zip(*points), style, marker=marker, color=colour, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch size (images)")
    ax.set_ylabel("TFLOP/s (direct-convolution FLOPs)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    # the key under the axes, so that no curve hides behind it
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    runs = sorted({r["run"] for r in rows})
    fig.text(0.01, 0.005, f"run(s) {', '.join(runs)}", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
