"""Stress sanitizers: compute-sanitizer memcheck, racecheck, synccheck and initcheck. Zero hazards is the
gate; where the tool cannot follow the run, the record says "not covered" with the tool's own words."""

from __future__ import annotations

import re
import shutil

from driver.launch import run_process, runtime_env
from driver.options import RunOptions
from driver.records import ArchivedRecord, DeviceInfo, StressLine
from driver.suites.common import progress, stress_record

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# SDPA shapes run under every sanitizer: small, mission and tail run the split-KV configs the
# heuristic picks for them; `large` (the unsplit 8-warp config) is left out because racecheck
# takes minutes over its 1024 blocks.
SANITIZED_SHAPES = ("small", "mission", "tail")


# "ERROR SUMMARY: 3 errors" (memcheck, synccheck, initcheck) and "RACECHECK SUMMARY: 0 hazards
# displayed (0 errors, 0 warnings)"; not "ERROR SUMMARY: 318 errors were not printed".
_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?[ \t]*$|hazards? displayed)", re.I | re.M)


def parse_sanitizer(output: str) -> int | None:
    """Hazards/errors the tool reported, or None when it printed no summary."""
    counts = [int(m.group(2)) for m in _SUMMARY.finditer(output)]
    return sum(counts) if counts else None


def sanitize(opts: RunOptions, tool: str, cmd: list[str], kernel: str, config: str, dev: DeviceInfo,
             sha: str) -> ArchivedRecord:
    sanitizer = shutil.which("compute-sanitizer")
    what = f"compute-sanitizer {tool} {kernel} {config}"
    progress(what)
    if sanitizer is None:
        line = StressLine(suite="stress", check="sanitizer", kernel=kernel, config=f"{tool}/{config}", iterations=0,
                          checked=0, wrong=0, max_abs_err=0.0, detail="not covered: compute-sanitizer not on PATH")
        return stress_record(dev, sha, line, passed=False, reasons=[line.detail], covered=False)
    res = run_process([sanitizer, "--tool", tool, "--error-exitcode", "99", *cmd], timeout_s=opts.timeout_s * 4,
                      env=runtime_env())
    out = res.stdout + res.stderr
    hazards = parse_sanitizer(out)
    detail = ""
    if res.timed_out:
        detail = f"not covered: {tool} did not finish within {opts.timeout_s * 4:.0f} s"
    elif hazards is None:
        tail = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["(no output)"]
        detail = f"not covered: {tool} printed no summary (exit {res.returncode}): {tail[0][:200]}"
    line = StressLine(suite="stress", check="sanitizer", kernel=kernel, config=f"{tool}/{config}", iterations=1,
                      checked=0, wrong=0, max_abs_err=0.0, hazards=hazards, seconds=res.seconds, detail=detail)
    if detail:
        return stress_record(dev, sha, line, passed=False, reasons=[detail], covered=False)
    reasons = [f"{hazards} hazard(s)/error(s)"] if hazards else []
    return stress_record(dev, sha, line, passed=not reasons, reasons=reasons)


