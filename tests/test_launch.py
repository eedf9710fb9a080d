"""The one launcher: timeouts kill the whole process tree, exit codes map to error classes."""

import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from driver.errors import ConfigError, KernelFailed, NoGPU
from driver.launch import ProcessResult, launch, run_process, runtime_env


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_hang_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """
    with pytest.raises(KernelFailed, match="hung"):
        launch(_py(code), what="sleeper", timeout_s=3)
    child = int(pidfile.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize(
    "code, error, message",
    [
        ("import sys; print('error: head dim 96 unsupported', file=sys.stderr); sys.exit(2)", ConfigError, "head dim 96"),
        ("import sys; print('error: no GPU: libnvidia-ml.so.1', file=sys.stderr); sys.exit(4)", NoGPU, "libnvidia-ml"),
        ("import sys; print('error: CUDA launch failed', file=sys.stderr); sys.exit(3)", KernelFailed, "exited 3"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", KernelFailed, "SIGSEGV"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", KernelFailed, "SIGKILL"),
    ],
)
def test_exit_codes_map_to_error_classes(code, error, message):
    with pytest.raises(error, match=message):
        launch(_py(code), what="exe", timeout_s=30)


def test_valid_looking_output_with_nonzero_exit_is_a_failure():
    code = "import sys; print('{\"suite\": \"sdpa\"}'); sys.exit(1)"
    with pytest.raises(KernelFailed, match="exited 1"):
        launch(_py(code), what="exe", timeout_s=30)


def test_missing_executable():
    with pytest.raises(KernelFailed, match="not found"):
        launch(["/nonexistent/sdpa_fp8_cpasync"], what="exe", timeout_s=5)


def test_runtime_env_keeps_multicast_off():
    env = runtime_env()
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"


def test_run_process_captures_both_streams():
    res = run_process(_py("import sys; print('out'); print('err', file=sys.stderr)"), timeout_s=30)
    assert (res.returncode, res.stdout.strip(), res.stderr.strip(), res.timed_out) == (0, "out", "err", False)


def test_an_abort_reports_the_failure_not_the_stack_dump():
    stderr = (Path(__file__).parent / "data" / "captured" / "mojo_abort_4gpu_stderr.txt").read_text()
    res = ProcessResult(("allreduce_bench",), -6, "", stderr, 1.0, False)
    assert res.last_error_line().startswith("CUDA call failed: CUDA_ERROR_ILLEGAL_ADDRESS")
