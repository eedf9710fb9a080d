#!/usr/bin/env bash
# The racecheck experiment (README.md), in one device call of about 3 min:
#   bash experiments/2026-11-29-sdpa-decode-racecheck/run.sh NEW_BUNDLE.tgz OLD_RUNNER "$OUT"
# NEW_BUNDLE.tgz: `python -m driver bundle --out bundle --python 3.12` at the commit under test, `tar czf X.tgz bundle`;
# OLD_RUNNER: the sdpa_fp8_cpasync runner of the commit to compare outputs with (bin/sm_90/ of its bundle).
# 1. the reduced kernel (repro.cu, built here with nvcc) under racecheck, every variant;
# 2. the decode kernel (the new bundle's cpasync runner) under racecheck at the three key-group shapes, both tiers,
#    chunk counts forced to 0 (the plan's), 1, 2, 4 (--split), and its outputs against OLD_RUNNER's bit for bit.
set -u
new=$1 old=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
nvcc -O3 -arch=sm_90 -lineinfo -o /tmp/repro "$here/repro.cu" || exit 9
for v in named32_async syncwarp32_async named64_async named128_async block64_async named32_plain named64_plain \
         syncwarp32_plain named32x4_uneven_async syncwarp32x4_uneven_async named64x4_uneven_async named64x4_async \
         named128x2_uneven_async; do
  timeout 60 compute-sanitizer --tool racecheck /tmp/repro $v > /tmp/rc.txt 2>&1
  echo "$v rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/rc.txt | head -1) | $(grep -m1 -A2 'Race reported' /tmp/rc.txt | tr '\n' ' ' | cut -c1-300)"
done > "$out/reduced.txt" 2>&1
rm -rf /tmp/rc_new && mkdir -p /tmp/rc_new && tar xzf "$new" -C /tmp/rc_new || exit 9
cd /tmp/rc_new/bundle
python3 -c "
# the three sanitizer cases' shapes (driver/config.py SANITIZER_CASES), numpy inputs: Q ~ N(0,1) fp16, K/V random
# E4M3 codes without the NaN codes, scales 1/64 (racecheck and the bit-for-bit comparison need no particular data)
import pathlib, numpy as np
rng = np.random.default_rng(0)
cases = {'san_decode_split': ((2, 8, 1, 128), (2, 2, 3000, 128)), 'san_decode_rows32': ((1, 32, 1, 128), (1, 1, 2000, 128)),
         'san_decode_rows64_d64': ((1, 8, 16, 64), (1, 2, 1000, 64))}
for name, (q, kv) in cases.items():
    f = pathlib.Path('/tmp/san') / name
    f.mkdir(parents=True, exist_ok=True)
    np.save(f / 'q.npy', rng.standard_normal(q).astype(np.float16))
    for t in ('k', 'v'):
        codes = rng.integers(0, 256, kv, dtype=np.uint8)
        np.save(f / f'{t}.npy', np.where((codes & 0x7f) == 0x7f, codes ^ 1, codes).astype(np.uint8))
    np.save(f / 'scales.npy', np.array([1 / 64, 1 / 64], dtype=np.float32))
" || exit 9
exe=bin/sm_90/sdpa_fp8_cpasync
for n in san_decode_rows32 san_decode_split san_decode_rows64_d64; do for prec in fp16 fp8; do for sp in 0 1 2 4; do
  c=""; [ $n = san_decode_rows64_d64 ] && c=--causal
  f=/tmp/san/$n; a="--q $f/q.npy --k $f/k.npy --v $f/v.npy --scales $f/scales.npy $c --precision $prec --split $sp"
  timeout 60 compute-sanitizer --tool racecheck $exe $a --out /tmp/o.npy --iters 1 --warmup 0 --no-spin > /tmp/rc.txt 2>&1
  r1=$?; timeout 30 $exe $a --out /tmp/o_new.npy --iters 2 --warmup 1 > /dev/null 2>&1; r2=$?
  timeout 30 "$old" $a --out /tmp/o_old.npy --iters 2 --warmup 1 > /dev/null 2>&1; r3=$?
  cmp -s /tmp/o_new.npy /tmp/o_old.npy && same="old == new bit for bit" || same="OUTPUTS DIFFER"
  echo "$n $prec split=$sp rc=$r1/$r2/$r3 $(grep -E 'RACECHECK SUMMARY' /tmp/rc.txt | head -1 | sed 's/=* *//') | $same"
done; done; done > "$out/decode.txt" 2>&1
cat "$out/reduced.txt" "$out/decode.txt"
