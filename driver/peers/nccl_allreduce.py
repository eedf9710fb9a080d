"""NCCL peer: torch.distributed all_reduce, one process per GPU, timed like ours.

Speaks the allreduce executables' vocabulary and prints the same JSON line per
size (impl "nccl"), so the driver's one parser reads it. Timing (--timing; the
line's `timing` says which method ran):
  cold (alias device; line "device"): one sample per collective, CUDA events on
    rank 0's stream, which a `torch.cuda._sleep` holds for HOLD_US first so the
    host has queued the collective before the start event fires; the other ranks
    are not held, so they wait inside the collective for rank 0 (as our
    executable's peers wait at its barrier).
  hot (line "graph"): `batch` collectives captured in a CUDA graph on every rank
    and replayed (driver/peers/torch_timing.py), rank 0 held before each replay,
    replay time / batch per sample. If any rank's capture fails, every rank says
    so and the peer exits 3: the driver records the mode as skipped, never timed
    another way.
  host (line "host"): nccl-tests' method, wall clock around `batch` collectives
    launched back to back plus a device synchronize, divided by `batch`; each
    sample is the slowest rank's.
`time_collective` is the cold/hot timing for any torch-driven collective peer.
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
from collections.abc import Callable

from driver.peers import torch_timing

HOLD_US = 100.0  # cold: how long rank 0's stream is held before each timed collective
EXIT_BAD_INPUT, EXIT_CUDA_ERROR, EXIT_NO_GPU = 2, 3, 4  # the kernel executables' codes
LINE_METHOD = {"cold": "device", "hot": "graph", "host": "host"}  # --timing -> the line's `timing`
ALIASES = {"device": "cold"}  # the executables' name for the same method

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
    p.add_argument("--timing", default="cold", choices=(*LINE_METHOD, *ALIASES),
                   help="cold (alias device), hot (a CUDA graph of --batch collectives) or host (nccl-tests' wall clock)")
    p.add_argument("--check", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args()
    ns.timing = ALIASES.get(ns.timing, ns.timing)
    if ns.iters < 1 or ns.warmup < 0 or ns.batch < 1:
        _fail("--iters and --batch must be >= 1, --warmup >= 0", EXIT_BAD_INPUT)
    try:
        ns.sizes_bytes = parse_sizes(ns.sizes)
    except ConfigError as exc:  # one line, exit 2 like the executables
        _fail(str(exc), EXIT_BAD_INPUT)
    return ns


def _inputs(torch, elements: int, rank: int, seed: int, dtype, device):
    g = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
    return (torch.rand(elements, generator=g, device=device, dtype=torch.float32) * 2 - 1).to(dtype)


def _device_times(torch, fn: Callable[[], object], rank: int, iters: int) -> list[float]:
    """Cold: per-collective device time in us (see the module docstring); every rank runs the loop."""
    cycles = int(HOLD_US * 1e-6 * torch_timing.SPIN_CLOCK_HZ)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    for _ in range(iters):
        if rank == 0:
            torch.cuda._sleep(cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def time_collective(torch, dist, fn: Callable[[], object], *, mode: str, rank: int, iters: int, warmup: int,
                    batch: int) -> list[float]:
    """Per-collective time in us on this rank, one entry per sample; every rank calls it with the
    same arguments. mode "cold": each collective timed alone behind rank 0's hold; "hot": `batch`
    collectives in a CUDA graph per sample. Rank 0's times are the measurement (its events span
    the collective; the other ranks' include waiting for rank 0). Raises GraphCaptureFailed on
    every rank when any rank's capture failed (so no rank is left waiting in a replay)."""
    if mode == "cold":
        return _device_times(torch, fn, rank, iters)
    if mode != "hot":
        raise ValueError(f"unknown timing mode {mode!r}")
    graph, why = None, ""
    try:
        graph = torch_timing.capture(torch, fn, batch)
    except torch_timing.GraphCaptureFailed as exc:
        why = f"rank {rank}: {exc}"
    reasons: list = [None] * dist.get_world_size()
    dist.all_gather_object(reasons, why)
    failed = [r for r in reasons if r]
    if failed:
        raise torch_timing.GraphCaptureFailed("; ".join(failed))
    return torch_timing.time_graph(torch, graph, launches=batch, iters=iters, warmup=warmup, hold=rank == 0)


def _host_times(torch, fn: Callable[[], object], iters: int, batch: int) -> list[float]:
    times: list[float] = []
    for _ in range((iters + batch - 1) // batch):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6 / batch)
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

            def collective(work=work) -> None:
                dist.all_reduce(work)

            for _ in range(ns.warmup):
                collective()
            torch.cuda.synchronize()
            if ns.timing == "host":
                times_us = _host_times(torch, collective, ns.iters, ns.batch)
            else:
                try:
                    times_us = time_collective(torch, dist, collective, mode=ns.timing, rank=rank, iters=ns.iters,
                                               warmup=ns.warmup, batch=ns.batch)
                except torch_timing.GraphCaptureFailed as exc:
                    if rank == 0:
                        print(f"error: hot timing: {exc}", file=sys.stderr, flush=True)
                    dist.destroy_process_group()
                    raise SystemExit(EXIT_CUDA_ERROR) from None
        gathered: list = [None] * ns.ngpus
        dist.all_gather_object(gathered, (times_us, max_err, wrong))
        if rank == 0:
            if ns.timing != "host":  # rank 0's events span the collective; the others' include the hold
                per_iter = list(gathered[0][0]) or [0.0]
            else:
                per_iter = [max(ts) for ts in zip(*(g[0] for g in gathered))] or [0.0]
            per_iter.sort()
            p50 = per_iter[len(per_iter) // 2]
            algbw = nbytes / (p50 * 1e-6) / 1e9 if p50 > 0 else 0.0
            line = {
                "suite": "allreduce", "impl": "nccl", "kernel_requested": "nccl", "kernel_selected": "nccl",
                "kernel_confirmed": "nccl", "dtype": ns.dtype, "ngpus": ns.ngpus, "bytes": nbytes,
                "elements": elements, "iters": ns.iters, "warmup": ns.warmup, "batch": 1 if ns.timing == "cold" else ns.batch,
                "timing": LINE_METHOD[ns.timing], "hold_overruns": 0, "p50_us": p50,
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
        _fail("torch is not installed on this host", EXIT_BAD_INPUT)
    if not torch.cuda.is_available():
        _fail("no GPU: torch sees no CUDA device", EXIT_NO_GPU)
    if torch.cuda.device_count() < ns.ngpus:
        _fail(f"--ngpus {ns.ngpus} asked for, but this host has {torch.cuda.device_count()} GPU(s)", EXIT_BAD_INPUT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(_worker, args=(ns, port), nprocs=ns.ngpus, join=True)
    except mp.ProcessExitedException as exc:  # a rank exited with its own code and `error:` line
        raise SystemExit(exc.exit_code if exc.exit_code and exc.exit_code > 0 else EXIT_CUDA_ERROR) from None
    except mp.ProcessRaisedException as exc:
        _fail(f"a rank raised: {(str(exc).strip().splitlines() or ['?'])[-1]}", EXIT_CUDA_ERROR)


if __name__ == "__main__":
    main()
