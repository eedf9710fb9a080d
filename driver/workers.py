"""Long-lived workers: one process per runner or peer serves case after case.

Starting a process per case cost more than the GPU work it measured (a new CUDA context for our
runners, a torch import for every Python peer, a process group per NCCL round). A worker is the
same executable or peer started once with `--serve`; the driver sends it one case per line and reads
back exactly the lines the one-shot run prints, so launching the built binaries and parsing their
output stays the contract (docs/BUILD.md, "Kernel executable interface"):

    worker -> driver   {"worker_ready":true}                 once, when it can take cases
    driver -> worker   --q<TAB>q.npy<TAB>--k<TAB>...          one case: the one-shot arguments, TAB-separated
    worker -> driver   {...result line...}                   what the one-shot run prints, per result
    worker -> driver   {"worker_end":true,"rc":0,"error":""} the one-shot exit code and `error:` text

A case that does not answer within its timeout has its worker's process tree and session killed
(`KernelFailed`, as `launch` does for a one-shot hang); a worker that dies mid-case (or exits while a child
of it still holds its output) fails that case with the reason and is started again, once, for the next
case; a line that is not JSON, not UTF-8, or an end line not exactly of the form above (`end_line`: rc
an integer, not `true`), more than `launch.MAX_OUTPUT_BYTES` of output in a case, or the stream ending
without an end line, is a `KernelFailed` naming the worker and the case. An rc of 2/3/4/5 maps to the
same error classes as a one-shot exit code.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Self, TypeVar

from pydantic import BaseModel

from driver import phases
from driver.errors import ConfigError, DriverError, KernelFailed
from driver.launch import (
    MAX_OUTPUT_BYTES,
    PIPE_GRACE_S,
    error_line,
    exit_error,
    exited,
    kill_session,
    mib,
    signal_name,
    start_process,
)
from driver.parse import launch_lines, parse_lines

M = TypeVar("M", bound=BaseModel)
SERVE_FLAG = "--serve"
READY, END = "worker_ready", "worker_end"
MALFORMED = "malformed"
RESTARTS = 1  # a worker that dies mid-case is started again this many times, then its cases fail at once
STDERR_LINE_BYTES = 2**16  # a longer stderr line is kept as several (the tail holds 200 of them)
EXIT_WAIT_S = 5.0  # after a worker's output ended: how long it may take to exit before it is killed


@dataclass(frozen=True)
class Served:
    """One case for a worker: the command that starts the worker (its identity) and the case's arguments."""

    server: tuple[str, ...]
    args: tuple[str, ...]
    one_shot_cmd: tuple[str, ...] | None = None  # where the one-shot command is not server + args
    serve: bool = True  # False: this case runs as its own process even where workers are on

    def one_shot(self) -> list[str]:
        """The same case as a one-shot command line (`--no-workers`: one process per case)."""
        if self.one_shot_cmd is not None:
            return list(self.one_shot_cmd)
        return [*(a for a in self.server if a != SERVE_FLAG), *self.args]


def served(cmd: Sequence[str], args: Sequence[str], one_shot: Sequence[str] | None = None, *,
           serve: bool = True) -> Served:
    """`cmd` (an executable or `python -m driver.peers.x ...`) serving the case `args`; with `serve`
    False the case keeps its own process (an executable whose served timing is not trusted yet)."""
    for a in args:
        if "\t" in a or "\n" in a:
            raise ConfigError(f"argument {a!r} holds a tab or a newline; a worker case cannot carry it")
    return Served((*cmd, SERVE_FLAG), tuple(args), tuple(one_shot) if one_shot is not None else None, serve)


@dataclass(frozen=True)
class WorkerEnd:
    """A case's end line: the exit code the one-shot run would have had, and its `error:` text."""

    rc: int
    error: str


def end_line(data: dict) -> WorkerEnd:
    """The end line `{"worker_end":true,"rc":RC,"error":"MSG"}`, checked strictly: exactly these keys, rc an
    integer (not `true`), the error text a string; anything else raises ValueError."""
    rc, error = data.get("rc"), data.get("error")
    if data.get(END) is not True or set(data) != {END, "rc", "error"} or type(rc) is not int or type(error) is not str:
        raise ValueError('an end line is {"worker_end":true,"rc":<integer>,"error":"<text>"}')
    return WorkerEnd(rc, error)


@dataclass(frozen=True)
class _Fault:
    """A stdout line the reader thread could not pass on: not UTF-8, or past the output cap."""

    reason: str
    line: str


@dataclass
class _Stream:
    """A reader thread per pipe, so every wait has a timeout and a full pipe never blocks the worker."""

    # stdout: (line, its size in bytes) each, a _Fault (then nothing more), None at EOF
    lines: queue.Queue = field(default_factory=queue.Queue)
    stderr_tail: deque = field(default_factory=lambda: deque(maxlen=200))
    queued_bytes: int = 0  # read from stdout, not yet taken by a case (a worker printing between cases)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Worker:
    """One long-lived process. Not thread-safe: one case at a time, as the rounds run."""

    def __init__(self, server: Sequence[str], name: str) -> None:
        self.server, self.name = tuple(server), name
        self.proc: subprocess.Popen | None = None
        self.stream = _Stream()
        self.started_at = 0.0
        self.ready = False
        self.deaths = 0
        self.cases = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the process (without waiting for its ready line: several workers start at once)."""
        self.stream = _Stream()
        self.ready = False
        self.started_at = time.perf_counter()
        self.proc = start_process(self.server, what=self.name)
        out, err = self.proc.stdout, self.proc.stderr
        threading.Thread(target=self._pump_out, args=(out, self.stream), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(err, self.stream), daemon=True).start()

    @staticmethod
    def _pump_out(pipe, stream: _Stream) -> None:
        """stdout, line by line; a line that is not UTF-8, or more output than the cap waiting, ends the reading
        with a _Fault (the case that reads it kills the worker)."""
        while raw := pipe.readline(MAX_OUTPUT_BYTES + 1):
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with stream.lock:
                stream.queued_bytes += len(raw)
                over = stream.queued_bytes > MAX_OUTPUT_BYTES
            if over:
                stream.lines.put(_Fault(f"more than {mib(MAX_OUTPUT_BYTES)} of output (the cap of a case's output)",
                                        text))
                return
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                stream.lines.put(_Fault("not UTF-8 text", text))
                return
            stream.lines.put((text, len(raw)))
        stream.lines.put(None)

    @staticmethod
    def _pump_err(pipe, stream: _Stream) -> None:
        while raw := pipe.readline(STDERR_LINE_BYTES):
            stream.stderr_tail.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def alive(self) -> bool:
        return self.proc is not None and not exited(self.proc)

    def close(self) -> None:
        """End of input, then a short wait; a worker that does not leave is killed with its tree."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if not exited(proc):
            try:
                proc.stdin.close()
            except OSError:
                pass
            _wait_exit(proc, 10.0)
        kill_session(proc)  # one that stayed, and whatever it left behind
        proc.wait()

    def kill(self) -> None:
        if self.proc is not None:
            kill_session(self.proc)
            self.proc.wait()
            self.proc = None

    # ------------------------------------------------------------------ one case
    def _next(self, deadline: float, what: str) -> tuple[str, int]:
        """The next stdout line and its size in bytes; a hang, a death (also a worker that exited while a child
        holds its output: after PIPE_GRACE_S) or a line the reader refused raise KernelFailed."""
        gone_at: float | None = None
        while True:
            now = time.perf_counter()
            try:
                item = self.stream.lines.get(timeout=max(min(deadline - now, 0.25), 0.0))
                break
            except queue.Empty:
                pass
            if self.proc is not None and exited(self.proc):
                gone_at = gone_at or now
                if now - gone_at >= PIPE_GRACE_S:
                    raise self._died(what) from None
            elif now >= deadline:
                self.kill()
                raise KernelFailed(f"{what} hung: no answer from worker {self.name} in time; its process tree was "
                                   f"killed", f"worker: {' '.join(self.server)}") from None
        if item is None:
            raise self._died(what)
        if isinstance(item, _Fault):
            self.kill()
            raise KernelFailed(f"malformed output from worker {self.name} in {what}: {item.reason}; its process tree "
                               f"was killed", f"line: {item.line[:200]!r}")
        with self.stream.lock:
            self.stream.queued_bytes -= item[1]
        return item

    def _died(self, what: str) -> KernelFailed:
        proc, self.proc = self.proc, None
        self.deaths += 1
        how = "exited None"
        if proc is not None:
            left = _wait_exit(proc, EXIT_WAIT_S)
            kill_session(proc)  # what it left behind (a child holding its output), or itself if it stays
            code = proc.wait()
            how = ("closed its output and was killed" if not left else
                   f"killed by {signal_name(-code)}" if code < 0 else f"exited {code}")
        tail = error_line(list(self.stream.stderr_tail))
        return KernelFailed(f"{what}: worker {self.name} {how} mid-case: {tail}", f"worker: {' '.join(self.server)}")

    def _wait_ready(self, deadline: float, what: str) -> None:
        line, _ = self._next(deadline, what)
        if _kind(line)[0] != READY:
            self.kill()
            raise KernelFailed(f"{what}: worker {self.name} did not start with a ready line, it printed {line[:200]!r}",
                               "rebuild the executables (python -m driver build)")
        self.ready = True
        phases.add(f"startup {self.name}", time.perf_counter() - self.started_at)

    def request(self, args: Sequence[str], model: type[M], *, what: str, timeout_s: float) -> list[M]:
        """Run one case: its result lines, parsed and validated, or the error its end line names."""
        if not args:  # an empty line is no case to a worker: it would wait for the next line forever
            raise ConfigError(f"{what}: a case for worker {self.name} needs at least one argument")
        if self.proc is None or not self.alive():
            if self.proc is not None and not self.ready:
                self.deaths += 1  # it left before its ready line
            if self.deaths > RESTARTS:
                raise KernelFailed(f"{what}: worker {self.name} died {self.deaths} times; its cases are not run",
                                   f"worker: {' '.join(self.server)}")
            self.close()
            self.start()
        deadline = time.perf_counter() + timeout_s
        if not self.ready:
            self._wait_ready(deadline, what)
        try:
            self.proc.stdin.write(("\t".join(args) + "\n").encode("utf-8", errors="surrogateescape"))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(what) from None
        self.cases += 1
        results: list[str] = []
        case_bytes = 0
        while True:
            line, size = self._next(deadline, what)
            case_bytes += size
            if case_bytes > MAX_OUTPUT_BYTES:
                self.kill()
                raise KernelFailed(f"worker {self.name} printed more than {mib(MAX_OUTPUT_BYTES)} in {what} (the cap "
                                   f"of a case's output); its process tree was killed",
                                   f"worker: {' '.join(self.server)}")
            try:
                kind, data = _kind(line)
                if kind == MALFORMED:
                    raise ValueError("not a JSON object")
                end = end_line(data) if kind == END else None
            except ValueError as exc:
                self.kill()
                raise KernelFailed(f"malformed output from worker {self.name} in {what}: {exc}",
                                   f"line: {line[:200]!r}") from None
            if end is not None:
                break
            results.append(line)
        if end.rc != 0:
            raise _rc_error(end.rc, what, end.error or error_line(list(self.stream.stderr_tail)), self.server)
        return parse_lines("\n".join(results), model, what=f"{what} (worker {self.name})")


def _wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the process to exit, without reaping it (launch.exited); True if it did."""
    end = time.perf_counter() + timeout_s
    while not exited(proc):
        if time.perf_counter() >= end:
            return False
        time.sleep(0.01)
    return True


def _kind(line: str) -> tuple[str, dict]:
    """READY, END (an object with a worker_end key: `end_line` checks it), "result", or MALFORMED (not a JSON
    object), and the object."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: [[[[... nested too deep
        return MALFORMED, {}
    if not isinstance(data, dict):
        return MALFORMED, {}
    if END in data:
        return END, data
    if data.get(READY) is True:
        return READY, data
    return "result", data


def _rc_error(rc: int, what: str, message: str, server: Sequence[str]) -> DriverError:
    """The one-shot exit codes, mapped by the one mapping launch.launch uses."""
    detail = message if message.startswith("error") else f"error: {message}"  # as launch quotes stderr
    return exit_error(rc, what, detail, f"worker: {' '.join(server)}")


class Pool:
    """The workers of one suite, keyed by the command that starts them; started on first use (or all at
    once with `prestart`) and closed together. A context manager, so no worker outlives its suite."""

    def __init__(self, *, one_shot: bool = False) -> None:
        self.workers: dict[tuple[str, ...], Worker] = {}
        self.one_shot = one_shot  # --no-workers: every case its own process, as before workers existed

    def worker(self, server: tuple[str, ...]) -> Worker:
        if server not in self.workers:
            self.workers[server] = Worker(server, _default_name(server))
        return self.workers[server]

    def prestart(self, servers: Sequence[tuple[str, ...]]) -> None:
        """Start these workers now, side by side: their start-up (a torch import, a CUDA context) overlaps."""
        for server in [] if self.one_shot else servers:  # (a case with serve False is never prestarted)
            w = self.worker(server)
            if w.proc is None:
                w.start()

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until every started worker said it is ready, so that no start-up (a torch import, a process
        group, CUDA contexts) overlaps what is timed next. A worker that fails to start is left to its first
        case, which starts it again once and fails with the reason (as without this wait)."""
        deadline = time.perf_counter() + timeout_s
        for w in self.workers.values():
            if w.proc is not None and not w.ready:
                try:
                    w._wait_ready(deadline, f"start-up of worker {w.name}")
                except KernelFailed:
                    pass

    def run(self, case: Served | Sequence[str], model: type[M], *, what: str, timeout_s: float) -> list[M]:
        """One case on its worker; a plain command line (or any case under --no-workers) as its own process."""
        if not isinstance(case, Served) or self.one_shot or not case.serve:
            cmd = case.one_shot() if isinstance(case, Served) else list(case)
            return launch_lines(cmd, model, what=what, timeout_s=timeout_s)
        return self.worker(case.server).request(case.args, model, what=what, timeout_s=timeout_s)

    def close(self) -> None:
        """Every worker leaves (end of input, then killed with its tree if it stays)."""
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
            return
        for w in self.workers.values():  # an error or Ctrl-C: no polite wait
            w.kill()
        self.workers.clear()


def _default_name(server: tuple[str, ...]) -> str:
    """`sdpa_fp8_baseline`, `torch_sdpa`, `allreduce_server --ngpus 4`: the executable, module or script."""
    parts = [p for p in server if p != SERVE_FLAG]
    if len(parts) >= 3 and parts[1] == "-m":
        return " ".join([parts[2].rsplit(".", 1)[-1], *parts[3:]])
    if len(parts) >= 2 and parts[0].rsplit("/", 1)[-1].startswith("python"):
        parts = parts[1:]
    return " ".join([parts[0].rsplit("/", 1)[-1], *parts[1:]])
