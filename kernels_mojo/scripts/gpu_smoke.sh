#!/usr/bin/env bash
# One-shot GPU verification of the Mojo allreduce bench on a 2-GPU host.
# Expects .gpu/mojo/{allreduce_bench,allreduce_bench_relaxed,lib*.so}.
# Writes $OUT/results.jsonl (all JSON lines, tagged), $OUT/log.txt (stderr),
# prints a condensed summary on stdout.
set -u
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.gpu/mojo${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=.gpu/mojo/allreduce_bench
R=$OUT/results.jsonl; L=$OUT/log.txt; : > "$R"; : > "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
nvidia-smi topo -m >> "$L" 2>&1

ABORT=0
run() {  # tag, timeout_s, binary, args...
  local tag=$1 to=$2 bin=$3; shift 3
  if [ $ABORT -eq 1 ]; then echo "SKIP $tag (aborted)"; return; fi
  local t0=$(date +%s.%N)
  timeout "$to" "$bin" "$@" > "$OUT/cur.json" 2>> "$L"; local rc=$?
  local t1=$(date +%s.%N)
  sed "s/^{/{\"tag\":\"$tag\",/" "$OUT/cur.json" >> "$R"
  printf 'RUN %s rc=%d wall=%.1fs args=%s\n' "$tag" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$*" | tee -a "$L"
  if [ $rc -eq 124 ] && [ "${tag#hang}" = "$tag" ]; then echo "TIMEOUT in $tag: aborting remaining runs"; ABORT=1; fi
}

# sizes in ELEMENTS 0, 7, 8K+7, 256K+5, 16M+24 -> bytes per dtype
sizes_for() { local e=$1; echo "0,$((7*e)),$(((8192+7)*e)),$(((262144+5)*e)),$(((16777216+24)*e))"; }

# 1) correctness: every kernel x dtype (few timing iterations)
for dt in float32 bfloat16 float16; do
  es=4; [ $dt != float32 ] && es=2
  S=$(sizes_for $es)
  run "chk_auto_$dt" 40 $B --dtype $dt --sizes $S --iters 3 --warmup 1
  run "chk_1stage_$dt" 40 $B --dtype $dt --kernel 1stage --sizes $S --iters 3 --warmup 1
  run "chk_2stage_$dt" 40 $B --dtype $dt --kernel 2stage --sizes $S --iters 3 --warmup 1
  for s in 2 3 4; do
    run "chk_cpasync_s${s}_$dt" 40 $B --dtype $dt --kernel 1stage_cpasync --stages $s --sizes $S --iters 3 --warmup 1
  done
  run "chk_upstream_aligned_$dt" 40 $B --impl upstream --dtype $dt --sizes 0,$((8192*es)),$((262144*es)),$((16777216*es)) --iters 3 --warmup 1
  run "chk_upstream_ragged_$dt" 40 $B --impl upstream --dtype $dt --sizes $S --iters 3 --warmup 1
done

# 2) timings fp32 (default iters 50, warmup 5), checked
TS=256K,1M,4M,16M,64M,256M
run tim_upstream 120 $B --impl upstream --sizes $TS
run tim_1stage 120 $B --kernel 1stage --sizes $TS
run tim_2stage 120 $B --kernel 2stage --sizes $TS
for s in 2 3 4; do run "tim_cpasync_s$s" 120 $B --kernel 1stage_cpasync --stages $s --sizes $TS; done
run tim_1stage_relaxed_edges 120 .gpu/mojo/allreduce_bench_relaxed --kernel 1stage --sizes $TS
run tim_upstream_again 120 $B --impl upstream --sizes $TS
run tim_bf16_1stage 120 $B --dtype bfloat16 --kernel 1stage --sizes 256K,16M,256M
run tim_bf16_upstream 120 $B --impl upstream --dtype bfloat16 --sizes 256K,16M,256M

# 3) error paths
run err_ngpus4 20 $B --ngpus 4 --sizes 1M
run err_ngpus3 20 $B --ngpus 3 --sizes 1M
# 4) hang switch: must be killed by timeout (rc 124)
run hang_rank1 15 $B --debug-hang-rank 1 --sizes 1M --iters 2 --warmup 0 --check 0

python3 - "$R" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception as e: print("BADJSON", line[:200]); continue
    print(f'{d["tag"]:<26} {d["dtype"]:<8} sel={d["kernel_selected"]:<18} conf={d["kernel_confirmed"]:<18} '
          f'B={d["bytes"]:<10} p50={d["p50_us"]:<9} bw={d["algbw_gbps"]:<8} wrong={d["wrong"]} err={d["max_abs_err"]}')
PY
grep -E "^error|check:|Unhandled|mismatch" "$L" | sort | uniq -c | head -30
