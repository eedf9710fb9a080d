#!/usr/bin/env bash
# GPU run 2 of the allreduce bring-up (2026-11-22, 2x H200): upstream crash diagnosis, launch floor, unroll variants
# (correctness + timing), window-based auto dispatch across kernels, 1 GiB.
set -u
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.gpu/mojo${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=.gpu/mojo
R=$OUT/results.jsonl; L=$OUT/log.txt; : > "$R"; : > "$L"
ABORT=0
run() {  # tag, timeout_s, binary, args...
  local tag=$1 to=$2 bin=$3; shift 3
  if [ $ABORT -eq 1 ]; then echo "SKIP $tag (aborted)"; return; fi
  echo "=== $tag" >> "$L"
  local t0=$(date +%s.%N)
  timeout "$to" "$bin" "$@" > "$OUT/cur.json" 2>> "$L"; local rc=$?
  local t1=$(date +%s.%N)
  sed "s/^{/{\"tag\":\"$tag\",/" "$OUT/cur.json" >> "$R"
  printf 'RUN %s rc=%d wall=%.1fs\n' "$tag" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" | tee -a "$L"
  if [ $rc -eq 124 ] && [ "${tag#diag}" = "$tag" ]; then echo "TIMEOUT in $tag: aborting"; ABORT=1; fi
}
sizes_for() { local e=$1; echo "0,$((7*e)),$(((8192+7)*e)),$(((262144+5)*e)),$(((16777216+24)*e))"; }

# 1) upstream diagnosis (short)
run diag_up_plain 30 $D/allreduce_bench --impl upstream --sizes 32K --iters 1 --warmup 0
MODULAR_DEBUG=device-sync-mode run diag_up_syncmode 30 $D/allreduce_bench --impl upstream --sizes 32K --iters 1 --warmup 0
run diag_up_fp32_aligned_big 30 $D/allreduce_bench --impl upstream --sizes 16M --iters 3 --warmup 1

# 2) launch floor
run noop 30 $D/allreduce_bench --kernel noop --sizes 4,256K,16M

# 3) correctness of unroll variants
for v in u2 u4 u4_b132; do
  for dt in float32 bfloat16 float16; do
    es=4; [ $dt != float32 ] && es=2
    S=$(sizes_for $es)
    for k in 1stage 2stage; do
      run "chk_${v}_${k}_$dt" 40 $D/allreduce_bench_$v --dtype $dt --kernel $k --sizes $S --iters 3 --warmup 1
    done
  done
done
# 4) auto dispatch across windows in one process (1stage <=1M, cpasync 4M..16M, 2stage above)
run chk_windows_auto 60 $D/allreduce_bench_windows --sizes 256K,4M+16,64M+4,1M,16M,8M+20,28 --iters 5 --warmup 2
run chk_windows_auto_bf16 60 $D/allreduce_bench_windows --dtype bfloat16 --sizes 256K,4M+16,64M+4,1M,16M,28 --iters 5 --warmup 2

# 5) timings fp32
TS=256K,1M,4M,16M,64M,256M
for v in "" _u2 _u4 _u4_b132; do
  run "tim_1stage$v" 60 $D/allreduce_bench$v --kernel 1stage --sizes $TS
  run "tim_2stage$v" 60 $D/allreduce_bench$v --kernel 2stage --sizes $TS
done
run tim_1stage_relaxed 60 $D/allreduce_bench_relaxed --kernel 1stage --sizes $TS
for s in 2 3 4; do run "tim_cpasync_s$s" 60 $D/allreduce_bench --kernel 1stage_cpasync --stages $s --sizes $TS; done
run tim_1G_1stage_u4 90 $D/allreduce_bench_u4 --kernel 1stage --sizes 1G --iters 20 --warmup 3
run tim_1G_2stage_u4 90 $D/allreduce_bench_u4 --kernel 2stage --sizes 1G --iters 20 --warmup 3
run tim_bf16_1stage_u4 60 $D/allreduce_bench_u4 --dtype bfloat16 --kernel 1stage --sizes $TS

# 6) sanitizer on upstream last (may hang: spinning cross-GPU barrier)
if command -v compute-sanitizer >/dev/null; then
  echo "=== diag_up_sanitizer" >> "$L"
  timeout 60 compute-sanitizer --tool memcheck --print-limit 5 $D/allreduce_bench --impl upstream --sizes 32K --iters 1 --warmup 0 --check 0 > "$OUT/sanitizer.txt" 2>&1
  echo "RUN diag_up_sanitizer rc=$?" | tee -a "$L"
  head -c 4000 "$OUT/sanitizer.txt"
fi

python3 - "$R" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: print("BADJSON", line[:200]); continue
    print(f'{d["tag"]:<24} {d["dtype"][:4]} sel={d["kernel_selected"]:<17} conf={d["kernel_confirmed"]:<17} '
          f'B={d["bytes"]:<10} p50={d["p50_us"]:<8} bw={d["algbw_gbps"]:<7} w={d["wrong"]} e={d["max_abs_err"]} c={d["checked"]}')
PY
grep -E "upstream:|CUDA_ERROR|error:|check:|mismatch" "$L" | sort | uniq -c | head -20
