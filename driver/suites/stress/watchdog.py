"""Stress watchdog: a rank (or an SDPA runner) that never finishes is killed in time, and a checked
run afterwards proves the GPUs usable. The record holds what that recovery run measured."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from driver.config import SDPA_SHAPES
from driver.errors import ConfigError, KernelFailed
from driver.gates import allreduce_correctness, sdpa_correctness
from driver.launch import launch
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, SdpaLine, StressLine
from driver.suites import sdpa
from driver.suites.common import checked_verdict, stress_record
from driver.thresholds import Thresholds
from driver.verify import sdpa_errors

WATCHDOG_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Recovery:
    """What the checked run after the hang measured."""

    launches: int
    checked: int
    wrong: int  # elements that disagreed with the reference
    max_abs_err: float | None  # None: not finite
    problems: list[str]  # why the recovery run does not count as correct (empty: it does)


def _watchdog_record(dev: DeviceInfo, sha: str, kernel: str, config: str, t0: float, hang_reasons: list[str],
                     hang: bool, recover: Callable[[], Recovery]) -> ArchivedRecord:
    detect_s = time.perf_counter() - t0
    reasons = list(hang_reasons)
    rec: Recovery | None = None
    try:
        rec = recover()
        reasons += rec.problems
    except (KernelFailed, ConfigError) as exc:
        reasons.append(f"the GPUs did not recover: {exc.message}")
    line = StressLine(suite="stress", check="watchdog", kernel=kernel, config=config,
                      iterations=rec.launches if rec else None, checked=rec.checked if rec else None,
                      wrong=rec.wrong if rec else None, max_abs_err=rec.max_abs_err if rec else None,
                      nonfinite=bool(rec and rec.max_abs_err is None), hang=hang, seconds=detect_s,
                      detail=f"hang detected after {detect_s:.1f} s (timeout {WATCHDOG_TIMEOUT_S:.0f} s); recovery "
                             f"{'ok' if not reasons else 'failed'}")
    return stress_record(dev, sha, line, checked_verdict(reasons))


def _expect_hang(cmd: list[str], what: str) -> tuple[bool, list[str]]:
    try:
        launch(cmd, what=what, timeout_s=WATCHDOG_TIMEOUT_S)
        return False, ["the simulated hang was not detected: the run finished"]
    except KernelFailed as exc:
        if "hung" in exc.message:
            return True, []
        return False, [f"the simulated hang failed another way: {exc.message}"]


def allreduce_hang(opts: RunOptions, exe: Path, dev: DeviceInfo, gates: Thresholds, sha: str) -> ArchivedRecord:
    """A rank that never reaches the barrier is killed in time, and the GPUs recover."""
    base = [str(exe), "--sizes", "1M", "--ngpus", "2", "--iters", "1", "--warmup", "0"]
    t0 = time.perf_counter()
    hang, reasons = _expect_hang([*base, "--debug-hang-rank", "1"], "watchdog: simulated hang")

    def recover() -> Recovery:
        (after,) = launch_lines([*base, "--check", "1"], AllreduceLine, what="watchdog: recovery run",
                                timeout_s=opts.timeout_s)
        verdict = allreduce_correctness(after, gates)
        return Recovery(launches=after.iters + after.warmup + after.checked_iters,
                        checked=after.checked_iters if after.checked else 0, wrong=after.wrong,
                        max_abs_err=after.max_abs_err,
                        problems=[f"the recovery run: {r}" for r in verdict.reasons])

    return _watchdog_record(dev, sha, "1stage", "2gpu/1M/hang-rank-1", t0, reasons, hang, recover)


def sdpa_hang(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, sha: str) -> ArchivedRecord:
    """Single-GPU hosts: an SDPA runner stuck behind a kernel that never finishes (--debug-hang) is
    killed in time, and a checked SDPA run afterwards proves the GPU usable."""
    exe = exe_dir / next(iter(sdpa.VARIANTS.values()))  # the first registered variant (baseline)
    with tempfile.TemporaryDirectory(prefix="stress-hang-") as tmp:
        files, expected = sdpa.prepare_case(Path(tmp), SDPA_SHAPES["small"], 0)
        out = Path(tmp) / "out.npy"
        cmd = [str(exe), *sdpa.file_args(files), "--out", str(out), *sdpa.CHECK_ARGS, "--precision", "fp16"]
        t0 = time.perf_counter()
        hang, reasons = _expect_hang([*cmd, "--debug-hang"], "watchdog: simulated SDPA hang")

        def recover() -> Recovery:
            launch_lines(cmd, SdpaLine, what="watchdog: SDPA recovery run", timeout_s=opts.timeout_s)
            errs = sdpa_errors(np.load(out), expected, bad_err=gates.sdpa.bad_err, what="SDPA recovery run output")
            verdict = sdpa_correctness(errs, gates.sdpa, "fp16", "normal")
            return Recovery(launches=1, checked=1, wrong=errs.bad_elements, max_abs_err=errs.max_abs_err,
                            problems=[f"the recovery run was wrong: {r}" for r in verdict.reasons])

        return _watchdog_record(dev, sha, exe.name, "1gpu/small/debug-hang", t0, reasons, hang, recover)
