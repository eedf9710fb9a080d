#!/usr/bin/env bash
# Build and pack the folder run 2 carries (/work/main/.gpu/ncwg): one pair of runners (baseline,
# cpasync) per head-dim-64 warpgroup policy (SDPA_SM90_NCWG3_D64: rule = 1, to become the default, three
# warpgroups from one full wave of 192-row blocks; two = 0; three = 2, the default until then), the checker and what it
# imports, run2.sh.  No driver bundle: check_variants.py needs numpy and torch only.
# Prints each build's largest ptxas register count and spill bytes; fails on a spill or a build
# without QGMMA in an unsplit head-dim-64 kernel.
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=${G:-/work/main/.gpu/ncwg}
E=$W/experiments/2026-11-23-sdpa-fp8-d64
CUOBJDUMP=$(command -v cuobjdump || ls /work/devvenv/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump 2>/dev/null | head -1)
rm -rf $G && mkdir -p $G/repo/experiments/2026-11-23-sdpa-fp8-d64
bad=0
for v in rule=1 two=0 three=2; do
  name=${v%%=*}; pol=${v#*=}; d=$G/bin-$name; mkdir -p $d
  for a in baseline:0 cpasync:1; do
    log=/tmp/pack-ncwg-$name-${a%%:*}.log
    nvcc -O3 -std=c++17 -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
      -DSDPA_SM90_NCWG3_D64=$pol -Xptxas -v $W/kernels_cuda/sdpa_fp8/runner.cu -o $d/sdpa_fp8_${a%%:*} \
      > $log 2>&1 || { cat $log; exit 1; }
    regs=$(grep -o "Used [0-9]* registers" $log | awk '{print $2}' | sort -n | tail -1)
    spills=$(grep -o "[0-9]* bytes spill stores" $log | awk '{s+=$1} END {print s+0}')
    q2=$($CUOBJDUMP -sass $d/sdpa_fp8_${a%%:*} | awk '/Function :/{f=($3 ~ /9Fp8TraitsILi64ELb[01]ELi0ELb0E/)} f' | grep -c QGMMA || true)
    q3=$($CUOBJDUMP -sass $d/sdpa_fp8_${a%%:*} | awk '/Function :/{f=($3 ~ /10Fp8Traits3ILi64ELb[01]ELi0E/)} f' | grep -c QGMMA || true)
    echo "$name ${a%%:*} (SDPA_SM90_NCWG3_D64=$pol): max regs $regs, spill store bytes $spills; QGMMA in the D64 unsplit kernels: two $q2, three $q3"
    [ "$spills" = 0 ] && [ "$q2" -gt 0 ] && [ "$q3" -gt 0 ] || bad=1
  done
done
cp $W/thresholds.toml $G/repo/
cp $E/check_variants.py $G/repo/experiments/2026-11-23-sdpa-fp8-d64/
mkdir -p $G/repo/experiments/2026-11-23-sdpa-hopper
cp $W/experiments/2026-11-23-sdpa-hopper/check_and_time.py $G/repo/experiments/2026-11-23-sdpa-hopper/
cp $E/run2.sh $G/run2.sh
du -sh $G
[ $bad = 0 ] || { echo "a build spills or has no QGMMA"; exit 1; }
