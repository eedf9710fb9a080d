#!/usr/bin/env bash
# One multi-GPU call: 2stage_ce forced, the build before this experiment (`old`: 2 pieces per part, 3/4 + 1/4
# on 4 GPUs, at 1cddb80) against the build with the incremental adds (`new`: the bundle's), alternating for
# ROUNDS rounds, device timing, every element checked. Run from the repo root with the bundle unpacked at $B
# and the old executable at $V/allreduce_bench_old. Rows in $OUT/ab.jsonl, tagged; the summary on stdout.
set -uo pipefail
B=${B:-bundle}; V=${V:-.gpu/ab}; ROUNDS=${ROUNDS:-3}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
AB=$OUT/ab.jsonl; : > "$AB"
chmod +x $V/allreduce_bench_old
for r in $(seq 1 $ROUNDS); do
  for cfg in "4 float32 64M,128M,256M" "4 bfloat16 256M" "2 float32 128M,256M"; do
    set -- $cfg
    for tag in old new; do
      exe=$V/allreduce_bench_old; [ $tag = new ] && exe=$B/bin/sm_90/allreduce_bench
      timeout -k 5 120 $exe --sizes $3 --ngpus $1 --dtype $2 --iters 60 --warmup 5 --timing device --check 1 \
        --kernel 2stage_ce 2>>"$OUT/err.txt" | sed -u "s/^/$tag\tround$r\t/" >> "$AB"
    done
  done
done
python3 - "$AB" <<'PY'
import json, sys, collections, statistics
rows = collections.defaultdict(list)
for ln in open(sys.argv[1]):
    tag, rnd, js = ln.rstrip("\n").split("\t", 2)
    if not js.startswith("{"): continue
    d = json.loads(js)
    rows[(d["ngpus"], d["dtype"], d["bytes"], tag)].append(d)
for (n, dt, b, tag), v in sorted(rows.items()):
    p50s = [x["p50_us"] for x in v]
    med = statistics.median(p50s)
    print(f"{n} GPUs {dt} {b >> 20} MiB {tag}: p50 per round {[round(x, 1) for x in p50s]} -> median {med:.1f} us "
          f"(busbw {2 * (n - 1) / n * b / med / 1e3:.1f} GB/s), p90 {statistics.median(x['p90_us'] for x in v):.1f}, "
          f"min {min(x['min_us'] for x in v):.1f}, wrong {sum(x['wrong'] for x in v)}, "
          f"same bits {set(x['same_bits_every_run'] for x in v)}, kernel {set(x['kernel_confirmed'] for x in v)}")
PY
