"""Copy bandwidth: a device-to-device copy on GPU 0, measured in the same run as the SDPA cases it scales.

A memory-bound attention case (decode: one query row against a long KV cache) can at best read K and V (and Q)
and write O at the rate the device moves memory; `hbm_frac` (records.ArchivedRecord) is the share of this copy's
rate a case reaches, as `link_frac` is the share of the measured link ceiling an allreduce reaches.

The copy is timed as every SDPA case is (docs/TIMING.md, cold; driver/peers/torch_timing.py): each copy alone, its
own CUDA event pair, queued behind a spin kernel, an L2 flush (a write of max(2 x L2, 64 MiB)) before each outside
the timed interval. `--bytes` (default 1 GiB, twenty times an H200's L2) are read and as many written: the driver
takes the p50 of the samples (driver/stats.py) and counts read + write, 2 x bytes / p50. Prints one CopyLine
(records.py); exit 2 bad arguments or no torch, 4 no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys

from driver.errors import RunnerExit

DEFAULT_BYTES = 1 << 30


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="hbm_copy")
    p.add_argument("--bytes", type=int, default=DEFAULT_BYTES)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    ns = p.parse_args(argv)
    if ns.bytes < 1 or ns.iters < 1 or ns.warmup < 0:
        print("error: --bytes and --iters must be >= 1, --warmup >= 0", file=sys.stderr)
        raise SystemExit(RunnerExit.BAD_INPUT)
    try:
        import torch
    except ImportError:
        print("error: torch is not installed on this host", file=sys.stderr)
        raise SystemExit(RunnerExit.BAD_INPUT) from None
    if not torch.cuda.is_available():
        print("error: no GPU: torch sees no CUDA device", file=sys.stderr)
        raise SystemExit(RunnerExit.NO_GPU)
    from driver.peers import torch_timing

    src = torch.empty(ns.bytes, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    src.fill_(1)
    flush = torch_timing.l2_flush_bytes(torch, 0)
    samples = torch_timing.time_cold(torch, lambda: dst.copy_(src), iters=ns.iters, warmup=ns.warmup,
                                     flush_bytes=flush)
    print(json.dumps({"hbm_copy": True, "bytes": ns.bytes, "timing": "cold", "samples_us": samples,
                      "l2_flush_bytes": flush, "device": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
