"""Launch: how compilers, kernel executables and peers are run (one-shot, `run_process` / `launch`) or
started as long-lived workers (`start_process`, spoken to by driver/workers.py).

Every process runs in its own session. The timeout is the main process's: past it, the whole process
tree and session are killed; a main process that exits leaves its pipes a short grace, then whatever
is left in its session (a child still holding the pipes or not) is killed, so no launch waits on a
leftover child. Output is captured as bytes, at most `MAX_OUTPUT_BYTES` a stream (more kills the tree),
and decoded as UTF-8 with replacement (`ProcessResult.undecodable` says which stream was not UTF-8).
The runtime library path and the NVLink-multicast guard are put into every executable's environment
(`runtime_env`; the torch peers set the guard again in their own processes, before torch loads), and
the executables' exit codes, and the reasons a file cannot be started, are mapped to the driver's
error classes.
"""

from __future__ import annotations

import errno
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from driver import paths
from driver.errors import RUNNER_EXIT_ERROR, ConfigError, DriverError, KernelFailed, NoGPU, TierNotOffered

MAX_OUTPUT_BYTES = 64 * 2**20  # per stream (stdout, stderr) of a run, and per case of a worker
PIPE_GRACE_S = 1.0  # after the main process exits: how long its pipes may stay open before its session is killed
DRAIN_S = 2.0  # after a kill: how long what is left in the pipes is read (a process outside the session may hold them)
POLL_S = 0.05  # how often a run checks whether its main process has exited while the pipes stay open
READ_BYTES = 2**16
KILL_WAIT_S = 10.0  # how long a kill waits for the killed processes to be gone


def mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MiB"


@dataclass(frozen=True)
class ProcessResult:
    cmd: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    capped: str = ""  # "stdout" or "stderr": that stream passed MAX_OUTPUT_BYTES and the tree was killed
    undecodable: tuple[str, ...] = ()  # the streams that held bytes that are not UTF-8 (decoded as U+FFFD)

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


def kill_session(proc: subprocess.Popen) -> None:
    """Kill a process started by this module with everything in its session (children of a main process that
    exited have lost their parent, not their session) and its descendants that left the session, then wait
    until they are gone. The main process is not reaped before this (`exited` does not reap), so its pid, the
    session's id, is still its own."""
    victims: dict[int, psutil.Process] = {}
    if proc.returncode is None:
        try:
            victims.update((p.pid, p) for p in psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
    for pid in psutil.pids():
        try:
            if pid != proc.pid and pid not in victims and os.getsid(pid) == proc.pid:
                victims[pid] = psutil.Process(pid)
        except (OSError, psutil.Error):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in victims.values():
        try:
            p.kill()
        except psutil.Error:
            pass
    end = time.perf_counter() + KILL_WAIT_S
    pending = list(victims.values())
    while pending and time.perf_counter() < end:
        pending = [p for p in pending if not _dead(p)]
        if pending:
            time.sleep(0.01)


def _dead(p: psutil.Process) -> bool:
    """Gone, or a zombie (killed; whoever its parent is now reaps it)."""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exited(proc: subprocess.Popen) -> bool:
    """Whether the main process has exited, without reaping it: its pid stays taken, so `kill_session` can
    still name its process group safely."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _decode(data: bytes) -> tuple[str, bool]:
    """UTF-8 with replacement, newlines as text mode reads them; True where some bytes were not UTF-8."""
    try:
        text, bad = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad = data.decode("utf-8", errors="replace"), True
    return text.replace("\r\n", "\n").replace("\r", "\n"), bad


def _collect(proc: subprocess.Popen, deadline: float) -> tuple[dict[str, bytearray], bool, str]:
    """Read both pipes until they close, the main process's deadline passes, its pipes outlive it by
    PIPE_GRACE_S, or a stream passes MAX_OUTPUT_BYTES; then kill its session and read what is left.
    Returns (bytes per stream, timed out, the capped stream or "")."""
    streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    data = {name: bytearray() for name in streams.values()}
    capped, gone, pipe_end = "", False, 0.0
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)

        def read(timeout: float) -> None:
            nonlocal capped
            for key, _ in sel.select(timeout):
                chunk = os.read(key.fd, READ_BYTES)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = data[streams[key.fd]]
                buf += chunk
                if len(buf) > MAX_OUTPUT_BYTES:
                    del buf[MAX_OUTPUT_BYTES:]
                    capped = capped or streams[key.fd]

        while not capped:
            now = time.perf_counter()
            if not gone and exited(proc):
                gone, pipe_end = True, now + PIPE_GRACE_S
            if gone and not sel.get_map():
                break  # the ordinary end: the process exited and its pipes closed
            limit = pipe_end if gone else deadline
            if now >= limit:
                break
            wait = limit - now if gone else min(limit - now, POLL_S)
            if sel.get_map():
                read(wait)
            else:
                time.sleep(wait)
        timed_out = not capped and not (gone or exited(proc))
        kill_session(proc)  # a hang, too much output, or children left behind after the main process exited
        drain_end = time.perf_counter() + DRAIN_S
        while sel.get_map() and time.perf_counter() < drain_end:
            read(drain_end - time.perf_counter())
    return data, timed_out, capped


def run_process(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessResult:
    """Run `cmd` to completion or until `timeout_s`, then kill it and all its children (module docstring).
    An executable that cannot be started raises the OSError (`cannot_start` says why in words)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        data, timed_out, capped = _collect(proc, start + timeout_s)
        proc.wait()
    except BaseException:
        kill_session(proc)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    (out, bad_out), (err, bad_err) = _decode(bytes(data["stdout"])), _decode(bytes(data["stderr"]))
    undecodable = tuple(name for name, bad in (("stdout", bad_out), ("stderr", bad_err)) if bad)
    return ProcessResult(tuple(cmd), proc.returncode, out, err, time.perf_counter() - start, timed_out, capped,
                         undecodable)


def cannot_start(exc: OSError, cmd: Sequence[str]) -> tuple[str, str]:
    """Why `cmd` could not be started, as (what, what to do): not found, not executable, not a program,
    a #! line naming a missing interpreter, or the system's own words."""
    name = cmd[0]
    path = name if os.sep in name else (shutil.which(name) or name)
    rebuild = "run `nox -s build` first"
    if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT:
        interpreter = _shebang(path)
        if interpreter is not None:
            return (f"{path} cannot start: its interpreter {interpreter} was not found",
                    f"bad #! line: fix the script's first line, or install {interpreter}")
        return f"executable {name} not found", rebuild
    if isinstance(exc, PermissionError) or exc.errno == errno.EACCES:
        if os.path.isdir(path):
            return f"{path} is a folder, not a program", rebuild
        return f"{path} is not executable", f"no execute permission: `chmod +x {path}`, or {rebuild}"
    if exc.errno == errno.ENOEXEC:
        why = "Exec format error: a binary for another machine, a truncated one, or a script without a #! line"
        return f"{path} is not a program the system can run", f"{why}; {rebuild}"
    return f"{path} cannot start: {exc.strerror or exc}", rebuild


def _shebang(path: str) -> str | None:
    """The interpreter a script's #! line names, or None (no such file, or not a script)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", errors="replace").split()
    return words[0] if words else "(none)"


def start_process(cmd: Sequence[str], *, what: str) -> subprocess.Popen:
    """Start a long-lived kernel executable or peer (driver/workers.py speaks to it over its stdin and
    stdout, as bytes), in its own session so that `kill_session` takes its children too, with the same
    environment as `launch`: runtime libraries and the NVLink-multicast guard."""
    try:
        return subprocess.Popen(
            list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=runtime_env(), start_new_session=True,
        )
    except OSError as exc:
        reason, hint = cannot_start(exc, cmd)
        raise KernelFailed(f"{what}: {reason}", hint) from None


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
    """Run a kernel executable; raise the matching DriverError unless it exited 0 with UTF-8 output."""
    where = f"command: {' '.join(cmd)}"
    try:
        res = run_process(cmd, timeout_s=timeout_s, env=runtime_env())
    except OSError as exc:
        reason, hint = cannot_start(exc, cmd)
        raise KernelFailed(f"{what}: {reason}", hint) from None
    if res.capped:
        raise KernelFailed(f"{what} printed more than {mib(MAX_OUTPUT_BYTES)} on {res.capped} (the cap of a run's "
                           f"output); its process tree was killed", where)
    if res.timed_out:
        raise KernelFailed(f"{what} hung: no exit within {timeout_s:.0f} s; its process tree was killed", where)
    if res.returncode != 0:
        detail = res.last_error_line()
        if res.returncode < 0:
            raise KernelFailed(f"{what} was killed by {signal_name(-res.returncode)}: {detail}", where)
        raise exit_error(res.returncode, what, detail, where)
    if "stdout" in res.undecodable:
        lineno, line = next(((i, ln) for i, ln in enumerate(res.stdout.splitlines(), 1) if "\ufffd" in ln), (0, ""))
        raise KernelFailed(f"malformed output from {what}, line {lineno}: not UTF-8 text", f"line: {line[:200]!r}")
    return res


def exit_error(code: int, what: str, detail: str, where: str) -> DriverError:
    """A runner's or peer's non-zero exit code (a one-shot run's, or a worker's end line) as the error the
    driver raises, by errors.RUNNER_EXIT_ERROR (a runner's 3 is a CUDA error, never the driver's 3); `where` (the
    command or the worker) goes into the hint."""
    error = RUNNER_EXIT_ERROR.get(code, KernelFailed)
    if error is ConfigError:
        return ConfigError(f"{what} rejected its input: {detail}")
    if error is NoGPU:
        return NoGPU(f"{what}: {detail}")
    if error is TierNotOffered:
        return TierNotOffered(f"{what}: {detail}", where)
    return KernelFailed(f"{what} exited {code}: {detail}", where)
