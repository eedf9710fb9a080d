"""Launch: how compilers, kernel executables and peers are run (one-shot, `run_process` / `launch`) or
started as long-lived workers (`start_process`, spoken to by driver/workers.py).

A timeout kills the whole process tree (psutil), output is captured, the runtime library path and
the NVLink-multicast guard are put into every executable's environment (`runtime_env`; the torch
peers set the guard again in their own processes, before torch loads), and the executables' exit
codes are mapped to the driver's error classes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from driver import paths
from driver.errors import ConfigError, DriverError, KernelFailed, NoGPU, TierNotOffered

# The kernel executables' own exit codes (docs/BUILD.md, "Kernel executable interface").
EXE_BAD_INPUT = 2
EXE_CUDA_ERROR = 3
EXE_NO_GPU = 4
EXE_NOT_OFFERED = 5  # SDPA runners: the --precision tier does not exist on this GPU or build


@dataclass(frozen=True)
class ProcessResult:
    cmd: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    def last_error_line(self) -> str:
        return error_line(self.stderr.splitlines())


def error_line(stderr_lines: Sequence[str]) -> str:
    """The line that says what went wrong: our executables' `error: ...` line, else the first line
    naming a failure (a runtime abort prints it before its stack dump), else the last line. For a
    one-shot run's stderr and a worker's (driver/workers.py) alike."""
    lines = [ln.strip() for ln in stderr_lines if ln.strip()]
    for ln in reversed(lines):
        if ln.lower().startswith("error"):
            return ln
    for ln in lines:
        if "failed" in ln.lower() or "error_" in ln.lower():
            return ln
    return lines[-1] if lines else "(no output on stderr)"


def kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def run_process(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessResult:
    """Run `cmd` to completion or until `timeout_s`, then kill it and all its children."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        out, err = proc.communicate()
    except BaseException:
        kill_tree(proc.pid)
        raise
    return ProcessResult(tuple(cmd), proc.returncode, out, err, time.perf_counter() - start, timed_out)


def start_process(cmd: Sequence[str], *, what: str) -> subprocess.Popen:
    """Start a long-lived kernel executable or peer (driver/workers.py speaks to it over its stdin and
    stdout), in its own session so that `kill_tree` takes its children too, with the same environment
    as `launch`: runtime libraries and the NVLink-multicast guard."""
    try:
        return subprocess.Popen(
            list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1, env=runtime_env(), start_new_session=True,
        )
    except FileNotFoundError:
        raise KernelFailed(f"{what}: executable {cmd[0]} not found", "run `nox -s build` first") from None


def runtime_env() -> dict[str, str]:
    """Environment for kernel executables: Mojo runtime libraries, multicast off."""
    env = dict(os.environ)
    lib = paths.mojo_runtime_lib_dir()
    if lib is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    # NVLink multicast can take a shared host's GPUs out of service: never on.
    env["NCCL_NVLS_ENABLE"] = "0"
    env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    env["NVSHMEM_DISABLE_NVLS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(paths.ROOT), env.get("PYTHONPATH")]))
    return env


def launch(cmd: Sequence[str], *, what: str, timeout_s: float) -> ProcessResult:
    """Run a kernel executable; raise the matching DriverError unless it exited 0."""
    try:
        res = run_process(cmd, timeout_s=timeout_s, env=runtime_env())
    except FileNotFoundError:
        raise KernelFailed(f"{what}: executable {cmd[0]} not found", "run `nox -s build` first") from None
    if res.timed_out:
        raise KernelFailed(
            f"{what} hung: no exit within {timeout_s:.0f} s; its process tree was killed",
            f"command: {' '.join(cmd)}",
        )
    if res.returncode == 0:
        return res
    detail = res.last_error_line()
    if res.returncode < 0:
        sig = signal.Signals(-res.returncode).name
        raise KernelFailed(f"{what} was killed by {sig}: {detail}", f"command: {' '.join(cmd)}")
    raise exit_error(res.returncode, what, detail, f"command: {' '.join(cmd)}")


def exit_error(code: int, what: str, detail: str, where: str) -> DriverError:
    """A runner's or peer's non-zero exit code (a one-shot run's, or a worker's end line) as the error the
    driver raises; `where` (the command or the worker) goes into the hint."""
    if code == EXE_BAD_INPUT:
        return ConfigError(f"{what} rejected its input: {detail}")
    if code == EXE_NO_GPU:
        return NoGPU(f"{what}: {detail}")
    if code == EXE_NOT_OFFERED:
        return TierNotOffered(f"{what}: {detail}", where)
    return KernelFailed(f"{what} exited {code}: {detail}", where)
