#!/usr/bin/env bash
# The prepared next question (README, "Next"): does a smaller grid close upstream's 0.4-1.0 us lead at 1-8 MiB
# on 2 GPUs? One call on a 2- or 4-GPU host, from the repo root with the bundle unpacked at $B: forced `1stage`
# and `1stage_push` capped at 132, 176, 216 and 264 blocks (--max-blocks; no rebuild), and upstream_bench, fp32
# and bf16, ROUNDS interleaved rounds, device timing, every element checked. Rows in $OUT/grid.jsonl (tagged);
# the summary (median of the rounds' p50, and against upstream) on stdout.
set -uo pipefail
B=${B:-bundle}; ROUNDS=${ROUNDS:-2}; SIZES=${SIZES:-1M,2M,4M,8M}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
AR=$B/bin/sm_90/allreduce_bench; UP=$B/bin/sm_90/upstream_bench
G=$OUT/grid.jsonl; : > "$G"
COMMON="--sizes $SIZES --ngpus 2 --iters 60 --warmup 5 --timing device --check 1"
for r in $(seq 1 $ROUNDS); do
  for dtype in float32 bfloat16; do
    timeout -k 5 60 $UP $COMMON --dtype $dtype 2>>"$OUT/err.txt" | sed -u "s/^/upstream\tround$r\t/" >> "$G"
    for kernel in 1stage 1stage_push; do
      for n in 132 176 216 264; do
        timeout -k 5 60 $AR $COMMON --dtype $dtype --kernel $kernel --max-blocks $n 2>>"$OUT/err.txt" \
          | sed -u "s/^/${kernel}_b$n\tround$r\t/" >> "$G"
      done
    done
  done
done
python3 - "$G" <<'PY'
import json, sys, collections, statistics
rows = collections.defaultdict(list)
for ln in open(sys.argv[1]):
    tag, rnd, js = ln.rstrip("\n").split("\t", 2)
    if not js.startswith("{"): continue
    d = json.loads(js)
    rows[(d["dtype"], d["bytes"], tag)].append(d)
for (dt, b, tag), v in sorted(rows.items()):
    med = statistics.median(x["p50_us"] for x in v)
    up = rows.get((dt, b, "upstream"))
    vs = statistics.median(x["p50_us"] for x in up) / med if up else float("nan")
    print(f"{dt} {b >> 20} MiB {tag}: p50 {med:.2f} us, upstream/ours {vs:.3f}, "
          f"wrong {sum(x.get('wrong', 0) for x in v)}, kernel {set(x['kernel_confirmed'] for x in v)}")
PY
