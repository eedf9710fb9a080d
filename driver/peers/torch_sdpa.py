"""PyTorch peer: scaled_dot_product_attention on fp16 Q and the dequantized fp16 K/V.

Reads the same .npy inputs as our runners, decodes K/V with exactly the kernels'
simulated-E4M3 decode, times each launch with its own CUDA event pair after a
warm-up, the launches queued behind a spin kernel as our runners do, and prints
one SdpaLine (impl "torch_sdpa").
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(prog="torch_sdpa")
    for name in ("q", "k", "v", "scales"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    ns = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("error: torch is not installed on this host", file=sys.stderr)
        raise SystemExit(2)
    if not torch.cuda.is_available():
        print("error: no GPU: torch sees no CUDA device", file=sys.stderr)
        raise SystemExit(4)
    from driver.reference.sdpa import decode_e4m3_sim

    q_np, k_u8, v_u8, scales = (np.load(getattr(ns, n)) for n in ("q", "k", "v", "scales"))
    dev = torch.device("cuda", 0)
    q = torch.from_numpy(q_np).to(dev)
    k = torch.from_numpy((decode_e4m3_sim(k_u8) * float(scales[0])).astype(np.float16)).to(dev)
    v = torch.from_numpy((decode_e4m3_sim(v_u8) * float(scales[1])).astype(np.float16)).to(dev)
    host_s = []
    for _ in range(max(ns.warmup, 3)):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        host_s.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    # Like our runners: hold the GPU with a spin kernel long enough for the host to
    # queue every timed launch (twice the measured Python dispatch time), so each
    # event pair times the device, not Python dispatch.
    per_launch_s = max(sorted(host_s)[len(host_s) // 2], 10e-6)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ns.iters)]
    torch.cuda._sleep(int(min(2 * per_launch_s * ns.iters, 0.5) * 2e9))
    for start, end in events:
        start.record()
        F.scaled_dot_product_attention(q, k, v)
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) * 1e3 for start, end in events]
    t = np.sort(np.array(times))
    b, h, s, d = q.shape
    p50 = float(np.percentile(t, 50))
    print(json.dumps({
        "suite": "sdpa", "impl": "torch_sdpa", "shape": [b, h, s, d], "iters": ns.iters, "warmup": ns.warmup,
        "p50_us": p50, "p90_us": float(np.percentile(t, 90)), "mean_us": float(t.mean()), "std_us": float(t.std()),
        "min_us": float(t[0]), "tflops": 4 * b * h * s * s * d / (p50 * 1e-6) / 1e12,
    }), flush=True)


if __name__ == "__main__":
    main()
