#!/usr/bin/env bash
# Build and pack the folder a GPU call carries (/work/main/.gpu/sdpa-kernel): the driver build, NAME=DEFINE variants, the checker, the GPU-test tree.
set -e
W=/work/wt/sdpa-kernel
G=/work/main/.gpu/sdpa-kernel
rm -rf $G && mkdir -p $G/bin $G/repo/experiments
cp $W/build/sm_90/sdpa_fp8_baseline $W/build/sm_90/sdpa_fp8_cpasync $G/bin/
nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I $W/kernels_cuda/sdpa_fp8_sm90 $W/experiments/2026-11-23-sdpa-hopper/wgmma_probe.cu -o $G/bin/wgmma_probe 2>/dev/null
for v in "$@"; do  # extra variants: NAME=DEFINE[,DEFINE]
  name=${v%%=*}; defs=${v#*=}; mkdir -p $G/bin-$name
  for a in baseline:0 cpasync:1; do
    nvcc -O3 -std=c++17 -lineinfo -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
      $(echo $defs | tr ',' '\n' | sed 's/^/-D/') $W/kernels_cuda/sdpa_fp8/runner.cu -o $G/bin-$name/sdpa_fp8_${a%%:*} 2>/dev/null &
  done
  wait
done
cp $W/thresholds.toml $G/repo/
cp -r $W/experiments/2026-11-23-sdpa-hopper $G/repo/experiments/
rm -rf $G/repo/experiments/2026-11-23-sdpa-hopper/run*/
cp $W/experiments/2026-11-23-sdpa-hopper/run_gpu.sh $G/run_gpu.sh
# test tree for the GPU tests: driver, tests, thresholds, the two executables, build_meta, pydantic & co for 3.12
T=$G/tb; mkdir -p $T/bin/sm_90
cp -r $W/driver $W/tests $T/; cp $W/thresholds.toml $W/pyproject.toml $T/
find $T -name __pycache__ -prune -exec rm -rf {} +
cp $W/build/sm_90/sdpa_fp8_baseline $W/build/sm_90/sdpa_fp8_cpasync $T/bin/sm_90/
/work/devvenv/bin/python - "$W" "$T" <<'PY'
import json, sys
meta = json.load(open(f"{sys.argv[1]}/build/build_meta.json"))
meta["targets"] = [t for t in meta["targets"] if t["arch"] == "sm_90" and t["target"].startswith("sdpa")]
meta["archs"] = ["sm_90"]
json.dump(meta, open(f"{sys.argv[2]}/bin/build_meta.json", "w"), indent=1)
json.dump({"git_sha": meta["git_sha"], "git_dirty": meta["git_dirty"], "archs": ["sm_90"], "pythons": ["3.12"]}, open(f"{sys.argv[2]}/bundle.json", "w"))
PY
if [ ! -d /tmp/site312 ]; then
  /work/devvenv/bin/python -m pip install -q --no-compile --target /tmp/site312 --python-version 3.12 --implementation cp --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    "pydantic==$(/work/devvenv/bin/python -c 'import pydantic;print(pydantic.VERSION)')" psutil nvidia-ml-py 2>&1 | grep -v WARNING | tail -2
fi
mkdir -p $T/site && cp -r /tmp/site312 $T/site/py312
du -sh $G
