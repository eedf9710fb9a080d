"""A Python peer as a long-lived worker (driver/workers.py has the protocol): `--serve` runs the peer's
own one-shot `main(argv)` once per case inside one process, so torch is imported (and cuDNN, NCCL
set up) once per suite instead of once per case.

stdout is the protocol channel: the process's file descriptor 1 is pointed at stderr, so that what a
library prints from C never lands between the result lines; `sys.stdout` (where the peers print
their lines) writes to the saved channel. Each case ends with the end line carrying the exit code
the one-shot run would have had and its `error:` text."""

from __future__ import annotations

import io
import json
import os
import sys
import traceback
from collections.abc import Callable

from driver.errors import RunnerExit

SERVE_FLAG = "--serve"
EXIT_CUDA_ERROR = RunnerExit.CUDA_ERROR  # a case that raised


class ErrorTee(io.TextIOBase):
    """stderr that also remembers the last `error:` line of the case (every served peer's, and the served
    NCCL group's in allreduce_server.serve)."""

    def __init__(self, real) -> None:
        self.real, self.last_error = real, ""

    def write(self, s: str) -> int:
        for ln in s.splitlines():
            if ln.startswith("error: "):
                self.last_error = ln.removeprefix("error: ")
        self.real.write(s)
        return len(s)

    def flush(self) -> None:
        self.real.flush()


def protocol_channel():
    """The saved stdout as a line-buffered text stream; fd 1 now writes to stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = channel
    return channel


def send(channel, **fields) -> None:
    channel.write(json.dumps(fields) + "\n")
    channel.flush()


def serve(main: Callable[[list[str]], None], *, prefix: list[str] | None = None,
          warm: Callable[[], None] | None = None) -> None:
    """Read cases from stdin until EOF; each is `main(prefix + case)`. `warm` (e.g. import torch) runs
    before the ready line, so the start-up is paid, and measured, once."""
    channel = protocol_channel()
    if warm is not None:
        try:
            warm()
        except Exception as exc:  # noqa: BLE001 - the cases then fail with their own error lines
            print(f"warning: worker start-up: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    send(channel, worker_ready=True)
    for raw in sys.stdin:
        line = raw.rstrip("\r\n")
        if not line:
            continue
        tee = ErrorTee(sys.__stderr__)
        sys.stderr = tee
        rc = 0
        try:
            main([*(prefix or []), *line.split("\t")])
        except SystemExit as exc:
            rc = int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 1)  # True: 1
        except Exception as exc:  # noqa: BLE001 - a crash of the case: its reason, the worker lives on
            traceback.print_exc()
            tee.last_error = tee.last_error or f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            rc = EXIT_CUDA_ERROR
        finally:
            sys.stderr = sys.__stderr__
        sys.stdout = channel  # a case may not take the channel away
        send(channel, worker_end=True, rc=rc, error=tee.last_error if rc else "")


def warm_torch() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()


def entry(main: Callable[[list[str] | None], None], *, warm: Callable[[], None] | None = warm_torch) -> None:
    """A peer module's `__main__`: one-shot as always, or, with `--serve`, a worker whose every case is
    prefixed by the other arguments given (e.g. `--impl torch_symm_oneshot`)."""
    argv = sys.argv[1:]
    if SERVE_FLAG in argv:
        serve(main, prefix=[a for a in argv if a != SERVE_FLAG], warm=warm)
    else:
        main(None)
