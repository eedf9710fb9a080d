"""A long-lived worker that stops answering is killed with its process tree within the case's timeout (issue 28:
the hang tests still hold with workers): our SDPA runner stopped with SIGSTOP, and one rank of the NCCL peer's
process group stopped while rank 0 waits for it in a collective. The next case starts the worker again and
is correct. (The suites turn the first into exit 6 and the second into a dropped peer: tests/test_workers.py,
tests/test_pipeline.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from driver import peers
from driver.config import SDPA_SHAPES, SUPPORTED_NGPUS
from driver.errors import KernelFailed
from driver.records import AllreduceLine, SdpaLine
from driver.suites import allreduce, sdpa
from driver.verify import sdpa_errors
from driver.workers import Pool, served

TIMEOUT_S = 10.0


def _gone(pids: list[int]) -> bool:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return not alive


def test_a_stopped_sdpa_worker_is_killed_in_time_and_the_next_case_runs(exe_dir, tmp_path: Path):
    exe = str(exe_dir / sdpa.VARIANTS["cpasync"])
    files, expected = sdpa.prepare_case(tmp_path, SDPA_SHAPES["small"], 0)
    out = tmp_path / "out.npy"
    args = [*sdpa.file_args(files), "--out", str(out), *sdpa.CHECK_ARGS, "--precision", "fp16"]
    with Pool() as pool:
        worker = pool.worker(served([exe], []).server)
        worker.start()
        pool.wait_ready(120)
        assert worker.ready, "the SDPA worker did not start"
        pid = worker.proc.pid
        os.kill(pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        with pytest.raises(KernelFailed, match="hung"):
            pool.run(served([exe], args), SdpaLine, what="stopped SDPA worker", timeout_s=TIMEOUT_S)
        assert time.perf_counter() - t0 < TIMEOUT_S + 15
        assert _gone([pid])
        (line,) = pool.run(served([exe], args), SdpaLine, what="after the restart", timeout_s=120)
        assert worker.proc is not None and worker.proc.pid != pid
    errs = sdpa_errors(np.load(out), expected, bad_err=1.0, what="SDPA output after the restart")
    assert line.precision == "fp16" and errs.nonfinite == 0 and errs.rel_l2 < 1e-2, errs


def test_a_stopped_nccl_rank_is_killed_with_its_tree_in_time(gpu):
    if not any(n <= len(gpu.gpus) for n in SUPPORTED_NGPUS):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    why = peers.missing("nccl")
    if why:
        pytest.skip(f"the NCCL peer cannot run here: {why}")
    server = (*allreduce.torch_server(2), "--serve")
    case = ["--impl", "nccl", "--sizes", "1M", "--dtype", "float32", "--ngpus", "2", "--iters", "2", "--warmup", "1",
            "--timing", "device", "--check", "1"]
    with Pool() as pool:
        worker = pool.worker(server)
        worker.start()
        pool.wait_ready(180)
        assert worker.ready, "the NCCL worker did not start"
        (ok,) = pool.run(served(server[:-1], case), AllreduceLine, what="NCCL before the stop", timeout_s=120)
        assert ok.wrong == 0
        root = psutil.Process(worker.proc.pid)
        tree = [root.pid, *(c.pid for c in root.children(recursive=True))]
        ranks = [c for c in root.children(recursive=True) if "spawn_main" in " ".join(c.cmdline())]
        assert ranks, f"no spawned rank under the NCCL worker: {[c.cmdline() for c in root.children(recursive=True)]}"
        os.kill(ranks[0].pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        with pytest.raises(KernelFailed, match="hung"):
            pool.run(served(server[:-1], case), AllreduceLine, what="NCCL with a stopped rank", timeout_s=TIMEOUT_S)
        assert time.perf_counter() - t0 < TIMEOUT_S + 15
        assert _gone(tree), "a process of the NCCL worker's tree outlived the kill"
