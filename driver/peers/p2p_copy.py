"""Link ceiling: GPU0 -> GPU1 copy-engine bandwidth, measured in the same run as the kernels.

A 2-GPU allreduce of N bytes must move N bytes across the link each way, so this
copy rate bounds what any allreduce's algbw can reach on the host. Prints one
JSON object: {"p2p_copy_gbps": ..., "bytes": ..., "iters": ...}.
"""

from __future__ import annotations

import json
import sys

from driver.errors import RunnerExit


def main() -> None:
    try:
        import torch
    except ImportError:
        print("error: torch is not installed on this host", file=sys.stderr)
        raise SystemExit(RunnerExit.BAD_INPUT)
    if torch.cuda.device_count() < 2:
        print("error: no GPU: the link ceiling needs 2 GPUs", file=sys.stderr)
        raise SystemExit(RunnerExit.NO_GPU)
    nbytes, iters = 256 << 20, 20
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    with torch.cuda.device(0):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
    torch.cuda.synchronize(1)
    seconds = start.elapsed_time(end) / 1e3 / iters
    print(json.dumps({"p2p_copy_gbps": nbytes / seconds / 1e9, "bytes": nbytes, "iters": iters}), flush=True)


if __name__ == "__main__":
    main()
