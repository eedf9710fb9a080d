#!/usr/bin/env bash
# One 2x H200 call: the GPU tests of the store-based kernels, then 1stage_pushflag with launch bounds
# (unroll 4 = 32 KiB per flag, the build's default; `_u2` = the same source with -DAR_PUSHFLAG_UNROLL=2)
# forced, against 1stage and upstream comm.allreduce in the same call, fp32 and bf16, 2 interleaved
# rounds, every element checked. Run from the repo root with the bundle at $B. Logs in $OUT.
# Reused by later A/Bs: SIZES, VARIANTS (allreduce_bench_NAME beside the bundle's binary) and
# VARIANT_KERNEL (the kernel the variants are forced to; default 1stage_pushflag); NO_TESTS=1 skips the tests.
set -uo pipefail
B=${B:-.gpu/ar/bundle}
X=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [ -z "${NO_TESTS:-}" ]; then
  echo "== GPU tests" | tee "$OUT/tests.txt"
  timeout -k 5 ${TESTS_S:-240} $B/run-tests -q -p no:cacheprovider -k "allreduce and (pushflag or bulk or 2stage_push or grids or refused)" 2>&1 | tail -25 | tee -a "$OUT/tests.txt"
fi
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/$B:$PWD/$B/site/py312${PYTHONPATH:+:$PYTHONPATH}"
BIN=$B/bin/sm_90; AR=$BIN/allreduce_bench; UP=$BIN/upstream_bench
AB=$OUT/ab.jsonl; : > "$AB"
SIZES=${SIZES:-4M,16M,64M,256M}
COMMON="--sizes $SIZES --ngpus 2 --iters 60 --warmup 5 --timing device --check 1"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt" >&2; }
tagged() {  # tagged TAG TIMEOUT cmd...
  local tag=$1 to=$2; shift 2
  log "$tag: $*"; echo "== $tag" >> "$OUT/err.txt"
  timeout -k 5 "$to" "$@" 2>>"$OUT/err.txt" | sed -u "s/^/$tag\t/" >> "$AB"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || log "$tag exited $rc"
}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/env.txt" 2>&1
tagged p2p 60 python3 -m driver.peers.p2p_copy
for dtype in float32 bfloat16; do
  for round in 1 2; do
    tagged 1stage 40 $AR $COMMON --dtype $dtype --kernel 1stage
    tagged upstream 40 $UP $COMMON --dtype $dtype
    tagged pushflag 40 $AR $COMMON --dtype $dtype --kernel 1stage_pushflag
    for v in ${VARIANTS:-u2}; do
      [ -x $BIN/allreduce_bench_$v ] && tagged ${VARIANT_KERNEL:-pushflag}_$v 40 $BIN/allreduce_bench_$v $COMMON --dtype $dtype --kernel ${VARIANT_KERNEL:-1stage_pushflag}
    done
  done
done
python3 "$X/../2026-11-23-allreduce-link/summarize.py" "$AB" > "$OUT/ratio_table.md" 2>&1; cat "$OUT/ratio_table.md"
log done
