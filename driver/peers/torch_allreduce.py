"""What every torch-driven allreduce peer shares: the executables' vocabulary, one process per GPU,
the inputs, the check against the float64 sum, the timing modes and the JSON line.

A peer module supplies only how to run its collective (`setup`, returning a `Collective`: the timed
call on a zero-filled buffer, and the checked call on real inputs) and its impl name; `main` does the
rest, so the NCCL peer and PyTorch's symmetric-memory peers print the same line, timed the same way
(--timing; the line's `timing` says which method ran):
  cold (alias device; line "device"): one sample per collective, CUDA events on rank 0's stream, which a
    `torch.cuda._sleep` holds for HOLD_US first so the host has queued the collective before the start
    event fires; the other ranks are not held, so they wait inside the collective for rank 0 (as our
    executable's peers wait at its barrier).
  hot (line "graph"): `batch` collectives captured in a CUDA graph on every rank and replayed
    (driver/peers/torch_timing.py), rank 0 held before each replay, replay time / batch per sample. If
    any rank's capture fails, every rank says so and the peer exits 3: the driver records the mode as
    skipped, never timed another way.
  host (line "host"): nccl-tests' method, wall clock around `batch` collectives launched back to back
    plus a device synchronize, divided by `batch`; each sample is the slowest rank's.
`time_collective` is the cold/hot timing for any torch-driven collective.
The checked run comes first, on the real inputs; the timed runs reduce a zero-filled buffer, so
repeated sums never overflow. A peer that cannot run a config (a dtype its op has no kernel for, a
buffer that came with multicast) raises `PeerCannotRun`: one `error:` line naming the impl and config,
exit 3, no JSON line; multicast is off in every process (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, set before torch loads).
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

from driver.peers import torch_timing

HOLD_US = 100.0  # cold: how long rank 0's stream is held before each timed collective
EXIT_BAD_INPUT, EXIT_CUDA_ERROR, EXIT_NO_GPU = 2, 3, 4  # the kernel executables' codes
LINE_METHOD = {"cold": "device", "hot": "graph", "host": "host"}  # --timing -> the line's `timing`
ALIASES = {"device": "cold"}  # the executables' name for the same method
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

DTYPE_TOL = {  # (relative, absolute) tolerance against the float64 sum
    "float32": (1e-6, 1e-5),
    "bfloat16": (2.0**-7, 1e-3),
    "float16": (2.0**-10, 1e-4),
}


class PeerCannotRun(RuntimeError):
    """This peer cannot run this config; str() is the reason, one line."""


@dataclass
class Collective:
    """One size's collective on one rank: `run()` reduces the zero-filled work buffer (the timed calls),
    `check(x)` reduces a copy of `x` and returns the result (the checked call)."""

    run: Callable[[], object]
    check: Callable[[object], object]


Setup = Callable[..., Collective]  # setup(torch, dist, elements, dtype, device) -> Collective


def fail(msg: str, code: int) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


class BadRequest(ValueError):
    """A served case's arguments are wrong; str() is the `error:` text (exit 2 in the one-shot run)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one `error:` line and exit 2 (or BadRequest when served)
        raise BadRequest(f"{self.prog}: {message}")


def parse_args(prog: str, argv: list[str] | None = None, *, served: bool = False) -> argparse.Namespace:
    """The executables' flags; a bad one is one `error:` line and exit 2, or BadRequest when `served`."""
    try:
        return _parse(prog, argv)
    except BadRequest as exc:
        if served:
            raise
        fail(str(exc), EXIT_BAD_INPUT)


def _parse(prog: str, argv: list[str] | None) -> argparse.Namespace:
    from driver.config import parse_sizes  # the same size grammar as everywhere else
    from driver.errors import ConfigError

    p = _Parser(prog=prog)
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
    p.add_argument("--impl", default=None, help="served: which collective (nccl, torch_symm_oneshot, ...)")
    ns = p.parse_args(argv)
    ns.timing = ALIASES.get(ns.timing, ns.timing)
    if ns.iters < 1 or ns.warmup < 0 or ns.batch < 1:
        raise BadRequest("--iters and --batch must be >= 1, --warmup >= 0")
    try:
        ns.sizes_bytes = parse_sizes(ns.sizes)
    except ConfigError as exc:  # one line, exit 2 like the executables
        raise BadRequest(str(exc)) from None
    return ns


def inputs(torch, elements: int, rank: int, seed: int, dtype, device):
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


def line(ns: argparse.Namespace, impl: str, nbytes: int, elements: int, per_iter: list[float], max_err: float,
         wrong: int) -> dict:
    """The JSON line every allreduce executable prints (records.AllreduceLine)."""
    per_iter = sorted(per_iter) or [0.0]
    p50 = per_iter[len(per_iter) // 2]
    algbw = nbytes / (p50 * 1e-6) / 1e9 if p50 > 0 else 0.0
    return {
        "suite": "allreduce", "impl": impl, "kernel_requested": impl, "kernel_selected": impl,
        "kernel_confirmed": impl, "dtype": ns.dtype, "ngpus": ns.ngpus, "bytes": nbytes,
        "elements": elements, "iters": ns.iters, "warmup": ns.warmup, "batch": 1 if ns.timing == "cold" else ns.batch,
        "timing": LINE_METHOD[ns.timing], "hold_overruns": 0, "p50_us": p50,
        "p90_us": per_iter[min(len(per_iter) - 1, int(len(per_iter) * 0.9))], "min_us": per_iter[0],
        "mean_us": sum(per_iter) / len(per_iter), "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (ns.ngpus - 1) / ns.ngpus, "max_abs_err": max_err, "wrong": wrong,
        "checked": bool(ns.check),
    }


def _one_size(torch, dist, ns, rank: int, setup: Setup, elements: int, dtype, device) -> tuple[list[float], float, int]:
    coll = setup(torch, dist, elements, dtype, device)
    max_err, wrong = 0.0, 0
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
    if ns.timing == "host":
        return _host_times(torch, coll.run, ns.iters, ns.batch), max_err, wrong
    return time_collective(torch, dist, coll.run, mode=ns.timing, rank=rank, iters=ns.iters, warmup=ns.warmup,
                           batch=ns.batch), max_err, wrong


def _join(rank: int, ngpus: int, port: int):
    """This rank's torch, process group (NCCL) and device."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **MULTICAST_OFF)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=ngpus, device_id=device)
    return torch, dist, device


def _worker(rank: int, ns: argparse.Namespace, port: int, impl: str, setup: Setup) -> None:
    torch, dist, device = _join(rank, ns.ngpus, port)
    why = _sizes(torch, dist, device, ns, rank, impl, setup)
    dist.destroy_process_group()
    if why:
        raise SystemExit(EXIT_CUDA_ERROR)


def _sizes(torch, dist, device, ns: argparse.Namespace, rank: int, impl: str, setup: Setup) -> str:
    """Every size of one request on this rank, rank 0 printing each line; the failure every rank agreed
    on (rank 0 printed its `error:` line), or "" when every size ran."""
    dtype = getattr(torch, ns.dtype)
    elem_bytes = torch.tensor([], dtype=dtype).element_size()
    for nbytes in ns.sizes_bytes:
        elements = nbytes // elem_bytes
        times_us: list[float] = []
        max_err, wrong, why = 0.0, 0, ""
        if elements > 0:
            try:
                times_us, max_err, wrong = _one_size(torch, dist, ns, rank, setup, elements, dtype, device)
            except torch_timing.GraphCaptureFailed as exc:
                why = f"hot timing: {exc}"
            except PeerCannotRun as exc:
                why = str(exc)
        gathered: list = [None] * ns.ngpus
        dist.all_gather_object(gathered, (times_us, max_err, wrong, why))
        failed = next((g[3] for g in gathered if g[3]), "")
        if failed:  # every rank leaves together: one line, the config named, nothing printed as measured
            if rank == 0:
                print(f"error: {impl} {ns.dtype} x{ns.ngpus} {nbytes} B {ns.timing}: {failed}", file=sys.stderr,
                      flush=True)
            return failed
        if rank == 0:
            if ns.timing != "host":  # rank 0's events span the collective; the others' include the hold
                per_iter = list(gathered[0][0])
            else:
                per_iter = [max(ts) for ts in zip(*(g[0] for g in gathered))]
            print(json.dumps(line(ns, impl, nbytes, elements, per_iter, max(g[1] for g in gathered),
                                  sum(g[2] for g in gathered))), flush=True)
    return ""


def worker_error(traceback_text: str) -> str:
    """The `SomeError: message` line of a worker's traceback (pybind errors continue over several lines,
    so the last line alone can be just `Invoked with: ...`)."""
    lines = [ln.strip() for ln in traceback_text.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", lines[i]):
            return " ".join(lines[i:i + 3])[:300]
    return (lines[-1] if lines else "(no message)")[:300]


def main(prog: str, impl: str, setup: Setup) -> None:
    """Parse the executables' flags and run `setup`'s collective on one process per GPU."""
    ns = parse_args(prog)
    os.environ.update(MULTICAST_OFF)  # before torch loads; the spawned workers inherit it
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        fail("torch is not installed on this host", EXIT_BAD_INPUT)
    if not torch.cuda.is_available():
        fail("no GPU: torch sees no CUDA device", EXIT_NO_GPU)
    if torch.cuda.device_count() < ns.ngpus:
        fail(f"--ngpus {ns.ngpus} asked for, but this host has {torch.cuda.device_count()} GPU(s)", EXIT_BAD_INPUT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(_worker, args=(ns, port, impl, setup), nprocs=ns.ngpus, join=True)
    except mp.ProcessExitedException as exc:  # a rank exited with its own code and `error:` line
        raise SystemExit(exc.exit_code if exc.exit_code and exc.exit_code > 0 else EXIT_CUDA_ERROR) from None
    except mp.ProcessRaisedException as exc:
        fail(f"{impl}: a rank raised {worker_error(str(exc))}", EXIT_CUDA_ERROR)


# ---------------------------------------------------------------- served (driver/workers.py)
# `python -m driver.peers.nccl_allreduce --ngpus N --serve`: one process group of N ranks for the whole
# suite, serving every torch-driven allreduce peer (`--impl nccl | torch_symm_oneshot | torch_symm_twoshot`
# in each case). Rank 0 is this process: it reads the cases, parses them (a bad one is an rc 2 end line,
# never sent to the other ranks), broadcasts each to ranks 1..N-1 (spawned once) and prints the lines.


def setup_of(impl: str) -> Setup:
    """The collective of a served case's `--impl`."""
    if impl == "nccl":
        from driver.peers.nccl_allreduce import setup

        return setup
    from functools import partial

    from driver.peers import symm_allreduce

    if impl not in symm_allreduce.OPS:
        raise BadRequest(f"--impl must be nccl or one of {', '.join(symm_allreduce.OPS)}, got {impl!r}")
    return partial(symm_allreduce.setup, impl)


def _control_group(dist):
    """The served ranks wait for the next case on the host (gloo, over TCP), never in a GPU collective: an
    NCCL broadcast would leave a kernel spinning on GPUs 1..N-1 between cases, and every other process's
    collective timed meanwhile would share those GPUs with it (2.2 ms per collective on 2x H200)."""
    return dist.new_group(backend="gloo")


def _serve_rank(rank: int, ngpus: int, port: int) -> None:
    torch, dist, device = _join(rank, ngpus, port)
    control = _control_group(dist)
    while True:
        box: list = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        if box[0] is None:
            break
        ns = _parse("torch_allreduce", box[0])  # rank 0 parsed it already: it is well formed
        _sizes(torch, dist, device, ns, rank, ns.impl, setup_of(ns.impl))
    dist.destroy_process_group()


def _request(argv: list[str], ngpus: int) -> tuple[argparse.Namespace, Setup]:
    ns = _parse("torch_allreduce", argv)
    if ns.ngpus != ngpus:
        raise BadRequest(f"this worker serves --ngpus {ngpus}, the case asks for {ns.ngpus}")
    if ns.impl is None:
        raise BadRequest("a served case needs --impl")
    return ns, setup_of(ns.impl)


def serve(ngpus: int) -> None:
    from driver.peers import serving

    channel = serving.protocol_channel()
    os.environ.update(MULTICAST_OFF)  # before torch loads; the spawned ranks inherit it
    unusable = ""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        torch, unusable, code = None, "torch is not installed on this host", EXIT_BAD_INPUT
    if torch is not None and not torch.cuda.is_available():
        unusable, code = "no GPU: torch sees no CUDA device", EXIT_NO_GPU
    elif torch is not None and torch.cuda.device_count() < ngpus:
        unusable = f"--ngpus {ngpus} asked for, but this host has {torch.cuda.device_count()} GPU(s)"
        code = EXIT_BAD_INPUT
    if unusable:  # every case gets the one-shot run's answer
        serving.send(channel, worker_ready=True)
        for raw in sys.stdin:
            if raw.strip():
                print(f"error: {unusable}", file=sys.stderr, flush=True)
                serving.send(channel, worker_end=True, rc=code, error=unusable)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn = mp.get_context("spawn")
    ranks = [spawn.Process(target=_serve_rank, args=(r, ngpus, port), daemon=True) for r in range(1, ngpus)]
    for p in ranks:
        p.start()
    torch, dist, device = _join(0, ngpus, port)
    control = _control_group(dist)
    serving.send(channel, worker_ready=True)
    for raw in sys.stdin:
        argv = raw.rstrip("\r\n").split("\t") if raw.strip() else []
        if not argv:
            continue
        tee = serving._Tee(sys.__stderr__)
        sys.stderr = tee
        try:
            ns, setup = _request(argv, ngpus)
        except BadRequest as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            sys.stderr = sys.__stderr__
            serving.send(channel, worker_end=True, rc=EXIT_BAD_INPUT, error=str(exc))
            continue
        dist.broadcast_object_list([argv], src=0, group=control)
        try:
            why = _sizes(torch, dist, device, ns, 0, ns.impl, setup)
        finally:
            sys.stderr = sys.__stderr__
        serving.send(channel, worker_end=True, rc=EXIT_CUDA_ERROR if why else 0, error=tee.last_error if why else "")
    dist.broadcast_object_list([None], src=0, group=control)
    dist.destroy_process_group()
    for p in ranks:
        p.join(timeout=30)

