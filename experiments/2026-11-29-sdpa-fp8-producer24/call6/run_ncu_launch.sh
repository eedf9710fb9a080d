#!/usr/bin/env bash
# (2026-11-29, 1x H200) Launch shape (cluster dims) and L2 sectors by source of one launch at (1,16,8192,128): ours
# (the bundle of 1fafc7e), Nsight Compute: does cuDNN run clusters (the precondition of TMA multicast)?
set -u
export PYTHONUNBUFFERED=1
here=$(pwd)/.gpu/ncu3
mkdir -p /tmp/new && tar xzf $here/new.tgz -C /tmp/new || exit 9
cd /tmp/new/bundle
export PYTHONPATH="$PWD:$PWD/site/py312" PYTHONSAFEPATH=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
M="launch__cluster_dim_x,launch__cluster_dim_y,launch__cluster_dim_z,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors.sum,gpu__time_duration.sum"
for shape in 1x16x8192x128; do
python3 - "$shape" <<'PY'
import sys, numpy as np, torch, pathlib
B, H, S, D = (int(x) for x in sys.argv[1].split("x"))
d = pathlib.Path("/tmp/in"); d.mkdir(exist_ok=True)
g = torch.Generator().manual_seed(0)
q = torch.randn((B, H, S, D), generator=g).to(torch.float16)
k, v = torch.randn((B, H, S, D), generator=g), torch.randn((B, H, S, D), generator=g)
ks, vs = float(k.abs().max()) / 448, float(v.abs().max()) / 448
np.save(d / "q.npy", q.numpy())
np.save(d / "k.npy", (k / ks).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "v.npy", (v / vs).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "scales.npy", np.array([ks, vs], dtype=np.float32))
PY
IO="--q /tmp/in/q.npy --k /tmp/in/k.npy --v /tmp/in/v.npy --scales /tmp/in/scales.npy"
timeout 90 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 --metrics $M \
  --csv --page raw bin/sm_90/sdpa_fp8_cpasync $IO --out /tmp/o.npy --precision fp8 --kernel wgmma_fp8_sm90 \
  --iters 1 --warmup 1 > "$OUT/ncu_ours_$shape.csv" 2>&1; echo "ours $shape rc=$?"
timeout 120 $NCU --clock-control none --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 \
  --metrics $M --csv --page raw python3 -m driver.peers.cudnn_sdpa $IO --timing cold --iters 2 --warmup 1 \
  > "$OUT/ncu_cudnn_$shape.csv" 2>&1; echo "cudnn $shape rc=$?"
done
ls "$OUT"
