"""Time and check the fp8 tier (wgmma_fp8_sm90) of several runner builds side by side: speed at the timing shapes
(cold and hot, the runners' own timing, builds alternating per shape and mode) and error against the float64
reference at the accuracy shapes, per input distribution and seed.

  python3 ab.py --build NAME=RUNNER [--build NAME=RUNNER ...] --out OUT_DIR
                [--shapes 1x8x512x64,...] [--acc-shapes 1x2x128x64,...] [--dists normal,large_logits_8,...]
                [--seeds 0,1,2] [--iters 100] [--warmup 10] [--batch 20]

Inputs: Q fp16, K and V E4M3 with per-tensor scales amax / 448, drawn from default_rng(seed) in the order Q, K,
V, as the driver's reference module draws its named distributions (normal: std 1; large_logits_4 / _8: Q and K
with std 4 / 8; outlier_channels: 4 channels of K 20x larger).  Written out with numpy here: experiments import
no driver module (../README.md).  Timing inputs: normal, seed 0.  Writes OUT_DIR/results.jsonl and prints two
markdown tables (speed: ratio of each build's p50 to the first build's; error: rel_l2 per build).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments" / "2026-11-23-sdpa-hopper"))
from check_and_time import encode_e4m3_sim, reference  # numpy

TIME_SHAPES = "1x8x512x64,3x5x777x64,2x16x2048x64,4x32x4096x64,8x8x1024x64,2x16x2048x128,1x16x8192x128,1x2x128x64,1x8x1000x64"
ACC_SHAPES = "1x2x128x64,1x2x129x64,1x3x77x128,1x8x512x64,3x5x777x64,2x16x1000x64"
DISTS = "normal,large_logits_4,large_logits_8,outlier_channels"


def draw(shape, seed: int, dist: str):
    rng = np.random.default_rng(seed)
    qs = {"large_logits_4": 4.0, "large_logits_8": 8.0}.get(dist, 1.0)
    q, k, v = (rng.standard_normal(shape) * qs, rng.standard_normal(shape) * qs, rng.standard_normal(shape))
    if dist == "outlier_channels":
        ch = rng.choice(shape[3], size=min(4, shape[3]), replace=False)
        k[..., ch] *= 20.0
    elif dist not in ("normal", "large_logits_4", "large_logits_8"):
        raise SystemExit(f"unknown distribution {dist}")
    out, scales = [q.astype(np.float16)], []
    for x in (k, v):
        amax = float(np.max(np.abs(x)))
        s = float(np.float32(amax / 448.0)) if amax > 0 else 1.0
        out.append(encode_e4m3_sim(x / s))
        scales.append(s)
    return out[0], out[1], out[2], scales[0], scales[1]


def write(folder: Path, q, k, v, ks, vs) -> dict[str, Path]:
    files = {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
        np.save(files[n], x)
    return files


def run(exe: str, files: dict[str, Path], out: Path, extra: list[str]) -> dict:
    cmd = [exe, *(a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))), "--out", str(out),
           "--precision", "fp8", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def rel_l2(o: np.ndarray, want: np.ndarray) -> float:
    o = o.astype(np.float64)
    return float(np.linalg.norm(o - want) / max(np.linalg.norm(want), 1e-300))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", required=True, help="NAME=RUNNER")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=TIME_SHAPES)
    ap.add_argument("--acc-shapes", default=ACC_SHAPES)
    ap.add_argument("--dists", default=DISTS)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20)
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.build)
    names = list(builds)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    speed, acc = [], []
    with open(out_dir / "results.jsonl", "w") as log, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for spec in filter(None, a.shapes.split(",")):
            shape = tuple(int(x) for x in spec.split("x"))
            files = write(folder, *draw(shape, 0, "normal"))
            t = {}
            for mode in ("cold", "hot"):
                for name in names:
                    line = run(builds[name], files, folder / "o.npy", ["--timing", mode, "--iters", str(a.iters),
                                                                      "--warmup", str(a.warmup), "--batch", str(a.batch)])
                    line.update(build=name, mode=mode, shape=list(shape))
                    log.write(json.dumps(line) + "\n")
                    t[(name, mode)] = line
            speed.append((shape, t))
            print(spec, {f"{n}/{m}": round(t[(n, m)]["p50_us"], 2) for (n, m) in t}, flush=True)
        for spec in filter(None, a.acc_shapes.split(",")):
            shape = tuple(int(x) for x in spec.split("x"))
            for dist in a.dists.split(","):
                for seed in (int(s) for s in a.seeds.split(",")):
                    arrays = draw(shape, seed, dist)
                    files = write(folder, *arrays)
                    want = reference(*arrays)
                    rec = {"shape": list(shape), "distribution": dist, "seed": seed}
                    for name in names:
                        run(builds[name], files, folder / "o.npy", ["--iters", "1", "--warmup", "0"])
                        rec[name] = rel_l2(np.load(folder / "o.npy"), want)
                    log.write(json.dumps(rec) + "\n")
                    acc.append(rec)
                    print(rec, flush=True)
    base = names[0]
    print(f"\n| shape | {' | '.join(f'{n} cold / hot us' for n in names)} | "
          f"{' | '.join(f'{base}/{n} cold / hot' for n in names[1:])} |")
    print("|---|" + "---|" * (2 * len(names) - 1))
    for shape, t in speed:
        cells = [f"{t[(n, 'cold')]['p50_us']:.2f} / {t[(n, 'hot')]['p50_us']:.2f}" for n in names]
        ratios = [f"{t[(base, 'cold')]['p50_us'] / t[(n, 'cold')]['p50_us']:.3f} / "
                  f"{t[(base, 'hot')]['p50_us'] / t[(n, 'hot')]['p50_us']:.3f}" for n in names[1:]]
        print(f"| {shape} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    print(f"\n| shape | distribution | {' | '.join(f'{n} rel_l2 (seeds)' for n in names)} |")
    print("|---|---|" + "---|" * len(names))
    groups: dict[tuple, list] = {}
    for r in acc:
        groups.setdefault((tuple(r["shape"]), r["distribution"]), []).append(r)
    for (shape, dist), rs in groups.items():
        print(f"| {shape} | {dist} | " + " | ".join(" / ".join(f"{r[n]:.4f}" for r in rs) for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
