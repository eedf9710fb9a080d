#!/usr/bin/env bash
# GPU run 3 of the allreduce bring-up (2026-11-22, 2x H200): verify the FINAL default build (AR_UNROLL=4, start barrier
# release/acquire, end barrier relaxed), retry upstream comm.allreduce outside a
# closure (default and explicit epilogue), time everything with one method.
set -u
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.gpu/mojo${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=.gpu/mojo; B=$D/allreduce_bench
R=$OUT/results.jsonl; L=$OUT/log.txt; : > "$R"; : > "$L"
ABORT=0
run() {  # tag, timeout_s, binary, args...
  local tag=$1 to=$2 bin=$3; shift 3
  if [ $ABORT -eq 1 ]; then echo "SKIP $tag (aborted)"; return; fi
  echo "=== $tag $*" >> "$L"
  local t0=$(date +%s.%N)
  timeout "$to" "$bin" "$@" > "$OUT/cur.json" 2>> "$L"; local rc=$?
  local t1=$(date +%s.%N)
  sed "s/^{/{\"tag\":\"$tag\",/" "$OUT/cur.json" >> "$R"
  printf 'RUN %s rc=%d wall=%.1fs\n' "$tag" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" | tee -a "$L"
  if [ $rc -eq 124 ] && [ "${tag#hang}" = "$tag" ] && [ "${tag#up_}" = "$tag" ]; then echo "TIMEOUT in $tag: aborting"; ABORT=1; fi
}
sizes_for() { local e=$1; echo "0,$((7*e)),$(((8192+7)*e)),$(((262144+5)*e)),$(((16777216+24)*e))"; }
TS=256K,1M,4M,16M,64M,256M

# 1) upstream, outside a closure (default epilogue), then explicit epilogue
run up_default_fp32 30 $B --impl upstream --sizes 32K,256K,16M --iters 5 --warmup 1
run up_explicit_fp32 30 $B --impl upstream --upstream-epilogue explicit --sizes 32K,256K,16M --iters 5 --warmup 1

# 2) correctness of the final build: every kernel x dtype x size
for dt in float32 bfloat16 float16; do
  es=4; [ $dt != float32 ] && es=2
  S=$(sizes_for $es)
  run "chk_auto_$dt" 40 $B --dtype $dt --sizes $S --iters 3 --warmup 1
  run "chk_1stage_$dt" 40 $B --dtype $dt --kernel 1stage --sizes $S --iters 3 --warmup 1
  run "chk_2stage_$dt" 40 $B --dtype $dt --kernel 2stage --sizes $S --iters 3 --warmup 1
  for s in 2 3 4; do
    run "chk_cpasync_s${s}_$dt" 40 $B --dtype $dt --kernel 1stage_cpasync --stages $s --sizes $S --iters 3 --warmup 1
  done
done
run chk_windows_auto 60 $D/allreduce_bench_windows --sizes 256K,4M+16,64M+4,1M,16M,8M+20,28 --iters 5 --warmup 2

# 3) upstream correctness + timings with whichever epilogue works
UPE=""
if grep -q '"tag":"up_default_fp32".*"wrong":0' "$R"; then UPE=default
elif grep -q '"tag":"up_explicit_fp32".*"wrong":0' "$R"; then UPE=explicit; fi
echo "UPSTREAM_EPILOGUE=${UPE:-none}" | tee -a "$L"
if [ -n "$UPE" ]; then
  for dt in float32 bfloat16 float16; do
    es=4; [ $dt != float32 ] && es=2
    run "up_chk_$dt" 40 $B --impl upstream --upstream-epilogue $UPE --dtype $dt --sizes $(sizes_for $es) --iters 3 --warmup 1
  done
fi

# 4) timings, fp32, default iters/warmup; interleave ours and upstream
for rep in 1 2; do
  [ -n "$UPE" ] && run "tim_upstream_r$rep" 60 $B --impl upstream --upstream-epilogue $UPE --sizes $TS
  run "tim_auto_r$rep" 60 $B --sizes $TS
  run "tim_1stage_r$rep" 60 $B --kernel 1stage --sizes $TS
  run "tim_2stage_r$rep" 60 $B --kernel 2stage --sizes $TS
done
for s in 2 3 4; do run "tim_cpasync_s$s" 60 $B --kernel 1stage_cpasync --stages $s --sizes $TS; done
run tim_1stage_ra_all 60 $D/allreduce_bench_ra_all --kernel 1stage --sizes $TS
run tim_1stage_relaxed_all 60 $D/allreduce_bench_relaxed_all --kernel 1stage --sizes $TS
run tim_noop 30 $B --kernel noop --sizes 4,256K
run tim_bf16_auto 60 $B --dtype bfloat16 --sizes $TS
[ -n "$UPE" ] && run tim_bf16_upstream 60 $B --impl upstream --upstream-epilogue $UPE --dtype bfloat16 --sizes $TS
run tim_1G_auto 90 $B --sizes 1G --iters 20 --warmup 3
[ -n "$UPE" ] && run tim_1G_upstream 90 $B --impl upstream --upstream-epilogue $UPE --sizes 1G --iters 20 --warmup 3

# 5) sm_80 build (PTX JIT on Hopper), error paths, hang switch
run chk_sm80_build 40 $D/allreduce_bench_sm80 --kernel 1stage_cpasync --stages 3 --sizes 28,1M+20,64M --iters 3 --warmup 1
run chk_sm80_build_2stage 40 $D/allreduce_bench_sm80 --kernel 2stage --dtype bfloat16 --sizes 14,1M+20,64M --iters 3 --warmup 1
run err_ngpus4 20 $B --ngpus 4 --sizes 1M
run err_ngpus3 20 $B --ngpus 3 --sizes 1M
run err_size 20 $B --sizes 7
run hang_rank1 10 $B --debug-hang-rank 1 --sizes 1M --iters 2 --warmup 0 --check 0

python3 - "$R" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: print("BADJSON", line[:200]); continue
    t = d["tag"]
    if t.startswith("chk_") and d["wrong"] == 0 and d["kernel_confirmed"] in (d["kernel_selected"], "none"):
        continue  # correctness lines that passed are summarised below
    print(f'{t:<22} {d["dtype"][:4]} sel={d["kernel_selected"]:<17} conf={d["kernel_confirmed"]:<17} '
          f'B={d["bytes"]:<10} p50={d["p50_us"]:<8} bw={d["algbw_gbps"]:<7} w={d["wrong"]} e={d["max_abs_err"]}')
n = bad = 0
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d["tag"].startswith(("chk_", "up_chk")):
        n += 1
        if d["wrong"] != 0 or d["kernel_confirmed"] not in (d["kernel_selected"], "none"): bad += 1
print(f"correctness records: {n}, failing: {bad}")
PY
grep -E "^RUN .* rc=[^0]|UPSTREAM|CUDA_ERROR|^error|check:|mismatch" "$L" | sort | uniq -c | head -30
