#!/usr/bin/env bash
# One GPU call: layout probe, then every variant checked and timed against torch SDPA (see README.md).
# Runs from the repo root of the device machine's checkout with the carried folder .gpu/sdpa-kernel:
#   bin/ (sdpa_fp8_baseline, sdpa_fp8_cpasync, wgmma_probe), repo/ (driver reference, thresholds, this folder).
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/sdpa-kernel
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "== wgmma layout probe"
  $G/bin/wgmma_probe
  echo "== check and time"
  python3 $G/repo/experiments/2026-11-23-sdpa-hopper/check_and_time.py --exe-dir $G/bin --out "$OUT" "$@"
  echo "== ablations (cpasync, wgmma_sm90): full / loads+decode only / math only"
  for sh in 2x16x2048x64 2x16x2048x128; do
    python3 - "$sh" <<'PY'
import sys, subprocess, json, tempfile, numpy as np
sys.path.insert(0, ".gpu/sdpa-kernel/repo")
from driver.reference import sdpa as ref
shape = tuple(int(x) for x in sys.argv[1].split("x"))
q, k, v, ks, vs = ref.make_inputs(shape, 0)
with tempfile.TemporaryDirectory() as t:
    for n, a in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], np.float32))):
        np.save(f"{t}/{n}.npy", a)
    for impl in ("cpasync", "baseline"):
        for ab in ("none", "no_compute", "no_loads"):
            r = subprocess.run([f".gpu/sdpa-kernel/bin/sdpa_fp8_{impl}", "--q", f"{t}/q.npy", "--k", f"{t}/k.npy", "--v", f"{t}/v.npy",
                                "--scales", f"{t}/scales.npy", "--out", f"{t}/o.npy", "--iters", "100", "--ablate", ab],
                               capture_output=True, text=True)
            line = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-200:]}
            print(sys.argv[1], impl, ab, line.get("p50_us"), line.get("tflops"), line.get("error", ""))
PY
  done
} 2>&1 | tee "$OUT/log.txt"
