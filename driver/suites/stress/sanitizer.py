"""Stress sanitizers: compute-sanitizer memcheck, racecheck, synccheck and initcheck. Zero hazards is the
gate; where the tool is missing or cannot follow the run, the record is "not measured" with the tool's own
words, which fails the release gate unless thresholds.toml marks it optional for the host."""

from __future__ import annotations

import re
import shutil

from driver.launch import run_process, runtime_env
from driver.options import RunOptions
from driver.records import ArchivedRecord, DeviceInfo, StressLine, Verdict
from driver.suites.common import checked_verdict, not_measured, progress, stress_record

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


# "ERROR SUMMARY: 3 errors" (memcheck, synccheck, initcheck) and "RACECHECK SUMMARY: 0 hazards
# displayed (0 errors, 0 warnings)"; not "ERROR SUMMARY: 318 errors were not printed".
_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?[ \t]*$|hazards? displayed)", re.IGNORECASE | re.MULTILINE)


def parse_sanitizer(output: str) -> int | None:
    """Hazards/errors the tool reported, or None when it printed no summary."""
    counts = [int(m.group(2)) for m in _SUMMARY.finditer(output)]
    return sum(counts) if counts else None


def first_report(output: str, max_chars: int = 600) -> str:
    """The tool's first report (its opening lines, e.g. "Race reported between Read access at ... and
    Write access at ..."), for the record's detail: without it a failed gate says how many hazards but
    not where."""
    lines: list[str] = []
    for raw in output.splitlines():
        if not raw.startswith("========="):
            continue
        text = raw.removeprefix("=========").strip()
        if not text or text.startswith(("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame")) or _SUMMARY.search(raw):
            if lines and not text:
                break  # a blank "=========" line ends the first report
            continue
        lines.append(text)
    return " | ".join(lines)[:max_chars]


def sanitize(opts: RunOptions, tool: str, cmd: list[str], kernel: str, config: str, dev: DeviceInfo,
             sha: str) -> ArchivedRecord:
    """One run under one tool. The record counts hazards only: the run's results are not checked
    here (the soak does that), so wrong and max_abs_err stay null."""
    sanitizer = shutil.which("compute-sanitizer")
    what = f"compute-sanitizer {tool} {kernel} {config}"
    progress(what, step=True)
    if sanitizer is None:
        return not_measured(dev, sha, "sanitizer", kernel, f"{tool}/{config}", "compute-sanitizer not on PATH")
    res = run_process([sanitizer, "--tool", tool, "--error-exitcode", "99", *cmd], timeout_s=opts.timeout_s * 4,
                      env=runtime_env())
    out = res.stdout + res.stderr
    hazards = parse_sanitizer(out)
    if res.timed_out:
        why = f"{tool} did not finish within {opts.timeout_s * 4:.0f} s"
    elif hazards is None:
        tail = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["(no output)"]
        why = f"{tool} printed no summary (exit {res.returncode}): {tail[0][:200]}"
    else:
        why = ""
    line = StressLine(suite="stress", check="sanitizer", kernel=kernel, config=f"{tool}/{config}",
                      iterations=None if why else 1, checked=None, wrong=None, max_abs_err=None,
                      hazards=None if why else hazards, seconds=res.seconds, detail=f"not measured: {why}" if why else "")
    if why:
        return stress_record(dev, sha, line, Verdict(status="not_measured", reasons=[why]))
    if hazards:
        line = line.model_copy(update={"detail": f"first report: {first_report(out)}"})
    return stress_record(dev, sha, line, checked_verdict([f"{hazards} hazard(s)/error(s)"] if hazards else []))
