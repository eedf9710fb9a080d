"""Measured dispatch windows: every allreduce kernel forced at every size, crossovers found.

`python -m driver sweep` times 1stage, 2stage and 1stage_cpasync
(2, 3, 4 stages) interleaved at each size, per GPU count and dtype, then finds the
crossovers as the compile-time defines the Mojo build reads, archives the sweep that justified them
(DISPATCH.md, dispatch_windows.json in the run folder) and, with `--write`
only, writes them to kernels_mojo/dispatch_windows.json.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from driver import paths
from driver.config import ALLREDUCE_KERNEL_NAMES, SUPPORTED_NGPUS, format_size, kernel_flags
from driver.errors import ConfigError, NoGPU
from driver.gates import allreduce_correctness
from driver.options import RunOptions
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, Skip, Verdict
from driver.suites.allreduce import EXE, timing_flags
from driver.suites.common import SuiteResult, interleaved
from driver.targets import DISPATCH_WINDOWS_FILE
from driver.thresholds import Thresholds
from driver.verify import allreduce_errors

TARGETS = "allreduce"
PUSH = "1stage_push"
PUSH_REGION_MAX_BYTES = 256 << 20  # AR_PUSH_REGION_MAX_BYTES's default: the push window may not exceed it
DEFAULT_SIZES = tuple(1 << p for p in range(13, 31))  # 8 KiB .. 1 GiB

Table = dict[tuple[int, str, int], dict[str, float]]  # (ngpus, dtype, bytes) -> kernel -> p50 us


def crossovers(table: Table, noise: float) -> dict[str, int]:
    """The defines the measurements justify.

    1stage up to the largest size at which, for every dtype and every size up to
    it, 1stage is not slower than 2stage beyond the noise (per GPU count). The
    cp.async window: the longest run of sizes at which the best stage count beats
    both other kernels by more than the noise for every GPU count and dtype
    measured; empty when it wins nowhere. The push window (where the sweep timed
    1stage_push): from the smallest size up to the last size at which push beats
    every other kernel by more than the noise for every GPU count and dtype; 0
    when it does not win at the smallest size.
    """
    defines: dict[str, int] = {}
    for ngpus in sorted({k[0] for k in table}):
        sizes = sorted({k[2] for k in table if k[0] == ngpus})
        dtypes = sorted({k[1] for k in table if k[0] == ngpus})
        limit = 0
        for size in sizes:
            if all(table[(ngpus, d, size)]["1stage"] <= table[(ngpus, d, size)]["2stage"] * (1 + noise) for d in dtypes):
                limit = size
            else:
                break
        defines[f"AR_1STAGE_MAX_BYTES_{ngpus}GPU"] = limit
    # Every GPU count's and dtype's row at each size, smallest size first.
    by_size: dict[int, list[dict[str, float]]] = {}
    for key in sorted(table, key=lambda k: k[2]):
        by_size.setdefault(key[2], []).append(table[key])
    winning: list[int] = []
    stages: Counter[int] = Counter()
    for size, rows in by_size.items():
        wins = []
        for row in rows:
            cp = {k: v for k, v in row.items() if k.startswith("1stage_cpasync")}
            best = min(cp, key=cp.get)
            if cp[best] < min(row["1stage"], row["2stage"]) * (1 - noise):
                wins.append(int(best.rsplit("_s", 1)[1]))
        if rows and len(wins) == len(rows):
            winning.append(size)
            stages.update(wins)
    if table and all(PUSH in row for row in table.values()):
        push_limit = 0
        for size, rows in by_size.items():
            if size <= PUSH_REGION_MAX_BYTES and all(
                    row[PUSH] < min(t for k, t in row.items() if k != PUSH) * (1 - noise) for row in rows):
                push_limit = size
            else:
                break
        defines["AR_PUSH_MAX_BYTES"] = push_limit
    run = _longest_run(winning)
    if run:
        defines |= {"AR_CPASYNC_MIN_BYTES": run[0], "AR_CPASYNC_MAX_BYTES": run[-1],
                    "AR_CPASYNC_STAGES": stages.most_common(1)[0][0]}
    else:
        defines |= {"AR_CPASYNC_MIN_BYTES": 1, "AR_CPASYNC_MAX_BYTES": 0}
    return defines


def _longest_run(sizes: list[int]) -> list[int]:
    """Longest run of consecutive sweep sizes (each twice the one before)."""
    best: list[int] = []
    cur: list[int] = []
    for s in sizes:
        cur = cur + [s] if cur and s == cur[-1] * 2 else [s]
        best = cur if len(cur) > len(best) else best
    return best


def markdown(table: Table, defines: dict[str, int], run_note: str) -> str:
    lines = ["# Allreduce dispatch sweep", "", run_note, "",
             "p50 us per kernel (forced); cp.async ratio = 1stage p50 / cp.async p50 (>1: prefetch helps).", ""]
    for ngpus, dtype in sorted({(k[0], k[1]) for k in table}):
        # Columns: the kernels this table timed (a sweep from before 1stage_push has no push column).
        timed = [k for k in ALLREDUCE_KERNEL_NAMES if all(k in v for kk, v in table.items() if kk[:2] == (ngpus, dtype))]
        lines += [f"## {dtype} x{ngpus}", "",
                  "| size | " + " | ".join(timed) + " | best | cp.async s2 / s3 / s4 ratio |",
                  "|---|" + "---|" * (len(timed) + 2)]
        for size in sorted(k[2] for k in table if k[:2] == (ngpus, dtype)):
            row = table[(ngpus, dtype, size)]
            ratios = " / ".join(f"{row['1stage'] / row[f'1stage_cpasync_s{s}']:.3f}" for s in (2, 3, 4))
            lines.append(f"| {format_size(size)} | " + " | ".join(f"{row[k]:.2f}" for k in timed) +
                         f" | {min(row, key=row.get)} | {ratios} |")
        lines.append("")
    lines += ["## Defines written", "", "```", *(f"-D{k}={v}" for k, v in sorted(defines.items())), "```", ""]
    return "\n".join(lines)


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    present = len(dev.gpus)
    counts = opts.ngpus or tuple(n for n in SUPPORTED_NGPUS if n <= present)
    if not counts or max(counts) > present:
        raise NoGPU(f"the sweep needs {max(counts, default=2)} GPUs; this host has {present}")
    sizes = opts.sizes_bytes if opts.sizes_given else DEFAULT_SIZES
    modes = opts.modes("sweep")
    if len(modes) != 1:
        raise ConfigError(f"the sweep times in one mode, --timing gave {','.join(modes)}",
                          "pick one: --timing cold or --timing hot")
    (mode,) = modes
    result = SuiteResult()
    table: Table = {}
    for ngpus in counts:
        for dtype in opts.dtypes:
            base = [str(exe_dir / EXE), "--sizes", ",".join(map(str, sizes)), "--dtype", dtype, "--ngpus", str(ngpus),
                    "--iters", str(opts.iters), "--warmup", str(opts.warmup), *timing_flags("ours", mode, opts.batch),
                    "--check", "1"]
            samples = interleaved(
                {k: base + kernel_flags(k) for k in ALLREDUCE_KERNEL_NAMES}, AllreduceLine, rounds=opts.rounds,
                min_rounds=min(2, opts.rounds), target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s,
                key=lambda _kernel, ln: (ln.kernel_selected, ln.bytes), label=f"sweep {dtype} x{ngpus}",
            )
            for (kernel, nbytes), rounds in samples.by_key.items():
                line, p50s = samples.representative((kernel, nbytes))
                verdict = Verdict.combine([allreduce_correctness(x, gates) for x in rounds])
                errs = allreduce_errors(rounds, dtype=dtype, ngpus=ngpus, what=f"sweep {kernel} {dtype} x{ngpus}")
                if line.timed:  # a kernel with wrong results is not timed and takes no part in the windows
                    table.setdefault((ngpus, dtype, nbytes), {})[kernel] = line.p50_us
                result.records.append(ArchivedRecord(
                    suite="allreduce", impl="ours", kernel=line.kernel_confirmed,
                    config=f"sweep/{kernel}/{dtype}/{ngpus}gpu/{nbytes}B", device=dev.kind, git_sha=git_sha,
                    passed=verdict.passed, max_abs_err=errs.max_abs_err, nonfinite=errs.nonfinite, correctness=verdict,
                    measurement=line, round_p50_us=p50s if line.timed else [], timing=mode if line.timed else None))
    # A kernel must win by more than the round-to-round spread we accept, not just the floor.
    margin = max(gates.noise.min_rel_noise, gates.noise.target_spread)
    defines = crossovers(table, margin)
    windows = {"defines": defines, "measured_on": dev.kind, "git_sha": git_sha,
               "margin": margin, "sizes_bytes": list(sizes),
               "note": "written by `python -m driver sweep --write`; see DISPATCH.md in the run folder"}
    text = json.dumps(windows, indent=1) + "\n"
    result.extra_files["dispatch_windows.json"] = text.encode()
    result.extra_files["DISPATCH.md"] = markdown(
        table, defines, f"Measured on {dev.kind} at {git_sha[:8]}; a kernel must win by more than {margin:.0%}.").encode()
    if opts.write_windows and all(r.passed for r in result.records):  # never windows from wrong results
        paths.write_atomic(DISPATCH_WINDOWS_FILE, text)
    elif opts.write_windows:
        result.skipped.append(Skip(suite="allreduce", impl="sweep",
                                   reason=f"{DISPATCH_WINDOWS_FILE.name} not written: some kernel had wrong results"))
    return result
