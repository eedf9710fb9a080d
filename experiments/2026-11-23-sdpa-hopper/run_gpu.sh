#!/usr/bin/env bash
# One GPU call (see README.md): layout probe; every variant checked and timed against torch SDPA;
# A/B of build variants and of the split configuration; ablations; the GPU tests.
# Runs from the repo root of the device machine's checkout with the carried folder .gpu/sdpa-kernel:
#   bin/ (sdpa_fp8_baseline, sdpa_fp8_cpasync, wgmma_probe), bin-NAME/ (variants), repo/ (thresholds,
#   this folder: check_and_time.py makes the inputs), tb/ (driver, tests, executables, site packages for
#   the GPU tests, which run as pytest there).
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/sdpa-kernel
OUT=${OUT:-/tmp/out}
CT="python3 $G/repo/experiments/2026-11-23-sdpa-hopper/check_and_time.py --out $OUT"
KEY=2x16x2048x64,8x8x1024x64,4x32x4096x64,2x16x2048x128,1x16x8192x128
SMALL=1x8x512x64,1x8x1000x64,2x2x1000x128
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "== wgmma layout probe"
  $G/bin/wgmma_probe
  echo "== main build: every shape, seeds 0,1,2, torch (default backend and flash)"
  $CT --exe-dir $G/bin --label main --seeds 0,1,2 --iters 200 "$@"
  echo "== main build, unsplit forced on the small shapes (split A/B)"
  $CT --exe-dir $G/bin --label main --runner-args "--split 1" --shapes $SMALL --no-torch --iters 300
  for d in $G/bin-*; do
    echo "== variant $(basename $d)"
    $CT --exe-dir $d --label "$(basename $d)" --shapes ${VARIANT_SHAPES:-$KEY,$SMALL} --no-torch --iters 200 --seeds 0,1
  done
  echo "== Nsight Compute: warp stall reasons and throughput, one launch of the head-dim-64 and -128 kernels"
  for sh in 2x16x2048x64 2x16x2048x128; do
    python3 - "$sh" <<'PY'
import sys, numpy as np
sys.path.insert(0, ".gpu/sdpa-kernel/repo/experiments/2026-11-23-sdpa-hopper")
from check_and_time import make_inputs
q, k, v, ks, vs = make_inputs(tuple(int(x) for x in sys.argv[1].split("x")), 0)
for n, a in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], np.float32))):
    np.save(f"/tmp/ncu_{n}.npy", a)
PY
    timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis -k regex:sdpa_fp8_sm90 --launch-skip 1 --launch-count 1 \
      $G/bin/sdpa_fp8_cpasync --q /tmp/ncu_q.npy --k /tmp/ncu_k.npy --v /tmp/ncu_v.npy --scales /tmp/ncu_scales.npy \
      --out /tmp/ncu_o.npy --iters 1 --warmup 1 --no-spin > "$OUT/ncu_$sh.txt" 2>&1
    grep -E "Duration|Throughput|Stall|Issued|Eligible|Active Warps|Pipe|Bank|Shared" "$OUT/ncu_$sh.txt" | head -60
  done
  echo "== ablations (wgmma_sm90): full / loads+decode only (no_compute) / math only (no_loads)"
  for sh in 2x16x2048x64 2x16x2048x128 1x8x512x64 2x2x1000x128; do
    python3 - "$sh" <<'PY'
import sys, subprocess, json, tempfile, numpy as np
sys.path.insert(0, ".gpu/sdpa-kernel/repo/experiments/2026-11-23-sdpa-hopper")
from check_and_time import make_inputs
shape = tuple(int(x) for x in sys.argv[1].split("x"))
q, k, v, ks, vs = make_inputs(shape, 0)
with tempfile.TemporaryDirectory() as t:
    for n, a in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], np.float32))):
        np.save(f"{t}/{n}.npy", a)
    for impl in ("cpasync", "baseline"):
        for ab in ("none", "no_compute", "no_loads"):
            r = subprocess.run([f".gpu/sdpa-kernel/bin/sdpa_fp8_{impl}", "--q", f"{t}/q.npy", "--k", f"{t}/k.npy", "--v", f"{t}/v.npy",
                                "--scales", f"{t}/scales.npy", "--out", f"{t}/o.npy", "--iters", "200", "--ablate", ab],
                               capture_output=True, text=True, timeout=60)
            line = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-200:]}
            print(sys.argv[1], impl, ab, line.get("p50_us"), line.get("tflops"), line.get("split"), line.get("error", ""))
PY
  done
  echo "== GPU tests (tests/gpu/test_sdpa_gpu.py)"
  (cd $G/tb && PYTHONPATH=.:site/py312 timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_sdpa_gpu.py 2>&1 | tail -15)
} 2>&1 | tee "$OUT/log.txt"
