"""A Python peer as a worker (driver/peers/serving.py): its own one-shot `main(argv)` once per case in one
process, answering with the one-shot lines and an end line; what a library prints from C on fd 1 never
lands between the lines, and a failing case leaves the worker serving."""

from __future__ import annotations

import sys
import textwrap
import time

from driver.records import SdpaLine
from driver.workers import Worker
from tests.conftest import ROOT

LINE = ('{"suite": "sdpa", "impl": "torch_sdpa", "shape": [1, 2, 128, 64], "iters": 1, "warmup": 0, "p50_us": 1.0, '
        '"p90_us": 1.0, "mean_us": 1.0, "std_us": 0.0, "min_us": 1.0, "tflops": 1.0, "timing": "cold"}')

PEER = textwrap.dedent(f"""
    import os, sys
    sys.path.insert(0, {str(ROOT)!r})
    from driver.peers import serving

    CALLS = []

    def main(argv):
        CALLS.append(argv)
        os.write(1, b"a library writing to fd 1\\n")  # must go to stderr, not into the protocol
        if argv[-1] == "bad":
            print("error: shape refused", file=sys.stderr)
            raise SystemExit(3)
        if argv[-1] == "crash":
            raise RuntimeError("something broke")
        print({LINE!r}, flush=True)
        print("calls so far", len(CALLS), argv, file=sys.stderr)

    serving.entry(main, warm=None)
""")


def _eventually(w: Worker, text: str) -> bool:
    """stderr is read by its own thread: give it a moment to catch up with stdout's end line."""
    for _ in range(100):
        if any(text in ln for ln in w.stream.stderr_tail):
            return True
        time.sleep(0.05)
    return False


def _worker(tmp_path, *prefix: str) -> Worker:
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    return Worker([sys.executable, str(script), *prefix, "--serve"], "peer")


def test_every_case_runs_in_one_process_and_fd1_noise_stays_out_of_the_protocol(tmp_path):
    w = _worker(tmp_path)
    for _ in range(3):
        (line,) = w.request(["--x", "1"], SdpaLine, what="case", timeout_s=30)
        assert line.impl == "torch_sdpa"
    assert w.cases == 3 and w.deaths == 0
    assert _eventually(w, "a library writing to fd 1")
    assert _eventually(w, "calls so far 3")  # one process saw all three
    w.close()


def test_a_failing_or_crashing_case_answers_its_code_and_the_worker_serves_on(tmp_path):
    import pytest

    from driver.errors import KernelFailed

    w = _worker(tmp_path, "--impl", "torch_symm_oneshot")  # the prefix goes in front of every case
    with pytest.raises(KernelFailed, match="exited 3: error: shape refused"):
        w.request(["bad"], SdpaLine, what="case", timeout_s=30)
    with pytest.raises(KernelFailed, match="exited 3: error: RuntimeError: something broke"):
        w.request(["crash"], SdpaLine, what="case", timeout_s=30)
    w.request(["good"], SdpaLine, what="case", timeout_s=30)
    assert w.deaths == 0
    assert _eventually(w, "['--impl', 'torch_symm_oneshot', 'good']")
    w.close()
