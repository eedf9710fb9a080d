#!/usr/bin/env bash
# Build and pack the folder a GPU call carries (/work/main/.gpu/sdpa-d64): a driver bundle (Python 3.12)
# of this worktree's build (its runners, bundle/bin/sm_90, are the default build "main"), one pair of
# runners (baseline, cpasync) per head-dim-64 candidate (bin-NAME/, NAME=DEFINE[,DEFINE] below or as
# arguments; packed as variants.tar.xz), the checker and what it imports.  Prints each build's ptxas registers / spills and SASS
# counts (QGMMA, MUFU.EX2) of the head-dim-64 cpasync kernel; fails on a spill or a build without QGMMA.
#   pack.sh [NAME=DEFINE[,DEFINE] ...]
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=${G:-/work/main/.gpu/sdpa-d64}
E=$W/experiments/2026-11-23-sdpa-fp8-d64
export DRIVER_TOOLCHAIN_VENV=${DRIVER_TOOLCHAIN_VENV:-/work/main/.toolchain/venv}
CUOBJDUMP=$(command -v cuobjdump || ls /work/devvenv/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump 2>/dev/null | head -1)
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(
  poly4=SDPA_SM90_EXP2_POLY=4
  poly6=SDPA_SM90_EXP2_POLY=6
  poly8=SDPA_SM90_EXP2_POLY=8
  # h2=SDPA_SM90_EX2_F16X2=1 ran in run 1 (code at fbcc1df); removed after it lost
  ncwg3=SDPA_SM90_NCWG3_D64=2  # =1 when run 1 ran (then "three"; now the policy values: 2 = three)
  ncwg3_poly4=SDPA_SM90_NCWG3_D64=2,SDPA_SM90_EXP2_POLY=4
)
rm -rf $G && mkdir -p $G/repo/experiments/2026-11-23-sdpa-fp8-d64
(cd $W && /work/devvenv/bin/python -m driver bundle --out $G/bundle --arch sm_90 --python 3.12 >/dev/null)
bad=0
for v in "${VARIANTS[@]}"; do
  name=${v%%=*}; defs=${v#*=}; d=$G/bin-$name; mkdir -p $d
  for a in baseline:0 cpasync:1; do
    nvcc -O3 -std=c++17 -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
      $(echo $defs | tr ',' '\n' | sed 's/^/-D/') -Xptxas -v $W/kernels_cuda/sdpa_fp8/runner.cu -o $d/sdpa_fp8_${a%%:*} \
      > /tmp/pack-d64-$name-${a%%:*}.log 2>&1 || { cat /tmp/pack-d64-$name-${a%%:*}.log; exit 1; }
    regs=$(grep -o "Used [0-9]* registers" /tmp/pack-d64-$name-${a%%:*}.log | awk '{print $2}' | sort -n | tail -1)
    spills=$(grep -o "[0-9]* bytes spill stores" /tmp/pack-d64-$name-${a%%:*}.log | awk '{s+=$1} END {print s+0}')
    sass=$($CUOBJDUMP -sass $d/sdpa_fp8_${a%%:*} | awk '/Function :/{f=($3 ~ /Fp8TraitsILi64ELb[01]ELi0ELb0E/)} f' )
    q=$(grep -c QGMMA <<<"$sass" || true); m=$(grep -c "MUFU.EX2" <<<"$sass" || true)
    echo "$name ${a%%:*} ($defs): max regs $regs, spill store bytes $spills; D64 unsplit kernel: QGMMA $q, MUFU.EX2 $m"
    [ "$spills" = 0 ] && [ "$q" -gt 0 ] || bad=1
  done
done
# The candidates' runners go as one xz tarball (about 3 MB instead of 4 MB per build; the carried
# folder must stay well under 64 MiB next to the 38 MB bundle); run_gpu.sh unpacks it.
(cd $G && tar cf - bin-* | xz -9e -T2 > variants.tar.xz && rm -rf bin-*)
cp $W/thresholds.toml $G/repo/
cp $E/check_variants.py $G/repo/experiments/2026-11-23-sdpa-fp8-d64/
mkdir -p $G/repo/experiments/2026-11-23-sdpa-hopper
cp $W/experiments/2026-11-23-sdpa-hopper/check_and_time.py $G/repo/experiments/2026-11-23-sdpa-hopper/
cp $E/run_gpu.sh $G/run_gpu.sh
du -sh $G
[ $bad = 0 ] || { echo "a build spills or has no QGMMA"; exit 1; }
