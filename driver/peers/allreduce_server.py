"""The served torch allreduce peers (driver/workers.py): one process group of N ranks for the whole suite,
serving every torch-driven allreduce peer, `--impl nccl | torch_symm_oneshot | torch_symm_twoshot` in each case.

`python -m driver.peers.allreduce_server --ngpus N --serve`. Rank 0 is this process: it reads the cases,
parses them (a bad one is an rc 2 end line, never sent to the other ranks), broadcasts each to ranks
1..N-1 (spawned once) and prints the lines. A leaf of driver/peers/: it imports the peers it serves
(nccl_allreduce, symm_allreduce) and what they share (torch_allreduce), and nothing imports it, so the
imports go one way.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from functools import partial

from driver.peers import nccl_allreduce, symm_allreduce
from driver.peers.torch_allreduce import (
    EXIT_BAD_INPUT,
    EXIT_CUDA_ERROR,
    EXIT_NO_GPU,
    MULTICAST_OFF,
    BadRequest,
    Setup,
    _join,
    _parse,
    _sizes,
    fail,
)

USAGE = "usage: python -m driver.peers.allreduce_server --ngpus N --serve"


def setup_of(impl: str) -> Setup:
    """The collective of a served case's `--impl`."""
    if impl == "nccl":
        return nccl_allreduce.setup
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
        tee = serving.ErrorTee(sys.__stderr__)
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


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--serve"]
    if len(args) != 2 or args[0] != "--ngpus" or not args[1].isdigit() or "--serve" not in sys.argv:
        fail(USAGE, EXIT_BAD_INPUT)
    serve(int(args[1]))
