"""What was tried for a step: its development candidates (``kernelbook try``), read from runs
promoted into the book's store, one table per page and one row per configuration.

Each row is one run's configuration: the sweep's (part ``<study>-<step>-grid``: every
configuration with its check verdict) and the chapter's (the step's part: the configuration it
ran at, its checks' worst error). Times are the recorded medians at each case's largest size,
with their spread and how they were timed. A time is set against the step's own only where the
same run holds the step's own configuration; rows of different runs (another day, another
device) stand side by side with their run ids and devices, never divided. The book's targets
(``Study.targets``) are judged per row from the same records.
"""

from __future__ import annotations

from . import paths, results
from .errors import ResultsError


def _spec(run: results.Run) -> dict:
    spec = run.manifest.get("candidate")
    if not isinstance(spec, dict) or not spec.get("source"):
        raise ResultsError(f"Run {run.run_id} names no candidate: it was not made by `kernelbook try`.",
                           "pass the run ids of promoted candidate runs (`kernelbook results --runs`).")
    return spec


def _median(r: dict) -> str:
    from .report import format_ms

    spread = f" ({format_ms(r['min'])}–{format_ms(r['max'])})" if r.get("min") is not None and r.get("max") is not None else ""
    n = len(r.get("samples") or [])
    return f"{format_ms(r['value'])}{spread}, {n} × {r.get('timing') or 'timed'}"


def _largest(records: list[dict], case: str, metric: str) -> dict | None:
    timed = [r for r in records if r["metric"] == metric and r["layer"] == case and r.get("value") is not None]
    if not timed:
        return None
    return max(timed, key=lambda r: -1 if r.get("size") is None else r["size"])


def _at(records: list[dict], case: str, metric: str, size) -> dict | None:
    if size is None:
        return _largest(records, case, metric)
    return next((r for r in records if r["metric"] == metric and r["layer"] == case and r.get("size") == size
                 and r.get("value") is not None), None)


def target_outcome(target: dict, records: list[dict], metric: str = "op_time_ms") -> str | None:
    """'met by …' or 'missed by …' for one book's target from one configuration's records (the sum
    over the target's cases at its size, else the largest recorded); None where a case is absent."""
    cases = target.get("cases") or (target["case"],)
    found = [_at(records, case, metric, target.get("size")) for case in cases]
    if any(r is None for r in found):
        return None
    total, limit = sum(r["value"] for r in found), target["limit_ms"]
    what = " + ".join(cases)
    verdict = f"met by {limit - total:.3f} ms" if total <= limit else f"missed by {total - limit:.3f} ms"
    return f"{what} = {total:.4f} ms ≤ {limit:g} ms: {verdict}"


def _targets(study, step: str) -> list[dict]:
    return [t for t in study.targets() if step in t.get("steps", ())]


def rows(study, step: str, run_ids: list[str], root=None, book_run: str | None = None) -> list[dict]:
    """One dict per (run, configuration): the table's rows before formatting; ``book_run``: a book
    run of the step (the page's own), first, as one more row of its own."""
    root = root if root is not None else paths.results_dir()
    step_entry = study.steps.get(step)
    own_params = study.impl(step).params()
    part = study.part(step_entry.slug)
    out = []
    for run_id in ([book_run] if book_run else []) + list(run_ids):
        run = results.load_run(run_id, root)
        own_run = run_id == book_run and not results.is_candidate(run)
        spec = {"source": step_entry.source, "step": step_entry.slug} if own_run else _spec(run)
        if spec.get("step") != step_entry.slug:
            raise ResultsError(f"Run {run_id} tried a candidate for step {spec.get('step')}, not {step_entry.slug}.",
                               f"pass only runs of {step_entry.slug}'s candidates on its page.")
        device = (run.manifest.get("device") or {}).get("name", "device not recorded")
        own_file = spec["source"] == step_entry.source and not spec.get("defines") and not spec.get("params")
        fixed = ", ".join([f"-D {k}={v}" for k, v in (spec.get("defines") or {}).items()]
                          + [f"-P {k}={v}" for k, v in (spec.get("params") or {}).items()])
        shown = f"kernels/{spec['source']} (the book's run)" if own_run else f"candidate/{spec['source']}"
        base = {"run": run_id, "device": device, "source": shown, "fixed": fixed}
        names = run.part_names()
        if f"{part}-grid" in names:
            grid = run.read_part(f"{part}-grid")
            metric = grid["parameters"].get("metric", "op_time_ms")
            labels = list(dict.fromkeys(r["config_label"] for r in grid["records"]))
            for label in labels:
                mine = [r for r in grid["records"] if r["config_label"] == label]
                config = mine[0].get("config") or {}
                statuses = list(dict.fromkeys(r.get("status", "ok") for r in mine))
                is_step = own_file and all(own_params.get(k) == v for k, v in config.items())
                out.append({**base, "part": "sweep", "config": label, "metric": metric, "records": mine,
                            "check": "; ".join(statuses), "worst": None, "is_step": is_step})
        if part in names:
            chapter = run.read_part(part)
            checks = chapter.get("checks") or []
            failed = [c for c in checks if not c.get("passed")]
            errors = [c for c in checks if c.get("measured") is not None]
            worst = max(errors, key=lambda c: c["measured"] / (c.get("tolerance") or 1.0), default=None)
            chosen = (chapter["parameters"].get(study.case_params_name) or {})
            config = "; ".join(f"{case}: " + (", ".join(f"{k}={v}" for k, v in p.items()) or "its own")
                               for case, p in chosen.items()) if any(chosen.values()) else "its own parameters"
            verdict = (f"failed {len(failed)} of {len(checks)}" if failed else f"passed {len(checks)} of {len(checks)}")
            out.append({**base, "part": "chapter", "config": config, "metric": study.time_metric,
                        "records": chapter["records"], "check": verdict, "worst": worst,
                        "is_step": own_file and not any(chosen.values())})
    return out


def table(study, step: str, run_ids: list[str], root=None, book_run: str | None = None):
    """The styled table: one row per configuration of each run (see the module's docstring)."""
    import pandas as pd

    from .report import styled

    if not run_ids:
        raise ResultsError(f"No candidate run given for {step}.", "pass the promoted runs' ids: tried(['RUN_ID', ...]).")
    found = rows(study, step, run_ids, root, book_run)
    targets = _targets(study, step)
    shown = []
    for row in found:
        correct = "failed" not in row["check"] and "refused" not in row["check"]
        worst = row["worst"]
        check = row["check"] + (f"; worst {worst.get('measure', 'error')} {worst['measured']:.3g} ({worst['label']}, "
                                f"limit {worst.get('tolerance'):g})" if worst is not None else "")
        if row["part"] == "sweep" and worst is None and correct:
            check += " (the sweep records the verdict, not the error)"
        line = {"Run (device)": f"{row['run']} ({row['device']})",
                "Candidate": row["source"] + (f" {row['fixed']}" if row["fixed"] else ""),
                "Part: configuration": f"{row['part']}: {row['config']}" + (" (the step's own)" if row["is_step"] else ""),
                "Check": check}
        same_step = [r for r in found if r["run"] == row["run"] and r["is_step"] and r["part"] == row["part"]]
        for case in study.cases:
            rec = _largest(row["records"], case, row["metric"]) if correct else None
            cell = "–" if rec is None else _median(rec)
            if rec is not None and same_step and not row["is_step"]:
                ref = _largest(same_step[0]["records"], case, row["metric"])
                if ref is not None and ref.get("size") == rec.get("size"):
                    cell += f"; {rec['value'] / ref['value']:.3f}× the step's own in this run"
            if rec is not None and rec.get("size") is not None:
                cell = f"size {rec['size']:,}: {cell}"
            line[case] = cell
        outcomes = [target_outcome(t, row["records"], row["metric"]) if correct else None for t in targets]
        line["The book's target"] = "; ".join(dict.fromkeys(o for o in outcomes if o)) or (
            "the study sets none for this step" if not targets else
            "not judged: its checks failed" if not correct else "not recorded at the target's size")
        shown.append(line)
    frame = pd.DataFrame(shown).fillna("–")
    return styled(frame, f"What was tried for {step}: every configuration of each candidate run, its checks and its "
                         "median time per case at the largest size (min–max, samples × how timed); a ratio only "
                         "against the step's own configuration in the same run.", wrap=True)
