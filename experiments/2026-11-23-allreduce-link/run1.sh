#!/usr/bin/env bash
# Call 1 of the link A/B (2x H200): every allreduce kernel forced, same binary, same run, against
# 1stage, upstream comm.allreduce, NCCL and PyTorch's symm_mem one-shot / two-shot; the link ceiling;
# the GPU tests of the new kernels. Run from the repo root with the bundle at $B. Logs under $OUT.
set -uo pipefail
B=${B:-.gpu/allreduce/bundle}
X=$(dirname "$0")
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/$B:$PWD/$B/site/py312${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
AR=$B/bin/sm_90/allreduce_bench UP=$B/bin/sm_90/upstream_bench
AB=$OUT/ab.jsonl; : > "$AB"
SIZES=1M,4M,16M,64M,256M
COMMON="--sizes $SIZES --ngpus 2 --iters 60 --warmup 5 --timing device --check 1"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt" >&2; }
declare -A DEAD  # a kernel that hung or failed once is not run again in this call
tagged() {  # tagged TAG TIMEOUT cmd...: JSON lines to $AB prefixed with TAG, stderr to $OUT/err.txt
  local tag=$1 to=$2; shift 2
  local key=${tag%%_b[0-9]*}; key=${key%%_c[0-9]*}; key=${key%%_sm[0-9]*}
  if [ -n "${DEAD[$key]:-}" ]; then log "$tag skipped: $key failed earlier"; return; fi
  log "$tag: $*"
  echo "== $tag" >> "$OUT/err.txt"
  timeout -k 5 "$to" "$@" 2>>"$OUT/err.txt" | sed -u "s/^/$tag\t/" >> "$AB"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" != 0 ]; then log "$tag exited $rc"; DEAD[$key]=1; fi
}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/env.txt" 2>&1
nvidia-smi topo -m >> "$OUT/env.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())' >> "$OUT/env.txt" 2>&1
tagged p2p 60 python3 -m driver.peers.p2p_copy
for round in 1 2; do
  tagged 1stage 30 $AR $COMMON --kernel 1stage
  tagged upstream 30 $UP $COMMON
  tagged 2stage 30 $AR $COMMON --kernel 2stage
  tagged cpasync_s3 30 $AR $COMMON --kernel 1stage_cpasync --stages 3
  tagged 2stage_push 30 $AR $COMMON --kernel 2stage_push
  tagged 1stage_pushflag 30 $AR $COMMON --kernel 1stage_pushflag
  tagged 1stage_ce 30 $AR $COMMON --kernel 1stage_ce
  tagged 1stage_bulk 30 $AR $COMMON --kernel 1stage_bulk
done
# (d) fewer SMs, deeper pipelines; (a) chunks and SM share of the copy-engine kernel
for mb in 132 66 32; do
  tagged 2stage_push_b$mb 30 $AR $COMMON --kernel 2stage_push --max-blocks $mb
  tagged 1stage_bulk_b$mb 30 $AR $COMMON --kernel 1stage_bulk --max-blocks $mb
done
tagged 1stage_pushflag_b66 30 $AR $COMMON --kernel 1stage_pushflag --max-blocks 66
tagged 1stage_ce_c2 30 $AR $COMMON --kernel 1stage_ce --ce-chunks 2
tagged 1stage_ce_c8 30 $AR $COMMON --kernel 1stage_ce --ce-chunks 8
tagged 1stage_ce_sm25 30 $AR $COMMON --kernel 1stage_ce --ce-sm-percent 25
tagged 1stage_ce_sm50 30 $AR $COMMON --kernel 1stage_ce --ce-sm-percent 50
tagged 1stage_b132 30 $AR $COMMON --kernel 1stage --max-blocks 132
# peers: NCCL and PyTorch symm_mem, the same device timing (hold on rank 0)
tagged nccl 120 python3 -m driver.peers.nccl_allreduce $COMMON
tagged torch_symm_oneshot 120 python3 -m driver.peers.symm_allreduce --impl torch_symm_oneshot $COMMON
tagged torch_symm_twoshot 120 python3 -m driver.peers.symm_allreduce --impl torch_symm_twoshot $COMMON
tagged torch_symm_oneshot_hot 120 python3 -m driver.peers.symm_allreduce --impl torch_symm_oneshot --sizes 16M --ngpus 2 --iters 100 --warmup 20 --timing hot
python3 "$X/summarize.py" "$AB" > "$OUT/ratio_table.md" 2>&1
log "GPU tests of the new kernels"
(cd "$B" && timeout -k 5 150 python3 -m pytest tests/gpu/test_allreduce_gpu.py -q -x -p no:cacheprovider \
   -k "2stage_push or pushflag or 1stage_ce or 1stage_bulk or forced or survive" 2>&1 | tail -15) > "$OUT/gpu_tests.txt" 2>&1
log "done"
tail -3 "$OUT/gpu_tests.txt"
tail -40 "$OUT/err.txt" | grep -v Crashpad | tail -15
cat "$OUT/ratio_table.md"
