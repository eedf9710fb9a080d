"""`python -m driver compare A B`: per-config p50 deltas between two archived runs.

A change counts only when it is larger than the noise: the larger of the
thresholds file's floor and each run's own p50-to-p90 spread. A slowdown past
the noise is a regression and exits with the performance-gate code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from driver import archive, paths, thresholds
from driver.errors import ConfigError, PerfGateFailed
from driver.records import ArchivedRecord, RunArchive


def _key(r: ArchivedRecord) -> tuple[str, ...]:
    """Two records compare only when they time the same config the same way (mode and method: a
    cold SDPA number with the L2 flush is not compared with one from before the flush) in the same SDPA
    precision tier (records before the tiers have their kernel's)."""
    return (r.suite, r.impl, r.kernel, r.config, r.timing_mode, r.timing_method, r.precision or "")


def _spread(r: ArchivedRecord) -> float:
    m = r.measurement
    return (m.p90_us - m.p50_us) / m.p50_us if m.p50_us > 0 else 0.0


def judge(old: ArchivedRecord, new: ArchivedRecord, min_noise: float) -> tuple[float, float, str]:
    """The one rule for whether a config moved between two runs (`compare`, `history`, the end line of `bench`):
    (change of p50, noise band, "slower" | "faster" | "" for within the noise). The band is the larger of
    thresholds.toml's `noise.min_rel_noise` and each run's own p50-to-p90 spread."""
    change = new.measurement.p50_us / old.measurement.p50_us - 1
    noise = max(min_noise, _spread(old), _spread(new))
    return change, noise, "" if abs(change) <= noise else "slower" if change > 0 else "faster"


def _default_pair() -> tuple[RunArchive, RunArchive]:
    """The newest run and the newest older one on the same device kind; a run folder that does not read is
    named on stderr and skipped."""
    runs = [run for _folder, run in reversed(archive.readable_runs())]
    for i, newer in enumerate(runs):
        for older in runs[i + 1 :]:
            if older.device.kind == newer.device.kind:
                return older, newer
    raise ConfigError(f"no two archived runs on one device kind in {paths.results_dir()}", "name two run folders")


def _resolve(text: str) -> Path:
    for cand in (Path(text), paths.results_dir() / text):
        if archive.results_path(cand) is not None:
            return cand
    raise ConfigError(f"{text!r} is not an archived run folder", f"look in {paths.results_dir()}")


HEADER = ["| suite | impl | kernel | config | timing | old p50 us | new p50 us | change | noise | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def _timed_keys(run: RunArchive) -> set[tuple[str, ...]]:
    return {_key(r) for r in run.records if r.round_p50_us and r.suite != "stress" and r.measurement.p50_us > 0}


def compare(old: RunArchive, new: RunArchive, min_noise: float) -> tuple[list[str], int]:
    """Markdown rows (HEADER first) and the number of regressions."""
    old_by = {_key(r): r for r in old.records if r.round_p50_us}  # records with timings only
    rows = list(HEADER)
    regressions = 0
    for r in (r for r in new.records if r.round_p50_us):
        if r.suite == "stress":
            continue
        o = old_by.get(_key(r))
        if o is None or o.measurement.p50_us <= 0:
            continue
        change, noise, step = judge(o, r, min_noise)
        verdict = {"slower": "REGRESSION", "faster": "faster", "": "within noise"}[step]
        regressions += step == "slower"
        impl = f"{r.impl} ({r.precision})" if r.precision else r.impl
        rows.append(f"| {r.suite} | {impl} | {r.kernel} | {r.config} | {r.timing_mode} ({r.timing_method}) | "
                    f"{o.measurement.p50_us:.2f} | "
                    f"{r.measurement.p50_us:.2f} | {change:+.1%} | {noise:.1%} | {verdict} |")
    return rows, regressions


def main(run_args: list[str]) -> int:
    if len(run_args) not in (0, 2):
        raise ConfigError(f"compare takes two run folders or none, not {len(run_args)}")
    # A run named here that does not read is an error naming it (exit 2); the default pair skips such runs.
    old, new = (archive.load_run(_resolve(x)) for x in run_args) if run_args else _default_pair()
    if old.device.kind != new.device.kind:
        print(f"warning: comparing {old.device.kind} with {new.device.kind}", file=sys.stderr)
    rows, regressions = compare(old, new, thresholds.load().noise.min_rel_noise)
    if len(rows) == len(HEADER):  # an empty table and exit 0 would read as "no change"
        raise ConfigError(f"{old.run_id} and {new.run_id} have no timed config in common (the first has "
                          f"{len(_timed_keys(old))} timed, the second {len(_timed_keys(new))}): nothing to compare",
                          "compare two runs of the same suite, configs and timing modes, e.g. two `bench` runs "
                          "on one device kind")
    print(f"# {old.run_id} -> {new.run_id}\n")
    print("\n".join(rows))
    if regressions:
        raise PerfGateFailed(f"{regressions} config(s) slower than {old.run_id} by more than the noise")
    return 0

