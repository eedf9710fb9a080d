"""Time two builds of the SDPA runner's fp16 tier (the Hopper kernel wgmma_sm90) at the same shapes, cold and
hot, with the runners' own timing, and check that their outputs agree to the fp16 tier's accuracy.

  python3 compare.py --new NEW_RUNNER --legacy LEGACY_RUNNER --out OUT_DIR [--shapes 1x8x512x64,...]
                     [--iters 100] [--warmup 10] [--batch 20] [--ref-max-scores 268435456]

NEW_RUNNER / LEGACY_RUNNER: two sdpa_fp8_cpasync (or _baseline) executables, e.g. the default build and one
with -DSDPA_SM90_FP16_LEGACY=1.  Per shape (seed 0: N(0, 1) Q, K, V, K and V stored as E4M3 with per-tensor
scales, and the float64 reference: experiments/2026-11-23-sdpa-hopper/check_and_time.py's make_inputs and
reference, numpy only), each runner writes its output once, then is timed cold (--timing cold: each launch alone, L2
flushed) and hot (--timing hot: CUDA graph of --batch launches); the two runners alternate per shape and mode.
Agreement: new against legacy, rel_l2 <= 5.86e-4 and max|new - legacy| / max|legacy| <= 1.76e-3 (the fp16
tier's bounds, thresholds.toml [[sdpa.bounds]]; the kernels do the same arithmetic per tile, so bit-identical
outputs are expected and counted); where B*H*S*S <= --ref-max-scores, both against the float64 reference too.
Writes OUT_DIR/results.jsonl (one record per runner line and per comparison) and prints a markdown table.
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
from check_and_time import make_inputs, reference  # numpy; the lab keeps apart from the driver

SHAPES = "1x8x512x64,3x5x777x64,2x16x2048x64,4x32x4096x64,8x8x1024x64,2x16x2048x128,1x16x8192x128"
MAX_REL_L2, MAX_ABS_REL = 5.86e-4, 1.76e-3  # thresholds.toml [[sdpa.bounds]] precision = "fp16"


def run(exe: str, files: dict[str, Path], out: Path, extra: list[str], timeout: float) -> dict:
    cmd = [exe, *(a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))), "--out", str(out),
           "--precision", "fp16", "--kernel", "wgmma_sm90", "--split", "0", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: rc {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def errors(out: np.ndarray, want: np.ndarray) -> dict:
    o, w = out.astype(np.float64), want.astype(np.float64)
    d = np.abs(o - w)
    return {"rel_l2": float(np.linalg.norm(o - w) / max(np.linalg.norm(w), 1e-300)),
            "max_abs_rel": float(d.max() / max(np.abs(w).max(), 1e-300)), "max_abs": float(d.max()),
            "nonfinite": int((~np.isfinite(o)).sum())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", required=True)
    ap.add_argument("--legacy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--ref-max-scores", type=int, default=1 << 28)
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    bins = {"new": a.new, "legacy": a.legacy}
    rows, bad = [], []
    with open(out_dir / "results.jsonl", "w") as log, tempfile.TemporaryDirectory() as tmp:
        for spec in a.shapes.split(","):
            shape = tuple(int(x) for x in spec.split("x"))
            arrays = make_inputs(shape, 0)
            folder = Path(tmp)
            q, k, v, ks, vs = arrays
            files = {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
            for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
                np.save(files[n], x)
            outs, t = {}, {}
            for mode in ("cold", "hot"):
                for name, exe in bins.items():
                    o = folder / f"out_{name}.npy"
                    line = run(exe, files, o, ["--timing", mode, "--iters", str(a.iters), "--warmup", str(a.warmup),
                                               "--batch", str(a.batch)], a.timeout)
                    line.update(build=name, exe=exe)
                    log.write(json.dumps(line) + "\n")
                    t[(name, mode)] = line
                    if mode == "cold":
                        outs[name] = np.load(o)
            agree = errors(outs["new"], outs["legacy"])
            agree["bit_identical_frac"] = float(np.mean(outs["new"].view(np.uint16) == outs["legacy"].view(np.uint16)))
            rec = {"shape": list(shape), "new_vs_legacy": agree}
            ok = agree["nonfinite"] == 0 and agree["rel_l2"] <= MAX_REL_L2 and agree["max_abs_rel"] <= MAX_ABS_REL
            b, h, s, _ = shape
            if b * h * s * s <= a.ref_max_scores:
                want = reference(*arrays)
                for name in bins:
                    e = errors(outs[name], want)
                    rec[f"{name}_vs_float64"] = e
                    ok = ok and e["nonfinite"] == 0 and e["rel_l2"] <= MAX_REL_L2 and e["max_abs_rel"] <= MAX_ABS_REL
            rec["ok"] = ok
            log.write(json.dumps(rec) + "\n")
            log.flush()
            if not ok:
                bad.append(spec)
            rows.append((shape, t, agree, rec))
            print(f"{spec}: new {t[('new', 'cold')]['p50_us']:.2f} / {t[('new', 'hot')]['p50_us']:.2f} us, legacy "
                  f"{t[('legacy', 'cold')]['p50_us']:.2f} / {t[('legacy', 'hot')]['p50_us']:.2f} us (cold / hot), "
                  f"agreement {agree}", flush=True)
    print("\n| shape | new cold us (TF/s) | legacy cold us (TF/s) | legacy/new cold | new hot us | legacy hot us | "
          "legacy/new hot | new grid x block, smem | bit-identical | rel_l2 new vs legacy | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape, t, agree, rec in rows:
        nc, lc, nh, lh = t[("new", "cold")], t[("legacy", "cold")], t[("new", "hot")], t[("legacy", "hot")]
        print(f"| {shape} | {nc['p50_us']:.2f} ({nc['tflops']:.0f}) | {lc['p50_us']:.2f} ({lc['tflops']:.0f}) | "
              f"{lc['p50_us'] / nc['p50_us']:.3f} | {nh['p50_us']:.2f} | {lh['p50_us']:.2f} | "
              f"{lh['p50_us'] / nh['p50_us']:.3f} | {nc['grid'][0]} x {nc['block'][0]}, {nc['smem_bytes']} | "
              f"{agree['bit_identical_frac']:.4f} | {agree['rel_l2']:.2e} | {'yes' if rec['ok'] else 'NO'} |")
    if bad:
        print(f"outputs disagree beyond the fp16 tier's bounds at: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
