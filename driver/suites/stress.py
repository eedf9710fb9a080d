"""`nox -s stress`: the release gate. Soak every kernel, hunt hangs, run the sanitizers.

- Soak: every allreduce kernel (1stage, 2stage, cp.async with 2, 3 and 4 stages) x
  dtype x GPU count present, at random sizes with odd tails, `--iters` checked
  launches per size (each poisoned first and checked element by element, fresh
  random inputs every `REFRESH_EVERY` launches, a new seed per process of
  `LAUNCHES_PER_PROCESS`); then three mixed configs per dtype and GPU count, each
  cycling every kernel back to back (a stale flag or signal left by one kernel
  would corrupt the next): `alternate` alone, `lanes2` (two independent
  allreduces in flight at once on separate streams) and `mempressure90` (a filler
  holds 90% of each GPU's free memory). Both SDPA variants on every shape and
  seed, each output checked against the float64 reference.
- Watchdog: a rank that never reaches the barrier (`--debug-hang-rank`) must be
  killed within the timeout, and the GPUs must then run a checked allreduce again.
  On a single-GPU host, an SDPA runner stuck behind a kernel that never finishes
  (`--debug-hang`) instead, followed by a checked SDPA run.
- Sanitizers: compute-sanitizer memcheck, racecheck, synccheck and initcheck on
  both SDPA variants and on the allreduce kernels at small sizes. Zero hazards is
  the gate; where the tool cannot follow the run, the record says "not covered"
  with the tool's own message, never clean.
- Profile (driver/suites/profile.py): Nsight Compute bank-conflict and stall counters for both
  SDPA variants, prefetch/compute overlap from ablated timings, and the allreduce cp.async
  kernel with and without prefetch.
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from driver.config import SDPA_SHAPES, SUPPORTED_NGPUS
from driver.errors import ConfigError, KernelFailed
from driver.launch import launch, run_process, runtime_env
from driver.options import RunOptions
from driver.parse import parse_lines
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, SdpaLine, StressLine
from driver.suites import profile, sdpa
from driver.suites.allreduce import EXE, worst_err
from driver.suites.common import SuiteResult, progress, stress_record
from driver.suites.sweep import KERNELS
from driver.thresholds import Thresholds

REFRESH_EVERY = 25  # fresh random inputs inside one process
LAUNCHES_PER_PROCESS = 250  # a new process (new seed, new contexts) after this many checked launches
MIXED_CONFIGS: dict[str, list[str]] = {
    "alternate": ["--alternate", "1"],
    "lanes2": ["--alternate", "1", "--lanes", "2"],
    "mempressure90": ["--alternate", "1", "--mem-pressure", "90"],
}
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
WATCHDOG_TIMEOUT_S = 20.0
# SDPA shapes run under every sanitizer: small, mission and tail run the split-KV configs the
# heuristic picks for them; `large` (the unsplit 8-warp config) is left out because racecheck
# takes minutes over its 1024 blocks.
SANITIZED_SHAPES = ("small", "mission", "tail")


def random_sizes(rng: random.Random, dtype: str, count: int = 4) -> list[int]:
    """Byte sizes with odd element tails: one tiny, one near 8K, the rest up to 256K elements."""
    e = ELEM_BYTES[dtype]
    elems = [rng.randrange(1, 64), (8 << 10) + rng.randrange(1, 16)]
    elems += [rng.randrange(1 << 10, 1 << 18) | 1 for _ in range(max(0, count - 2))]
    return [n * e for n in elems]


def soak_allreduce(opts: RunOptions, exe: Path, dev: DeviceInfo, gates: Thresholds, sha: str, rng: random.Random,
                   ngpus: int, dtype: str, kernel: str, flags: list[str] | None = None) -> ArchivedRecord:
    """`kernel` is a kernel name (forced) or a MIXED_CONFIGS name (its flags cycle every kernel)."""
    mixed = flags is not None
    sizes = random_sizes(rng, dtype)
    chunks = max(1, -(-opts.iters // LAUNCHES_PER_PROCESS))
    per_chunk = -(-opts.iters // chunks)
    lines: list[AllreduceLine] = []
    t0 = time.perf_counter()
    c = 0
    # At least `chunks` processes (>= --iters launches per size), and on for --minutes.
    while c < chunks or time.perf_counter() - t0 < opts.soak_minutes * 60:
        cmd = [str(exe), "--sizes", ",".join(map(str, sizes)), "--dtype", dtype, "--ngpus", str(ngpus),
               "--check", "1", "--check-iters", str(per_chunk), "--refresh-every", str(REFRESH_EVERY),
               "--iters", "1", "--warmup", "0", "--seed", str(rng.randrange(1 << 30)),
               *(flags if mixed else KERNELS[kernel])]
        what = f"stress soak {kernel} {dtype} x{ngpus} ({c + 1}/{chunks}{'+' if c >= chunks else ''})"
        progress(what)
        lines += parse_lines(launch(cmd, what=what, timeout_s=opts.timeout_s).stdout, AllreduceLine, what=what)
        c += 1
    wrong = sum(ln.wrong for ln in lines)
    expect = "alternate" if mixed else kernel
    bad_kernel = sorted({ln.kernel_confirmed for ln in lines if ln.elements and ln.kernel_confirmed != expect})
    # Per size, the checked launches are per_chunk x lanes; the soak's count is per size (every size
    # gets that many), which is what ">= 1000 iterations per config" means here.
    per_size = sum(ln.checked_iters for ln in lines) // max(1, len(sizes))
    line = StressLine(suite="stress", check="soak", kernel=kernel, config=f"{dtype}/{ngpus}gpu",
                      sizes_bytes=sizes, iterations=per_size, checked=sum(ln.checked_iters for ln in lines),
                      wrong=wrong, max_abs_err=worst_err(lines), seconds=time.perf_counter() - t0,
                      detail=" ".join(flags) if mixed else "")
    reasons = [f"{wrong} wrong elements"] if wrong else []
    reasons += ["some output was NaN or infinite"] if line.max_abs_err is None else []
    what_ran = "a kernel other than the one each launch asked for" if mixed else f"{bad_kernel}, not {kernel}"
    reasons += [f"the GPU ran {what_ran}"] if bad_kernel else []
    return stress_record(dev, sha, line, passed=not reasons, reasons=reasons)


SDPA_SOAK_STREAMS = 2


def soak_sdpa(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, sha: str, impl: str,
              shape_name: str) -> ArchivedRecord:
    """Per seed (fresh inputs): one output launch checked against the float64 reference, then
    `--iters` launches over SDPA_SOAK_STREAMS streams in flight at once, each compared bit for
    bit with that output on the GPU, so every launch is checked."""
    shape = SDPA_SHAPES[shape_name]
    t0 = time.perf_counter()
    worst: dict[str, float] = {}
    launches = mismatched = 0
    per_seed = -(-opts.iters // len(opts.seeds))
    # Every seed once (>= --iters launches), then new seeds (fresh inputs) until --minutes have passed.
    seeds = list(opts.seeds)
    rnd = 0
    while True:
        if not seeds:
            if time.perf_counter() - t0 >= opts.soak_minutes * 60:
                break
            rnd += 1
            seeds = [s + 1009 * rnd for s in opts.seeds]
        seed = seeds.pop(0)
        with tempfile.TemporaryDirectory(prefix="stress-sdpa-") as tmp:
            files, expected = sdpa.prepare_case(Path(tmp), shape, seed)
            out = Path(tmp) / "out.npy"
            cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out),
                   "--iters", "1", "--warmup", "0", "--soak", str(per_seed), "--streams", str(SDPA_SOAK_STREAMS)]
            what = f"stress soak sdpa {impl} {shape_name} seed {seed}"
            progress(what)
            (sl,) = parse_lines(launch(cmd, what=what, timeout_s=opts.timeout_s).stdout, SdpaLine, what=what)
            if sl.soak_launches != per_seed:
                raise KernelFailed(f"{what}: the runner reports {sl.soak_launches} soak launches, not {per_seed}",
                                   "rebuild the SDPA runners (python -m driver build --targets sdpa)")
            m = sdpa.error_metrics(np.load(out), expected, gates.sdpa)
            worst = {k: max(v, worst.get(k, 0.0)) for k, v in m.items()}
            launches += 1 + sl.soak_launches
            mismatched += sl.soak_mismatched_elements
    verdict = sdpa.correctness(worst, gates.sdpa)
    reasons = list(verdict.reasons)
    if mismatched:
        reasons.append(f"{mismatched} elements of the soak launches differ from the checked output")
    line = StressLine(suite="stress", check="soak", kernel=sdpa.VARIANTS[impl], config=shape_name,
                      iterations=launches, checked=launches, wrong=mismatched + (0 if verdict.passed else 1),
                      max_abs_err=worst["max_abs_err"], seconds=time.perf_counter() - t0,
                      detail=f"{len(opts.seeds)} seeds; {SDPA_SOAK_STREAMS} streams in flight; every launch compared "
                             "bit for bit with the reference-checked output")
    return stress_record(dev, sha, line, passed=not reasons, reasons=reasons)


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
            verdict = sdpa.correctness(sdpa.error_metrics(np.load(out), expected, gates.sdpa), gates.sdpa)
            return [f"the recovery run was wrong: {'; '.join(verdict.reasons)}"] if not verdict.passed else []

        return _watchdog_record(dev, sha, exe.name, "1gpu/small/debug-hang", t0, reasons, hang, recover)


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


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    rng = random.Random(opts.seeds[0])
    result = SuiteResult()
    exe = exe_dir / EXE
    counts = opts.ngpus or tuple(n for n in SUPPORTED_NGPUS if n <= len(dev.gpus))
    if "allreduce" in opts.stress_parts:
        for ngpus in counts:
            for dtype in opts.dtypes:
                for kernel in KERNELS:
                    result.records.append(soak_allreduce(opts, exe, dev, gates, git_sha, rng, ngpus, dtype, kernel))
                for name, flags in MIXED_CONFIGS.items():
                    result.records.append(soak_allreduce(opts, exe, dev, gates, git_sha, rng, ngpus, dtype, name,
                                                         flags))
        if counts:
            result.records.append(watchdog(opts, exe, dev, git_sha))
    if "sdpa" in opts.stress_parts:
        if not counts:  # no allreduce watchdog on this host: hang an SDPA runner instead
            result.records.append(watchdog_sdpa(opts, exe_dir, dev, gates, git_sha))
        for impl in sdpa.VARIANTS:
            for shape_name, _shape in opts.shapes:
                if shape_name in SDPA_SHAPES:
                    result.records.append(soak_sdpa(opts, exe_dir, dev, gates, git_sha, impl, shape_name))
    if "sanitizers" in opts.stress_parts:
        with tempfile.TemporaryDirectory(prefix="stress-san-") as tmp:
            inputs: dict[str, dict[str, Path]] = {}
            for name in SANITIZED_SHAPES:
                (Path(tmp) / name).mkdir()
                inputs[name] = sdpa.write_inputs(Path(tmp) / name, SDPA_SHAPES[name], 0)
            for tool in SANITIZER_TOOLS:
                for shape_name, files in inputs.items():
                    for impl, exe_name in sdpa.VARIANTS.items():
                        cmd = [str(exe_dir / exe_name), *sdpa.file_args(files), "--out", str(Path(tmp) / "o.npy"),
                               "--iters", "2", "--warmup", "0", "--no-spin"]
                        result.records.append(sanitize(opts, tool, cmd, exe_name, shape_name, dev, git_sha))
                if counts:
                    for kernel, args in KERNELS.items():
                        cmd = [str(exe), "--sizes", "8K,32772", "--ngpus", "2", "--iters", "1", "--warmup", "0", *args]
                        result.records.append(sanitize(opts, tool, cmd, kernel, "2gpu/8K,32772B", dev, git_sha))
    if "profile" in opts.stress_parts:
        result.records.extend(profile.run(opts, exe_dir, exe, dev, git_sha, sdpa_variants="sdpa" in opts.stress_parts,
                                          allreduce="allreduce" in opts.stress_parts and bool(counts)))
    return result
