"""Report: what a reader sees of a run. COMPARE.md (side by side, per-suite tables, stress and
profile tables), the bench_results/ index, and the run's printout; all derived from results.json,
so any of them can be rendered again (`python -m driver index --rerender`).

driver/archive.py writes and reads the run folders; this module only turns records into text.
"""

from __future__ import annotations

from pathlib import Path

from driver import archive, gates, paths, phases, plots
from driver.config import TIMING_MODES
from driver.records import ArchivedRecord, BuildMeta, ClusterReport, GateResult, RunArchive
from driver.suites.stress.profile import METRIC_COLUMNS

COMPARE_FILE = "COMPARE.md"
INDEX_FILE = "README.md"


def _modes(run: RunArchive) -> list[str]:
    present = {r.timing_mode for r in run.records if r.suite != "stress" and r.round_p50_us}
    return [m for m in TIMING_MODES if m in present]


def _speed_table(run: RunArchive) -> list[str]:
    lines = []
    for suite in ("allreduce", "sdpa"):
        recs = [r for r in run.records if r.suite == suite]
        if not recs:
            continue
        # allreduce: link_frac, the share of the run's measured link ceiling (GPU0 -> GPU1 copy) reached
        link_col = suite == "allreduce"
        lines += [f"## {suite}", "", "| config | impl | kernel | timing | p50 us | p90 us | metric | "
                  + ("link_frac | " if link_col else "") + "correct | gate |",
                  "|---|---|---|---|---|---|---|---|---|" + ("---|" if link_col else "")]
        for r in recs:
            m = r.measurement
            gate = r.performance.status if r.performance else ""
            why = "; ".join(r.performance.reasons) if r.performance else ""
            link = ("- | " if r.link_frac is None else f"{r.link_frac:.2f} | ") if link_col else ""
            if not r.round_p50_us:  # checked only (a seed past the first, or wrong results): no timing to show
                lines.append(f"| {r.config} | {r.impl} | {r.kernel} | - | - | - | not timed | {link}{r.correctness.status} | "
                             f"{gate} {why} |")
                continue
            metric = f"{m.algbw_gbps:.1f} GB/s" if m.suite == "allreduce" else f"{m.tflops:.1f} TFLOP/s"
            lines.append(
                f"| {r.config} | {r.impl} | {r.kernel} | {r.timing_mode} ({r.timing_method}) | {m.p50_us:.2f} | "
                f"{m.p90_us:.2f} | {metric} | {link}{r.correctness.status} | {gate} {why} |"
            )
        lines.append("")
    return lines


def reading(speedup: float) -> str:
    """The seeds' reading of a difference: <5% negligible, 5-10% noticeable, >10% significant."""
    change = abs(speedup - 1)
    return "negligible" if change < 0.05 else "noticeable" if change <= 0.10 else "significant"


def _winner_table(run: RunArchive) -> list[str]:
    """Ours against every other impl of the same config on p50 (first seed for SDPA), every timing
    mode of the run side by side: each mode has its own speedup, reading and winner."""
    groups: dict[str, dict[str, dict[str, object]]] = {}
    first_seed = min((r.seed for r in run.records if r.seed is not None), default=None)
    for r in run.records:
        if r.suite == "stress":
            continue
        cfg = r.config if r.suite == "allreduce" else r.config.split("/")[0]
        if (r.seed != first_seed and r.seed is not None) or not r.round_p50_us:
            continue
        groups.setdefault(f"{r.suite} {cfg}", {}).setdefault(r.impl, {}).setdefault(r.timing_mode, r.measurement)
    modes = _modes(run)
    head = "| config | candidate | other | " + " | ".join(
        f"{m} p50 us (cand / other) | {m} speedup | {m} reading | {m} winner" for m in modes) + " |"
    rows = ["## Side by side (p50; speedup = other / candidate, >1 means the candidate is faster)", "",
            ("cold: each launch timed alone (SDPA: L2 flushed first); hot: launches back to back (a CUDA graph, "
             "or the host batch where the executable cannot capture one); README \"How we time\"."), "",
            head, "|---|---|---|" + "---|---|---|---|" * len(modes)]
    for cfg, by_impl in groups.items():
        cands = [i for i in ("ours", "cpasync", "baseline") if i in by_impl]
        for cand in cands:
            for other in by_impl:
                if other == cand or (cand == "baseline" and other == "cpasync"):
                    continue
                cells = []
                for mode in modes:
                    c, o = by_impl[cand].get(mode), by_impl[other].get(mode)
                    if c is None or o is None or c.p50_us <= 0 or o.p50_us <= 0:
                        cells.append("- | - | - | -")
                        continue
                    sp = o.p50_us / c.p50_us
                    win = cand if sp > 1 else other
                    cells.append(f"{c.p50_us:.2f} / {o.p50_us:.2f} | {sp:.2f}x ({(sp - 1):+.1%}) | {reading(sp)} | "
                                 f"{win if reading(sp) != 'negligible' else 'tie'}")
                rows.append(f"| {cfg} | {cand} | {other} | " + " | ".join(cells) + " |")
    return rows + [""] if len(rows) > 6 else []


def _stress_table(run: RunArchive) -> list[str]:
    recs = [r for r in run.records if r.suite == "stress"]
    if not recs:
        return []
    rows = ["## stress", "",
            "| check | kernel | config | iterations | checked | wrong | max_abs_err | hazards | hang | s | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        m = r.measurement
        why = "; ".join(r.correctness.reasons) or m.detail
        err = "NaN/inf" if m.nonfinite else _cell(m.max_abs_err)
        rows.append(f"| {m.check} | {m.kernel} | {m.config} | {_cell(m.iterations)} | {_cell(m.checked)} | "
                    f"{_cell(m.wrong)} | {err} | {_cell(m.hazards)} | {m.hang} | {_cell(m.seconds)} | "
                    f"{STATUS_TEXT[r.correctness.status]} {why} |")
    return rows + [""]


def _cell(value: float | None) -> str:
    """A measured number, or "-" where the check measured nothing (never a made-up 0)."""
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


STATUS_TEXT = {"fail": "FAIL", "not_measured": "NOT MEASURED", "inconclusive": "inconclusive", "pass": "pass"}


def _state(g: GateResult) -> str:
    return "not measured (optional here)" if g.optional else STATUS_TEXT[g.status]


def _gate_table(run: RunArchive) -> list[str]:
    """Every gate of the run and its state: failed and not measured first."""
    recorded = gates.recorded(run)
    if not recorded:
        return []
    note = "" if run.gates else " (schema 1 run: read back from its records' verdicts)"
    rows = [f"## Gates{note}", "", "| state | gate | kind | why |", "|---|---|---|---|"]
    rows += [f"| {_state(g)} | {g.gate} | {g.kind} | {'; '.join(g.reasons)} |" for g in gates.ordered(recorded)]
    return rows + [""]


def _number(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.3g}"


def _profile_table(run: RunArchive) -> list[str]:
    """The profile stage's counters, one table per kind of record (ncu, overlap, prefetch), so the
    numbers can be read side by side instead of inside the verdict column."""
    recs = [r for r in run.records if r.suite == "stress" and r.measurement.check == "profile"]
    out: list[str] = []
    for kind in dict.fromkeys(r.measurement.config.split("/")[0] for r in recs):
        group = [r for r in recs if r.measurement.config.split("/")[0] == kind]
        names = list(dict.fromkeys(k for r in group for k in r.measurement.counters))
        out += [f"### profile: {kind}", "", "| kernel | config | " + " | ".join(METRIC_COLUMNS.get(n, n) for n in names)
                + " | note |", "|---|---|" + "---|" * (len(names) + 1)]
        for r in group:
            c = r.measurement.counters
            cells = [_number(c[n]) if n in c else "-" for n in names]
            note = "; ".join(r.correctness.reasons) if r.correctness.status != "pass" else ""
            out.append(f"| {r.measurement.kernel} | {r.measurement.config} | " + " | ".join(cells) + f" | {note} |")
        out.append("")
    return out


def compare_markdown(run: RunArchive, images: list[str] | None = None) -> str:
    gpus = ", ".join(sorted({g.name for g in run.device.gpus}))
    head = [
        f"# Run {run.run_id}",
        "",
        f"- device: {run.device.kind} ({gpus}), driver {run.device.driver_version}",
        f"- git: {run.git_sha}{' (dirty)' if run.git_dirty else ''}",
        f"- command: `{' '.join(run.command)}`",
        *([f"- time: {phases.one_line(run.wall_s, run.phases_s)} (phase seconds; background phases overlap)"]
          if run.wall_s is not None else []),
        "",
    ]
    ceilings = [f"- link ceiling {k}: {v:.1f} GB/s (measured in this run)" for k, v in run.ceilings_gbps.items()]
    skipped = [f"- skipped {s.suite}/{s.impl}: {s.reason}" for s in run.skipped]
    if images:
        pics = [f"![{name}]({name})" for name in images]
    elif images is not None and plots.plottable(run):
        pics = ["(no plots: matplotlib is not installed on this host)"]
    else:
        pics = []  # nothing asked for, or nothing timed to plot (a stress run)
    return "\n".join(head + _gate_table(run) + _winner_table(run) + _speed_table(run) + _stress_table(run) + _profile_table(run) + ceilings + skipped + [""] + pics) + "\n"


def publish(run: RunArchive, meta: BuildMeta, thresholds_text: str, extra: dict[str, bytes] | None = None) -> Path:
    """Archive the run with its COMPARE.md (and any plots in `extra`), then refresh the index."""
    extra = dict(extra or {})
    compare = compare_markdown(run, sorted(n for n in extra if n.endswith(".png")))
    folder = archive.write_run(run, meta, thresholds_text, {COMPARE_FILE: compare.encode(), **extra})
    update_index(folder.parent)
    return folder


def rerender_compare(folder: Path) -> None:
    """COMPARE.md is derived from results.json (and the plots beside it): write it again, whole."""
    run = archive.load_run(folder)
    pngs = sorted(p.name for p in folder.glob("*.png"))
    paths.write_atomic(folder / COMPARE_FILE, compare_markdown(run, pngs or None))


def headline(run: RunArchive) -> str:
    """Every gate's state in one cell, failed and not measured first, naming the first of each."""
    recorded = gates.ordered(gates.recorded(run))
    if not recorded:
        return "no gates"
    parts = []
    for state in dict.fromkeys(_state(g) for g in recorded):
        group = [g for g in recorded if _state(g) == state]
        text = f"{len(group)} {state}"
        first = group[0]
        if first.blocking:
            why = "; ".join(first.reasons) or "no reason recorded"
            text += f" (e.g. {first.gate}: {why[:160]})"
        parts.append(text)
    return "; ".join(parts).replace("|", "/")


def index_markdown(root: Path) -> str:
    rows = ["# bench_results", "", "Archived runs, newest first. Each folder holds results.json (schema in schema/),",
            "build_meta.json, the thresholds used and COMPARE.md.", "",
            "| run | device | git | headline |", "|---|---|---|---|"]
    for folder in reversed(archive.archived_runs(root)):
        try:
            run = archive.load_run(folder)
        except ValueError:
            continue
        rows.append(f"| [{run.run_id}]({run.run_id}/COMPARE.md) | {run.device.kind} | {run.git_sha[:8]} | {headline(run)} |")
    return "\n".join(rows) + "\n"


def update_index(root: Path | None = None) -> None:
    root = root or paths.results_dir()
    paths.write_atomic(root / INDEX_FILE, index_markdown(root))


def _column_names(runs: list[RunArchive]) -> list[str]:
    """One column per run, named by its device kind (`2xH100`); a kind that appears twice gets its run id too."""
    kinds = [r.device.kind for r in runs]
    return [k if kinds.count(k) == 1 else f"{k} {r.run_id}" for k, r in zip(kinds, runs)]


def _stress_cell(r: ArchivedRecord) -> str:
    wrong = getattr(r.measurement, "wrong", None)
    return r.correctness.status + (f" ({wrong} wrong)" if wrong is not None else "")


def cross_device(runs: list[RunArchive]) -> list[str]:
    """The same config, in the same timing mode, on each GPU kind side by side: p50 per run, and slowest
    over fastest where two or more kinds ran it. Stress checks get their verdict per kind instead."""
    names = _column_names(runs)
    timed: dict[tuple[str, str, str, str], dict[str, ArchivedRecord]] = {}
    checked: dict[tuple[str, str, str], dict[str, ArchivedRecord]] = {}
    for name, run in zip(names, runs):
        for r in run.records:
            if r.suite == "stress":
                checked.setdefault((r.measurement.check, r.kernel, r.config), {}).setdefault(name, r)
            elif r.round_p50_us and r.measurement.p50_us > 0:
                timed.setdefault((r.suite, r.config, r.impl, r.timing_mode), {}).setdefault(name, r)
    out: list[str] = []
    if timed:
        out += ["## Timed configs, p50 us per device (kernel where ours chose one)", "",
                "| suite | config | impl | mode | " + " | ".join(names) + " | slowest / fastest |",
                "|---|---|---|---|" + "---|" * (len(names) + 1)]
        for (suite, cfg, impl, mode), by in timed.items():
            cells = []
            for n in names:
                r = by.get(n)
                kernel = f" ({r.kernel})" if r and suite == "allreduce" and impl == "ours" else ""
                cells.append(f"{r.measurement.p50_us:.2f}{kernel}" if r else "-")
            p50s = [r.measurement.p50_us for r in by.values()]
            spread = f"{max(p50s) / min(p50s):.2f}x" if len(p50s) > 1 else "-"
            out.append(f"| {suite} | {cfg} | {impl} | {mode} | " + " | ".join(cells) + f" | {spread} |")
        out.append("")
    if checked:
        out += ["## Stress checks per device", "", "| check | kernel | config | " + " | ".join(names) + " |",
                "|---|---|---|" + "---|" * len(names)]
        for (check, kernel, cfg), by in checked.items():
            cells = [_stress_cell(by[n]) if n in by else "-" for n in names]
            out.append(f"| {check} | {kernel} | {cfg} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def cluster_markdown(report: ClusterReport, runs: list[RunArchive]) -> str:
    """CLUSTER.md of a cluster run: every task's end, the cross-device table, each failed task's log tail."""
    sub = report.submission
    lines = [f"# Cluster run {sub.submission_id}", "",
             f"- job array {sub.job_id}, {len(sub.tasks)} task(s), time limit {sub.time_limit_min} min",
             f"- git: {sub.git_sha}{' (dirty)' if sub.git_dirty else ''}; built for {', '.join(sub.archs)}",
             f"- command: `{' '.join(sub.command)}`", "",
             "## Tasks", "", "| task | partition | GPUs | suite | node | Slurm state | exit | elapsed s | run folders |",
             "|---|---|---|---|---|---|---|---|---|"]
    for o in report.outcomes:
        t, st = o.task, o.state
        runs_cell = ", ".join(f"[{r}](../../{r}/COMPARE.md)" for r in o.collected) or "-"
        lines.append(f"| {t.index} | {t.partition} | {t.gpus}x {t.gpu_type} ({t.arch}) | {t.suite} | {st.node or '-'} | "
                     f"{st.state} | {'-' if st.exit_code is None else st.exit_code} | {st.elapsed_s} | {runs_cell} |")
    lines.append("")
    lines += cross_device(runs) if runs else ["(no task archived a run folder: nothing to compare)", ""]
    for o in report.outcomes:
        if o.problem:
            lines += [f"## Task {o.task.index} {o.task.label}: {o.problem}", "", "```", *o.log_tail, "```", ""]
    return "\n".join(lines) + "\n"
