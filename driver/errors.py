"""One exception class and one exit code per failure class.

A script can tell "you asked for something wrong" (2) from "the build broke" (4)
from "the kernel computed garbage" (7) by the exit code alone.
"""

from __future__ import annotations

from enum import IntEnum


class DriverError(Exception):
    """Base class: `exit_code` is what `python -m driver` exits with."""

    exit_code = 1
    label = "error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = f"{self.label}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text.replace("\n", " ")


class ConfigError(DriverError):
    """The request itself is wrong: a size, an arch, a kernel name, a threshold file."""

    exit_code = 2
    label = "configuration error"


class ToolchainMissing(DriverError):
    """mojo, nvcc or ptxas cannot be found; the message says what to install."""

    exit_code = 3
    label = "toolchain missing"


class BuildFailed(DriverError):
    """A compiler returned non-zero, or a static check of its output failed."""

    exit_code = 4
    label = "build failed"


class NoGPU(DriverError):
    """A GPU run was asked for on a machine without (enough) usable GPUs."""

    exit_code = 5
    label = "no GPU"


class KernelFailed(DriverError):
    """A kernel executable crashed, hung past its timeout, or printed malformed output."""

    exit_code = 6
    label = "kernel failed"


class TierNotOffered(KernelFailed):
    """An SDPA runner refused a precision tier this GPU or build cannot run (exit 5: no FP8 warpgroup MMA).
    The driver decides that before it launches (suites/sdpa.py); this is the backstop, and the suite records
    the tier as skipped with the runner's words."""


class WrongResults(DriverError):
    """A kernel ran but its results disagree with the reference."""

    exit_code = 7
    label = "wrong results"


class PerfGateFailed(DriverError):
    """A kernel is correct but slower than its threshold against the peer."""

    exit_code = 8
    label = "performance gate failed"


class ClusterFailed(DriverError):
    """A Slurm command failed or did not answer, or cluster tasks failed, timed out or were cancelled."""

    exit_code = 9
    label = "cluster run failed"


class IOFailed(DriverError):
    """The machine refused a read or write the run needed: a full disk, a read-only tree, a file that cannot be
    read back. The message names the path and the operating system's reason; nothing half-written stays."""

    exit_code = 10
    label = "I/O error"


class Interrupted(DriverError):
    """Ctrl-C: what was running was stopped (a Slurm job array cancelled); the message says what is left."""

    exit_code = 130
    label = "interrupted"


class Terminated(KeyboardInterrupt):
    """SIGTERM (a `kill`, a Slurm time limit), raised by cli.main's handler so that it takes Ctrl-C's path: what
    runs is stopped and cleaned up (a build's compiler killed with its process group, nothing half-written kept),
    one `interrupted:` line, and this exit code."""

    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended


ALL_ERRORS: tuple[type[DriverError], ...] = (
    ConfigError,
    ToolchainMissing,
    BuildFailed,
    NoGPU,
    KernelFailed,
    WrongResults,
    PerfGateFailed,
    ClusterFailed,
    IOFailed,
)


class RunnerExit(IntEnum):
    """The kernel executables' and peers' own exit codes, by name: the runners (kernels_cuda/sdpa_fp8/runner.cu,
    kernels_mojo/benchlib/cli.mojo) and driver/peers/ declare the same names with the same numbers
    (`EXIT_<NAME>`), and a worker's end line carries them as its rc. They are not the driver's codes: the driver
    reads a runner's code through `RUNNER_EXIT_ERROR` and exits with that error's own code (docs/BUILD.md,
    "Kernel executable interface")."""

    RUN_FAILED = 1  # the run raised (Mojo: an error without a code of its own)
    BAD_INPUT = 2  # a flag, an input file or a shape it refuses
    CUDA_ERROR = 3  # a CUDA call failed, or the peer's library refused or failed
    NO_GPU = 4  # no GPU, or fewer than asked for (allreduce)
    NOT_OFFERED = 5  # SDPA runners: the --precision tier does not exist on this GPU or build


RUNNER_EXIT_ERROR: dict[RunnerExit, type[DriverError]] = {
    RunnerExit.RUN_FAILED: KernelFailed,
    RunnerExit.BAD_INPUT: ConfigError,
    RunnerExit.CUDA_ERROR: KernelFailed,
    RunnerExit.NO_GPU: NoGPU,
    RunnerExit.NOT_OFFERED: TierNotOffered,
}  # any other non-zero code: KernelFailed
