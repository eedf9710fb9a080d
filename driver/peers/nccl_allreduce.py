"""NCCL peer: torch.distributed all_reduce, one process per GPU, timed like ours.

Speaks the allreduce executables' vocabulary and prints the same JSON line per
size (impl "nccl"), so the driver's one parser reads it. Timing is the method
our executable uses (--timing):
  device: one sample per collective, CUDA events on rank 0's stream, which a
    `torch.cuda._sleep` holds for HOLD_US first so the host has queued the
    collective before the start event fires; the other ranks are not held, so
    they wait inside the collective for rank 0 (as our executable's peers wait
    at its barrier).
  host: wall clock around `batch` collectives launched back to back plus a
    device synchronize, divided by `batch`; each sample is the slowest rank's.
The checked run comes first, on the real inputs; the timed runs reduce a
zero-filled buffer in place, so repeated sums never overflow.
Run on the GPU host: `python -m driver.peers.nccl_allreduce --sizes 256K --ngpus 2`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

HOLD_US = 100.0  # device timing: how long rank 0's stream is held before each timed collective

DTYPE_TOL = {  # (relative, absolute) tolerance against the float64 sum
    "float32": (1e-6, 1e-5),
    "bfloat16": (2.0**-7, 1e-3),
    "float16": (2.0**-10, 1e-4),
}


def _fail(msg: str, code: int) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def _parse() -> argparse.Namespace:
    from driver.config import parse_sizes  # the same size grammar as everywhere else
    from driver.errors import ConfigError

    p = argparse.ArgumentParser(prog="nccl_allreduce")
    p.add_argument("--sizes", required=True)
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPE_TOL))
    p.add_argument("--ngpus", type=int, default=2)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--timing", default="host", choices=("device", "host"))
    p.add_argument("--check", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args()
    try:
        ns.sizes_bytes = parse_sizes(ns.sizes)
    except ConfigError as exc:  # one line, exit 2 like the executables
        _fail(str(exc), 2)
    return ns


def _inputs(torch, elements: int, rank: int, seed: int, dtype, device):
    g = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
    return (torch.rand(elements, generator=g, device=device, dtype=torch.float32) * 2 - 1).to(dtype)


def _device_times(torch, dist, work, rank: int, iters: int) -> list[float]:
    """Per-collective device time in us (see the module docstring); every rank runs the loop."""
    cycles = int(HOLD_US * 1e-6 * 2e9)  # _sleep counts SM clock cycles; H100/H200 run at <= 2 GHz
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    for _ in range(iters):
        if rank == 0:
            torch.cuda._sleep(cycles)
        start.record()
        dist.all_reduce(work)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def _worker(rank: int, ns: argparse.Namespace, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=ns.ngpus, device_id=device)
    dtype = getattr(torch, ns.dtype)
    elem_bytes = torch.tensor([], dtype=dtype).element_size()
    for nbytes in ns.sizes_bytes:
        elements = nbytes // elem_bytes
        times_us: list[float] = []
        max_err, wrong = 0.0, 0
        if elements > 0:
            if ns.check:
                buf = _inputs(torch, elements, rank, ns.seed, dtype, device)
                dist.all_reduce(buf)
                ref = sum(_inputs(torch, elements, r, ns.seed, dtype, device).double() for r in range(ns.ngpus))
                err = (buf.double() - ref).abs()
                rtol, atol = DTYPE_TOL[ns.dtype]
                wrong = int((err > atol + rtol * ref.abs()).sum().item() + (~torch.isfinite(buf)).sum().item())
                max_err = float(err.max().item())
                del buf, ref, err
            work = torch.zeros(elements, dtype=dtype, device=device)
            for _ in range(ns.warmup):
                dist.all_reduce(work)
            torch.cuda.synchronize()
            if ns.timing == "device":
                times_us = _device_times(torch, dist, work, rank, ns.iters)
            else:
                for _ in range((ns.iters + ns.batch - 1) // ns.batch):
                    t0 = time.perf_counter()
                    for _ in range(ns.batch):
                        dist.all_reduce(work)
                    torch.cuda.synchronize()
                    times_us.append((time.perf_counter() - t0) * 1e6 / ns.batch)
        gathered: list = [None] * ns.ngpus
        dist.all_gather_object(gathered, (times_us, max_err, wrong))
        if rank == 0:
            if ns.timing == "device":  # rank 0's events span the collective; the others' include the hold
                per_iter = list(gathered[0][0]) or [0.0]
            else:
                per_iter = [max(ts) for ts in zip(*(g[0] for g in gathered))] or [0.0]
            per_iter.sort()
            p50 = per_iter[len(per_iter) // 2]
            algbw = nbytes / (p50 * 1e-6) / 1e9 if p50 > 0 else 0.0
            line = {
                "suite": "allreduce", "impl": "nccl", "kernel_requested": "nccl", "kernel_selected": "nccl",
                "kernel_confirmed": "nccl", "dtype": ns.dtype, "ngpus": ns.ngpus, "bytes": nbytes,
                "elements": elements, "iters": ns.iters, "warmup": ns.warmup, "batch": ns.batch if ns.timing == "host" else 1,
                "timing": ns.timing, "hold_overruns": 0, "p50_us": p50,
                "p90_us": per_iter[min(len(per_iter) - 1, int(len(per_iter) * 0.9))], "min_us": per_iter[0],
                "mean_us": sum(per_iter) / len(per_iter), "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (ns.ngpus - 1) / ns.ngpus, "max_abs_err": max(g[1] for g in gathered),
                "wrong": sum(g[2] for g in gathered), "checked": bool(ns.check),
            }
            print(json.dumps(line), flush=True)
    dist.destroy_process_group()


def main() -> None:
    ns = _parse()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        _fail("torch is not installed on this host", 2)
    if not torch.cuda.is_available():
        _fail("no GPU: torch sees no CUDA device", 4)
    if torch.cuda.device_count() < ns.ngpus:
        _fail(f"--ngpus {ns.ngpus} asked for, but this host has {torch.cuda.device_count()} GPU(s)", 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(ns, port), nprocs=ns.ngpus, join=True)


if __name__ == "__main__":
    main()
