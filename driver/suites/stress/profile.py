"""Stress's profile stage: shared-memory bank conflicts and prefetch/compute overlap of the cp.async kernels.

- Counters: Nsight Compute (`ncu --clock-control none`, clocks left alone) reads one launch of each
  SDPA variant per profiled shape: bank conflicts of shared loads, shared stores and cp.async
  (LDGSTS) shared writes, shared-load wavefronts, the main stall reasons and the duration. Metrics
  this ncu does not know on this GPU are left out and named in the record. Where ncu is missing,
  cannot read the counters, or cannot follow the run, the record says "not measured" with the
  tool's own words, never clean. The allreduce cp.async kernel is tried too: ncu serializes kernel
  launches, so a kernel that waits in a cross-GPU barrier for its peer's launch is expected to hang
  under it; that is recorded as not measured (thresholds.toml marks that one gate optional).
- Overlap, without counters: the same SDPA runner timed in full, with loads only
  (`--ablate no_compute`) and with math only (`--ablate no_loads`).
  overlap = (loads + math - full) / min(loads, math): 1 means the shorter path is hidden
  completely behind the longer one, 0 that they run back to back. For the allreduce, the
  cp.async kernel at each stage count against the same one-shot kernel without prefetch.
"""

from __future__ import annotations

import csv
import glob
import io
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from driver.config import CPASYNC_STAGES, SDPA_SHAPES, kernel_flags
from driver.errors import DriverError, KernelFailed
from driver.launch import run_process, runtime_env
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, SdpaLine, StressLine, Verdict
from driver.suites import sdpa
from driver.suites.common import progress, stress_record

# Profiled SDPA shapes: the mission shape (launch-bound), `large` (where tiling and cp.async show) and
# `large_d128` (head dim 128 has its own decode and transpose maps: its decode stores were 2-way bank
# conflicted until 2026-11-26, unseen because no head-dim-128 shape was profiled;
# experiments/2026-11-26-sdpa-fp16-decode-banks).
PROFILED_SHAPES = ("mission", "large", "large_d128")
# The counters read per profiled launch, each with the short column name the run report uses.
METRIC_COLUMNS = {
    "gpu__time_duration.sum": "ncu duration ns",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "bank conflicts shared ld",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "bank conflicts shared st",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum": "bank conflicts cp.async",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared ld wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "shared st wavefronts",
    "smsp__sass_inst_executed_op_ldgsts.sum": "cp.async instructions",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall long scoreboard",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall short scoreboard",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall barrier",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall math pipe",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall mio",
}
METRICS = tuple(METRIC_COLUMNS)
NCU_TIMEOUT_FACTOR = 4  # ncu replays each kernel once per counter pass
ALLREDUCE_NCU_TIMEOUT_S = 30.0  # ncu profiles one launch in well under a second; a rank alone in the barrier never returns
ALLREDUCE_PREFETCH_BYTES = 16 << 20  # inside every cp.async window the sweep measured
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu")


class NcuOutputError(DriverError):
    """ncu ran but its output holds no counter values for the kernel."""


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def known_metrics(query_output: str) -> set[str]:
    """Base metric names listed by `ncu --query-metrics` (first column; header lines ignored)."""
    names = set()
    for line in query_output.splitlines():
        token = line.split(maxsplit=1)[0] if line.strip() else ""
        if "__" in token:
            names.add(token)
    return names


def parse_ncu_csv(text: str, kernel_substring: str) -> dict[str, float]:
    """Counter values of the first profiled launch whose kernel name contains `kernel_substring`,
    from `ncu --csv --print-units base` output (one row per metric; other lines are skipped).
    Raises NcuOutputError when there is no such launch or no numeric value."""
    header: list[str] | None = None
    values: dict[str, float] = {}
    launch_id: str | None = None
    for row in csv.reader(io.StringIO(text)):
        if header is None:
            if "Metric Name" in row and "Metric Value" in row and "Kernel Name" in row:
                header = row
            continue
        if len(row) != len(header):
            continue
        rec = dict(zip(header, row))
        if kernel_substring not in rec["Kernel Name"]:
            continue
        rid = rec.get("ID", "")
        if launch_id is None:
            launch_id = rid
        elif rid != launch_id:
            break
        try:
            value = float(rec["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        values[rec["Metric Name"]] = value
    if header is None:
        raise NcuOutputError("ncu printed no counter table", "see the record's detail for ncu's own message")
    if not values:
        raise NcuOutputError(f"ncu's table has no numeric counter for a kernel named *{kernel_substring}*",
                             "check the kernel filter and the metric names")
    return values


def _tool_message(out: str) -> str:
    """ncu's own words: its ==ERROR==/==WARNING== lines, else the last line."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    flagged = [ln for ln in lines if ln.startswith(("==ERROR==", "==PROF==", "==WARNING=="))
               and "Connected to process" not in ln and "Disconnected" not in ln]
    pick = [ln for ln in flagged if "ERROR" in ln] or flagged or lines[-1:] or ["(no output)"]
    return " | ".join(pick[:3])[:400]


def _record(dev: DeviceInfo, sha: str, kernel: str, config: str, *, counters: dict[str, float], detail: str,
            covered: bool, seconds: float | None = None) -> ArchivedRecord:
    """A profile record: the counters it read (measured), or not measured with the reason. A profile
    checks no results, so wrong and max_abs_err stay null."""
    line = StressLine(suite="stress", check="profile", kernel=kernel, config=config, iterations=1 if covered else None,
                      checked=None, wrong=None, max_abs_err=None, seconds=seconds, counters=counters, detail=detail)
    verdict = Verdict(status="pass") if covered else Verdict(status="not_measured",
                                                             reasons=[detail.removeprefix("not measured: ")])
    return stress_record(dev, sha, line, verdict)


NO_NCU = "not measured: Nsight Compute (ncu) not found on PATH or under /usr/local/cuda, /opt/nvidia"


def _ncu_cmd(ncu: str, kernel_regex: str, metrics: tuple[str, ...], target: list[str]) -> list[str]:
    """One launch of the first kernel matching `kernel_regex`, clocks left alone, base units, CSV."""
    return [ncu, "--clock-control", "none", "--csv", "--print-units", "base", "--kernel-name", f"regex:{kernel_regex}",
            "--launch-count", "1", "--metrics", ",".join(metrics), *target]


def _ncu_record(ncu: str | None, kernel_regex: str, metrics: tuple[str, ...], target: list[str], timeout_s: float,
                kernel: str, config: str, dev: DeviceInfo, sha: str, *, on_timeout: Callable[[str], str],
                detail: str) -> ArchivedRecord:
    """One launch of `target`'s first kernel matching `kernel_regex` under ncu, as a profile record: the
    counters, or not measured with the reason (no ncu; `on_timeout(ncu's words)`; no counter table)."""
    if ncu is None:
        return _record(dev, sha, kernel, config, counters={}, covered=False, detail=NO_NCU)
    res = run_process(_ncu_cmd(ncu, kernel_regex, metrics, target), timeout_s=timeout_s, env=runtime_env())
    if res.timed_out:
        return _record(dev, sha, kernel, config, counters={}, covered=False, seconds=res.seconds,
                       detail=f"not measured: {on_timeout(_tool_message(res.stdout + res.stderr))}")
    try:
        counters = parse_ncu_csv(res.stdout, kernel_regex)
    except NcuOutputError:
        return _record(dev, sha, kernel, config, counters={}, covered=False, seconds=res.seconds,
                       detail=f"not measured: ncu exit {res.returncode}: {_tool_message(res.stdout + res.stderr)}")
    return _record(dev, sha, kernel, config, counters=counters, covered=True, seconds=res.seconds, detail=detail)


def ncu_sdpa(opts: RunOptions, ncu: str | None, exe: Path, files: dict[str, Path], out: Path, shape_name: str,
             dev: DeviceInfo, sha: str, metrics: tuple[str, ...], left_out: list[str],
             precision: str = "fp16") -> ArchivedRecord:
    progress(f"ncu {exe.name} {precision} {shape_name}")
    timeout_s = opts.timeout_s * NCU_TIMEOUT_FACTOR
    detail = f"one launch under ncu --clock-control none, {precision} tier"
    if left_out:
        detail += f"; metrics this ncu does not know here: {', '.join(left_out)}"
    return _ncu_record(ncu, "sdpa", metrics, [str(exe), *sdpa.file_args(files), "--out", str(out), *sdpa.CHECK_ARGS,
                                              "--precision", precision],
                       timeout_s, exe.name, f"ncu/{shape_name}/{precision}", dev, sha,
                       on_timeout=lambda _said: f"ncu did not finish within {timeout_s:.0f} s", detail=detail)


def overlap_sdpa(opts: RunOptions, exe: Path, files: dict[str, Path], out: Path, shape_name: str, dev: DeviceInfo,
                 sha: str, precision: str = "fp16") -> ArchivedRecord:
    """Time full, loads-only and math-only, cold (L2 flushed before each launch, so the loads come from
    memory); the overlap fraction says how much of the shorter path is hidden."""
    kernel = exe.name
    p50: dict[str, float] = {}
    for mode in ("none", "no_compute", "no_loads"):
        what = f"overlap {kernel} {precision} {shape_name} ablate={mode}"
        progress(what)
        cmd = [str(exe), *sdpa.file_args(files), "--out", str(out), *sdpa.timing_args(opts, "cold"), "--ablate", mode,
               "--precision", precision]
        (line,) = launch_lines(cmd, SdpaLine, what=what, timeout_s=opts.timeout_s)
        if line.ablate != mode:
            raise KernelFailed(f"{what}: the runner reports ablate={line.ablate}",
                                 "rebuild the SDPA runners (python -m driver build --targets sdpa)")
        p50[mode] = line.p50_us
    full, loads, compute = p50["none"], p50["no_compute"], p50["no_loads"]
    counters = {"full_p50_us": full, "loads_only_p50_us": loads, "math_only_p50_us": compute}
    if min(loads, compute) > 0:
        counters["overlap"] = (loads + compute - full) / min(loads, compute)
    return _record(dev, sha, kernel, f"overlap/{shape_name}/{precision}", counters=counters, covered=True,
                   detail=f"{precision} tier; overlap = (loads_only + math_only - full) / min(loads_only, math_only)")


def ncu_allreduce(opts: RunOptions, ncu: str | None, exe: Path, dev: DeviceInfo, sha: str,
                  metrics: tuple[str, ...]) -> ArchivedRecord:
    kernel = "1stage_cpasync_s3"
    progress(f"ncu allreduce {kernel}")
    target = [str(exe), "--sizes", "8K", "--ngpus", "2", *kernel_flags(kernel), "--iters", "1", "--warmup", "0",
              "--timing", "host", "--batch", "1"]
    return _ncu_record(ncu, "ar_cpasync", metrics, target, ALLREDUCE_NCU_TIMEOUT_S, kernel, "ncu/2gpu/8K", dev, sha,
                       on_timeout=lambda said: f"under ncu the run did not finish within {ALLREDUCE_NCU_TIMEOUT_S:.0f} s "
                       "(ncu serializes kernel launches; each rank's launch waits in the cross-GPU barrier "
                       f"for a peer launch that cannot start); ncu said: {said}",
                       detail="one launch of rank 0 under ncu --clock-control none")


def prefetch_allreduce(opts: RunOptions, exe: Path, dev: DeviceInfo, sha: str, stages: int) -> ArchivedRecord:
    """The cp.async kernel with `stages` against the same one-shot kernel without prefetch, one process, fp32."""
    kernel = f"1stage_cpasync_s{stages}"
    p50: dict[str, float] = {}
    for name in ("1stage", kernel):
        what = f"prefetch on/off allreduce {name}"
        progress(what)
        cmd = [str(exe), "--sizes", str(ALLREDUCE_PREFETCH_BYTES), "--ngpus", "2", "--iters", str(opts.iters),
               "--warmup", str(opts.warmup), "--check", "1", *kernel_flags(name)]
        (line,) = launch_lines(cmd, AllreduceLine, what=what, timeout_s=opts.timeout_s)
        if line.wrong or line.kernel_confirmed != name:
            raise KernelFailed(f"{what}: {line.wrong} wrong elements, the GPU ran {line.kernel_confirmed}",
                                 "run `python -m driver stress --suite allreduce` to find the failing config")
        p50[name] = line.p50_us
    counters = {"no_prefetch_p50_us": p50["1stage"], "prefetch_p50_us": p50[kernel],
                "speedup": p50["1stage"] / p50[kernel]}
    return _record(dev, sha, kernel, f"prefetch/2gpu/{ALLREDUCE_PREFETCH_BYTES}B", counters=counters, covered=True,
                   detail="speedup = 1stage p50 / cp.async p50 (>1: the prefetch helps)")


def run(opts: RunOptions, exe_dir: Path, allreduce_exe: Path, dev: DeviceInfo, sha: str, *, sdpa_variants: bool,
        allreduce: bool, tiers: tuple[str, ...] = ("fp16",)) -> list[ArchivedRecord]:
    """The profile records: SDPA counters and overlap in each precision tier of `tiers` when `sdpa_variants`;
    the allreduce cp.async kernel (ncu attempt, prefetch on/off per stage count) when `allreduce` (needs 2 GPUs)."""
    ncu = find_ncu()
    metrics, left_out = METRICS, []
    if ncu is not None:
        q = run_process([ncu, "--query-metrics"], timeout_s=opts.timeout_s, env=runtime_env())
        known = known_metrics(q.stdout)
        if known:  # an empty listing filters nothing: ncu then names what it refuses
            metrics = tuple(m for m in METRICS if m.split(".")[0] in known)
            left_out = [m for m in METRICS if m not in metrics]
    records: list[ArchivedRecord] = []
    with tempfile.TemporaryDirectory(prefix="stress-profile-") as tmp:
        for shape_name in PROFILED_SHAPES if sdpa_variants else ():
            folder = Path(tmp) / shape_name
            folder.mkdir()
            files = sdpa.write_inputs(folder, SDPA_SHAPES[shape_name], 0)
            for tier in tiers:
                for exe_name in sdpa.VARIANTS.values():
                    exe = exe_dir / exe_name
                    out = folder / "out.npy"
                    records.append(ncu_sdpa(opts, ncu, exe, files, out, shape_name, dev, sha, metrics, left_out, tier))
                    records.append(overlap_sdpa(opts, exe, files, out, shape_name, dev, sha, tier))
    if allreduce:
        records.append(ncu_allreduce(opts, ncu, allreduce_exe, dev, sha, metrics))
        for stages in CPASYNC_STAGES:
            records.append(prefetch_allreduce(opts, allreduce_exe, dev, sha, stages))
    return records
