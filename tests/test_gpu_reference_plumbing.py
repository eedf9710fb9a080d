"""The SDPA suite's GPU inputs and references (suites/sdpa.py GpuReference, Cases): inputs and references come from
the worker when it answers, from numpy on the CPU once it cannot, and never while something is timed (`quiet`); the
inputs of later shapes wait for room on disk. The worker here is a stand-in that speaks the worker protocol and
makes the numpy inputs and reference (no GPU on this box); the real worker's arithmetic is checked against numpy on
a GPU by tests/gpu/test_reference_gpu.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from driver import config
from driver.reference import sdpa as ref
from driver.suites import sdpa

STAND_IN = '''
import json, sys
import numpy as np
from driver.reference import inputs, sdpa as ref
print(json.dumps({"worker_ready": True}), flush=True)
for line in sys.stdin:
    a = line.rstrip("\\n").split("\\t")
    arg = {a[i]: a[i + 1] for i in range(0, len(a), 2)}
    if "--make-inputs" in arg:
        shape = [int(x) for x in arg["--q-shape"].split(",")]
        kv = [int(x) for x in arg["--kv-shape"].split(",")]
        _, (ks, vs) = inputs.write_files(inputs.NUMPY, arg["--make-inputs"], shape, kv, int(arg["--seed"]),
                                         arg["--distribution"])
        np.save(arg["--make-inputs"] + "/q.npy", np.load(arg["--make-inputs"] + "/q.npy") + np.float16(MARK))
        print(json.dumps({"inputs": arg["--make-inputs"], "q_shape": shape, "kv_shape": kv, "k_scale": ks,
                          "v_scale": vs, "generator": "stand-in", "seconds": 0.0}), flush=True)
    else:
        sc = np.load(arg["--scales"])
        out = ref.reference(np.load(arg["--q"]), np.load(arg["--k"]), np.load(arg["--v"]), float(sc[0]), float(sc[1]))
        np.save(arg["--out"], out + MARK)
        print(json.dumps({"reference": arg["--out"], "shape": list(out.shape), "seconds": 0.0}), flush=True)
    print(json.dumps({"worker_end": True, "rc": 0, "error": ""}), flush=True)
'''


def _gpu_ref(tmp_path: Path, body: str, monkeypatch, *, small_on_cpu: bool = False) -> sdpa.GpuReference:
    """The stand-in as the GPU worker; the tests' small case goes to it too unless `small_on_cpu`."""
    script = tmp_path / "stand_in.py"
    script.write_text(body)
    monkeypatch.setattr(sdpa.GpuReference, "SERVER", (sys.executable, str(script)))
    if not small_on_cpu:
        monkeypatch.setattr(sdpa, "CPU_INPUTS_MAX_VALUES", 0)
        monkeypatch.setattr(sdpa, "CPU_REFERENCE_MAX_FLOP", 0)
    return sdpa.GpuReference(timeout_s=60)


def _cases(tmp_path: Path, gpu) -> sdpa.Cases:
    return sdpa.Cases(tmp_path / "cases", [("small", (1, 2, 64, 64))], (0,), ("normal",), gpu)


def _want(files: dict) -> np.ndarray:
    sc = np.load(files["scales"])
    return ref.reference(np.load(files["q"]), np.load(files["k"]), np.load(files["v"]), float(sc[0]), float(sc[1]))


def test_inputs_and_reference_come_from_the_worker(tmp_path, monkeypatch):
    # MARK shifts the stand-in's Q and its reference so the test can tell whose inputs and reference it got
    gpu = _gpu_ref(tmp_path, "MARK = 1.0\n" + STAND_IN, monkeypatch)
    cases = _cases(tmp_path, gpu)
    try:
        got = cases.refs[("small", 0, "normal")].result(timeout=60)
        files, _folder = cases.inputs[("small", 0, "normal")].result()
        q = ref.make_inputs((1, 2, 64, 64), 0, "normal")[0]
        np.testing.assert_array_equal(np.load(files["q"]), q + np.float16(1.0))
        np.testing.assert_array_equal(got, _want(files) + 1.0)
        assert gpu.broken is None
        assert not list((tmp_path / "cases").rglob("reference.npy"))  # read, then removed
    finally:
        cases.close()
        gpu.close()


def test_small_cases_are_made_on_the_cpu_whatever_the_worker_does(tmp_path, monkeypatch):
    """Below CPU_INPUTS_MAX_VALUES and CPU_REFERENCE_MAX_FLOP the case never reaches the worker: its inputs and its
    reference are numpy's (no MARK), even while something is timed. The bench's first and third shapes are such."""
    log = tmp_path / "asked.txt"
    gpu = _gpu_ref(tmp_path, f"open({str(log)!r}, 'a').write('started\\n')\nMARK = 1.0\n" + STAND_IN, monkeypatch,
                   small_on_cpu=True)
    gpu.start()
    gpu.pool.wait_ready(30)
    gpu.quiet.acquire()  # a timing section is running: the CPU's work goes on
    cases = _cases(tmp_path, gpu)
    try:
        got = cases.refs[("small", 0, "normal")].result(timeout=60)
        files, _folder = cases.inputs[("small", 0, "normal")].result()
        want = ref.make_inputs((1, 2, 64, 64), 0, "normal")
        np.testing.assert_array_equal(np.load(files["q"]), want[0])
        np.testing.assert_array_equal(got, ref.reference(*want))
    finally:
        gpu.quiet.release()
        cases.close()
        gpu.close()
    assert log.read_text() == "started\n"  # started (with the suite), never asked
    on_cpu = {name: sdpa.on_cpu(sdpa.AttnCase.of(config.SDPA_SHAPES[name])) for name in config.BENCH_SDPA_SHAPES}
    assert [name for name, (inp, refr) in on_cpu.items() if inp or refr] == ["mission", "odd"]
    assert on_cpu["mission"] == on_cpu["odd"] == (True, True)


def test_a_worker_that_fails_leaves_inputs_and_references_to_the_cpu(tmp_path, monkeypatch):
    gpu = _gpu_ref(tmp_path, "import sys\nsys.exit(3)\n", monkeypatch)
    cases = _cases(tmp_path, gpu)
    try:
        got = cases.refs[("small", 0, "normal")].result(timeout=60)
        files, _folder = cases.inputs[("small", 0, "normal")].result()
        want = ref.make_inputs((1, 2, 64, 64), 0, "normal")
        for name, arr in zip("qkv", want[:3]):
            np.testing.assert_array_equal(np.load(files[name]), arr)
        np.testing.assert_array_equal(np.load(files["scales"]), np.array(want[3:], dtype=np.float32))
        np.testing.assert_array_equal(got, ref.reference(*want))
        assert gpu.broken
    finally:
        cases.close()
        gpu.close()


def test_nothing_runs_on_the_gpu_while_something_is_timed(tmp_path, monkeypatch):
    gpu = _gpu_ref(tmp_path, "MARK = 0.0\n" + STAND_IN, monkeypatch)
    gpu.quiet.acquire()  # a timing section is running
    cases = _cases(tmp_path, gpu)
    try:
        made, fut = cases.inputs[("small", 0, "normal")], cases.refs[("small", 0, "normal")]
        time.sleep(1.0)
        assert not made.done() and not fut.done()
        gpu.quiet.release()
        fut.result(timeout=60)
    finally:
        cases.close()
        gpu.close()


def test_inputs_of_later_shapes_wait_for_room_the_current_shape_never(tmp_path, monkeypatch):
    """Made ahead only while the files fit in INPUTS_AHEAD_BYTES: here one case's worth, so the current shape's two
    seeds pass it (they are needed) and the next shape waits until the current one is released."""
    shape = (1, 2, 64, 64)
    monkeypatch.setattr(sdpa, "INPUTS_AHEAD_BYTES", sdpa.AttnCase.of(shape).input_bytes)
    cases = sdpa.Cases(tmp_path / "cases", [("a", shape), ("b", shape)], (0, 1), ("normal",))
    try:
        for seed in (0, 1):
            cases.inputs[("a", seed, "normal")].result(timeout=60)
        later = cases.inputs[("b", 0, "normal")]
        time.sleep(0.5)
        assert not later.done()
        cases.release("a")
        files, _folder = later.result(timeout=60)
        assert files["q"].is_file() and not (tmp_path / "cases" / "a-normal-seed0").exists()
    finally:
        cases.close()


def test_attention_cases_reach_the_reference_with_their_mask(tmp_path):
    """A GQA decode-like case with the causal mask, made and checked on the CPU: the reference the suite keeps is
    the masked, grouped one."""
    case = sdpa.AttnCase((1, 4, 3, 64), (1, 2, 40, 64), causal=True)
    cases = sdpa.Cases(tmp_path / "cases", [("gqa", case)], (2,), ("sink",))
    try:
        got = cases.refs[("gqa", 2, "sink")].result(timeout=60)
        want = ref.make_inputs(case.q_shape, case.kv_shape, 2, "sink")
        np.testing.assert_array_equal(got, ref.reference(*want, causal=True))
        assert not np.array_equal(got, ref.reference(*want, causal=False))
    finally:
        cases.close()


def test_gpu_turns_go_lowest_priority_first():
    """Waiters on the worker are served by priority (shape, inputs before references, order), not by arrival; a
    plain hold (a timing section) comes first."""
    import threading

    turns = sdpa.GpuTurns()
    served: list[tuple] = []
    turns.acquire()
    threads = []
    for prio in [(2, 0, 5), (0, 1, 1), (1, 0, 2), (0, 0, 0)]:
        def take(p=prio):
            with turns.turn(p):
                served.append(p)
        threads.append(threading.Thread(target=take))
        threads[-1].start()
    while len(turns._waiting) < 4:
        time.sleep(0.01)
    turns.release()
    for t in threads:
        t.join(timeout=10)
    assert served == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (2, 0, 5)]
