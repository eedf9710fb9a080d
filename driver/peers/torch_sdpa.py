"""PyTorch peer: scaled_dot_product_attention on fp16 Q and the dequantized fp16 K/V.

Reads the same .npy inputs as our runners, decodes K/V with exactly the kernels'
simulated-E4M3 decode, times it in the mode asked for (`--timing`, see
driver/peers/torch_timing.py; the same two modes as our runners' timing.cuh):
  cold: each launch alone by its own event pair, queued behind a spin kernel, an L2
    flush (a write of max(2 x L2, 64 MiB)) before each, outside the timed interval;
  hot: `--batch` launches captured in a CUDA graph and replayed, replay time / batch.
Prints one SdpaLine (impl "torch_sdpa"). A mode it cannot do (the graph capture
failed) is one `error:` line and exit 3; the driver records that mode as skipped
with the reason and never times it another way.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

EXIT_BAD_INPUT, EXIT_CUDA_ERROR, EXIT_NO_GPU = 2, 3, 4  # the kernel executables' codes
MODES = ("cold", "hot")


def _fail(msg: str, code: int) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def main() -> None:
    p = argparse.ArgumentParser(prog="torch_sdpa")
    for name in ("q", "k", "v", "scales"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timing", default="cold", choices=MODES)
    p.add_argument("--batch", type=int, default=20, help="hot: launches per graph replay")
    ns = p.parse_args()
    if ns.iters < 1 or ns.warmup < 0 or ns.batch < 1:
        _fail("--iters and --batch must be >= 1, --warmup >= 0", EXIT_BAD_INPUT)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        _fail("torch is not installed on this host", EXIT_BAD_INPUT)
    if not torch.cuda.is_available():
        _fail("no GPU: torch sees no CUDA device", EXIT_NO_GPU)
    from driver.peers import torch_timing
    from driver.reference.sdpa import decode_e4m3_sim

    q_np, k_u8, v_u8, scales = (np.load(getattr(ns, n)) for n in ("q", "k", "v", "scales"))
    dev = torch.device("cuda", 0)
    q = torch.from_numpy(q_np).to(dev)
    k = torch.from_numpy((decode_e4m3_sim(k_u8) * float(scales[0])).astype(np.float16)).to(dev)
    v = torch.from_numpy((decode_e4m3_sim(v_u8) * float(scales[1])).astype(np.float16)).to(dev)

    def sdpa() -> object:
        return F.scaled_dot_product_attention(q, k, v)

    flush_bytes, batch = 0, 1
    if ns.timing == "cold":
        flush_bytes = torch_timing.l2_flush_bytes(torch, 0)
        times = torch_timing.time_cold(torch, sdpa, iters=ns.iters, warmup=ns.warmup, flush_bytes=flush_bytes)
    else:
        batch = ns.batch
        try:
            times = torch_timing.time_hot(torch, sdpa, iters=ns.iters, warmup=ns.warmup, launches=batch)
        except torch_timing.GraphCaptureFailed as exc:
            _fail(f"hot timing: {exc}", EXIT_CUDA_ERROR)
    t = np.sort(np.array(times))
    b, h, s, d = q.shape
    p50 = float(np.percentile(t, 50))
    print(json.dumps({
        "suite": "sdpa", "impl": "torch_sdpa", "shape": [b, h, s, d], "iters": ns.iters, "warmup": ns.warmup,
        "p50_us": p50, "p90_us": float(np.percentile(t, 90)), "mean_us": float(t.mean()), "std_us": float(t.std()),
        "min_us": float(t[0]), "tflops": 4 * b * h * s * s * d / (p50 * 1e-6) / 1e12,
        "timing": ns.timing, "batch": batch, "l2_flush_bytes": flush_bytes,
    }), flush=True)


if __name__ == "__main__":
    main()
