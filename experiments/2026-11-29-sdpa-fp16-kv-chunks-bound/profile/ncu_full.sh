#!/usr/bin/env bash
# (run 2026-11-29 09:49 UTC, 1x H200) Nsight Compute at decode_b8_32k_sq16 with a bundle (python -m driver bundle)
# (.gpu/next/new.tgz, of c6c61eb): the fp16 tier's key chunks (197 us cold: K decoded by the producer, V by the consumers), the fp8
# tier's (150 us: the same structure, no decode) and the fp16 decode kernel (311 us), one launch each, --set full:
# which pipe (tensor, the conversions' ALU, shared memory) and which stalls take the fp16 tier's 47 us more.
#   bash experiments/2026-11-29-sdpa-fp16-kv-chunks-bound/profile/ncu_full.sh   (from the repository root; carry .gpu/next)
set -u
fin=$(pwd)/.gpu/next
mkdir -p /tmp/new && { [ -d /tmp/new/bundle ] || tar xzf $fin/new.tgz -C /tmp/new || exit 9; }
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
I=/tmp/decode_b8_32k_sq16; IO="--q $I/q.npy --k $I/k.npy --v $I/v.npy --scales $I/scales.npy --causal"
prof() { local name=$1 regex=$2; shift 2
  timeout 150 $NCU --clock-control none -k regex:$regex --launch-skip 1 --launch-count 1 --set full \
    --import-source no --csv --page details bin/sm_90/sdpa_fp8_cpasync $IO --out /tmp/o.npy --iters 1 --warmup 1 "$@" \
    > "$OUT/ncu_$name.csv" 2>&1; echo "ncu $name rc=$?"; }
prof kv_fp16 sdpa_fp8_sm90_kernel --precision fp16 --kernel wgmma_sm90
prof kv_fp8 sdpa_fp8_sm90_kernel --precision fp8 --kernel wgmma_fp8_sm90
prof decode_fp16 sdpa_decode --precision fp16 --kernel decode_sm89
ls -la "$OUT"
