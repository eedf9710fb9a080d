"""Stress soak: every allreduce kernel and both SDPA variants, every launch's result checked."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import numpy as np

from driver.config import ELEM_BYTES, AttnCase, kernel_flags
from driver.errors import KernelFailed, TierNotOffered
from driver.gates import allreduce_property_failures, sdpa_correctness
from driver.options import RunOptions
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, SdpaLine, StressLine
from driver.suites import sdpa
from driver.suites.common import checked_verdict, not_measured, progress, stress_record
from driver.thresholds import Thresholds
from driver.verify import SdpaErrors, allreduce_errors
from driver.workers import Pool, served

REFRESH_EVERY = 25  # fresh random inputs inside one process
LAUNCHES_PER_PROCESS = 250  # a new process (new seed, new contexts) after this many checked launches
MIXED_CONFIGS: dict[str, list[str]] = {
    "alternate": ["--alternate", "1"],
    "lanes2": ["--alternate", "1", "--lanes", "2"],
    "mempressure90": ["--alternate", "1", "--mem-pressure", "90"],
}


def random_sizes(rng: random.Random, dtype: str, count: int = 4) -> list[int]:
    """Byte sizes with odd element tails: one tiny, one near 8K, the rest up to 256K elements."""
    e = ELEM_BYTES[dtype]
    elems = [rng.randrange(1, 64), (8 << 10) + rng.randrange(1, 16)]
    elems += [rng.randrange(1 << 10, 1 << 18) | 1 for _ in range(max(0, count - 2))]
    return [n * e for n in elems]


def allreduce_soak_steps(opts: RunOptions) -> int:
    """Processes (progress steps) one allreduce soak config takes at least: --iters in chunks of at most
    LAUNCHES_PER_PROCESS launches."""
    return max(1, -(-opts.iters // LAUNCHES_PER_PROCESS))


def soak_allreduce(opts: RunOptions, exe: Path, dev: DeviceInfo, gates: Thresholds, sha: str, rng: random.Random,
                   ngpus: int, dtype: str, kernel: str, flags: list[str] | None = None,
                   pool: Pool | None = None) -> ArchivedRecord:
    """`kernel` is a kernel name (forced) or a MIXED_CONFIGS name (its flags cycle every kernel). Each
    chunk of LAUNCHES_PER_PROCESS launches is one case, with its own seed, on the executable's
    long-lived worker in `pool` (a new process per chunk with --no-workers)."""
    mixed = flags is not None
    pool = pool or Pool(one_shot=True)
    sizes = random_sizes(rng, dtype)
    chunks = allreduce_soak_steps(opts)
    per_chunk = -(-opts.iters // chunks)
    lines: list[AllreduceLine] = []
    t0 = time.perf_counter()
    c = 0
    # At least `chunks` processes (>= --iters launches per size), and on for --minutes.
    while c < chunks or time.perf_counter() - t0 < opts.soak_minutes * 60:
        args = ["--sizes", ",".join(map(str, sizes)), "--dtype", dtype, "--ngpus", str(ngpus),
                "--check", "1", "--check-iters", str(per_chunk), "--refresh-every", str(REFRESH_EVERY),
                "--iters", "1", "--warmup", "0", "--seed", str(rng.randrange(1 << 30)),
                *(flags if mixed else kernel_flags(kernel))]
        what = f"stress soak {kernel} {dtype} x{ngpus} ({c + 1}/{chunks}{'+' if c >= chunks else ''})"
        progress(what, step=True)
        lines += pool.run(served([str(exe)], args), AllreduceLine, what=what, timeout_s=opts.timeout_s)
        c += 1
    errs = allreduce_errors(lines, dtype=dtype, ngpus=ngpus, what=f"stress soak {kernel} {dtype} x{ngpus}")
    wrong = errs.wrong
    expect = "alternate" if mixed else kernel
    bad_kernel = sorted({ln.kernel_confirmed for ln in lines if ln.elements and ln.kernel_confirmed != expect})
    # Per size, the checked launches are per_chunk x lanes; the soak's count is per size (every size
    # gets that many), which is what ">= 1000 iterations per config" means here.
    per_size = sum(ln.checked_iters for ln in lines) // max(1, len(sizes))
    line = StressLine(suite="stress", check="soak", kernel=kernel, config=f"{dtype}/{ngpus}gpu",
                      sizes_bytes=sizes, iterations=per_size, checked=sum(ln.checked_iters for ln in lines),
                      wrong=wrong, max_abs_err=errs.max_abs_err, nonfinite=errs.nonfinite, seconds=time.perf_counter() - t0,
                      detail=" ".join(flags) if mixed else "")
    reasons = [f"{wrong} wrong elements"] if wrong else []
    first_wrong = next((ln for ln in lines if ln.wrong), None)  # which property, with its first element
    reasons += [f"e.g. {why}" for why in allreduce_property_failures(first_wrong)] if first_wrong else []
    reasons += ["some output was NaN or infinite"] if errs.nonfinite else []
    what_ran = "a kernel other than the one each launch asked for" if mixed else f"{bad_kernel}, not {kernel}"
    reasons += [f"the GPU ran {what_ran}"] if bad_kernel else []
    return stress_record(dev, sha, line, checked_verdict(reasons))


SDPA_SOAK_STREAMS = 2


def soak_case(seeds: tuple[int, ...], distributions: tuple[str, ...], i: int) -> tuple[int, str]:
    """The i-th (seed, distribution) pair: both lists in turn, so that max(len(seeds), len(distributions))
    cases cover every seed and every distribution; past the seeds given, new ones (seed + 1009 per round)."""
    seed = seeds[i % len(seeds)] + 1009 * (i // max(len(seeds), len(distributions)))
    return seed, distributions[i % len(distributions)]


def soak_cases(seeds: tuple[int, ...], distributions: tuple[str, ...], count: int) -> list[tuple[int, str]]:
    """The first `count` of `soak_case`'s pairs."""
    return [soak_case(seeds, distributions, i) for i in range(count)]


def sdpa_soak_steps(opts: RunOptions) -> int:
    """Cases (progress steps) one SDPA soak config takes at least: every seed and every distribution once."""
    return max(len(opts.seeds), len(opts.distributions))


def soak_sdpa(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, sha: str, impl: str,
              shape_name: str, shape: AttnCase | tuple[int, int, int, int], pool: Pool | None = None,
              precision: str = "fp16") -> ArchivedRecord:
    """Per case (fresh inputs: a seed and an input distribution, the two lists in turn so that every seed and
    every distribution of --distributions is fed): one output launch checked against the float64 reference
    within the tier's bounds for that distribution, then `--iters` launches (shared out over the cases) over
    SDPA_SOAK_STREAMS streams in flight at once, each compared bit for bit with that output on the GPU, so
    every launch is checked. Each case is one request to the runner's long-lived worker in `pool`."""
    pool = pool or Pool(one_shot=True)
    t0 = time.perf_counter()
    runs: list[SdpaErrors] = []
    reasons: list[str] = []
    launches = mismatched = bad = 0
    first = sdpa_soak_steps(opts)
    per_case = -(-opts.iters // first)
    done = 0
    exe = exe_dir / sdpa.VARIANTS[impl]
    case = AttnCase.of(shape)
    # Every seed and distribution once (>= --iters launches), then new seeds until --minutes have passed.
    while done < first or time.perf_counter() - t0 < opts.soak_minutes * 60:
        seed, dist = soak_case(opts.seeds, opts.distributions, done)
        done += 1
        with tempfile.TemporaryDirectory(prefix="stress-sdpa-") as tmp:
            files, expected = sdpa.prepare_case(Path(tmp), case, seed, dist)
            out = Path(tmp) / "out.npy"
            args = [*sdpa.file_args(files), "--out", str(out), *sdpa.case_args(case), "--iters", "1", "--warmup", "0",
                    "--soak", str(per_case), "--streams", str(SDPA_SOAK_STREAMS), "--precision", precision]
            what = f"stress soak sdpa {impl} {precision} {shape_name} {dist} seed {seed}"
            progress(what, step=True)
            try:
                (sl,) = pool.run(served([str(exe)], args), SdpaLine, what=what, timeout_s=opts.timeout_s)
            except TierNotOffered as exc:  # a kernel that does not serve this case: not measured, with its words
                if case.square:
                    raise
                return not_measured(dev, sha, "soak", sdpa.VARIANTS[impl], f"{shape_name}/{precision}",
                                    f"the runner does not offer the {precision} tier for {case.words()}: "
                                    f"{exc.message}")
            sdpa.check_precision(what, precision, sl.precision)
            sdpa.check_case(what, case, sl)
            if sl.soak_launches != per_case:
                raise KernelFailed(f"{what}: the runner reports {sl.soak_launches} soak launches, not {per_case}",
                                   "rebuild the SDPA runners (python -m driver build --targets sdpa)")
            errs = sdpa.tier_errors(np.load(out), expected, gates.sdpa, precision, dist, what)
            runs.append(errs)
            reasons += [f"{dist} seed {seed}: {r}" for r in sdpa_correctness(errs, gates.sdpa, precision, dist).reasons]
            launches += 1 + sl.soak_launches
            mismatched += sl.soak_mismatched_elements
            bad += errs.bad_elements
    worst = SdpaErrors.worst(runs)
    if mismatched:
        reasons.append(f"{mismatched} elements of the soak launches differ from the checked output")
    # wrong: elements of the reference-checked outputs off by more than bad_err (on other inputs than normal:
    # than the tier's worst-element bound at the output's scale), plus elements of the soak launches that
    # differ from their checked output.
    cases = soak_cases(opts.seeds, opts.distributions, done)
    line = StressLine(suite="stress", check="soak", kernel=sdpa.VARIANTS[impl], config=f"{shape_name}/{precision}",
                      iterations=launches, checked=launches, wrong=mismatched + bad,
                      max_abs_err=worst.max_abs_err, nonfinite=worst.nonfinite > 0, seconds=time.perf_counter() - t0,
                      detail=f"{precision} tier; {len(cases)} cases (seed, distribution) "
                             f"{', '.join(f'{s}/{d}' for s, d in cases[:first])}{' ...' if len(cases) > first else ''}; "
                             f"worst rel_l2 {_num(worst.rel_l2)}, max_abs_rel {_num(worst.max_abs_rel)}; "
                             f"{SDPA_SOAK_STREAMS} streams in flight; every launch compared bit for bit with the "
                             "reference-checked output")
    return stress_record(dev, sha, line, checked_verdict(reasons))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
