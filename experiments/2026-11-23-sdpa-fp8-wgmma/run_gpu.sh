#!/usr/bin/env bash
# One GPU call (see README.md): layout probe; every shape x seeds 0,1,2 of the main build checked
# against the float64 reference (baseline and cpasync, bit for bit too) and timed; build variants
# (bin-NAME/) checked and timed; then, if every check passed, the driver's SDPA bench from the bundle
# (ours, torch SDPA and cuDNN FP8, cold and hot), and the GPU tests.
# Runs from the repo root of the device machine's checkout with the carried folder .gpu/sdpa-fp8.
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/sdpa-fp8
OUT=${OUT:-/tmp/out}
CT="python3 $G/repo/experiments/2026-11-23-sdpa-hopper/check_and_time.py --out $OUT"
KEY=2x16x2048x64,8x8x1024x64,4x32x4096x64,2x16x2048x128,1x16x8192x128
SMALL=1x8x512x64,3x5x777x64,2x2x1000x128
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "== FP8 wgmma layout probe"
  $G/bin/fp8_probe
  echo "== main build: every shape, seeds 0,1,2"
  $CT --exe-dir $G/bundle/bin/sm_90 --label main --kernels wgmma_fp8_sm90 --seeds 0,1,2 --extra-seeds-max-elems 100000000000 \
      --iters ${ITERS:-100} --no-torch --timeout 120 ${MAIN_SHAPES:+--shapes $MAIN_SHAPES}
  main_rc=$?
  for d in $G/bin-*; do
    [ -d "$d" ] || continue
    n=$(basename $d); k=wgmma_fp8_sm90; [ "$n" = bin-fp16 ] && k=wgmma_sm90
    echo "== variant $n ($k)"
    $CT --exe-dir $d --label "$n" --kernels $k --shapes ${VARIANT_SHAPES:-$KEY,$SMALL} --no-torch --iters ${ITERS:-100} --seeds 0
  done
  if [ "$main_rc" = 0 ] && [ -z "$NO_BENCH" ]; then
    echo "== bench (bundle): ours, torch SDPA, cuDNN FP8; cold and hot"
    timeout ${BENCH_S:-300} $G/bundle/run bench --suite sdpa --timing cold,hot --seeds ${BENCH_SEEDS:-0} --rounds 2 --no-build ${BENCH_SHAPES:+--shapes $BENCH_SHAPES}
    echo "bench rc=$?"
    (cd $G/bundle && tar czf $OUT/bench_results.tgz bench_results)
    grep -h -A200 "^## Side by side" $G/bundle/bench_results/*/COMPARE.md | head -80
  else
    echo "== bench skipped (main checks rc=$main_rc)"
  fi
  if [ -n "$GPU_TESTS" ]; then
    echo "== GPU tests (bundle)"
    timeout ${TESTS_S:-200} $G/bundle/run-tests -q -x -p no:cacheprovider 2>&1 | tail -15
  fi
} 2>&1 | tee "$OUT/log.txt"
