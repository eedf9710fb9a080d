"""`python -m driver history`: every archived run's p50 (and busbw or TFLOP/s) per device kind and config, in
commit order, with each step beyond the noise between consecutive runs flagged at the commit where it happened
(asv's and conbench's practice). The same series give `bench_results/README.md` its history section (written
by `index`) and `bench` its end line (since the previous run of each config on the same device kind).

A config is what `compare` pairs (`compare._key`: suite, impl, kernel, config, timing mode and method, SDPA
precision tier) on one device kind; a step is `compare.judge`, the one rule for "moved beyond the noise".
Runs are ordered by their commit's place in `git rev-list --topo-order HEAD`; a run whose commit is not in
that history (or a bundle, which carries none) keeps its place in time after the run before it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from driver import archive, compare, host, paths, plots
from driver.errors import ConfigError
from driver.records import ArchivedRecord, RunArchive

# The suites a history is kept for: a sweep's records are allreduce records whose config starts with "sweep/".
SUITES = ("allreduce", "sdpa", "sweep")
METRIC = {"allreduce": "busbw GB/s", "sweep": "busbw GB/s", "sdpa": "TFLOP/s"}
PNG_FOLDER = "history"  # under the results folder: the PNGs `index` writes and its section links


def read_run(folder: Path) -> RunArchive | str:
    """The archived run, or in a few words why its records file cannot be read (truncated gzip, not UTF-8, JSON
    that fails the model, records naming another run, no permission): such a run is skipped and named, never a
    traceback. archive.try_load_run is the one reader every command shares."""
    run = archive.try_load_run(folder)
    return run.reason if isinstance(run, archive.Unreadable) else run


@dataclass(frozen=True)
class TimedRun:
    """What history keeps of one archived run: its place and its timed records (one per config)."""

    run_id: str
    git_sha: str
    created_utc: str
    kind: str
    records: tuple[ArchivedRecord, ...]


_CACHE: dict[tuple[str, int, int], TimedRun | str] = {}


def _timed_run(folder: Path) -> TimedRun | str:
    """read_run, kept per records file (path, mtime, size): `bench` reads the archive for the index and then
    for its end line, and an SDPA run's untimed records (most of its 1 MB) are dropped at once."""
    path = archive.results_path(folder)
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    key = (str(path), st.st_mtime_ns, st.st_size) if st else None
    if key in _CACHE:
        return _CACHE[key]
    run = read_run(folder)
    if isinstance(run, str):
        out: TimedRun | str = run
    else:
        by = {compare._key(r): r for r in run.records
              if r.round_p50_us and r.suite != "stress" and r.measurement.p50_us > 0}
        out = TimedRun(run.run_id, run.git_sha, run.created_utc, run.device.kind, tuple(by.values()))
    if key is not None:
        _CACHE[key] = out
    return out


def load(root: Path | None = None) -> tuple[list[TimedRun], list[tuple[str, str]]]:
    """Every archived run in commit order, and the (folder, reason) of each one that could not be read."""
    runs: list[TimedRun] = []
    unreadable: list[tuple[str, str]] = []
    for folder in archive.archived_runs(root):
        got = _timed_run(folder)
        if isinstance(got, str):
            unreadable.append((folder.name, got))
        else:
            runs.append(got)
    return commit_order(runs, host.commit_positions()), unreadable


def commit_order(runs: list[TimedRun], positions: dict[str, int]) -> list[TimedRun]:
    """By the commit's place in `positions` (oldest first), runs of one commit by time; a run whose commit is
    not there takes the place of the run archived before it."""
    place, keyed = -1, []
    for run in sorted(runs, key=lambda r: (r.created_utc, r.run_id)):
        place = positions.get(run.git_sha, place)
        keyed.append(((place, run.created_utc, run.run_id), run))
    return [run for _, run in sorted(keyed, key=lambda kr: kr[0])]


def suite_of(r: ArchivedRecord) -> str:
    return "sweep" if r.config.startswith("sweep/") else r.suite


@dataclass(frozen=True)
class Point:
    """One run's timing of a config, and how it moved from the run before it in the series."""

    run: TimedRun
    record: ArchivedRecord
    change: float | None = None  # p50 over the previous point's, minus 1; None: the first point
    noise: float | None = None
    step: str = ""  # "slower" | "faster": beyond the noise (compare.judge); "": within it, or the first point

    @property
    def metric(self) -> float:
        m = self.record.measurement
        return m.busbw_gbps if m.suite == "allreduce" else m.tflops


@dataclass(frozen=True)
class Series:
    kind: str
    suite: str
    key: tuple[str, ...]  # compare._key
    points: tuple[Point, ...]

    @property
    def label(self) -> tuple[str, str, str, str]:
        """(config, impl with its tier, kernel, timing) as the tables show them."""
        _suite, impl, kernel, cfg, mode, method, tier = self.key
        return cfg, f"{impl} ({tier})" if tier else impl, kernel, f"{mode} ({method})"

    @property
    def steps(self) -> list[Point]:
        return [p for p in self.points if p.step]


def series(runs: list[TimedRun], min_noise: float) -> list[Series]:
    """Every config's points over `runs` (in the order given), per device kind, each step judged."""
    grouped: dict[tuple[str, tuple[str, ...]], list[Point]] = {}
    for run in runs:
        for r in run.records:
            pts = grouped.setdefault((run.kind, compare._key(r)), [])
            if pts:
                change, noise, step = compare.judge(pts[-1].record, r, min_noise)
                pts.append(Point(run, r, change, noise, step))
            else:
                pts.append(Point(run, r))
    out = [Series(kind, suite_of(pts[0].record), key, tuple(pts)) for (kind, key), pts in grouped.items()]
    return sorted(out, key=lambda s: (s.kind, SUITES.index(s.suite), _natural(s.key[3]), s.key[1:3], s.key[4:]))


def _natural(text: str) -> list[tuple[int, str]]:
    """Sizes in numeric order: float32/2gpu/8192B before float32/2gpu/16384B."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", text)]


def select(all_series: list[Series], device: str | None, suites: tuple[str, ...] | None,
           config: str | None, unreadable: int = 0) -> list[Series]:
    """The series asked for; ConfigError (one line, exit 2) where the device kind or a filter has none."""
    kinds = sorted({s.kind for s in all_series})
    if device is not None and device not in kinds:
        also = f"; {unreadable} run folder(s) could not be read" if unreadable else ""
        raise ConfigError(f"no archived run with a timed config on device {device} in {paths.results_dir()}",
                          f"device kinds archived: {', '.join(kinds) or 'none'}{also}")
    picked = [s for s in all_series if (device is None or s.kind == device) and (suites is None or s.suite in suites)
              and (config is None or config in s.key[3])]
    if not picked:
        asked = ", ".join(x for x in (device and f"device {device}", suites and f"suite {','.join(suites)}",
                                      config and f"config containing {config!r}") if x)
        raise ConfigError(f"no archived timing for {asked or 'any config'} in {paths.results_dir()}",
                          "see `python -m driver history` for what is archived")
    return picked


def parse_suites(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    got = tuple(dict.fromkeys(s.strip() for s in text.split(",")))
    bad = [s for s in got if s not in SUITES]
    if bad:
        raise ConfigError(f"unknown history suite {bad[0]!r}", f"--suite takes {', '.join(SUITES)} (comma list)")
    return got


def _sha(p: Point) -> str:
    return p.run.git_sha[:8]


def _step_text(p: Point) -> str:
    assert p.change is not None
    return f"{p.change:+.1%} at {_sha(p)}"


def _groups(picked: list[Series]) -> dict[tuple[str, str], list[Series]]:
    out: dict[tuple[str, str], list[Series]] = {}
    for s in picked:
        out.setdefault((s.kind, s.suite), []).append(s)
    return out


def markdown(picked: list[Series], unreadable: list[tuple[str, str]]) -> str:
    """`history`'s table per device kind and suite: every run's p50 of each config in commit order."""
    lines: list[str] = []
    for (kind, suite), group in _groups(picked).items():
        nruns = len({p.run.run_id for s in group for p in s.points})
        lines += [f"## {suite} on {kind}", "",
                  (f"{len(group)} config(s) over {nruns} run(s); p50 us of every run in commit order (oldest first); "
                  "a step beyond the noise (compare's rule) is named with the commit of the run where it appeared."),
                  "", (f"| config | impl | kernel | timing | runs | p50 us, oldest to newest | newest {METRIC[suite]} | "
                  "steps beyond the noise |"), "|---|---|---|---|---|---|---|---|"]
        for s in group:
            cfg, impl, kernel, timing = s.label
            values = " ".join(f"{p.record.measurement.p50_us:.2f}" for p in s.points)
            steps = "; ".join(_step_text(p) for p in s.steps) or "-"
            lines.append(f"| {cfg} | {impl} | {kernel} | {timing} | {len(s.points)} | {values} | "
                         f"{s.points[-1].metric:.1f} | {steps} |")
        lines.append("")
    lines += _unreadable_lines(unreadable)
    return "\n".join(lines) + "\n"


def _unreadable_lines(unreadable: list[tuple[str, str]]) -> list[str]:
    if not unreadable:
        return []
    return [f"Skipped {len(unreadable)} run folder(s) whose records cannot be read:", "",
            *(f"- {name}: {why.replace('|', '/')}" for name, why in unreadable), ""]


def png_name(kind: str, suite: str) -> str:
    return f"{kind}-{suite}.png"


def pngs(picked: list[Series], runs: list[TimedRun]) -> dict[str, bytes]:
    """One PNG per device kind and suite (empty without matplotlib); x: the runs (`runs`: commit order)."""
    place = {r.run_id: i for i, r in enumerate(runs)}
    out: dict[str, bytes] = {}
    for (kind, suite), group in _groups(picked).items():
        shown = sorted({p.run.run_id: p for s in group for p in s.points}.values(), key=lambda p: place[p.run.run_id])
        x_of = {p.run.run_id: i for i, p in enumerate(shown)}
        lines: list[plots.HistoryLine] = []
        for s in group:
            def pts(want: tuple[str, ...], s: Series = s, x_of: dict[str, int] = x_of) -> list[tuple[int, float]]:
                return [(x_of[p.run.run_id], p.record.measurement.p50_us) for p in s.points if p.step in want]
            colour = s.key[2] if suite == "sweep" else s.label[1]  # a sweep is all ours: one colour per kernel
            lines.append((colour, pts(("", "slower", "faster")), pts(("slower",)), pts(("faster",))))
        png = plots.history(f"{suite} p50 per config on {kind}, {len(shown)} archived runs in commit order",
                            [_sha(p) for p in shown], lines)
        if png is not None:
            out[png_name(kind, suite)] = png
    return out


def index_section(root: Path, min_noise: float) -> list[str]:
    """The history section of `bench_results/README.md`: per device kind and suite, each config timed in two
    runs or more: its newest p50, how it moved since the first run and since the one before, its steps; the
    PNG beside it where `write_pngs` made one."""
    runs, unreadable = load(root)
    picked = [s for s in series(runs, min_noise) if len(s.points) > 1]
    if not picked and not unreadable:
        return []
    lines = ["## History", "",
             ("Each config timed in two archived runs or more on one device kind, runs in commit order "
              "(`python -m driver history` prints every run's p50; docs/BUILD.md). A step is a change beyond the "
              "noise from the run before (compare's rule), named with the commit of the run where it appeared."), ""]
    for (kind, suite), group in _groups(picked).items():
        moved = [s.points[-1].step for s in group]
        lines += [f"### {suite} on {kind}", "",
                  (f"{len(group)} config(s); in their newest run {moved.count('slower')} slower and "
                  f"{moved.count('faster')} faster than the run before, beyond the noise."), ""]
        if (root / PNG_FOLDER / png_name(kind, suite)).is_file():
            lines += [f"![{suite} on {kind}]({PNG_FOLDER}/{png_name(kind, suite)})", ""]
        if suite == "sweep":  # every kernel at every size: the plot, and `history --suite sweep` for the numbers
            lines += [f"`python -m driver history --device {kind} --suite sweep` lists them.", ""]
            continue
        lines += [(f"| config | impl | timing | runs | newest p50 us (commit) | newest {METRIC[suite]} | "
                  "since the first | since the run before | steps (newest last) |"), "|---|---|---|---|---|---|---|---|---|"]
        for s in group:
            cfg, impl, _kernel, timing = s.label
            first, newest = s.points[0], s.points[-1]
            assert newest.change is not None
            since_first = newest.record.measurement.p50_us / first.record.measurement.p50_us - 1
            last = f"{newest.change:+.1%}" + (f" ({newest.step})" if newest.step else "")
            steps = s.steps
            shown = "; ".join(_step_text(p) for p in steps[-3:]) or "-"
            more = f" ({len(steps) - 3} earlier)" if len(steps) > 3 else ""
            lines.append(f"| {cfg} | {impl} | {timing} | {len(s.points)} | {newest.record.measurement.p50_us:.2f} "
                         f"({_sha(newest)}) | "
                         f"{newest.metric:.1f} | {since_first:+.1%} | {last} | {shown}{more} |")
        lines.append("")
    return lines + _unreadable_lines(unreadable)


def write_pngs(folder: Path, picked: list[Series], runs: list[TimedRun]) -> list[Path]:
    """The PNGs of `picked` into `folder` (made if missing), each replaced whole."""
    written = []
    for name, data in pngs(picked, runs).items():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, folder / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        written.append(folder / name)
    return written


def index_pngs(root: Path, min_noise: float) -> list[Path]:
    """`index`: the PNGs of every config timed twice or more, into `<results>/history/`."""
    runs, _unreadable = load(root)
    return write_pngs(root / PNG_FOLDER, [s for s in series(runs, min_noise) if len(s.points) > 1], runs)


def since_previous(run: RunArchive, min_noise: float, root: Path | None = None) -> str:
    """`bench`'s end line: against the previous run of each config on the same device kind (in commit order),
    how many moved beyond the noise, and the worst slowdown."""
    runs, _unreadable = load(root)
    kind = run.device.kind
    moved = [(s, i) for s in series([r for r in runs if r.kind == kind], min_noise)
             for i, p in enumerate(s.points) if i and p.run.run_id == run.run_id]
    if not moved:
        timed = any(r.round_p50_us and r.suite != "stress" for r in run.records)
        return (f"history: since the previous run: no config of this run was archived before on {kind}" if timed else
                "history: since the previous run: nothing timed in this run to compare")
    steps = [s.points[i].step for s, i in moved]
    text = (f"history: since the previous run of each config on {kind}: {steps.count('slower')} slower, "
            f"{steps.count('faster')} faster beyond the noise, {steps.count('')} within it")
    slower = [(s.points[i].change or 0.0, s, i) for s, i in moved if s.points[i].step == "slower"]
    if slower:
        change, s, i = max(slower, key=lambda c: c[0])
        cfg, impl, _kernel, timing = s.label
        text += (f"; worst: {s.suite} {impl} {cfg} {timing} {change:+.1%} "
                 f"({s.points[i - 1].record.measurement.p50_us:.2f} -> {s.points[i].record.measurement.p50_us:.2f} us,"
                 f" since {s.points[i - 1].run.run_id})")
    return text


def main(device: str | None, suite: str | None, config: str | None, out: Path | None) -> int:
    """Print the history table of the configs asked for; with `out`, write their PNGs there too."""
    from driver import thresholds

    suites = parse_suites(suite)
    if out is not None:
        archive.check_writable(out, "history folder", "pass --out a writable folder")
    runs, unreadable = load()
    picked = select(series(runs, thresholds.load().noise.min_rel_noise), device, suites, config, len(unreadable))
    print(markdown(picked, unreadable), end="")
    for name, why in unreadable:
        print(f"history: skipped {name}: {why}", file=sys.stderr)
    if out is not None:
        with archive.writing(f"the history plots into {out}", "pass --out a writable folder"):
            written = write_pngs(out, picked, runs)
        print(f"history: {len(written)} PNG(s) in {out}" if written else
              "history: no PNG written (matplotlib is not installed)", file=sys.stderr)
    return 0
