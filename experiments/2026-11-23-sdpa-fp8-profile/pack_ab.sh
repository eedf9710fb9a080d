#!/usr/bin/env bash
# Build and pack the folder run_ab.sh carries (/work/main/.gpu/sdpaab): one pair of runners (baseline,
# cpasync) per build NAME=DEFINE[,DEFINE] (arguments; "NAME=" is this checkout's defaults), the
# reference build "main" copied from REF_BIN (a pair of runners built at an earlier commit, with its
# commit in REF_BIN/../commit.txt), the checker and what it imports.  Prints each build's largest
# register count and spill bytes; fails on a spill.
#   REF_BIN=/work/main/.gpu/prof/bin pack_ab.sh new= old_wait=SDPA_SM90_WAIT_DATA_FIRST=0 ...
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=${G:-/work/main/.gpu/sdpaab}
E=$W/experiments/2026-11-23-sdpa-fp8-profile
rm -rf $G && mkdir -p $G/repo/experiments/2026-11-23-sdpa-fp8-d64 $G/repo/experiments/2026-11-23-sdpa-hopper
if [ -n "$REF_BIN" ]; then
  mkdir -p $G/bin-main && cp $REF_BIN/sdpa_fp8_baseline $REF_BIN/sdpa_fp8_cpasync $G/bin-main/
  echo "main: $(cat $REF_BIN/../commit.txt 2>/dev/null || echo '?')" > $G/builds.txt
fi
echo "this checkout: $(cd $W && git rev-parse --short HEAD)$(cd $W && git diff --quiet -- kernels_cuda || echo ' + uncommitted kernel changes')" >> $G/builds.txt
bad=0
for v in "$@"; do
  name=${v%%=*}; defs=${v#*=}; d=$G/bin-$name; mkdir -p $d
  echo "$name: $defs" >> $G/builds.txt
  for a in baseline:0 cpasync:1; do
    log=/tmp/pack-ab-$name-${a%%:*}.log
    nvcc -O3 -std=c++17 -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
      $(echo $defs | tr ',' '\n' | grep . | sed 's/^/-D/') -Xptxas -v $W/kernels_cuda/sdpa_fp8/runner.cu \
      -o $d/sdpa_fp8_${a%%:*} > $log 2>&1 &
  done
  wait
  for a in baseline cpasync; do
    log=/tmp/pack-ab-$name-$a.log
    [ -x $d/sdpa_fp8_$a ] || { cat $log; exit 1; }
    regs=$(grep -o "Used [0-9]* registers" $log | awk '{print $2}' | sort -n | tail -1)
    spills=$(grep -o "[0-9]* bytes spill stores" $log | awk '{s+=$1} END {print s+0}')
    echo "$name $a ($defs): max regs $regs, spill store bytes $spills"
    [ "$spills" = 0 ] || bad=1
  done
done
cp $W/thresholds.toml $G/repo/
cp $W/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py $G/repo/experiments/2026-11-23-sdpa-fp8-d64/
cp $W/experiments/2026-11-23-sdpa-hopper/check_and_time.py $G/repo/experiments/2026-11-23-sdpa-hopper/
cp $E/run_ab.sh $G/run_ab.sh
du -sh $G
[ $bad = 0 ] || { echo "a build spills"; exit 1; }
