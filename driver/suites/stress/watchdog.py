"""Stress watchdog: a rank (or an SDPA runner) that never finishes is killed in time, and a checked
run afterwards proves the GPUs usable."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from driver.gates import sdpa_correctness
from driver.verify import sdpa_errors
from driver.config import SDPA_SHAPES
from driver.errors import ConfigError, KernelFailed
from driver.launch import launch
from driver.options import RunOptions
from driver.parse import parse_lines
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, StressLine
from driver.suites import sdpa
from driver.suites.common import stress_record
from driver.thresholds import Thresholds

WATCHDOG_TIMEOUT_S = 20.0


def _watchdog_record(dev: DeviceInfo, sha: str, kernel: str, config: str, t0: float, hang_reasons: list[str],
                     hang: bool, recover) -> ArchivedRecord:
    detect_s = time.perf_counter() - t0
    reasons = list(hang_reasons)
    try:
        reasons += recover()
    except (KernelFailed, ConfigError) as exc:
        reasons.append(f"the GPUs did not recover: {exc.message}")
    line = StressLine(suite="stress", check="watchdog", kernel=kernel, config=config,
                      iterations=1, checked=1, wrong=0, max_abs_err=0.0, hang=hang, seconds=detect_s,
                      detail=f"hang detected after {detect_s:.1f} s (timeout {WATCHDOG_TIMEOUT_S:.0f} s); recovery "
                             f"{'ok' if not reasons else 'failed'}")
    return stress_record(dev, sha, line, passed=hang and not reasons, reasons=reasons)


def _expect_hang(cmd: list[str], what: str) -> tuple[bool, list[str]]:
    try:
        launch(cmd, what=what, timeout_s=WATCHDOG_TIMEOUT_S)
        return False, ["the simulated hang was not detected: the run finished"]
    except KernelFailed as exc:
        if "hung" in exc.message:
            return True, []
        return False, [f"the simulated hang failed another way: {exc.message}"]


def watchdog(opts: RunOptions, exe: Path, dev: DeviceInfo, sha: str) -> ArchivedRecord:
    """A rank that never reaches the barrier is killed in time, and the GPUs recover."""
    base = [str(exe), "--sizes", "1M", "--ngpus", "2", "--iters", "1", "--warmup", "0"]
    t0 = time.perf_counter()
    hang, reasons = _expect_hang([*base, "--debug-hang-rank", "1"], "watchdog: simulated hang")

    def recover() -> list[str]:
        (after,) = parse_lines(launch(base, what="watchdog: recovery run", timeout_s=opts.timeout_s).stdout,
                               AllreduceLine, what="recovery run")
        return [f"the recovery run had {after.wrong} wrong elements"] if after.wrong else []

    return _watchdog_record(dev, sha, "1stage", "2gpu/1M/hang-rank-1", t0, reasons, hang, recover)


def watchdog_sdpa(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, sha: str) -> ArchivedRecord:
    """Single-GPU hosts: an SDPA runner stuck behind a kernel that never finishes (--debug-hang) is
    killed in time, and a checked SDPA run afterwards proves the GPU usable."""
    exe = exe_dir / sdpa.VARIANTS["baseline"]
    with tempfile.TemporaryDirectory(prefix="stress-hang-") as tmp:
        files, expected = sdpa.prepare_case(Path(tmp), SDPA_SHAPES["small"], 0)
        out = Path(tmp) / "out.npy"
        cmd = [str(exe), *sdpa.file_args(files), "--out", str(out), "--iters", "1", "--warmup", "0"]
        t0 = time.perf_counter()
        hang, reasons = _expect_hang([*cmd, "--debug-hang"], "watchdog: simulated SDPA hang")

        def recover() -> list[str]:
            launch(cmd, what="watchdog: SDPA recovery run", timeout_s=opts.timeout_s)
            errs = sdpa_errors(np.load(out), expected, bad_err=gates.sdpa.bad_err, what="SDPA recovery run output")
            verdict = sdpa_correctness(errs, gates.sdpa)
            return [f"the recovery run was wrong: {'; '.join(verdict.reasons)}"] if not verdict.passed else []

        return _watchdog_record(dev, sha, exe.name, "1gpu/small/debug-hang", t0, reasons, hang, recover)


