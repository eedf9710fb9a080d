"""Old and new estimator, side by side, on one archived run whose records carry their raw samples (schema 5).

    python3 experiments/2026-11-28-one-estimator/ab.py bench_results/<run id> [--keep DIR]

Per timed record, the p50 of the archived samples (`measurement.samples_us`, the representative round's) by the
rule its executable used before 2026-11-28 and by the driver's one estimator (docs/TIMING.md, "One estimator"):

    old: ours, upstream (Mojo, benchlib/stats.mojo): nearest rank, sorted[ceil(n / 2) - 1] (the lower median)
         nccl, torch_symm_* (driver/peers/torch_allreduce.py): sorted[n // 2] (the upper median)
         SDPA runner and peers (timing.cuh, np.percentile): linear interpolation
    new: np.percentile(samples, 50, method="linear"), every executable

Then every speed gate is judged both ways by the driver's own gate code, through its command line: the run is
written twice into two scratch result folders (every record's p50 replaced by the old or the new one, its stored
verdicts dropped so that nothing is read back), and `python -m driver limits` judges each with today's
thresholds.toml (gates.evaluate, as for a gate added after a run). Prints one table: gate, old ratio and verdict,
new ratio and verdict, and which verdicts changed. Imports no driver module (experiments/README.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MOJO = {"ours", "upstream"}
TORCH_ALLREDUCE = {"nccl", "torch_symm_oneshot", "torch_symm_twoshot"}


def old_p50(suite: str, impl: str, samples: list[float]) -> float:
    t = sorted(samples)
    if not t:
        return 0.0
    if suite == "allreduce" and impl in MOJO:
        return t[max(0, min(len(t) - 1, (50 * len(t) + 99) // 100 - 1))]  # stats.mojo _rank_index
    if suite == "allreduce" and impl in TORCH_ALLREDUCE:
        return t[len(t) // 2]
    return float(np.percentile(t, 50))  # the SDPA runner and peers: numpy's default, linear


def new_p50(samples: list[float]) -> float:
    return float(np.percentile(samples, 50, method="linear")) if samples else 0.0


def read_run(folder: Path) -> dict:
    for name, opener in (("results.json.gz", gzip.open), ("results.json", open)):
        if (folder / name).is_file():
            with opener(folder / name, "rt") as f:
                return json.load(f)
    sys.exit(f"ab: no results.json(.gz) in {folder}")


def variant(run: dict, which: str) -> tuple[dict, dict]:
    """The run with every sampled record's p50 by `which` rule, its verdicts dropped; and the p50s, by record."""
    out = json.loads(json.dumps(run))
    out["gates"], p50s = [], {}
    for rec in out["records"]:
        rec["performance"] = None
        m = rec["measurement"]
        samples = m.get("samples_us")
        if samples is None or not rec.get("round_p50_us"):
            continue
        p50 = old_p50(rec["suite"], rec["impl"], samples) if which == "old" else new_p50(samples)
        m["p50_us"] = p50
        if rec["suite"] == "allreduce" and p50 > 0:
            m["algbw_gbps"] = m["bytes"] / (p50 * 1e-6) / 1e9
            m["busbw_gbps"] = m["algbw_gbps"] * 2 * (m["ngpus"] - 1) / m["ngpus"]
        p50s[(rec["impl"], rec["config"], rec.get("timing"))] = p50
    return out, p50s


# `python -m driver limits`: a row of the not-met table, and an entry of the "Met in their newest run" sentence
ROW = re.compile(r"^\| (?P<device>[^|]+) \| (?P<gate>[^|]+?) \| (?P<measured>[^|]+) \| (?P<floor>[^|]+) \| [^|]+ \| "
                 r"(?P<state>[^|]+) \|")
MET = re.compile(r"(?P<device>\S+) (?P<suite>allreduce|sdpa) (?P<config>\S+) (?P<timing>cold|hot) (?P<impl>\S+) vs "
                 r"(?P<peer>\S+) (?P<ratio>[0-9.]+)x \(floor (?P<floor>[0-9.]+)x")


def judged(run: dict, scratch: Path) -> dict[str, tuple[str, str]]:
    """gate -> (ratio, verdict) as `python -m driver limits` judges the run alone."""
    folder = scratch / run["run_id"]
    folder.mkdir(parents=True)
    with gzip.open(folder / "results.json.gz", "wt") as f:
        json.dump(run, f)
    env = {**os.environ, "BENCH_RESULTS_DIR": str(scratch),  # the driver of this tree first, its packages after
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "driver", "limits"], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        sys.exit(f"ab: driver limits exited {proc.returncode}: {proc.stderr.strip()}")
    out: dict[str, tuple[str, str]] = {}
    for line in proc.stdout.splitlines():
        if (m := ROW.match(line)) and m["device"] != "device" and not m["device"].startswith("-"):
            ratio = m["measured"].split(" ")[0]
            out[f"{m['device']} {m['gate']}"] = (ratio, m["state"].strip())
        elif line.startswith("Met in their newest run:"):
            for e in MET.finditer(line):
                out[f"{e['device']} {e['suite']} {e['config']} {e['timing']}: {e['impl']} vs {e['peer']}"] = (
                    f"{e['ratio']}x", "pass")
    return out


def _norm(gate: str) -> str:
    return re.sub(r" \([^)]*\) vs ", " vs ", gate)  # the table names the kernel, the sentence does not


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an archived run folder whose records carry samples_us")
    ap.add_argument("--keep", type=Path, help="keep the two scratch result folders here")
    a = ap.parse_args()
    run = read_run(a.run)
    sampled = [r for r in run["records"] if r["measurement"].get("samples_us") is not None and r.get("round_p50_us")]
    if not sampled:
        sys.exit(f"ab: {a.run} has no timed record with samples_us (archived before 2026-11-28?)")
    base = a.keep or Path(tempfile.mkdtemp(prefix="one-estimator-"))
    try:
        old_run, old_p = variant(run, "old")
        new_run, new_p = variant(run, "new")
        old, new = ({_norm(k): v for k, v in judged(r, base / tag).items()}
                    for r, tag in ((old_run, "old"), (new_run, "new")))
    finally:
        if a.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"# {run['run_id']}: {len(sampled)} timed records with samples\n")
    print("| record | timing | samples | old p50 us | new p50 us | change |\n|---|---|---|---|---|---|")
    for r in sampled:
        k = (r["impl"], r["config"], r.get("timing"))
        o, n = old_p[k], new_p[k]
        print(f"| {r['impl']} {r['config']} | {r.get('timing')} | {len(r['measurement']['samples_us'])} | {o:.3f} | "
              f"{n:.3f} | {(n / o - 1) if o else 0:+.2%} |")
    changed = []
    print("\n| gate | old ratio | old verdict | new ratio | new verdict | changed |\n|---|---|---|---|---|---|")
    for gate in sorted(set(old) | set(new)):
        (orat, ov), (nrat, nv) = old.get(gate, ("-", "-")), new.get(gate, ("-", "-"))
        flip = ov != nv
        changed += [f"{gate}: {ov} -> {nv}"] if flip else []
        print(f"| {gate} | {orat} | {ov} | {nrat} | {nv} | {'**yes**' if flip else ''} |")
    print(f"\n{len(changed)} verdict(s) changed" + (":\n- " + "\n- ".join(changed) if changed else "."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
