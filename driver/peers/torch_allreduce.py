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
The checked run comes first, on the real inputs, and is judged by the rules every allreduce line is
judged by (docs/ALLREDUCE.md): each element within `sum_error_bound` of the float64 sum, and every
rank's bits equal to rank 0's; `--debug-corrupt-element I` moves rank 1's element I by 4x its bound
after the collective, before the check (the GPU tests' proof that the check catches it). The timed
runs reduce a zero-filled buffer, so repeated sums never overflow. A peer that cannot run a config (a
dtype its op has no kernel for, a buffer that came with multicast) raises `PeerCannotRun`: one `error:` line naming the impl and config,
exit 3, no JSON line; multicast is off in every process (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, set before torch loads).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from driver.errors import RunnerExit
from driver.peers import torch_timing

HOLD_US = 100.0  # cold: how long rank 0's stream is held before each timed collective
EXIT_BAD_INPUT, EXIT_CUDA_ERROR, EXIT_NO_GPU = RunnerExit.BAD_INPUT, RunnerExit.CUDA_ERROR, RunnerExit.NO_GPU
LINE_METHOD = {"cold": "device", "hot": "graph", "host": "host"}  # --timing -> the line's `timing`
ALIASES = {"device": "cold"}  # the executables' name for the same method
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# u = 2^-p for a p-bit significand; kernels_mojo/benchlib/check.mojo `unit_roundoff` holds the same numbers.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}


def sum_error_bound(abs_sum, ngpus: int, dtype: str):
    """gamma_{n-1} * sum_r |x_r|, gamma_k = k*u / (1 - k*u): how far a sum of `ngpus` terms may lie from the
    exact sum when every addition rounds to `dtype`, in any order (Higham, Accuracy and Stability of Numerical
    Algorithms, 2nd ed., section 4.2); a float32 accumulation rounded once to `dtype` stays inside it too
    (n >= 2). `abs_sum` is sum_r |x_r|: a float, a NumPy array or a tensor (the bound is per element).
    The one formula of docs/ALLREDUCE.md; check.mojo computes the same for our executables."""
    ku = (ngpus - 1) * UNIT_ROUNDOFF[dtype]
    return ku / (1 - ku) * abs_sum


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
    from driver.config import ELEM_BYTES, parse_sizes  # the same size grammar as everywhere else
    from driver.errors import ConfigError

    p = _Parser(prog=prog)
    p.add_argument("--sizes", required=True)
    p.add_argument("--dtype", default="float32", choices=sorted(UNIT_ROUNDOFF))
    p.add_argument("--ngpus", type=int, default=2)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--timing", default="cold", choices=(*LINE_METHOD, *ALIASES),
                   help="cold (alias device), hot (a CUDA graph of --batch collectives) or host (nccl-tests' wall clock)")
    p.add_argument("--check", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--impl", default=None, help="served: which collective (nccl, torch_symm_oneshot, ...)")
    p.add_argument("--debug-corrupt-element", type=int, default=None, metavar="I",
                   help="move rank 1's element I by 4x its bound after the collective, before the check")
    ns = p.parse_args(argv)
    ns.timing = ALIASES.get(ns.timing, ns.timing)
    if ns.iters < 1 or ns.warmup < 0 or ns.batch < 1:
        raise BadRequest("--iters and --batch must be >= 1, --warmup >= 0")
    try:
        ns.sizes_bytes = parse_sizes(ns.sizes)
    except ConfigError as exc:  # one line, exit 2 like the executables
        raise BadRequest(str(exc)) from None
    bad = ns.debug_corrupt_element
    if bad is not None:
        if bad < 0 or not ns.check:
            raise BadRequest("--debug-corrupt-element takes an element index >= 0 and needs --check 1")
        for nbytes in ns.sizes_bytes:
            if bad >= nbytes // ELEM_BYTES[ns.dtype]:
                raise BadRequest(f"--debug-corrupt-element {bad} is not an element of size {nbytes} "
                                 f"({nbytes // ELEM_BYTES[ns.dtype]} {ns.dtype} elements)")
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


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


NOT_CHECKED = {"max_abs_err": 0.0, "max_err_over_bound": 0.0, "out_of_bound": 0, "out_of_bound_first": None,
               "rank_mismatch": 0, "rank_mismatch_first": None}


def check_rank(torch, dist, out, ref, abs_sum, *, ngpus: int, dtype: str, rank: int) -> dict:
    """This rank's output against the bound (every element) and, bit for bit, against rank 0's (broadcast
    here: every rank must call this). Plain numbers, for all_gather_object; `merge_checks` folds them."""
    got = out.double()
    err = torch.where(torch.isfinite(got), (got - ref).abs(), torch.full_like(got, math.inf))
    bound = sum_error_bound(abs_sum, ngpus, dtype)
    bad = ~(err <= bound)
    result = dict(NOT_CHECKED, max_abs_err=float(err.max()),
                  max_err_over_bound=float(torch.where(err > 0, err / bound, torch.zeros_like(err)).max()),
                  out_of_bound=int(bad.sum()))
    if result["out_of_bound"]:
        i = int(bad.nonzero()[0, 0])
        result["out_of_bound_first"] = {"rank": rank, "element": i, "value": _finite(float(got[i])),
                                        "reference": float(ref[i]), "bound": float(bound[i])}
    rank0 = out.clone()
    dist.broadcast(rank0, src=0)
    bits = torch.int32 if out.element_size() == 4 else torch.int16
    differ = out.view(bits) != rank0.view(bits)
    result["rank_mismatch"] = int(differ.sum())
    if result["rank_mismatch"]:
        i = int(differ.nonzero()[0, 0])
        result["rank_mismatch_first"] = {"rank": rank, "element": i, "value": _finite(float(out[i])),
                                         "rank0_value": _finite(float(rank0[i]))}
    return result


def merge_checks(per_rank: list[dict]) -> dict:
    """Every rank's `check_rank`, in rank order, as the line's check fields: counts summed, the largest
    errors (None where some output was not finite), the first failing element of the lowest rank."""
    def worst(key: str) -> float | None:
        return _finite(max((c[key] for c in per_rank), default=0.0))

    oob, mismatch = sum(c["out_of_bound"] for c in per_rank), sum(c["rank_mismatch"] for c in per_rank)
    return {"max_abs_err": worst("max_abs_err"), "wrong": oob + mismatch, "out_of_bound": oob,
            "max_err_over_bound": worst("max_err_over_bound"),
            "out_of_bound_first": next((c["out_of_bound_first"] for c in per_rank if c["out_of_bound_first"]), None),
            "rank_mismatch": mismatch,
            "rank_mismatch_first": next((c["rank_mismatch_first"] for c in per_rank if c["rank_mismatch_first"]), None)}


def line(ns: argparse.Namespace, impl: str, nbytes: int, elements: int, per_iter: list[float], check: dict) -> dict:
    """The JSON line every allreduce executable prints (records.AllreduceLine); `check` is `merge_checks`'s.
    Same bits every run is not recorded for these peers (a peer need not sum in a fixed order). `per_iter`: the raw
    samples in the order timed, per collective (hot: a replay's time / its collectives); the driver computes every
    statistic from them (driver/stats.py)."""
    return {
        "suite": "allreduce", "impl": impl, "kernel_requested": impl, "kernel_selected": impl,
        "kernel_confirmed": impl, "dtype": ns.dtype, "ngpus": ns.ngpus, "bytes": nbytes,
        "elements": elements, "iters": ns.iters, "warmup": ns.warmup, "batch": 1 if ns.timing == "cold" else ns.batch,
        "timing": LINE_METHOD[ns.timing], "hold_overruns": 0, "samples_us": [float(t) for t in per_iter],
        **check, "checked": bool(ns.check),
    }


def _corrupt(out, abs_sum, i: int, ngpus: int, dtype: str) -> None:
    """--debug-corrupt-element: move element i by 4x its bound (by 1 where the bound is 0)."""
    b = float(sum_error_bound(abs_sum[i], ngpus, dtype))
    shift = 4 * b if b > 0 else 1.0
    out[i] = (out[i].double() + shift).to(out.dtype)
    print(f"debug: rank 1 element {i} moved by {shift} (4x its bound) before the check", file=sys.stderr, flush=True)


def _one_size(torch, dist, ns, rank: int, setup: Setup, elements: int, dtype, device) -> tuple[list[float], dict]:
    coll = setup(torch, dist, elements, dtype, device)
    check = dict(NOT_CHECKED)
    if ns.check:
        out = coll.check(inputs(torch, elements, rank, ns.seed, dtype, device))
        # s and sum_r |x_r| of the dtype-rounded inputs, in float64 (exact: docs/ALLREDUCE.md)
        ref = torch.zeros(elements, dtype=torch.float64, device=device)
        abs_sum = torch.zeros_like(ref)
        for r in range(ns.ngpus):
            x = inputs(torch, elements, r, ns.seed, dtype, device).double()
            ref += x
            abs_sum += x.abs()
            del x
        if ns.debug_corrupt_element is not None and rank == 1:
            _corrupt(out, abs_sum, ns.debug_corrupt_element, ns.ngpus, ns.dtype)
        check = check_rank(torch, dist, out, ref, abs_sum, ngpus=ns.ngpus, dtype=ns.dtype, rank=rank)
        del out, ref, abs_sum
    for _ in range(ns.warmup):
        coll.run()
    torch.cuda.synchronize()
    if ns.timing == "host":
        return _host_times(torch, coll.run, ns.iters, ns.batch), check
    return time_collective(torch, dist, coll.run, mode=ns.timing, rank=rank, iters=ns.iters, warmup=ns.warmup,
                           batch=ns.batch), check


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
        check, why = dict(NOT_CHECKED), ""
        if elements > 0:
            try:
                times_us, check = _one_size(torch, dist, ns, rank, setup, elements, dtype, device)
            except torch_timing.GraphCaptureFailed as exc:
                why = f"hot timing: {exc}"
            except PeerCannotRun as exc:
                why = str(exc)
        gathered: list = [None] * ns.ngpus
        dist.all_gather_object(gathered, (times_us, check, why))
        failed = next((g[2] for g in gathered if g[2]), "")
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
            print(json.dumps(line(ns, impl, nbytes, elements, per_iter, merge_checks([g[1] for g in gathered]))),
                  flush=True)
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
