#!/usr/bin/env bash
# Device command (1x H200): Nsight Compute of base, ps32 (this folder's runners) and cuDNN FP8's attention kernel at
# (1,16,8192,128), one launch each after warm-up, clocks untouched: pipe utilization, issue-stall reasons per warp
# (all warps: the producer's are a quarter), cycles; then, for base and ps32, the SASS-level stall samples
# (SourceCounters).  From the payload folder holding bin/*.xz and pb.tar.xz (as run.sh): bash profile.sh
set -u
cd "$(dirname "$0")"
mkdir -p /tmp/abps/bin /tmp/in
python3 -c "import tarfile; tarfile.open('pb.tar.xz').extractall('/tmp/abps')"
for r in base ps32; do xz -dc bin/$r.xz > /tmp/abps/bin/$r && chmod +x /tmp/abps/bin/$r; done
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
M='regex:^sm__inst_executed_pipe_[a-z0-9_]*\.avg\.pct_of_peak_sustained_active$,regex:^sm__pipe_[a-z0-9_]*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__time_duration.sum'
for r in base ps32; do
  timeout 60 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 --metrics "$M" \
    --csv --page raw /tmp/abps/bin/$r $IO --out /tmp/o.npy --precision fp8 --kernel wgmma_fp8_sm90 --split 0 --iters 1 \
    --warmup 1 > "$OUT/m_$r.csv" 2>&1; echo "metrics $r rc=$?"
done
timeout 120 $NCU --clock-control none --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 \
  --metrics "$M" --csv --page raw python3 -m driver.peers.cudnn_sdpa $IO --timing cold --iters 2 --warmup 1 \
  > "$OUT/m_cudnn.csv" 2>&1; echo "metrics cudnn rc=$?"
for r in base ps32; do
  timeout 120 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --import-source no --csv --page source --print-source sass \
    /tmp/abps/bin/$r $IO --out /tmp/o.npy --precision fp8 --kernel wgmma_fp8_sm90 --split 0 --iters 1 --warmup 1 \
    | gzip -9 > "$OUT/s_$r.csv.gz"; echo "source $r rc=$?"
done
ls -la "$OUT"
