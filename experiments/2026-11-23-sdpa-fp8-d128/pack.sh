#!/usr/bin/env bash
# Build and pack the folder a GPU call carries (/work/main/.gpu/d128): a driver bundle (Python 3.12) of
# this worktree's build (its runners, bundle/bin/sm_90, are the default build "main"), one pair of
# runners (baseline, cpasync) per head-dim-128 candidate (bin-NAME/, NAME=DEFINE[,DEFINE] below or as
# arguments; packed as variants.tar.xz), the checker (../2026-11-23-sdpa-fp8-d64/check_variants.py) and
# what it imports.  Prints each build's ptxas registers / spills and SASS counts of the head-dim-128
# unsplit cpasync kernel (QGMMA, LDS, STS, PRMT, FMUL, and the producer's instructions after its
# setmaxnreg); fails on a spill or a build without QGMMA.
#   pack.sh [NAME=DEFINE[,DEFINE] ...]
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=${G:-/work/main/.gpu/d128}
E=$W/experiments/2026-11-23-sdpa-fp8-d128
C=$W/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py
export DRIVER_TOOLCHAIN_VENV=${DRIVER_TOOLCHAIN_VENV:-/work/main/.toolchain/venv}
CUOBJDUMP=$(command -v cuobjdump || ls /work/devvenv/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump 2>/dev/null | head -1)
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(
  slow_vt=SDPA_SM90_VT_FAST=0
)
rm -rf $G && mkdir -p $G/repo/experiments/2026-11-23-sdpa-fp8-d64
(cd $W && /work/devvenv/bin/python -m driver bundle --out $G/bundle --arch sm_90 --python 3.12 >/dev/null)
bad=0
build() {  # name defs mode:async
  local name=$1 defs=$2 a=$3 d=$G/bin-$1
  nvcc -O3 -std=c++17 -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
    $(echo $defs | tr ',' '\n' | sed 's/^/-D/') -Xptxas -v $W/kernels_cuda/sdpa_fp8/runner.cu -o $d/sdpa_fp8_${a%%:*} \
    > /tmp/pack-d128-$name-${a%%:*}.log 2>&1 || { cat /tmp/pack-d128-$name-${a%%:*}.log; return 1; }
}
for v in "${VARIANTS[@]}"; do
  name=${v%%=*}; defs=${v#*=}; mkdir -p $G/bin-$name
  build $name $defs baseline:0 & p1=$!
  build $name $defs cpasync:1 & p2=$!
  wait $p1 && wait $p2 || exit 1
  for a in baseline cpasync; do
    log=/tmp/pack-d128-$name-$a.log
    regs=$(grep -o "Used [0-9]* registers" $log | awk '{print $2}' | sort -n | tail -1)
    spills=$(grep -o "[0-9]* bytes spill stores" $log | awk '{s+=$1} END {print s+0}')
    sass=$($CUOBJDUMP -sass $G/bin-$name/sdpa_fp8_$a | awk '/Function :/{f=($3 ~ /Fp8TraitsILi128ELb[01]ELi0ELb0E/)} f')
    q=$(grep -c QGMMA <<<"$sass" || true)
    c() { grep -c "$1" <<<"$sass" || true; }
    prod=$(awk '/USETMAXREG.DEALLOC/{f=1} f && /\/\*[0-9a-f]+\*\/ /' <<<"$sass" | wc -l)
    echo "$name $a ($defs): max regs $regs, spill store bytes $spills; D128 unsplit kernel: QGMMA $q, LDS $(c ' LDS'), STS $(c ' STS'), PRMT $(c PRMT), FMUL $(c FMUL), producer code $prod instructions"
    [ "$spills" = 0 ] && [ "$q" -gt 0 ] || bad=1
  done
done
# The candidates' runners go as one xz tarball; run_gpu.sh unpacks it.
(cd $G && tar cf - bin-* | xz -9e -T2 > variants.tar.xz && rm -rf bin-*)
cp $W/thresholds.toml $G/repo/
cp $C $G/repo/experiments/2026-11-23-sdpa-fp8-d64/
mkdir -p $G/repo/experiments/2026-11-23-sdpa-hopper
cp $W/experiments/2026-11-23-sdpa-hopper/check_and_time.py $G/repo/experiments/2026-11-23-sdpa-hopper/
cp $E/run_gpu.sh $G/run_gpu.sh
du -sh $G
[ $bad = 0 ] || { echo "a build spills or has no QGMMA"; exit 1; }
