#!/usr/bin/env bash
# Device command: the SASS instruction mix and pipe activity of our fp8 kernel and of cuDNN FP8's attention kernel
# at one shape (Nsight Compute, clocks untouched, one launch of each after warm-up). From the repository root, the
# bundle unpacked at bundle/ and its Python path set (PYTHONPATH=$PWD/bundle:$PWD/bundle/site/py312 PYTHONSAFEPATH=1):
#   SHAPE=1x16x8192x128 bash experiments/2026-11-27-sdpa-fp8-energy/profile_mix.sh OUT_DIR
set -o pipefail
OUT=${1:?out dir}
SHAPE=${SHAPE:-1x16x8192x128}
mkdir -p "$OUT" /tmp/mix-in
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU ($($NCU --version | tail -1))"
python3 - /tmp/mix-in "$SHAPE" <<'PY'
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, "experiments/2026-11-23-sdpa-hopper")
from check_and_time import make_inputs
d, shape = Path(sys.argv[1]), tuple(int(x) for x in sys.argv[2].split("x"))
q, k, v, ks, vs = make_inputs(shape, 0)
for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
    np.save(d / f"{n}.npy", x)
PY
IO="--q /tmp/mix-in/q.npy --k /tmp/mix-in/k.npy --v /tmp/mix-in/v.npy --scales /tmp/mix-in/scales.npy"
METRICS="smsp__inst_executed.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg,gpu__time_duration.sum,sass__inst_executed_per_opcode,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active"
# 1. cuDNN's kernels in one warm run: names and durations, to find its attention kernel.
timeout 240 $NCU --target-processes all --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  python3 -m driver.peers.cudnn_sdpa $IO --timing hot --iters 2 --warmup 1 --batch 1 > "$OUT/cudnn_kernels.csv" 2> "$OUT/cudnn_kernels.err"
echo "cudnn kernel list rc=$?"
KNAME=$(python3 - "$OUT/cudnn_kernels.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
i = next(k for k, r in enumerate(rows) if r and r[0] == "ID")  # ncu's header (the peer's own lines come first)
head = rows[i]; ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
best = {}
for r in rows[i + 1:]:
    if len(r) != len(head): continue
    try: t = float(r[ti].replace(",", ""))
    except ValueError: continue
    best[r[ki]] = max(best.get(r[ki], 0.0), t)
name = max(best, key=best.get)
print(name.split("(")[0].split("<")[0].split()[-1])
PY
)
echo "cudnn attention kernel: $KNAME"
# 2. Its instruction mix, the last launch of a warm run; ours the same way (the launch after the output launch).
timeout 240 $NCU --target-processes all --clock-control none -k "regex:$KNAME" --launch-skip 2 --launch-count 1 \
  --metrics "$METRICS" --print-metric-instances details --csv --page raw \
  python3 -m driver.peers.cudnn_sdpa $IO --timing hot --iters 2 --warmup 1 --batch 1 > "$OUT/cudnn_mix.csv" 2> "$OUT/cudnn_mix.err"
echo "cudnn mix rc=$?"
timeout 240 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 \
  --metrics "$METRICS" --print-metric-instances details --csv --page raw \
  bundle/bin/sm_90/sdpa_fp8_cpasync $IO --out /tmp/mix-in/o.npy --precision fp8 --kernel wgmma_fp8_sm90 \
  --iters 1 --warmup 0 > "$OUT/ours_mix.csv" 2> "$OUT/ours_mix.err"
echo "ours mix rc=$?"
python3 - "$OUT/ours_mix.csv" "$OUT/cudnn_mix.csv" <<'PY'
import csv, re, sys
def load(p):
    rows = list(csv.reader(open(p)))
    i = next(k for k, r in enumerate(rows) if r and r[0] == "ID")
    head = rows[i]
    data = [r for r in rows[i + 1:] if len(r) == len(head)]
    return dict(zip(head, data[-1]))
def ops(cell):
    # "TOTAL (NAME: n; NAME: n; ...)": the instances of an instanced metric, after its total
    cell = re.sub(r"^[\d,.]+\s*\(", "", cell.strip()).rstrip(")")
    out = {}
    for part in cell.split(";"):
        if ":" in part:
            k, v = part.rsplit(":", 1)
            try: out[k.strip()] = float(v.replace(",", ""))
            except ValueError: pass
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
for key in ("Kernel Name", "gpu__time_duration.sum", "smsp__inst_executed.sum", "sm__cycles_elapsed.avg"):
    print(f"{key}: ours {a.get(key)} | cudnn {b.get(key)}")
for k in sorted(set(a) | set(b)):
    if "pct_of_peak" in k:
        print(f"{k}: ours {a.get(k)} | cudnn {b.get(k)}")
oa, ob = ops(a.get("sass__inst_executed_per_opcode", "")), ops(b.get("sass__inst_executed_per_opcode", ""))
print("| opcode | ours | cudnn |")
for k in sorted(set(oa) | set(ob), key=lambda k: -(oa.get(k, 0) + ob.get(k, 0)))[:40]:
    print(f"| {k} | {oa.get(k, 0):.0f} | {ob.get(k, 0):.0f} |")
PY
