"""Measured dispatch windows: every allreduce kernel forced at every size, crossovers found.

`python -m driver sweep` times every kernel (1stage, 2stage, 1stage_push, 2stage_push,
1stage_pushflag, 1stage_bulk, 2stage_ce and 1stage_cpasync with 2, 3, 4 stages) interleaved at
each size, per GPU count and dtype, then finds the crossovers as the compile-time defines the Mojo
build reads, one set per GPU count (AR_..._<n>GPU, from that count's rows only), archives the sweep
that justified them (DISPATCH.md, dispatch_windows.json in the run folder) and, with `--write` only,
merges them into kernels_mojo/dispatch_windows.json: the measured counts' defines are replaced, every
other count's kept.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from driver import paths
from driver.config import ALLREDUCE_KERNEL_NAMES, SUPPORTED_NGPUS, WINDOWED_KERNELS, format_size, kernel_flags
from driver.errors import ConfigError, NoGPU
from driver.gates import allreduce_correctness
from driver.options import RunOptions
from driver.records import AllreduceLine, ArchivedRecord, DeviceInfo, Skip, Verdict
from driver.suites.allreduce import EXE, SERVE_TIMED_MOJO, link_frac, measure_ceiling, timing_flags
from driver.suites.common import SuiteResult, interleaved, plan
from driver.targets import DISPATCH_WINDOWS_FILE
from driver.thresholds import Thresholds
from driver.verify import allreduce_errors
from driver.workers import Pool, served

TARGETS = "allreduce"
PUSH = "1stage_push"
PUSH_REGION_MAX_BYTES = 256 << 20  # AR_PUSH_REGION_MAX_BYTES's default: the push window may not exceed it
WHOLE_MESSAGE_SCRATCH = ("1stage_pushflag",)  # its scratch, too, exists only up to that size
# 8 KiB .. 256 MiB: the sweep forces every kernel at every size, and the runner refuses a forced 1stage_push
# (and 1stage_pushflag) above its push region (PUSH_REGION_MAX_BYTES), so no size above it can be swept.
DEFAULT_SIZES = tuple(1 << p for p in range(13, 29))
_COUNT_SUFFIX = re.compile(r"_(\d+)GPU$")

Table = dict[tuple[int, str, int], dict[str, float]]  # (ngpus, dtype, bytes) -> kernel -> p50 us


def count_of(define: str) -> int | None:
    """The GPU count a define is for (AR_PUSH_MAX_BYTES_4GPU -> 4); None for a shared one (AR_PUSH_MAX_BYTES)."""
    m = _COUNT_SUFFIX.search(define)
    return int(m.group(1)) if m else None


def for_count(defines: dict[str, int], ngpus: int) -> dict[str, int]:
    """The windows `ngpus` GPUs dispatch on under these defines, named without the count: each its own
    _<n>GPU define where given, else the shared one (a name in neither is dispatch.mojo's default)."""
    shared = {k: v for k, v in defines.items() if count_of(k) is None}
    return shared | {k.removesuffix(f"_{ngpus}GPU"): v for k, v in defines.items() if count_of(k) == ngpus}


def crossovers(table: Table, noise: float) -> dict[str, int]:
    """The defines the measurements justify, every one per GPU count (_<n>GPU) from that count's rows only,
    so that a sweep at one count says nothing about another's windows.

    For each GPU count: 1stage up to the largest size at which, for every dtype and every size up to it,
    1stage is not slower than 2stage beyond the noise. The cp.async window: the longest run of sizes at
    which the best stage count beats every other kernel by more than the noise for every dtype, with the
    stage count that won most often there; empty when it wins nowhere. The push window (where the sweep
    timed 1stage_push): from the smallest size up to the last size at which push beats every other kernel by
    more than the noise for every dtype; 0 when it does not win at the smallest size. Each windowed kernel (WINDOWED_KERNELS): the
    longest run of sizes at which, for every dtype, it is the fastest kernel and beats every kernel
    without such a window by more than the noise (`_wins`), grown over the neighbouring sizes at which it
    still holds (fastest within the noise, and faster than 1stage/2stage) in every dtype, but never into a
    size another windowed kernel won; empty (MIN=1 > MAX=0) when it wins nowhere.
    """
    defines: dict[str, int] = {}
    for ngpus in sorted({k[0] for k in table}):
        defines |= _count_windows({k: row for k, row in table.items() if k[0] == ngpus}, ngpus, noise)
    return defines


def _count_windows(table: Table, ngpus: int, noise: float) -> dict[str, int]:
    """crossovers() for the rows of one GPU count."""
    sfx = f"_{ngpus}GPU"
    # Every dtype's row at each size, smallest size first.
    by_size: dict[int, list[dict[str, float]]] = {}
    for key in sorted(table, key=lambda k: k[2]):
        by_size.setdefault(key[2], []).append(table[key])
    measured = list(by_size)
    defines: dict[str, int] = {}
    limit = 0
    for size, rows in by_size.items():
        if all(row["1stage"] <= row["2stage"] * (1 + noise) for row in rows):
            limit = size
        else:
            break
    defines[f"AR_1STAGE_MAX_BYTES{sfx}"] = limit
    if all(PUSH in row for row in table.values()):
        push_limit = 0
        for size, rows in by_size.items():
            if size > PUSH_REGION_MAX_BYTES:
                break
            if all(row[PUSH] < min(t for k, t in row.items() if k != PUSH) * (1 - noise) for row in rows):
                push_limit = size  # a clear win
            elif push_limit and all(_holds(row, PUSH, noise) for row in rows):
                push_limit = size  # the window it won extends while push stays faster than the fallback
            else:
                break
        defines[f"AR_PUSH_MAX_BYTES{sfx}"] = push_limit
    timed = [kernel for kernel in WINDOWED_KERNELS if all(kernel in row for row in table.values())]
    # A sweep that did not time a kernel sets no window for it. First the sizes each kernel wins, then each
    # run grown, never into a size another windowed kernel won.
    cores = {kernel: _longest_run([size for size, rows in by_size.items()
                                   if _may_serve(kernel, size) and all(_wins(row, kernel, noise) for row in rows)],
                                  measured)
             for kernel in timed}
    for kernel in timed:
        others_won = {size for k, run in cores.items() if k != kernel for size in run}
        best_run = _extend_run(cores[kernel], measured, by_size, kernel, noise, others_won)
        lo, hi = (best_run[0], best_run[-1]) if best_run else (1, 0)
        stem = WINDOWED_KERNELS[kernel]
        defines |= {f"AR_{stem}_MIN_BYTES{sfx}": lo, f"AR_{stem}_MAX_BYTES{sfx}": hi}
    winning: list[int] = []
    stages: Counter[int] = Counter()
    for size, rows in by_size.items():
        wins = []
        for row in rows:
            cp = {k: v for k, v in row.items() if k.startswith("1stage_cpasync")}
            best = min(cp, key=cp.get)
            others = [v for k, v in row.items() if not k.startswith("1stage_cpasync")]
            if cp[best] < min(others) * (1 - noise):
                wins.append(int(best.rsplit("_s", 1)[1]))
        if rows and len(wins) == len(rows):
            winning.append(size)
            stages.update(wins)
    run = _longest_run(winning, measured)
    if run:
        defines |= {f"AR_CPASYNC_MIN_BYTES{sfx}": run[0], f"AR_CPASYNC_MAX_BYTES{sfx}": run[-1],
                    f"AR_CPASYNC_STAGES{sfx}": stages.most_common(1)[0][0]}
    else:
        defines |= {f"AR_CPASYNC_MIN_BYTES{sfx}": 1, f"AR_CPASYNC_MAX_BYTES{sfx}": 0}
    return defines


def _may_serve(kernel: str, size: int) -> bool:
    """Whether a window of `kernel` may include `size`: a kernel with whole-message scratch has it only up to
    the push region."""
    return not (kernel in WHOLE_MESSAGE_SCRATCH and size > PUSH_REGION_MAX_BYTES)


def _wins(row: dict[str, float], kernel: str, noise: float) -> bool:
    """Whether windowed `kernel` wins a size in this row: it is the fastest kernel, and faster by more than the
    noise than every kernel without a window of its own kind (1stage, 2stage, 1stage_push, cp.async). Against
    another windowed kernel it only needs to be the faster: when two of them both clearly beat the rest, the
    margin between them must not hand the size to a third kernel slower than both."""
    rest = [t for k, t in row.items() if k != kernel and k not in WINDOWED_KERNELS]
    return row[kernel] <= min(row.values()) and row[kernel] < min(rest) * (1 - noise)


def _holds(row: dict[str, float], kernel: str, noise: float) -> bool:
    """Whether `kernel` keeps a size next to the window it won: it is faster than 1stage and 2stage (what
    serves the size once its window ends) and no other kernel beats it by more than the noise."""
    fallback = min(row[k] for k in ("1stage", "2stage") if k in row)
    return row[kernel] < fallback and all(t >= row[kernel] * (1 - noise) for k, t in row.items() if k != kernel)


def _extend_run(run: list[int], measured: list[int], by_size: dict[int, list[dict[str, float]]], kernel: str,
                noise: float, blocked: set[int] = frozenset()) -> list[int]:
    """A window `kernel` won (`run`, consecutive measured sizes) grown over each neighbouring size at which it
    `_holds` in every dtype, downwards and upwards, as the push window keeps the sizes next to the ones it won:
    a size it stays the fastest at, within the noise, and faster than the 1stage/2stage that would otherwise
    serve it, is not handed to a slower kernel. It stops at a size in `blocked` (one another windowed kernel
    won)."""
    if not run:
        return run
    order = sorted(set(measured))
    lo, hi = order.index(run[0]), order.index(run[-1])

    def holds(size: int) -> bool:
        return size not in blocked and _may_serve(kernel, size) and all(_holds(row, kernel, noise)
                                                                         for row in by_size[size])

    while lo > 0 and holds(order[lo - 1]):
        lo -= 1
    while hi + 1 < len(order) and holds(order[hi + 1]):
        hi += 1
    return order[lo:hi + 1]


def _longest_run(sizes: list[int], measured: list[int]) -> list[int]:
    """Longest run of `sizes` that are consecutive among the sweep's `measured` sizes."""
    order = {s: i for i, s in enumerate(sorted(set(measured)))}
    best: list[int] = []
    cur: list[int] = []
    for s in sorted(sizes):
        cur = cur + [s] if cur and order[s] == order[cur[-1]] + 1 else [s]
        best = cur if len(cur) > len(best) else best
    return best


def markdown(table: Table, defines: dict[str, int], run_note: str) -> str:
    from driver.report import generated

    by = "driver/suites/sweep.py (`python -m driver sweep`, `sweep --from RUN`)"
    lines = [generated(by, "the sweep's timings"),
             "# Allreduce dispatch sweep", "", run_note, "",
             "p50 us per kernel (forced); ratios are 1stage p50 / that kernel's p50 (>1: faster than 1stage).", ""]
    for ngpus, dtype in sorted({(k[0], k[1]) for k in table}):
        # Columns: the kernels this table timed (a sweep from before 1stage_push has no push column).
        timed = [k for k in ALLREDUCE_KERNEL_NAMES if all(k in v for kk, v in table.items() if kk[:2] == (ngpus, dtype))]
        ratio_of = [k for k in timed if k != "1stage"]
        lines += [f"## {dtype} x{ngpus}", "",
                  "| size | " + " | ".join(timed) + " | best | " + " | ".join(f"{k} ratio" for k in ratio_of) + " |",
                  "|---|" + "---|" * (len(timed) + 1 + len(ratio_of))]
        for size in sorted(k[2] for k in table if k[:2] == (ngpus, dtype)):
            row = table[(ngpus, dtype, size)]
            ratios = " | ".join(f"{row['1stage'] / row[k]:.3f}" for k in ratio_of)
            lines.append(f"| {format_size(size)} | " + " | ".join(f"{row[k]:.2f}" for k in timed) +
                         f" | {min(row, key=row.get)} | {ratios} |")
        lines.append("")
    lines += ["## Windows written, per GPU count", "",
              ("Each count's windows come from that count's rows only. `--write` replaces these counts' defines in "
               "kernels_mojo/dispatch_windows.json and keeps every other count's (and the shared defines, which "
               "serve a count that has none of its own)."), ""]
    for ngpus in sorted({n for n in map(count_of, defines) if n is not None}):
        own = {k: v for k, v in defines.items() if count_of(k) == ngpus}
        lines += [f"### {ngpus} GPUs", "", "| kernel | window |", "|---|---|",
                  *(f"| {kernel} | {window} |" for kernel, window in _windows_in_words(for_count(own, ngpus))), "",
                  "```", *(f"-D{k}={v}" for k, v in sorted(own.items())), "```", ""]
    shared = {k: v for k, v in defines.items() if count_of(k) is None}
    if shared:
        lines += ["### Every GPU count (shared)", "", "```", *(f"-D{k}={v}" for k, v in sorted(shared.items())),
                  "```", ""]
    return "\n".join(lines)


def _windows_in_words(w: dict[str, int]) -> list[tuple[str, str]]:
    """One count's windows (for_count's names) as select_kernel checks them, for DISPATCH.md."""
    def span(lo: int, hi: int) -> str:
        return "none" if lo > hi else f"{format_size(lo)}-{format_size(hi)}"

    out = []
    if "AR_PUSH_MAX_BYTES" in w:
        out.append((PUSH, f"up to {format_size(w['AR_PUSH_MAX_BYTES'])}" if w["AR_PUSH_MAX_BYTES"] > 0 else "none"))
    for kernel, stem in WINDOWED_KERNELS.items():
        if f"AR_{stem}_MIN_BYTES" in w:
            out.append((kernel, span(w[f"AR_{stem}_MIN_BYTES"], w[f"AR_{stem}_MAX_BYTES"])))
    if "AR_CPASYNC_MIN_BYTES" in w:
        stages = f"1stage_cpasync_s{w['AR_CPASYNC_STAGES']}" if "AR_CPASYNC_STAGES" in w else "1stage_cpasync"
        out.append((stages, span(w["AR_CPASYNC_MIN_BYTES"], w["AR_CPASYNC_MAX_BYTES"])))
    if "AR_1STAGE_MAX_BYTES" in w:
        one = w["AR_1STAGE_MAX_BYTES"]
        out.append(("1stage / 2stage", f"1stage up to {format_size(one)}, 2stage above" if one > 0
                    else "2stage at every size"))
    return out


# The first key of every dispatch_windows.json (JSON has no comments; readers take "defines" only).
WINDOWS_COMMENT = ("Generated by driver/suites/sweep.py (`python -m driver sweep --write`, or "
                   "`sweep --from RUN --write` to re-derive from an archived sweep); do not edit: measure again, "
                   "see DISPATCH.md in the run folder.")


class Provenance(BaseModel):
    """Which sweep justified a set of windows: the device kind it ran on, the commit, the margin a kernel had
    to win by, the sizes it timed and a note (where its DISPATCH.md is)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    measured_on: str
    git_sha: str
    margin: float
    sizes_bytes: list[int]
    note: str


_PROVENANCE_KEYS = tuple(Provenance.model_fields)


def windows_data(defines: dict[str, int], gpu_counts: dict[int, Provenance],
                 shared: Provenance | None = None) -> dict:
    """A dispatch_windows.json's content: the defines, and per GPU count the sweep its _<n>GPU defines come from
    (`shared`: the sweep the defines without a count come from, where there are any)."""
    data: dict = {"$comment": WINDOWS_COMMENT, "defines": defines,
                  "gpu_counts": {str(n): p.model_dump() for n, p in sorted(gpu_counts.items())}}
    if shared is not None:
        data["shared"] = shared.model_dump()
    return data


def windows_json(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def read_windows(data: dict) -> tuple[dict[str, int], dict[int, Provenance], Provenance | None]:
    """(defines, provenance per GPU count, provenance of the shared defines) of a dispatch_windows.json's content.
    A file from before the windows were per count (one sweep's measured_on, git_sha, ... at the top) gives
    that sweep for each count it has _<n>GPU defines for and for its shared defines."""
    defines = {str(k): int(v) for k, v in data.get("defines", {}).items()}
    if "gpu_counts" in data:
        counts = {int(n): Provenance.model_validate(p) for n, p in data["gpu_counts"].items()}
        return defines, counts, Provenance.model_validate(data["shared"]) if "shared" in data else None
    if not all(k in data for k in _PROVENANCE_KEYS):
        return defines, {}, None
    legacy = Provenance.model_validate({k: data[k] for k in _PROVENANCE_KEYS})
    counts = {n: legacy for n in sorted({count_of(k) for k in defines} - {None})}
    return defines, counts, legacy if any(count_of(k) is None for k in defines) else None


def merge_windows(existing: dict | None, measured: dict) -> dict:
    """`measured` (one sweep's dispatch_windows.json) merged into `existing` (the tree's, None when there is
    none): the defines of every GPU count the sweep measured are replaced by the sweep's, those of every other
    count and the shared ones kept, with where each came from."""
    new_defines, new_counts, _ = read_windows(measured)
    if existing is None:
        return windows_data(new_defines, new_counts)
    old_defines, old_counts, old_shared = read_windows(existing)
    kept = {k: v for k, v in old_defines.items() if count_of(k) not in new_counts}
    defines = dict(sorted((kept | new_defines).items(), key=lambda kv: _order(kv[0])))
    counts = {n: p for n, p in old_counts.items() if n not in new_counts} | new_counts
    shared = old_shared if any(count_of(k) is None for k in defines) else None
    return windows_data(defines, counts, shared)


_DEFINE_ORDER = ("AR_1STAGE_MAX_BYTES", "AR_PUSH_MAX_BYTES", *(f"AR_{stem}_" for stem in WINDOWED_KERNELS.values()),
                 "AR_CPASYNC_")


def _order(define: str) -> tuple[int, int, int, str]:
    """Shared defines first, then each GPU count's, each in the order select_kernel checks them, MIN before MAX."""
    kind = next((i for i, p in enumerate(_DEFINE_ORDER) if define.startswith(p)), len(_DEFINE_ORDER))
    return count_of(define) or 0, kind, 0 if "_MIN_" in define else 1 if "_MAX_" in define else 2, define


def write_windows(measured: dict) -> Path:
    """Merge one sweep's windows into kernels_mojo/dispatch_windows.json (merge_windows); returns the path."""
    existing = json.loads(DISPATCH_WINDOWS_FILE.read_text()) if DISPATCH_WINDOWS_FILE.is_file() else None
    paths.write_atomic(DISPATCH_WINDOWS_FILE, windows_json(merge_windows(existing, measured)))
    return DISPATCH_WINDOWS_FILE


def _sweep_provenance(defines: dict[str, int], prov: Provenance) -> dict[int, Provenance]:
    return {n: prov for n in sorted({count_of(k) for k in defines} - {None})}


def from_run(folder: Path) -> tuple[dict, str]:
    """The windows today's rules find in an archived sweep (no GPU): (dispatch_windows.json content, DISPATCH.md).

    The table is rebuilt from the run's records (timed, correct ones only, as the sweep itself keeps them), the
    margin is the one that sweep used."""
    from driver.archive import load_run

    run = load_run(folder)
    saved = folder / "dispatch_windows.json"
    if not saved.is_file():
        raise ConfigError(f"{folder} holds no dispatch_windows.json: not a sweep run",
                          "pass the folder of a `python -m driver sweep` run in bench_results/")
    _, saved_counts, saved_shared = read_windows(json.loads(saved.read_text()))
    margins = {p.margin for p in [*saved_counts.values(), *([saved_shared] if saved_shared else [])]}
    if len(margins) != 1:
        raise ConfigError(f"{saved} names no single margin ({sorted(margins)})", "re-run the sweep")
    (margin,) = margins
    table: Table = {}
    for rec in run.records:
        parts = rec.config.split("/")
        if parts[0] != "sweep" or not rec.passed or not isinstance(rec.measurement, AllreduceLine):
            continue
        line = rec.measurement
        if line.timed:
            table.setdefault((line.ngpus, line.dtype, line.bytes), {})[parts[1]] = line.p50_us
    if not table:
        raise ConfigError(f"{folder} has no timed, correct sweep records", "re-run the sweep")
    defines = crossovers(table, margin)
    note = (f"derived by `python -m driver sweep --from {folder.name}` from that archived sweep; see its DISPATCH.md")
    prov = Provenance(measured_on=run.device.kind, git_sha=run.git_sha, margin=margin,
                      sizes_bytes=sorted({k[2] for k in table}), note=note)
    data = windows_data(defines, _sweep_provenance(defines, prov))
    md = markdown(table, defines, f"Re-derived from {folder.name} (measured at {run.git_sha[:8]}); a kernel must "
                  f"win by more than {margin:.0%}.")
    return data, md


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    with Pool(one_shot=not opts.workers) as pool:  # one long-lived allreduce_bench serves the whole sweep
        return _run(opts, exe_dir, dev, gates, git_sha, pool)


def _run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, pool: Pool) -> SuiteResult:
    present = len(dev.gpus)
    counts = opts.ngpus or tuple(n for n in SUPPORTED_NGPUS if n <= present)
    if not counts or max(counts) > present:
        raise NoGPU(f"the sweep needs {max(counts, default=2)} GPUs; this host has {present}")
    sizes = opts.sizes_bytes if opts.sizes_given else DEFAULT_SIZES
    too_big = [s for s in sizes if s > PUSH_REGION_MAX_BYTES]
    if too_big:
        raise ConfigError(f"the sweep forces 1stage_push at every size, which takes at most "
                          f"{format_size(PUSH_REGION_MAX_BYTES)}; --sizes has {format_size(max(too_big))}",
                          f"sweep sizes up to {format_size(PUSH_REGION_MAX_BYTES)} (the default is 8K..256M)")
    modes = opts.modes("sweep")
    if len(modes) != 1:
        raise ConfigError(f"the sweep times in one mode, --timing gave {','.join(modes)}",
                          "pick one: --timing cold or --timing hot")
    (mode,) = modes
    result = SuiteResult()
    # Every kernel, every round (an upper bound: a dtype's rounds stop early once they agree).
    plan(len(counts) * len(opts.dtypes) * opts.rounds * len(ALLREDUCE_KERNEL_NAMES))
    ceilings, ceiling_skips = measure_ceiling(opts)
    result.ceilings_gbps |= ceilings
    result.skipped += ceiling_skips
    table: Table = {}
    for ngpus in counts:
        for dtype in opts.dtypes:
            base = ["--sizes", ",".join(map(str, sizes)), "--dtype", dtype, "--ngpus", str(ngpus),
                    "--iters", str(opts.iters), "--warmup", str(opts.warmup), *timing_flags("ours", mode, opts.batch),
                    "--check", "1"]
            samples = interleaved(
                {k: served([str(exe_dir / EXE)], base + kernel_flags(k), serve=SERVE_TIMED_MOJO)
                 for k in ALLREDUCE_KERNEL_NAMES},
                AllreduceLine, rounds=opts.rounds,
                min_rounds=min(2, opts.rounds), target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s,
                key=lambda _kernel, ln: (ln.kernel_selected, ln.bytes), label=f"sweep {dtype} x{ngpus}", pool=pool,
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
                    measurement=line, round_p50_us=p50s if line.timed else [], timing=mode if line.timed else None,
                    link_frac=link_frac(line, result.ceilings_gbps)))
    # A kernel must win by more than the round-to-round spread we accept, not just the floor.
    margin = max(gates.noise.min_rel_noise, gates.noise.target_spread)
    defines = crossovers(table, margin)
    prov = Provenance(measured_on=dev.kind, git_sha=git_sha, margin=margin, sizes_bytes=list(sizes),
                      note=("written by `python -m driver sweep`; the table that justifies it is DISPATCH.md in "
                            f"this sweep's run folder, bench_results/<UTC time>-{git_sha[:8]}-{dev.kind}"))
    windows = windows_data(defines, _sweep_provenance(defines, prov))
    result.extra_files["dispatch_windows.json"] = windows_json(windows).encode()
    result.extra_files["DISPATCH.md"] = markdown(
        table, defines, f"Measured on {dev.kind} at {git_sha[:8]}; a kernel must win by more than {margin:.0%}.").encode()
    if opts.write_windows and all(r.passed for r in result.records):  # never windows from wrong results
        write_windows(windows)  # this sweep's GPU counts only; every other count's windows are kept
    elif opts.write_windows:
        result.skipped.append(Skip(suite="allreduce", impl="sweep",
                                   reason=f"{DISPATCH_WINDOWS_FILE.name} not written: some kernel had wrong results"))
    return result
