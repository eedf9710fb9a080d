#!/usr/bin/env bash
# One 4-GPU call: 2stage_ce forced at 4 GPUs with the first piece holding 50% (even, AR_CE_FIRST_PCT_4GPU=0),
# 75% (the bundle's build, the default) and 87% of each part, the three builds alternating for ROUNDS rounds,
# fp32, every element checked, device timing. Run from the repo root with the bundle unpacked at $B and the
# variants at $V (allreduce_bench_pct0, allreduce_bench_pct87: the build's mojo command plus
# -DAR_CE_FIRST_PCT_4GPU=0 / 87). Rows in $OUT/ab.jsonl, tagged.
set -uo pipefail
B=${B:-bundle}; V=${V:-.gpu/pct}; ROUNDS=${ROUNDS:-3}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
AB=$OUT/ab.jsonl; : > "$AB"
chmod +x $V/allreduce_bench_pct* 2>/dev/null
COMMON="--sizes ${SIZES:-128M,256M} --ngpus 4 --dtype float32 --iters 60 --warmup 5 --timing device --check 1 --kernel 2stage_ce"
for r in $(seq 1 $ROUNDS); do
  for tag in pct0 pct75 pct87; do
    exe=$V/allreduce_bench_$tag; [ $tag = pct75 ] && exe=$B/bin/sm_90/allreduce_bench
    timeout -k 5 120 $exe $COMMON 2>>"$OUT/err.txt" | sed -u "s/^/$tag\tround$r\t/" >> "$AB"
  done
done
python3 - "$AB" <<'PY'
import json, sys, collections, statistics
rows = collections.defaultdict(list)
for ln in open(sys.argv[1]):
    tag, rnd, js = ln.rstrip("\n").split("\t", 2)
    if not js.startswith("{"): continue
    d = json.loads(js); rows[(tag, d["bytes"])].append((d["p50_us"], d["min_us"], d["wrong"], d["kernel_confirmed"]))
for (tag, b), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    p50s = [x[0] for x in v]
    print(f"{tag} {b >> 20} MiB: p50 per round {p50s} -> median {statistics.median(p50s):.1f} us "
          f"(busbw {1.5 * b / statistics.median(p50s) / 1e3:.1f} GB/s), min {min(x[1] for x in v):.1f}, "
          f"wrong {sum(x[2] for x in v)}, kernel {set(x[3] for x in v)}")
PY
