"""Long-lived workers (driver/workers.py): one process serves many cases, and every way a worker can go
wrong is still one clear error: a hang kills its tree within the timeout, a death mid-case fails that
case and the worker is started again once, a malformed line or a silent exit names the worker and the
case, and the end line's exit code maps to the same error classes as a one-shot run's."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from driver.errors import ConfigError, KernelFailed, NoGPU
from driver.records import SdpaLine
from driver.workers import Pool, Worker, served
from tests.runner_doubles import SERVE

LINE = ('{"suite": "sdpa", "impl": "baseline", "shape": [1, 2, 128, 64], "iters": 1, "warmup": 0, "p50_us": 1.0, '
        '"p90_us": 1.0, "mean_us": 1.0, "std_us": 0.0, "min_us": 1.0, "tflops": 1.0, "timing": "cold"}')


def _worker_script(tmp_path: Path, body: str) -> list[str]:
    """A double whose `case(argv)` is `body`; it logs its pid per case in pids.txt."""
    script = tmp_path / "worker.py"
    script.write_text("import json, os, sys, time\n"
                      f"PIDS = {str(tmp_path / 'pids.txt')!r}\n"
                      "def case(argv):\n"
                      "    open(PIDS, 'a').write(f'{os.getpid()}\\n')\n"
                      + textwrap.indent(textwrap.dedent(body), "    ") + SERVE)
    return [sys.executable, str(script)]


def _pids(tmp_path: Path) -> list[int]:
    return [int(x) for x in (tmp_path / "pids.txt").read_text().split()]


def test_one_process_serves_every_case(tmp_path):
    cmd = _worker_script(tmp_path, f"print({LINE!r}, flush=True)")
    with Pool() as pool:
        for _ in range(5):
            (line,) = pool.run(served(cmd, ["--x", "1"]), SdpaLine, what="case", timeout_s=30)
            assert line.impl == "baseline"
    assert len(set(_pids(tmp_path))) == 1 and len(_pids(tmp_path)) == 5


def test_no_workers_runs_every_case_as_its_own_process(tmp_path):
    cmd = _worker_script(tmp_path, f"print({LINE!r}, flush=True)")
    with Pool(one_shot=True) as pool:
        for _ in range(3):
            pool.run(served(cmd, ["--x", "1"]), SdpaLine, what="case", timeout_s=30)
    assert len(set(_pids(tmp_path))) == 3


@pytest.mark.parametrize("code, error, message", [
    (2, ConfigError, "rejected its input: error: bad shape"),
    (3, KernelFailed, "exited 3: error: bad shape"),
    (4, NoGPU, "error: bad shape"),
])
def test_the_end_line_exit_code_maps_like_a_one_shot_exit(tmp_path, code, error, message):
    cmd = _worker_script(tmp_path, f"""
        if argv == ["bad"]:
            print("error: bad shape", file=sys.stderr)
            raise SystemExit({code})
        print({LINE!r}, flush=True)
    """)
    with Pool() as pool:
        with pytest.raises(error, match=message):
            pool.run(served(cmd, ["bad"]), SdpaLine, what="case", timeout_s=30)
        pool.run(served(cmd, ["good"]), SdpaLine, what="case", timeout_s=30)  # the worker lives on
    assert len(set(_pids(tmp_path))) == 1


def test_a_hung_case_kills_the_worker_tree_within_the_timeout(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = _worker_script(tmp_path, f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    start = time.perf_counter()
    with Pool() as pool, pytest.raises(KernelFailed, match="hung: no answer from worker worker.py"):
        pool.run(served(cmd, ["x"]), SdpaLine, what="case", timeout_s=5)
    assert time.perf_counter() - start < 15
    for pid in (int(pidfile.read_text()), *_pids(tmp_path)):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_stopped_worker_counts_as_hung(tmp_path):
    """SIGSTOP of the worker (the hang test of the GPU runs): the case times out and the tree is killed."""
    cmd = _worker_script(tmp_path, f"print({LINE!r}, flush=True)")
    worker = Worker([*cmd, "--serve"], "stopped")
    worker.request(["warm"], SdpaLine, what="warm", timeout_s=30)
    pid = worker.proc.pid
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(KernelFailed, match="hung"):
        worker.request(["x"], SdpaLine, what="case", timeout_s=2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_death_mid_case_fails_the_case_and_restarts_the_worker_once(tmp_path):
    cmd = _worker_script(tmp_path, f"""
        if argv == ["die"]:
            print("error: segfault here", file=sys.stderr, flush=True)
            os.kill(os.getpid(), 9)
        print({LINE!r}, flush=True)
    """)
    worker = Worker([*cmd, "--serve"], "dies")
    with pytest.raises(KernelFailed, match="worker dies killed by SIGKILL mid-case"):
        worker.request(["die"], SdpaLine, what="case 1", timeout_s=30)
    worker.request(["ok"], SdpaLine, what="case 2", timeout_s=30)  # started again for the next case
    with pytest.raises(KernelFailed, match="mid-case"):
        worker.request(["die"], SdpaLine, what="case 3", timeout_s=30)
    with pytest.raises(KernelFailed, match="died 2 times; its cases are not run"):
        worker.request(["ok"], SdpaLine, what="case 4", timeout_s=30)
    assert len(set(_pids(tmp_path))) == 2
    worker.close()


@pytest.mark.parametrize("body, message", [
    ("print('not json at all', flush=True)", "malformed output from worker w in case: not a JSON object"),
    ("print('{\"suite\": \"sdpa\"}', flush=True)", "malformed output from case \\(worker w\\), line 1"),
    ("print('[1, 2]', flush=True)", "malformed output from worker w in case"),
    ("pass", "case \\(worker w\\) printed no result line"),
])
def test_a_malformed_line_or_none_names_the_worker_and_the_case(tmp_path, body, message):
    cmd = _worker_script(tmp_path, body)
    worker = Worker([*cmd, "--serve"], "w")
    with pytest.raises(KernelFailed, match=message):
        worker.request(["x"], SdpaLine, what="case", timeout_s=30)
    worker.close()


def test_a_worker_without_a_ready_line_is_refused(tmp_path):
    script = tmp_path / "old.py"
    script.write_text(f"import sys\nprint({LINE!r}, flush=True)\n")  # an executable built before --serve
    worker = Worker([sys.executable, str(script), "--serve"], "old")
    with pytest.raises(KernelFailed, match="did not start with a ready line"):
        worker.request(["x"], SdpaLine, what="case", timeout_s=30)


def test_a_tab_in_an_argument_is_refused_before_any_launch():
    with pytest.raises(ConfigError, match="tab or a newline"):
        served(["exe"], ["--out", "a\tb.npy"])
