"""What every torch-driven allreduce peer shares: the executables' vocabulary, one process per GPU,
the inputs, the check against the float64 sum, the timing methods and the JSON line.

A peer module supplies only how to run its collective (a `Collective`: set up once per size, then a
callable that runs one allreduce on the rank's current stream) and its impl name; `main` does the
rest, so the NCCL peer and PyTorch's symmetric-memory peers print the same line, timed the same way
as our executable:
  device (also spelled cold): one sample per collective, CUDA events on rank 0's stream, which a
    `torch.cuda._sleep` holds for HOLD_US first so every rank's launch is queued before the start
    event fires; the other ranks are not held, so they wait inside the collective for rank 0 (as
    our executable's peers wait at its barrier).
  hot: `driver.peers.torch_timing.time_hot` on every rank: a CUDA graph of 20 collectives replayed,
    total / 20 per sample, the ranks lined up by a host barrier before each replay; a collective that
    cannot be captured is skipped with the reason.
  host: wall clock around `batch` collectives launched back to back plus a device synchronize,
    divided by `batch`; each sample is the slowest rank's.
The checked run comes first, on the real inputs; the timed runs reduce a zero-filled buffer, so
repeated sums never overflow. A peer that cannot run a config (an unsupported dtype, a missing
feature) prints `skipped: <reason>` on stderr and exits 9 with no line, so nothing is recorded as
measured; any other failure is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

HOLD_US = 100.0  # device timing: how long rank 0's stream is held before each timed collective
EXIT_SKIPPED = 9  # the peer cannot run this config; stderr says why (the driver records a skip)
TIMINGS = ("device", "cold", "hot", "host")

DTYPE_TOL = {  # (relative, absolute) tolerance against the float64 sum
    "float32": (1e-6, 1e-5),
    "bfloat16": (2.0**-7, 1e-3),
    "float16": (2.0**-10, 1e-4),
}


class PeerSkipped(RuntimeError):
    """The peer cannot run this config; str() is the reason, one line."""


@dataclass
class Collective:
    """One size's collective on one rank: `run()` reduces `work` (the timed runs), `check(x)` reduces a
    copy of `x` and returns the result (the checked run)."""

    run: Callable[[], object]
    check: Callable[[object], object]


def fail(msg: str, code: int) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def parse_args(prog: str) -> argparse.Namespace:
    from driver.config import parse_sizes  # the same size grammar as everywhere else
    from driver.errors import ConfigError

    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--sizes", required=True)
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPE_TOL))
    p.add_argument("--ngpus", type=int, default=2)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--timing", default="host", choices=TIMINGS)
    p.add_argument("--check", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args()
    try:
        ns.sizes_bytes = parse_sizes(ns.sizes)
    except ConfigError as exc:  # one line, exit 2 like the executables
        fail(str(exc), 2)
    if ns.timing == "cold":
        ns.timing = "device"
    return ns


def inputs(torch, elements: int, rank: int, seed: int, dtype, device):
    g = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
    return (torch.rand(elements, generator=g, device=device, dtype=torch.float32) * 2 - 1).to(dtype)


def device_times(torch, fn: Callable[[], object], rank: int, iters: int) -> list[float]:
    """Per-collective device time in us (see the module docstring); every rank runs the loop."""
    cycles = int(HOLD_US * 1e-6 * 2e9)  # _sleep counts SM clock cycles; H100/H200 run at <= 2 GHz
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


def _times(torch, dist, ns: argparse.Namespace, fn: Callable[[], object], rank: int) -> list[float]:
    if ns.timing == "device":
        return device_times(torch, fn, rank, ns.iters)
    if ns.timing == "hot":
        from driver.peers.torch_timing import GraphCaptureFailed, time_hot

        try:
            return time_hot(torch, fn, iters=ns.iters, warmup=ns.warmup, before_sample=dist.barrier)
        except GraphCaptureFailed as exc:
            raise PeerSkipped(str(exc)) from exc
    times = []
    for _ in range((ns.iters + ns.batch - 1) // ns.batch):
        t0 = time.perf_counter()
        for _ in range(ns.batch):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6 / ns.batch)
    return times


def line(ns: argparse.Namespace, impl: str, nbytes: int, elements: int, per_iter: list[float], max_err: float,
         wrong: int) -> dict:
    """The JSON line every allreduce executable prints (records.AllreduceLine)."""
    per_iter = sorted(per_iter) or [0.0]
    p50 = per_iter[len(per_iter) // 2]
    algbw = nbytes / (p50 * 1e-6) / 1e9 if p50 > 0 else 0.0
    return {
        "suite": "allreduce", "impl": impl, "kernel_requested": impl, "kernel_selected": impl,
        "kernel_confirmed": impl, "dtype": ns.dtype, "ngpus": ns.ngpus, "bytes": nbytes,
        "elements": elements, "iters": ns.iters, "warmup": ns.warmup, "batch": ns.batch if ns.timing == "host" else 1,
        "timing": ns.timing, "hold_overruns": 0, "p50_us": p50,
        "p90_us": per_iter[min(len(per_iter) - 1, int(len(per_iter) * 0.9))], "min_us": per_iter[0],
        "mean_us": sum(per_iter) / len(per_iter), "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (ns.ngpus - 1) / ns.ngpus, "max_abs_err": max_err, "wrong": wrong,
        "checked": bool(ns.check),
    }


def worker_error(traceback_text: str) -> str:
    """The `SomeError: message` line of a worker's traceback (pybind errors continue over several lines,
    so the last line alone can be just `Invoked with: ...`)."""
    lines = [ln.strip() for ln in traceback_text.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", lines[i]):
            return " ".join(lines[i:i + 3])[:300]
    return (lines[-1] if lines else "(no message)")[:300]


Setup = Callable[..., Collective]  # setup(torch, dist, elements, dtype, device) -> Collective


def _worker(rank: int, ns: argparse.Namespace, port: int, impl: str, setup: Setup, env: dict[str, str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **env)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=ns.ngpus, device_id=device)
    dtype = getattr(torch, ns.dtype)
    elem_bytes = torch.tensor([], dtype=dtype).element_size()
    for nbytes in ns.sizes_bytes:
        elements = nbytes // elem_bytes
        times_us: list[float] = []
        max_err, wrong, skipped = 0.0, 0, ""
        if elements > 0:
            try:
                coll = setup(torch, dist, elements, dtype, device)
                if ns.check:
                    out = coll.check(inputs(torch, elements, rank, ns.seed, dtype, device))
                    ref = sum(inputs(torch, elements, r, ns.seed, dtype, device).double() for r in range(ns.ngpus))
                    err = (out.double() - ref).abs()
                    rtol, atol = DTYPE_TOL[ns.dtype]
                    wrong = int((err > atol + rtol * ref.abs()).sum().item() + (~torch.isfinite(out)).sum().item())
                    max_err = float(err.max().item())
                    del out, ref, err
                for _ in range(ns.warmup):
                    coll.run()
                torch.cuda.synchronize()
                times_us = _times(torch, dist, ns, coll.run, rank)
            except PeerSkipped as exc:
                skipped = str(exc)
            except (RuntimeError, NotImplementedError) as exc:  # an op the build does not have for this dtype, ...
                text = str(exc).strip().splitlines()
                skipped = f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
            torch.cuda.synchronize()
        gathered: list = [None] * ns.ngpus
        dist.all_gather_object(gathered, (times_us, max_err, wrong, skipped))
        if rank == 0:
            why = next((g[3] for g in gathered if g[3]), "")
            if why:
                print(f"skipped: {impl} {ns.dtype} x{ns.ngpus} {nbytes} B: {why}", file=sys.stderr, flush=True)
                dist.destroy_process_group()
                raise SystemExit(EXIT_SKIPPED)
            if ns.timing == "device":  # rank 0's events span the collective; the others' include the hold
                per_iter = list(gathered[0][0])
            else:  # hot, host: each sample is the slowest rank's
                per_iter = [max(ts) for ts in zip(*(g[0] for g in gathered))]
            print(json.dumps(line(ns, impl, nbytes, elements, per_iter, max(g[1] for g in gathered),
                                  sum(g[2] for g in gathered))), flush=True)
        elif any(g[3] for g in gathered):
            dist.destroy_process_group()
            raise SystemExit(EXIT_SKIPPED)
    dist.destroy_process_group()


def main(prog: str, impl: str, setup: Setup, env: dict[str, str] | None = None) -> None:
    """Parse the executables' flags and run `setup`'s collective on one process per GPU."""
    ns = parse_args(prog)
    env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           **(env or {})}
    os.environ.update(env)  # before torch loads; the spawned workers inherit it: multicast stays off everywhere
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        fail("torch is not installed on this host", 2)
    if not torch.cuda.is_available():
        fail("no GPU: torch sees no CUDA device", 4)
    if torch.cuda.device_count() < ns.ngpus:
        fail(f"--ngpus {ns.ngpus} asked for, but this host has {torch.cuda.device_count()} GPU(s)", 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(_worker, args=(ns, port, impl, setup, env), nprocs=ns.ngpus, join=True)
    except mp.ProcessExitedException as exc:
        raise SystemExit(exc.exit_code if exc.exit_code else 1) from None
    except mp.ProcessRaisedException as exc:  # a worker raised: the exception line of its traceback is the reason
        fail(f"{impl} failed: {worker_error(str(exc))}", 1)
