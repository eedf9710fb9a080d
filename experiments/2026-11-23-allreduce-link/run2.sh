#!/usr/bin/env bash
# Call 2 of the link A/B (2x H200): the copy-engine kernel after its host-ordering fix (explicit events,
# ready flags for every rank first) against 1stage and upstream; PyTorch symm_mem one-shot / two-shot
# (run from the bundle so its driver package is the one imported); the GPU tests of 1stage_ce and
# 1stage_bulk; a checked soak of the new kernels. Steps in priority order, each under its own timeout.
set -uo pipefail
B=${B:-.gpu/allreduce/bundle}
X=$(cd "$(dirname "$0")" && pwd)
ROOT=$PWD
export LD_LIBRARY_PATH="$ROOT/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$ROOT/$B:$ROOT/$B/site/py312"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
AR=$ROOT/$B/bin/sm_90/allreduce_bench UP=$ROOT/$B/bin/sm_90/upstream_bench
AB=$OUT/ab.jsonl; : > "$AB"
COMMON="--sizes 1M,4M,16M,64M,256M --ngpus 2 --iters 60 --warmup 5 --timing device --check 1"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt" >&2; }
declare -A DEAD
tagged() {
  local tag=$1 to=$2; shift 2
  local key=${tag%%_b[0-9]*}; key=${key%%_c[0-9]*}; key=${key%%_sm[0-9]*}
  if [ -n "${DEAD[$key]:-}" ]; then log "$tag skipped: $key failed earlier"; return; fi
  log "$tag: $*"
  echo "== $tag" >> "$OUT/err.txt"
  (cd "$ROOT/$B" && timeout -k 5 "$to" "$@") 2>>"$OUT/err.txt" | sed -u "s/^/$tag\t/" >> "$AB"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" != 0 ]; then log "$tag exited $rc"; DEAD[$key]=1; fi
}
tagged p2p 30 python3 -m driver.peers.p2p_copy
tagged 1stage_ce 25 $AR $COMMON --kernel 1stage_ce
tagged 1stage 25 $AR $COMMON --kernel 1stage
tagged upstream 25 $UP $COMMON
tagged 1stage_ce_c8 25 $AR $COMMON --kernel 1stage_ce --ce-chunks 8
tagged 1stage_ce_c16 25 $AR $COMMON --kernel 1stage_ce --ce-chunks 16
tagged 1stage_ce_sm20 25 $AR $COMMON --kernel 1stage_ce --ce-chunks 8 --ce-sm-percent 20
tagged 1stage_ce_sm35 25 $AR $COMMON --kernel 1stage_ce --ce-chunks 8 --ce-sm-percent 35
tagged 1stage_ce_r2 25 $AR $COMMON --kernel 1stage_ce
tagged 1stage_bulk_b66 25 $AR $COMMON --kernel 1stage_bulk --max-blocks 66
tagged torch_symm_oneshot 60 python3 -m driver.peers.symm_allreduce --impl torch_symm_oneshot $COMMON
tagged torch_symm_twoshot 60 python3 -m driver.peers.symm_allreduce --impl torch_symm_twoshot $COMMON
tagged torch_symm_twoshot_hot 40 python3 -m driver.peers.symm_allreduce --impl torch_symm_twoshot --sizes 1M,16M --ngpus 2 --iters 100 --warmup 20 --timing hot
python3 "$X/summarize.py" "$AB" > "$OUT/ratio_table.md" 2>&1
log "GPU tests: 1stage_ce, 1stage_bulk, other grids and shares, forced-kernel refusal"
(cd "$ROOT/$B" && timeout -k 5 70 python3 -m pytest tests/gpu/test_allreduce_gpu.py -q -x -p no:cacheprovider \
   -k "1stage_ce or 1stage_bulk or forced or survive" 2>&1 | tail -15) > "$OUT/gpu_tests.txt" 2>&1
log "soak: 1000 checked launches per kernel at 4 odd small sizes, inputs refreshed every 25"
for dt in float32 bfloat16; do
  e=4; [ $dt = float32 ] || e=2
  SZ="$((37*e)),$(((8192+7)*e)),$((70001*e)),$((262143*e))"
  for k in 2stage_push 1stage_pushflag 1stage_ce 1stage_bulk; do
    tagged soak_${k}_$dt 20 $AR --sizes $SZ --dtype $dt --ngpus 2 --kernel $k --check-iters 1000 --refresh-every 25 --iters 1 --warmup 0 --seed 11
  done
  tagged soak_alternate_$dt 20 $AR --sizes $SZ --dtype $dt --ngpus 2 --alternate 1 --check-iters 1100 --refresh-every 25 --iters 1 --warmup 0 --seed 12
done
log "done"
cat "$OUT/gpu_tests.txt"
grep -h "^soak" "$AB" | python3 -c 'import sys, json
for ln in sys.stdin:
    tag, d = ln.split("\t", 1); d = json.loads(d)
    print(tag, d["bytes"], "checked_iters", d["checked_iters"], "wrong", d["wrong"], "confirmed", d["kernel_confirmed"])'
grep -v Crashpad "$OUT/err.txt" | grep -v "^upstream:" | tail -12
cat "$OUT/ratio_table.md"
