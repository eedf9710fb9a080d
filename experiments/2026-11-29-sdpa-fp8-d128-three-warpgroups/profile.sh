#!/usr/bin/env bash
# Call 3 (device, 1x H200): Nsight Compute of the 256-key kernel (runner base), the three-warpgroup kernel (runner w3a)
# and cuDNN FP8's attention kernel at (2,32,4096,128), one launch each after warm-up, clocks untouched: pipe
# utilization, issue-stall reasons, cycles, instructions (the metrics of ../2026-11-29-sdpa-fp8-p-smem/profile.sh).
# From the payload folder holding bin/*.xz and pb.tar.xz (.gpu/w3b): bash profile.sh
set -u
P=$(cd "$(dirname "$0")" && pwd)
B=${PAYLOAD:-$P}
mkdir -p /tmp/w3p/bin /tmp/w3in
python3 -c "import tarfile; tarfile.open('$B/pb.tar.xz').extractall('/tmp/w3p')"
for r in base w3a; do xz -dc "$B/bin/$r.xz" > /tmp/w3p/bin/$r && chmod +x /tmp/w3p/bin/$r; done
export PYTHONPATH="/tmp/w3p/pb:/tmp/w3p/pb/site/py312" PYTHONSAFEPATH=1
python3 - <<'PY'
import numpy as np, torch, pathlib
d = pathlib.Path("/tmp/w3in")
g = torch.Generator().manual_seed(0)
shape = (2, 32, 4096, 128)
q = torch.randn(shape, generator=g).to(torch.float16)
k, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
ks, vs = float(k.abs().max()) / 448, float(v.abs().max()) / 448
np.save(d / "q.npy", q.numpy())
np.save(d / "k.npy", (k / ks).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "v.npy", (v / vs).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
np.save(d / "scales.npy", np.array([ks, vs], dtype=np.float32))
PY
IO="--q /tmp/w3in/q.npy --k /tmp/w3in/k.npy --v /tmp/w3in/v.npy --scales /tmp/w3in/scales.npy"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
M='regex:^sm__inst_executed_pipe_[a-z0-9_]*\.avg\.pct_of_peak_sustained_active$,regex:^sm__pipe_[a-z0-9_]*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__time_duration.sum,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__inst_executed_pipe_xu.sum'
for r in base w3a; do
  timeout 90 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 --metrics "$M" \
    --csv --page raw /tmp/w3p/bin/$r $IO --out /tmp/o.npy --precision fp8 --kernel wgmma_fp8_sm90 --split 0 --iters 1 \
    --warmup 1 > "$OUT/m_$r.csv" 2>&1; echo "metrics $r rc=$?"
done
timeout 120 $NCU --clock-control none --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 \
  --metrics "$M" --csv --page raw python3 -m driver.peers.cudnn_sdpa $IO --timing cold --iters 2 --warmup 1 \
  > "$OUT/m_cudnn.csv" 2>&1; echo "metrics cudnn rc=$?"
ls -la "$OUT"
