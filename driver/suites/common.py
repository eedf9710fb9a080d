"""What every suite shares: the Protocol the pipeline runs it through, its result container,
progress lines, interleaved rounds."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from driver import phases, stats
from driver.errors import ConfigError, KernelFailed, WrongResults
from driver.options import RunOptions
from driver.records import ArchivedRecord, DeviceInfo, Skip, StressLine, Verdict
from driver.thresholds import Thresholds
from driver.workers import Pool, Served

L = TypeVar("L")
K = TypeVar("K", bound=Hashable)

_T0 = time.perf_counter()


@dataclass
class SuiteResult:
    records: list[ArchivedRecord] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    ceilings_gbps: dict[str, float] = field(default_factory=dict)
    extra_files: dict[str, bytes] = field(default_factory=dict)  # archived beside results.json.gz

    def extend(self, other: SuiteResult) -> None:
        self.records += other.records
        self.skipped += other.skipped
        self.ceilings_gbps.update(other.ceilings_gbps)
        self.extra_files.update(other.extra_files)


class Suite(Protocol):
    """What the pipeline needs of a suite (each is a module under driver/suites/): the build
    targets it launches and one run that turns options into archived records."""

    TARGETS: str  # build target names or suites, comma list (driver.targets.select)

    def run(self, opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
        ...


@dataclass
class _Plan:
    """Cases planned and done in this run, for the progress line's done / total and ETA. A suite adds
    its cases up front (`plan`); rounds that settle early leave the total an upper bound."""

    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.perf_counter)


_PLAN = _Plan()


def plan(cases: int, *, reset: bool = False) -> None:
    global _PLAN
    if reset:
        _PLAN = _Plan()
    _PLAN.total += cases


def progress(what: str, *, step: bool = False) -> None:
    """One line on stderr: elapsed time, cases done / planned with an ETA, and what runs now. `step`:
    this line starts one planned case."""
    now = time.perf_counter()
    count = ""
    if _PLAN.total:
        if step:
            _PLAN.done = min(_PLAN.done + 1, _PLAN.total)
        done = _PLAN.done
        eta = (now - _PLAN.started) / max(done - 1, 1) * (_PLAN.total - done) if done > 1 else None
        count = f"[{done}/{_PLAN.total}" + (f", ETA {eta:.0f} s] " if eta is not None else "] ")
    print(f"[{now - _T0:7.1f} s] {count}{what}", file=sys.stderr, flush=True)


def spread(p50s: list[float]) -> float:
    """(max - min) / p50 of the per-round p50s (driver/stats.py); 0 with one round."""
    return stats.spread(p50s)


@dataclass
class Samples(Generic[L]):
    """Per config key, the line each interleaved round produced."""

    by_key: dict[Hashable, list[L]] = field(default_factory=dict)
    peer_failures: dict[Hashable, str] = field(default_factory=dict)  # command key -> the error, one line
    # per config key, when each of its rounds ran (time.time() before the case was sent, after its end line):
    # the windows whose clock samples describe it (driver/clocks.py)
    windows: dict[Hashable, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, key: Hashable, line: L, window: tuple[float, float] | None = None) -> None:
        self.by_key.setdefault(key, []).append(line)
        if window is not None:
            self.windows.setdefault(key, []).append(window)

    def representative(self, key: Hashable) -> tuple[L, list[float]]:
        """The round with the median p50 (of an even count, the lower middle one: a round that ran), and every
        round's p50."""
        lines = self.by_key[key]
        ordered = sorted(lines, key=lambda ln: ln.p50_us)
        return ordered[(len(ordered) - 1) // 2], [ln.p50_us for ln in lines]

    def settled(self, target: float) -> bool:
        return all(spread([ln.p50_us for ln in v]) <= target for v in self.by_key.values())


def interleaved(
    cmds: dict[K, Served | list[str]],
    model: type[L],
    *,
    rounds: int,
    min_rounds: int,
    target_spread: float,
    timeout_s: float,
    key: Callable[[K, L], Hashable],
    samples: Samples[L] | None = None,
    on_line: Callable[[K, L], None] | None = None,
    label: str = "",
    peers: frozenset[K] = frozenset(),
    pool: Pool | None = None,
) -> Samples[L]:
    """Run A B C A B C ... until every config's p50 spread across rounds is below
    `target_spread` (after `min_rounds`) or `rounds` is reached (nvbench-style stop).

    `cmds` is keyed by what a command measures (e.g. impl and timing mode); `key(cmd_key, line)`
    gives the sample key of each line it prints. A peer's command (a key in `peers`) that crashes,
    hangs or misprints is dropped and its error kept in `peer_failures`; the same failure of ours
    raises. A `Served` command runs on its long-lived worker in `pool` (driver/workers.py), a plain
    command line as its own process."""
    samples = samples or Samples()
    pool = pool or Pool(one_shot=True)  # no pool given: nothing would close a worker, so none is started
    for r in range(rounds):
        for cmd_key, cmd in cmds.items():
            if cmd_key in samples.peer_failures:
                continue
            what = f"{label} {_name(cmd_key)} (round {r + 1}/{rounds})".strip()
            progress(what, step=True)
            try:
                with phases.timed("timing"):
                    t0 = time.time()
                    lines = pool.run(cmd, model, what=what, timeout_s=timeout_s)
                    window = (t0, time.time())
                for line in lines:
                    check_samples(what, line)
                keyed = [(key(cmd_key, line), line) for line in lines]
            except (KernelFailed, ConfigError, WrongResults) as exc:
                if cmd_key not in peers:
                    raise
                samples.peer_failures[cmd_key] = exc.one_line()
                progress(f"peer {_name(cmd_key)} dropped: {exc.one_line()}")
                continue
            for sample_key, line in keyed:
                samples.add(sample_key, line, window)
                if on_line:
                    on_line(cmd_key, line)
        if r + 1 >= min_rounds and samples.settled(target_spread):
            break
    return samples


def _name(cmd_key: Hashable) -> str:
    return " ".join(map(str, cmd_key)) if isinstance(cmd_key, tuple) else str(cmd_key)


def check_samples(what: str, line: object) -> None:
    """A timed line must bring its raw samples, so that its p50 is the driver's (driver/stats.py) and never the
    executable's own rule's."""
    if getattr(line, "estimator", stats.ESTIMATOR) is None:
        raise KernelFailed(f"{what}: the line has no samples_us, only its own statistics",
                           "rebuild the executables (python -m driver build)")


def check_mode(what: str, asked: str, got: str | None) -> None:
    """An executable must time in the mode it was asked for: never another one in its place."""
    if got != asked:
        raise KernelFailed(f"{what}: asked for timing {asked}, the line says {got}",
                           "rebuild the executables (python -m driver build)")


def check_impl(what: str, asked: str, got: str) -> None:
    """A line must name the implementation that was asked for (the build tells each executable its name,
    targets.IMPL_NAME_DEFINE): a line of another impl is refused, never counted under its name or merged with
    that impl's timings."""
    if got != asked:
        raise WrongResults(f"{what}: asked for impl {asked}, the line says {got}",
                           "give the target its own impl in driver/targets.py and rebuild (python -m driver build)")


def telemetry_flags(before: list, after: list) -> list[str]:
    """What makes a number less trustworthy: other processes, throttling, clock drops."""
    flags = []
    for b, a in zip(before, after):
        if b.other_processes or a.other_processes:
            flags.append(f"GPU{b.index}: {max(b.other_processes, a.other_processes)} other process(es) on the GPU")
        reasons = sorted(set(a.throttle_reasons) - {"idle"})
        if reasons:
            flags.append(f"GPU{b.index}: clocks held back ({', '.join(reasons)}) after the config")
    return flags


def stress_record(dev: DeviceInfo, sha: str, line: StressLine, verdict: Verdict) -> ArchivedRecord:
    """A stress check as an archived record: pass, fail, or not measured (the tool is missing or cannot
    follow the run, the host is too small), with the reason. Not measured is never passed."""
    return ArchivedRecord(suite="stress", impl=line.check, kernel=line.kernel, config=line.config, device=dev.kind,
                          git_sha=sha, passed=verdict.passed, max_abs_err=line.max_abs_err, nonfinite=line.nonfinite,
                          correctness=verdict, measurement=line)


def not_measured(dev: DeviceInfo, sha: str, check: str, kernel: str, config: str, why: str) -> ArchivedRecord:
    """A stress check this run could not make: every measured field null, the reason kept."""
    line = StressLine(suite="stress", check=check, kernel=kernel, config=config, iterations=None, checked=None,
                      wrong=None, max_abs_err=None, detail=f"not measured: {why}")
    return stress_record(dev, sha, line, Verdict(status="not_measured", reasons=[why]))


def checked_verdict(reasons: list[str]) -> Verdict:
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)
