#!/usr/bin/env bash
# (run 2026-11-29 09:56 UTC, 1x H200) Nsight Compute with a bundle (python -m driver bundle) of c6c61eb at .gpu/next/new.tgz: pipe utilization, stall reasons and the SASS-level stall samples of
# the fp16 tier's key chunks (decode_b8_32k_sq16), the fp8 tier's, and the fp16 decode kernel (sq16, mqa).
set -u
b=$(pwd)/.gpu/next
mkdir -p /tmp/new && { [ -d /tmp/new/bundle ] || tar xzf $b/new.tgz -C /tmp/new || exit 9; }
cd /tmp/new/bundle
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
python3 - <<'PY'
# Inputs as ../ab.py makes them (seed 0: Q ~ N(0,1) fp16, K and V random E4M3 codes below 16 in magnitude, scale 1/64).
# (As run, the inputs came from the bundle's own input writer, the normal distribution at seed 0: see ../README.md.)
import pathlib, numpy as np
for name, qs, kvs in (("decode_b8_32k_sq16", (8, 32, 16, 128), (8, 8, 32768, 128)),
                      ("decode_b8_32k_mqa", (8, 32, 1, 128), (8, 1, 32768, 128))):
    d = pathlib.Path("/tmp/" + name); d.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(d / "q.npy", rng.standard_normal(qs, dtype=np.float32).astype(np.float16))
    for n in ("k", "v"):
        np.save(d / f"{n}.npy", rng.integers(0, 0x58, size=kvs, dtype=np.uint8) | (rng.integers(0, 2, size=kvs, dtype=np.uint8) << 7))
    np.save(d / "scales.npy", np.array([1 / 64, 1 / 64], dtype=np.float32))
PY
io() { echo "--q /tmp/$1/q.npy --k /tmp/$1/k.npy --v /tmp/$1/v.npy --scales /tmp/$1/scales.npy $( [ $1 = decode_b8_32k_sq16 ] && echo --causal)"; }
M='regex:^sm__inst_executed_pipe_[a-z0-9_]*\.avg\.pct_of_peak_sustained_active$,regex:^sm__pipe_[a-z0-9_]*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum'
prof() { local name=$1 case=$2 regex=$3; shift 3
  timeout 120 $NCU --clock-control none -k regex:$regex --launch-skip 1 --launch-count 1 --metrics "$M" --csv --page raw \
    bin/sm_90/sdpa_fp8_cpasync $(io $case) --out /tmp/o.npy --iters 1 --warmup 1 "$@" > "$OUT/m_$name.csv" 2>&1
  echo "ncu $name rc=$?"; }
prof kv16 decode_b8_32k_sq16 sdpa_fp8_sm90_kernel --precision fp16 --kernel wgmma_sm90
prof kv8 decode_b8_32k_sq16 sdpa_fp8_sm90_kernel --precision fp8 --kernel wgmma_fp8_sm90
prof dec16 decode_b8_32k_sq16 sdpa_decode --precision fp16 --kernel decode_sm89
prof mqa16 decode_b8_32k_mqa sdpa_decode --precision fp16
src() { local name=$1 case=$2 regex=$3; shift 3
  timeout 150 $NCU --clock-control none -k regex:$regex --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --import-source no --csv --page source --print-source sass bin/sm_90/sdpa_fp8_cpasync $(io $case) --out /tmp/o.npy --iters 1 --warmup 1 "$@" \
    | gzip -9 > "$OUT/s_$name.csv.gz"; echo "src $name rc=$?"; }
src kv16 decode_b8_32k_sq16 sdpa_fp8_sm90_kernel --precision fp16 --kernel wgmma_sm90
src mqa16 decode_b8_32k_mqa sdpa_decode --precision fp16
ls -la "$OUT"
