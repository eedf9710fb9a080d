"""cuDNN FP8 and torch SDPA peers on one GPU, through the driver's command line: one `python -m driver
bench --suite sdpa` at the mission, (2,16,2048,128), (1,16,8192,128) and odd shapes (seed 0, cold and hot,
100 iterations, 10 warm-up, hot = 20 launches per graph), archived under OUTDIR/bench_results; then every
SDPA row of its results.json (ours and the peers: p50, TFLOP/s, error against the float64 reference,
precision, peer version) as OUTDIR/results.jsonl and a table.

    PYTHONPATH=<bundle>:<bundle>/site/py312 python3 run_peers.py OUTDIR [extra `driver bench` arguments]

The script that made this folder's log.txt and results.jsonl (bundle of 3f127a0) called the peers' main()
and cudnn_sdpa.decode_check in its own process; it imported driver modules, so since issue 31 it is in the
git history only (`git show 4549c0d:experiments/2026-11-23-sdpa-peers/run_peers.py`), and this one asks
the driver's command line for the same shapes instead (the decode check has no command line: not rerun).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SHAPES = "mission,large_d128,long_d128,odd"
BENCH = ["bench", "--suite", "sdpa", "--shapes", SHAPES, "--seeds", "0", "--timing", "cold,hot",
         "--iters", "100", "--warmup", "10", "--batch", "20", "--rounds", "1"]


def main() -> int:
    out_dir = Path(sys.argv[1]).resolve()
    runs = out_dir / "bench_results"
    runs.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "driver", *BENCH, *sys.argv[2:]]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, "BENCH_RESULTS_DIR": str(runs)})
    print(f"driver bench exited {proc.returncode} after {time.perf_counter() - t0:.0f} s", flush=True)
    folders = sorted(p for p in runs.iterdir() if (p / "results.json.gz").is_file() or (p / "results.json").is_file())
    if not folders:
        print("no archived run", file=sys.stderr)
        return proc.returncode or 1
    last = folders[-1]  # results.json.gz since 2026-11-26, results.json before
    run = json.loads(gzip.decompress((last / "results.json.gz").read_bytes()) if (last / "results.json.gz").is_file()
                     else (last / "results.json").read_text())
    rows = []
    for r in run["records"]:
        if r["suite"] != "sdpa":
            continue
        m = r["measurement"] or {}
        rows.append({"config": r["config"], "shape": m.get("shape"), "impl": r["impl"], "timing": r["timing"],
                     "p50_us": m.get("p50_us"), "tflops": m.get("tflops"), "max_abs_err": r["max_abs_err"],
                     "rel_l2": r["rel_l2"], "correctness": r["correctness"]["status"],
                     "precision": m.get("precision"), "peer_version": m.get("peer_version")})
    (out_dir / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    print(f"\nrun {run['run_id']} (commit {run['git_sha'][:8]})\n")
    print("| shape | impl | timing | p50 us | TFLOP/s | max_abs_err | rel_l2 |")
    print("|---|---|---|---|---|---|---|")
    def cell(x, f: str) -> str:
        return "-" if x is None else format(x, f)

    for x in rows:
        print(f"| {x['config']} | {x['impl']} | {x['timing'] or 'check only'} | {cell(x['p50_us'], '.2f')} | "
              f"{cell(x['tflops'], '.1f')} | {cell(x['max_abs_err'], '.4f')} | {cell(x['rel_l2'], '.4f')} |")
    for impl, text in {x["impl"]: x["precision"] for x in rows if x["precision"]}.items():
        print(f"precision {impl}: {text}")
    for impl, text in {x["impl"]: x["peer_version"] for x in rows if x["peer_version"]}.items():
        print(f"version {impl}: {text}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
