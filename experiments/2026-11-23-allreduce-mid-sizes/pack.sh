#!/usr/bin/env bash
# Build and pack the folder the mid-size A/B carries (/work/main/.gpu/armid): a driver bundle of this tree
# (Python 3.12) plus allreduce_bench variants beside its binary:
#   nc     -DAR_NC_LOADS=1              1stage/2stage read the inputs with ld.global.nc (upstream's loads)
#   u1     -DAR_UNROLL=1                one vector per thread per step (upstream's loop)
#   nc_u1  -DAR_NC_LOADS=1 -DAR_UNROLL=1
# Run: run(kind nvidia-h200-x2, carry [".gpu/armid"]):
#   B=.gpu/armid/bundle NO_TESTS=1 SIZES=1M,2M,4M,8M,16M VARIANTS="nc u1 nc_u1" VARIANT_KERNEL=1stage \
#     bash experiments/2026-11-23-allreduce-pushflag-bounds/run.sh
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=/work/main/.gpu/armid
export DRIVER_TOOLCHAIN_VENV=${DRIVER_TOOLCHAIN_VENV:-/work/main/.toolchain/venv}
rm -rf $G && mkdir -p $G
(cd $W && /work/devvenv/bin/python -m driver bundle --out $G/bundle --arch sm_90 --python 3.12 >/dev/null)
BIN=$G/bundle/bin/sm_90
# the defines the bundle's allreduce_bench was built with (the windows), plus each variant's
DEFS=$(python3 -c "import json;print(' '.join(f'-D{k}={v}' for k,v in json.load(open('$W/kernels_mojo/dispatch_windows.json'))['defines'].items()))")
for v in "nc=-DAR_NC_LOADS=1" "u1=-DAR_UNROLL=1" "nc_u1=-DAR_NC_LOADS=1 -DAR_UNROLL=1"; do
  name=${v%%=*}; extra=${v#*=}
  (cd $W && $DRIVER_TOOLCHAIN_VENV/bin/mojo build -I kernels_mojo --target-accelerator sm_90 $DEFS $extra \
     kernels_mojo/bin/allreduce_bench.mojo -o $BIN/allreduce_bench_$name) 2>&1 | grep -v Crashpad | grep -i error && exit 1
done
du -sh $G
