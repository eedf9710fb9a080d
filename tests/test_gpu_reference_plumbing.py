"""The SDPA suite's GPU references (suites/sdpa.py GpuReference): a reference comes from the worker when it
answers, from numpy on the CPU once it cannot, and never while something is timed (`quiet`). The worker here
is a stand-in that speaks the worker protocol and computes the numpy reference (no GPU on this box); the real
worker's arithmetic is checked against numpy on a GPU by tests/gpu/test_reference_gpu.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from driver.reference import sdpa as ref
from driver.suites import sdpa

STAND_IN = '''
import json, sys
import numpy as np
from driver.reference import sdpa as ref
print(json.dumps({"worker_ready": True}), flush=True)
for line in sys.stdin:
    a = line.rstrip("\\n").split("\\t")
    arg = {a[i]: a[i + 1] for i in range(0, len(a), 2)}
    sc = np.load(arg["--scales"])
    out = ref.reference(np.load(arg["--q"]), np.load(arg["--k"]), np.load(arg["--v"]), float(sc[0]), float(sc[1]))
    np.save(arg["--out"], out + MARK)
    print(json.dumps({"reference": arg["--out"], "shape": list(out.shape), "seconds": 0.0}), flush=True)
    print(json.dumps({"worker_end": True, "rc": 0, "error": ""}), flush=True)
'''


def _gpu_ref(tmp_path: Path, body: str, monkeypatch) -> sdpa.GpuReference:
    script = tmp_path / "stand_in.py"
    script.write_text(body)
    monkeypatch.setattr(sdpa.GpuReference, "SERVER", (sys.executable, str(script)))
    return sdpa.GpuReference(timeout_s=60)


def _cases(tmp_path: Path, gpu) -> sdpa.Cases:
    return sdpa.Cases(tmp_path / "cases", [("small", (1, 2, 64, 64))], (0,), ("normal",), gpu)


def test_the_reference_comes_from_the_worker(tmp_path, monkeypatch):
    # MARK shifts the stand-in's answer so the test can tell whose reference it got
    gpu = _gpu_ref(tmp_path, "MARK = 1.0\n" + STAND_IN, monkeypatch)
    cases = _cases(tmp_path, gpu)
    try:
        got = cases.refs[("small", 0, "normal")].result(timeout=60)
        want = ref.reference(*ref.make_inputs((1, 2, 64, 64), 0, "normal"))
        np.testing.assert_array_equal(got, want + 1.0)
        assert gpu.broken is None
        assert not list((tmp_path / "cases").rglob("reference.npy"))  # read, then removed
    finally:
        cases.close()
        gpu.close()


def test_a_worker_that_fails_leaves_the_references_to_the_cpu(tmp_path, monkeypatch):
    gpu = _gpu_ref(tmp_path, "import sys\nsys.exit(3)\n", monkeypatch)
    cases = _cases(tmp_path, gpu)
    try:
        got = cases.refs[("small", 0, "normal")].result(timeout=60)
        np.testing.assert_array_equal(got, ref.reference(*ref.make_inputs((1, 2, 64, 64), 0, "normal")))
        assert gpu.broken
    finally:
        cases.close()
        gpu.close()


def test_no_reference_runs_while_something_is_timed(tmp_path, monkeypatch):
    gpu = _gpu_ref(tmp_path, "MARK = 0.0\n" + STAND_IN, monkeypatch)
    gpu.quiet.acquire()  # a timing section is running
    cases = _cases(tmp_path, gpu)
    try:
        fut = cases.refs[("small", 0, "normal")]
        time.sleep(1.0)
        assert not fut.done()
        gpu.quiet.release()
        fut.result(timeout=60)
    finally:
        cases.close()
        gpu.close()
