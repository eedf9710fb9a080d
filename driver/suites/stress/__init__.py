"""`nox -s stress`: the release gate. Soak every kernel, hunt hangs, run the sanitizers.

- Soak: every allreduce kernel (1stage, 2stage, cp.async with 2, 3 and 4 stages) x
  dtype x GPU count present, at random sizes with odd tails, `--iters` checked
  launches per size (each poisoned first and checked element by element, fresh
  random inputs every `REFRESH_EVERY` launches, a new seed per process of
  `LAUNCHES_PER_PROCESS`); then three mixed configs per dtype and GPU count, each
  cycling every kernel back to back (a stale flag or signal left by one kernel
  would corrupt the next): `alternate` alone, `lanes2` (two independent
  allreduces in flight at once on separate streams) and `mempressure90` (a filler
  holds 90% of each GPU's free memory). Both SDPA variants in every precision
  tier asked for (--precision; the fp8 tier skipped with the reason where the
  GPU or build has no FP8 warpgroup MMA) on every shape, each seed and input
  distribution (--distributions, default all) fed in turn, each output checked
  against the float64 reference within the tier's bounds.
- Watchdog: a rank that never reaches the barrier (`--debug-hang-rank`) must be
  killed within the timeout, and the GPUs must then run a checked allreduce again.
  On a single-GPU host, an SDPA runner stuck behind a kernel that never finishes
  (`--debug-hang`) instead, followed by a checked SDPA run.
- Sanitizers: compute-sanitizer memcheck, racecheck, synccheck and initcheck on
  both SDPA variants (in each tier that runs) and on the allreduce kernels at
  small sizes and every GPU count the soak runs (those of the suites `--suite` names). Zero hazards is
  the gate; where the tool cannot follow the run, the record says "not covered"
  with the tool's own message, never clean.
- Profile (profile.py beside this file): Nsight Compute bank-conflict and stall counters for both
  SDPA variants, prefetch/compute overlap from ablated timings, and the allreduce cp.async
  kernel with and without prefetch.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from driver import device, phases
from driver.config import (
    ALLREDUCE_KERNEL_NAMES,
    SANITIZED_SHAPES,
    SANITIZER_FORCED_DECODE,
    SDPA_CASES,
    SUPPORTED_NGPUS,
    AttnCase,
    kernel_flags,
)
from driver.gates import tier_skip
from driver.options import RunOptions
from driver.records import DeviceInfo, Skip
from driver.suites import sdpa
from driver.suites.allreduce import EXE
from driver.suites.common import SuiteResult, not_measured, plan
from driver.suites.stress import profile
from driver.suites.stress.sanitizer import SANITIZER_TOOLS, sanitize
from driver.suites.stress.soak import MIXED_CONFIGS, allreduce_soak_steps, sdpa_soak_steps, soak_allreduce, soak_sdpa
from driver.suites.stress.watchdog import allreduce_hang, sdpa_hang
from driver.thresholds import Thresholds
from driver.workers import Pool

TARGETS = "all"


def sdpa_tiers(opts: RunOptions, exe_dir: Path, result: SuiteResult) -> tuple[str, ...]:
    """The precision tiers asked for that run here; the fp8 tier where it cannot is a skip with the reason
    (only then is the GPU asked what it is)."""
    tiers = []
    for tier in opts.precisions:
        why = sdpa.fp8_not_offered(device.arch_of(0), exe_dir.name) if tier == "fp8" else None
        if why:
            result.skipped.append(Skip(suite="stress", impl=tier_skip(tier), reason=why))
        else:
            tiers.append(tier)
    return tuple(tiers)


def soak_kernels(opts: RunOptions) -> tuple[str, ...]:
    """The allreduce kernels stress soaks and sanitizes on their own: every one (`--kernel auto`, the default),
    or the one `--kernel` names (`1stage_cpasync`: each of its stage counts). The mixed configurations
    (alternate, lanes2, mempressure90) run either way: they cycle every kernel."""
    if opts.kernel == "auto":
        return ALLREDUCE_KERNEL_NAMES
    return tuple(k for k in ALLREDUCE_KERNEL_NAMES if k == opts.kernel or k.startswith(f"{opts.kernel}_s"))


def sanitizer_cases(opts: RunOptions) -> tuple[tuple[str, AttnCase], ...]:
    """The SDPA cases every sanitizer runs: --sanitizer-shapes, else SANITIZED_SHAPES."""
    if opts.sanitizer_shapes is not None:
        return opts.sanitizer_shapes
    return tuple((name, SDPA_CASES[name]) for name in SANITIZED_SHAPES)


def sanitizer_kernels(case_name: str, tier: str) -> tuple[str | None, ...]:
    """The --kernel each sanitizer run of a case asks for: auto (None), then for config.SANITIZER_FORCED_DECODE the
    tier's decode kernel (on sm_90 auto takes the Hopper kernel's key chunks for those rows)."""
    return (None, sdpa.DECODE_KERNEL[tier]) if case_name in SANITIZER_FORCED_DECODE else (None,)


def planned_steps(opts: RunOptions, counts: tuple[int, ...], tiers: tuple[str, ...]) -> int:
    """The soak and sanitizer steps this run takes at least (each a line of progress, for done / total and
    the ETA): every allreduce soak process and SDPA soak case, every sanitizer run. --minutes only adds
    soak steps, so the total is then a lower bound."""
    steps = 0
    allreduce_configs = len(soak_kernels(opts)) + len(MIXED_CONFIGS)
    if "allreduce" in opts.stress_parts:
        steps += len(counts) * len(opts.dtypes) * allreduce_configs * allreduce_soak_steps(opts)
    if "sdpa" in opts.stress_parts:
        steps += len(tiers) * len(sdpa.VARIANTS) * len(opts.shapes) * sdpa_soak_steps(opts)
    if "sanitizers" in opts.stress_parts:
        per_tool = sum(len(sanitizer_kernels(name, tier)) for name, _ in sanitizer_cases(opts) for tier in tiers) * \
            len(sdpa.VARIANTS) if "sdpa" in opts.stress_parts else 0
        per_tool += len(soak_kernels(opts)) * len(counts) if "allreduce" in opts.stress_parts else 0
        steps += len(SANITIZER_TOOLS) * per_tool
    return steps


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    rng = random.Random(opts.seeds[0])
    result = SuiteResult()
    exe = exe_dir / EXE
    counts = opts.ngpus or tuple(n for n in SUPPORTED_NGPUS if n <= len(dev.gpus))
    too_small = f"needs at least 2 GPUs; this host has {len(dev.gpus)}"
    tiers = sdpa_tiers(opts, exe_dir, result) if "sdpa" in opts.stress_parts else ()
    plan(planned_steps(opts, counts, tiers))
    if "allreduce" in opts.stress_parts:
        for ngpus in counts:
            with Pool(one_shot=not opts.workers) as pool, phases.timed("soak allreduce"):  # one worker per count
                for dtype in opts.dtypes:
                    for kernel in soak_kernels(opts):
                        result.records.append(soak_allreduce(opts, exe, dev, gates, git_sha, rng, ngpus, dtype, kernel,
                                                             pool=pool))
                    for name, flags in MIXED_CONFIGS.items():
                        result.records.append(soak_allreduce(opts, exe, dev, gates, git_sha, rng, ngpus, dtype, name,
                                                             flags, pool=pool))
        if counts:
            with phases.timed("watchdog"):
                result.records.append(allreduce_hang(opts, exe, dev, gates, git_sha))
        else:  # the allreduce soak cannot run here: say so, never pass by omission
            result.records += [not_measured(dev, git_sha, "soak", "allreduce", "2gpu", too_small),
                               not_measured(dev, git_sha, "watchdog", "1stage", "2gpu/1M/hang-rank-1", too_small)]
    if "sdpa" in opts.stress_parts:
        if not counts:  # no allreduce watchdog on this host: hang an SDPA runner instead
            result.records.append(sdpa_hang(opts, exe_dir, dev, gates, git_sha))
        with Pool(one_shot=not opts.workers) as pool, phases.timed("soak sdpa"):
            for tier in tiers:
                for impl in sdpa.VARIANTS:
                    for shape_name, shape in opts.shapes:
                        result.records.append(soak_sdpa(opts, exe_dir, dev, gates, git_sha, impl, shape_name, shape,
                                                        pool, tier))
    if "sanitizers" in opts.stress_parts:
        with tempfile.TemporaryDirectory(prefix="stress-san-") as tmp, phases.timed("sanitizers"):
            inputs: dict[str, dict[str, Path]] = {}
            cases = dict(sanitizer_cases(opts))
            for name, case in cases.items() if "sdpa" in opts.stress_parts else ():
                (Path(tmp) / name).mkdir()
                inputs[name] = sdpa.write_inputs(Path(tmp) / name, case, 0)
            for tool in SANITIZER_TOOLS:
                for shape_name, files in inputs.items():  # empty unless the sdpa part runs
                    for tier in tiers:
                        for kernel in sanitizer_kernels(shape_name, tier):
                            forced = ["--kernel", kernel] if kernel else []
                            config = f"{shape_name}/{tier}" + (f"/{kernel}" if kernel else "")
                            for impl, exe_name in sdpa.VARIANTS.items():
                                cmd = [str(exe_dir / exe_name), *sdpa.file_args(files), "--out",
                                       str(Path(tmp) / "o.npy"), "--iters", "2", "--warmup", "0", "--no-spin",
                                       "--precision", tier, *forced, *sdpa.case_args(cases[shape_name])]
                                result.records.append(sanitize(opts, tool, cmd, exe_name, config, dev, git_sha))
                for kernel in soak_kernels(opts) if "allreduce" in opts.stress_parts else ():
                    if not counts:
                        result.records.append(not_measured(dev, git_sha, "sanitizer", kernel,
                                                           f"{tool}/2gpu/8K,32772B", too_small))
                        continue
                    for ngpus in counts:  # every GPU count the soak ran: 2stage_ce's 3+ GPU adds exist only there
                        cmd = [str(exe), "--sizes", "8K,32772", "--ngpus", str(ngpus), "--iters", "1", "--warmup",
                               "0", *kernel_flags(kernel)]
                        result.records.append(sanitize(opts, tool, cmd, kernel, f"{ngpus}gpu/8K,32772B", dev,
                                                       git_sha))
    if "profile" in opts.stress_parts:
        with phases.timed("profile"):
            result.records.extend(profile.run(opts, exe_dir, exe, dev, git_sha, sdpa_variants="sdpa" in opts.stress_parts,
                                              tiers=tiers,
                                              allreduce="allreduce" in opts.stress_parts and bool(counts)))
        if "allreduce" in opts.stress_parts and not counts:
            result.records.append(not_measured(dev, git_sha, "profile", "1stage_cpasync", "prefetch/2gpu", too_small))
    return result
