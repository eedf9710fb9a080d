#!/usr/bin/env bash
# Device command (1x H200): cuDNN FP8's attention kernel at (1,16,8192,128) in Nsight Compute's source view: its SASS
# with the executed instructions and stall samples per instruction (one launch after warm-up, clocks untouched), to
# set beside ours (profile.sh's s_base).  From the payload folder holding pb.tar.xz (as run.sh): bash profile_cudnn_sass.sh
set -u
cd "$(dirname "$0")"
mkdir -p /tmp/abps /tmp/in
python3 -c "import tarfile; tarfile.open('pb.tar.xz').extractall('/tmp/abps')"
export PYTHONPATH="/tmp/abps/pb:/tmp/abps/pb/site/py312" PYTHONSAFEPATH=1
python3 - <<'PY'
import numpy as np, torch, pathlib
d = pathlib.Path("/tmp/in")
g = torch.Generator().manual_seed(0)
shape = (1, 16, 8192, 128)
q = torch.randn(shape, generator=g).to(torch.float16)
k, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
ks, vs = float(k.abs().max()) / 448, float(v.abs().max()) / 448
np.save(d / "q.npy", q.numpy())
np.save(d / "k.npy", (k / ks).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "v.npy", (v / vs).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "scales.npy", np.array([ks, vs], dtype=np.float32))
PY
IO="--q /tmp/in/q.npy --k /tmp/in/k.npy --v /tmp/in/v.npy --scales /tmp/in/scales.npy"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
timeout 200 $NCU --clock-control none --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no --csv --page source --print-source sass \
  python3 -m driver.peers.cudnn_sdpa $IO --timing cold --iters 2 --warmup 1 | gzip -9 > "$OUT/s_cudnn.csv.gz"
echo "source cudnn rc=$?"
ls -la "$OUT"
