"""Faults of the executables themselves, one clear line each, through the real launcher and workers: output
that is not UTF-8, a file that cannot be started (no execute bit, not a program, a #! line naming a missing
interpreter), a child left holding the output after its parent exited, output without end, an end line
whose rc is not an integer, and Ctrl-C in the middle of a run."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver import build, launch, paths, targets, workers
from driver.errors import BuildFailed, KernelFailed
from driver.launch import run_process
from driver.parse import launch_lines
from driver.records import SdpaLine, Toolchain
from driver.workers import Pool, Worker, end_line, served
from tests.runner_doubles import SERVE

LINE = ('{"suite": "sdpa", "impl": "baseline", "shape": [1, 2, 128, 64], "iters": 1, "warmup": 0, "p50_us": 1.0, '
        '"p90_us": 1.0, "mean_us": 1.0, "std_us": 0.0, "min_us": 1.0, "tflops": 1.0, "timing": "cold"}')


def _exe(path: Path, text: str | bytes, mode: int = 0o755) -> str:
    if isinstance(text, str):
        text = textwrap.dedent(text).lstrip().encode()
    path.write_bytes(text)
    path.chmod(mode)
    return str(path)


def _py_exe(path: Path, body: str) -> str:
    return _exe(path, f"#!{sys.executable}\n" + textwrap.dedent(body))


def _worker(tmp_path: Path, body: str) -> list[str]:
    """A worker double whose `case(argv)` is `body` (tests/runner_doubles.SERVE speaks the protocol)."""
    script = tmp_path / "worker.py"
    script.write_text("import json, os, subprocess, sys, time\n"
                      "def case(argv):\n" + textwrap.indent(textwrap.dedent(body), "    ") + SERVE)
    return [sys.executable, str(script)]


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _eventually_gone(pid: int) -> bool:
    for _ in range(100):
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


# ------------------------------------------------------------------ output that is not UTF-8

def test_one_shot_stdout_not_utf8_is_malformed_naming_the_executable(tmp_path):
    exe = _py_exe(tmp_path / "runner", r"""
        import sys
        sys.stdout.buffer.write(b'{"suite": "sdpa\xff\xfe"}\n')
    """)
    with pytest.raises(KernelFailed, match=r"malformed output from sdpa runner, line 1: not UTF-8 text") as exc:
        launch_lines([exe], SdpaLine, what="sdpa runner", timeout_s=3)
    assert exc.value.exit_code == 6 and "\ufffd" in exc.value.hint


def test_one_shot_stderr_not_utf8_is_shown_with_replacement(tmp_path):
    exe = _py_exe(tmp_path / "runner", r"""
        import sys
        sys.stderr.buffer.write(b"error: bad \xff value\n")
        sys.exit(3)
    """)
    with pytest.raises(KernelFailed, match="exited 3: error: bad \ufffd value"):
        launch.launch([exe], what="runner", timeout_s=3)


def test_a_compiler_printing_non_utf8_fails_the_build_with_its_message(tmp_path, monkeypatch):
    compiler = _py_exe(tmp_path / "nvcc", r"""
        import sys
        sys.stdout.buffer.write(b"note: \xe9t\xe9\n")
        sys.stderr.buffer.write(b"kernel.cu(3): error: identifier \xab x \xbb is undefined\n")
        sys.exit(1)
    """)
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    monkeypatch.setattr(build, "_command", lambda *_a: [compiler])
    t = targets.select("sdpa_fp8_baseline")[0]
    with pytest.raises(BuildFailed, match="error: identifier \ufffd x \ufffd is undefined"):
        build.build_target(t, "sm_90", Toolchain(python="test"), force=True)


def test_a_worker_printing_non_utf8_is_malformed_at_once_and_leaves_no_traceback(tmp_path, capfd):
    cmd = _worker(tmp_path, r"""
        sys.stdout.flush()
        sys.stdout.buffer.write(b'{"suite": "\xff"}\n')
        sys.stdout.flush()
        time.sleep(60)
    """)
    start = time.perf_counter()
    with Pool() as pool, pytest.raises(KernelFailed, match="malformed output from worker worker.py in case: not UTF-8"):
        pool.run(served(cmd, ["x"]), SdpaLine, what="case", timeout_s=10)
    assert time.perf_counter() - start < 5  # not the whole timeout
    time.sleep(0.2)
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------ files that cannot be started

def _not_executable(tmp_path: Path) -> tuple[str, str]:
    return _exe(tmp_path / "runner", "#!/bin/sh\necho hi\n", mode=0o644), r"runner is not executable \(no execute"


def _not_a_program(tmp_path: Path) -> tuple[str, str]:
    return (_exe(tmp_path / "runner", b"\x7fELF\x02\x01\x01 truncated binary"),
            r"runner is not a program the system can run \(Exec format error")


def _bad_shebang(tmp_path: Path) -> tuple[str, str]:
    return (_exe(tmp_path / "runner", "#!/nonexistent/python3 -u\nprint(1)\n"),
            r"runner cannot start: its interpreter /nonexistent/python3 was not found \(bad #! line")


UNSTARTABLE = [_not_executable, _not_a_program, _bad_shebang]


@pytest.mark.parametrize("make", UNSTARTABLE)
def test_a_file_that_cannot_start_is_one_line_one_shot(tmp_path, make):
    exe, message = make(tmp_path)
    with pytest.raises(KernelFailed) as exc:
        launch.launch([exe], what="sdpa runner", timeout_s=3)
    assert exc.value.exit_code == 6
    assert exc.value.one_line().startswith("kernel failed: sdpa runner: ")
    assert re.search(message, exc.value.one_line())


@pytest.mark.parametrize("make", UNSTARTABLE)
def test_a_file_that_cannot_start_is_one_line_as_a_worker(tmp_path, make):
    exe, message = make(tmp_path)
    with Pool() as pool, pytest.raises(KernelFailed) as exc:
        pool.run(served([exe], ["x"]), SdpaLine, what="case", timeout_s=3)
    assert re.search(message, exc.value.one_line())


# ------------------------------------------------------------------ children left behind, the timeout

def test_a_child_holding_stdout_after_exit_0_does_not_hold_the_launch(tmp_path):
    pidfile = tmp_path / "child.pid"
    exe = _exe(tmp_path / "runner", f"""
        #!/bin/sh
        sleep 100000 &
        echo $! > {pidfile}
        echo '{LINE}'
        exit 0
    """)
    start = time.perf_counter()
    (line,) = launch_lines([exe], SdpaLine, what="runner", timeout_s=3)
    assert line.impl == "baseline" and time.perf_counter() - start < 2.9
    assert _eventually_gone(int(pidfile.read_text()))


def test_a_child_left_behind_without_the_pipes_is_killed_too(tmp_path):
    pidfile = tmp_path / "child.pid"
    exe = _exe(tmp_path / "runner", f"""
        #!/bin/sh
        sleep 100000 >/dev/null 2>&1 &
        echo $! > {pidfile}
        exit 0
    """)
    assert run_process([exe], timeout_s=3).returncode == 0
    assert _eventually_gone(int(pidfile.read_text()))


def test_a_worker_that_exits_leaving_a_child_on_its_output_is_a_death_not_a_hang(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = _worker(tmp_path, f"""
        child = subprocess.Popen(["sleep", "100000"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("error: gone", file=sys.stderr, flush=True)
        os._exit(7)
    """)
    start = time.perf_counter()
    with Pool() as pool, pytest.raises(KernelFailed, match="worker worker.py exited 7 mid-case"):
        pool.run(served(cmd, ["x"]), SdpaLine, what="case", timeout_s=10)
    assert time.perf_counter() - start < 5
    assert _eventually_gone(int(pidfile.read_text()))


# ------------------------------------------------------------------ output without end

@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_without_end_is_capped_and_the_tree_killed(tmp_path, monkeypatch, stream):
    monkeypatch.setattr(launch, "MAX_OUTPUT_BYTES", 2**20)  # 64 MiB in use; 1 MiB here (and a bounded rate)
    exe = _py_exe(tmp_path / "runner", f"""
        import sys, time
        while True:
            sys.{stream}.buffer.write(b"y" * 65536)
            time.sleep(0.001)
    """)
    with pytest.raises(KernelFailed, match=f"runner printed more than 1 MiB on {stream} \\(the cap of a run's output"):
        launch.launch([exe], what="runner", timeout_s=3)


def test_a_worker_printing_without_end_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "MAX_OUTPUT_BYTES", 2**20)
    cmd = _worker(tmp_path, f"""
        while True:
            print({LINE!r})
            time.sleep(0.0001)
    """)
    with Pool() as pool, pytest.raises(KernelFailed, match=r"more than 1 MiB .*the cap of a case's output"):
        pool.run(served(cmd, ["x"]), SdpaLine, what="case", timeout_s=3)


# ------------------------------------------------------------------ the end line

@pytest.mark.parametrize("end", [
    '{"worker_end": true, "rc": true, "error": "x"}',
    '{"worker_end": true, "rc": 1.0, "error": "x"}',
    '{"worker_end": true, "rc": "3", "error": "x"}',
    '{"worker_end": true, "rc": null, "error": ""}',
    '{"worker_end": true, "rc": 0}',
    '{"worker_end": true, "rc": 0, "error": 5}',
    '{"worker_end": 1, "rc": 0, "error": ""}',
    '{"worker_end": true, "rc": 0, "error": "", "extra": 1}',
])
def test_an_end_line_not_exactly_of_its_form_is_malformed(tmp_path, end):
    cmd = _worker(tmp_path, f"""
        print({LINE!r})
        print({end!r}, flush=True)
        time.sleep(60)
    """)
    worker = Worker([*cmd, "--serve"], "w")
    with pytest.raises(KernelFailed, match=r"malformed output from worker w in case: an end line is") as exc:
        worker.request(["x"], SdpaLine, what="case", timeout_s=3)
    assert "exited True" not in exc.value.one_line()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(rc=JSON, error=JSON, extra=st.dictionaries(st.sampled_from(["worker_end", "rc", "error", "x"]), JSON))
def test_end_line_accepts_exactly_an_int_rc_and_a_text_error(rc, error, extra):
    data = {"worker_end": True, "rc": rc, "error": error, **extra}
    ok = (data["worker_end"] is True and set(data) == {"worker_end", "rc", "error"}
          and type(data["rc"]) is int and type(data["error"]) is str)
    try:
        end = end_line(data)
    except ValueError:
        assert not ok
    else:
        assert ok and (end.rc, end.error) == (data["rc"], data["error"])
        assert end_line(json.loads(json.dumps(data))) == end


@settings(deadline=None)
@given(st.text() | st.binary().map(lambda b: b.decode("utf-8", errors="replace")) | st.builds(lambda n: "[" * n,
                                                                                             st.integers(0, 10**5)))
def test_any_worker_line_is_a_kind_or_malformed(line):
    kind, data = workers._kind(line)
    assert kind in ("worker_ready", "worker_end", "result", "malformed") and isinstance(data, dict)
    if kind == "worker_end":
        try:
            end_line(data)
        except ValueError:
            pass


def test_a_deeply_nested_one_shot_line_is_malformed_not_a_recursion_error(tmp_path):
    exe = _py_exe(tmp_path / "runner", "print('[' * 100000)\n")
    with pytest.raises(KernelFailed, match="malformed output from runner, line 1"):
        launch_lines([exe], SdpaLine, what="runner", timeout_s=3)


# ------------------------------------------------------------------ signals and Ctrl-C

def test_a_death_by_a_signal_without_a_name_is_one_line(tmp_path):
    exe = _py_exe(tmp_path / "runner", "import os\nos.kill(os.getpid(), 40)\n")
    with pytest.raises(KernelFailed, match="killed by signal 40"):
        launch.launch([exe], what="runner", timeout_s=3)


def test_ctrl_c_while_a_child_of_an_exited_executable_holds_its_output_kills_the_child(tmp_path, monkeypatch):
    # a long grace, so that Ctrl-C comes while the launch waits on the pipes
    monkeypatch.setattr(launch, "PIPE_GRACE_S", 30.0, raising=False)
    pidfile = tmp_path / "child.pid"
    exe = _exe(tmp_path / "runner", f"#!/bin/sh\nsleep 100000 &\necho $! > {pidfile}\nexit 0\n")
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # Ctrl-C
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_process([exe], timeout_s=60)
    finally:
        timer.cancel()
    assert _eventually_gone(int(pidfile.read_text()))
