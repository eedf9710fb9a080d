"""Known limits: the newest archived state of every speed gate that is not met.

Reads the run folders in bench_results/ (each run's results.json and the thresholds.toml it used) and keeps,
per (device, suite, config, candidate, peer), the gate state of the newest run that measured it. The gate
stage archives one verdict per record with one reason per gate (`p50 vs <peer>: <ratio>x (ours .. us, peer
.. us, floor <floor>x)`, or `<peer> not measured`); this module splits those reasons back into one state
per gate with the same rule the gate used (`ratio_verdict`, with the run's own noise setting).

`python -m driver limits` prints the table; `--write` (and `python -m driver index`) puts it into README.md
between the two markers, so the README's known limits follow the newest archived runs.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from driver import gates as gating
from driver import paths
from driver.config import SDPA_SHAPES
from driver.gates import ratio_verdict
from driver.options import RunOptions
from driver.records import Record, RunArchive
from driver.thresholds import Thresholds

README_FILE = paths.ROOT / "README.md"
BEGIN = "<!-- limits:begin (written by `python -m driver limits --write` from bench_results/; edits here are overwritten) -->"
END = "<!-- limits:end -->"

# Reasons name the timing mode since thresholds v2 ("cold p50 vs ..."); older runs' reasons do not.
_MODE = r"(?:(?P<mode>cold|hot) )?"
_RATIO = re.compile(
    rf"^{_MODE}p50 vs (?P<peer>\S+): (?P<ratio>[0-9.]+)x \(ours (?P<ours>[0-9.]+) us, peer (?P<peer_us>[0-9.]+) us, "
    r"floor (?P<floor>[0-9.]+)x\)$"
)
_ZERO = re.compile(rf"^{_MODE}p50 vs (?P<peer>\S+): our time is 0$")
_MISSING = re.compile(r"^(?:peer )?(?P<peer>\S+) not measured(?: \((?P<mode>cold|hot)\))?$")
_UNTIMED = re.compile(r"^gate vs (?P<peer>\S+) is on (?P<mode>cold|hot) timing, which this run did not measure")
_SEED = re.compile(r"/seed\d+$")


class GateState(Record):
    """One speed gate as one archived run left it."""

    device: str  # e.g. 2xH200
    suite: Literal["allreduce", "sdpa"]
    config: str  # float32/2gpu/16777216B, mission, ...
    impl: str  # the candidate: ours, cpasync, baseline
    kernel: str
    peer: str
    timing: str = "cold"  # the gate's timing mode
    status: Literal["pass", "fail", "inconclusive", "not_measured", "untimed"]  # untimed: the run did not time the mode
    ratio: float | None = None  # peer p50 / our p50, as archived (2 decimals)
    floor: float | None = None
    ours_us: float | None = None
    peer_us: float | None = None
    run_id: str
    created_utc: str
    git_sha: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """One gate: its peer and mode at a config. Not the candidate: a `best` gate judges whichever of our
        variants was fastest in that run, and a newer run's state replaces an older one's either way."""
        return self.device, self.suite, self.config, self.peer, self.timing

    @property
    def short_by(self) -> float | None:
        """How far the ratio is below the floor, as a fraction of the floor (0.08 = 8% short)."""
        if self.ratio is None or not self.floor or self.ratio >= self.floor:
            return None
        return 1 - self.ratio / self.floor


def _noise(folder: Path, default: float) -> float:
    """The noise band the run was gated with (its own thresholds.toml), else the current one."""
    try:
        data = tomllib.loads((folder / "thresholds.toml").read_text())
        return float(data["noise"]["min_rel_noise"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
        return default


def gate_states(run: RunArchive, noise: float) -> list[GateState]:
    """One state per gate reason of every gated record in one run."""
    out = []
    for r in run.records:
        if r.suite == "stress" or r.performance is None:
            continue
        common = {"device": run.device.kind, "suite": r.suite, "config": _SEED.sub("", r.config), "impl": r.impl,
                  "kernel": r.kernel, "run_id": run.run_id, "created_utc": run.created_utc, "git_sha": run.git_sha}
        for reason in r.performance.reasons:
            if m := _UNTIMED.match(reason):
                out.append(GateState(peer=m["peer"], timing=m["mode"], status="untimed", **common))
                continue
            m = _RATIO.match(reason) or _ZERO.match(reason) or _MISSING.match(reason)
            if m is None:
                continue
            mode = m["mode"] or r.timing_mode  # an older run's reasons: the mode its record was timed in
            if m.re is _RATIO:
                ours, peer_us, floor = float(m["ours"]), float(m["peer_us"]), float(m["floor"])
                status = ratio_verdict("", ours_us=ours, peer_us=peer_us, min_ratio=floor, noise=noise).status
                out.append(GateState(peer=m["peer"], timing=mode, status=status, ratio=float(m["ratio"]),
                                     floor=floor, ours_us=ours, peer_us=peer_us, **common))
            else:
                out.append(GateState(peer=m["peer"], timing=mode, status="inconclusive" if m.re is _ZERO else "not_measured",
                                     **common))
    return out


_AR_CONFIG = re.compile(r"^(?P<dtype>\w+)/(?P<ngpus>\d+)gpu/(?P<bytes>\d+)B$")


def is_current(s: GateState, gates: Thresholds) -> bool:
    """Whether `gates` (today's thresholds.toml) still holds the gate this state measured, mode included:
    a state from a gate that has since changed its mode or was dropped is no known limit."""
    if s.suite == "allreduce":
        m = _AR_CONFIG.match(s.config)
        return bool(m) and any((g.bytes, g.dtype, g.ngpus, g.peer, g.timing) ==
                               (int(m["bytes"]), m["dtype"], int(m["ngpus"]), s.peer, s.timing)
                               for g in gates.allreduce.speedup)
    return any((g.shape, g.peer, g.timing) == (s.config, s.peer, s.timing) and g.impl in (s.impl, "best")
               for g in gates.sdpa.speedup)


def _options_of(run: RunArchive) -> RunOptions | None:
    """What the run measured, as the options that would ask for it: its suites, named SDPA shapes, allreduce
    sizes, dtypes and GPU counts, and the timing modes it timed (sweeps and stress runs have no speed gates)."""
    shapes = tuple((n, SDPA_SHAPES[n]) for n in dict.fromkeys(r.config.split("/")[0] for r in run.records
                                                               if r.suite == "sdpa") if n in SDPA_SHAPES)
    ar = [m for r in run.records if r.suite == "allreduce" and (m := _AR_CONFIG.match(r.config))]
    suites = tuple(s for s, present in (("allreduce", bool(ar)), ("sdpa", bool(shapes))) if present)
    modes = tuple(dict.fromkeys(r.timing_mode for r in run.records if r.round_p50_us))
    if not suites or not modes:
        return None
    return RunOptions(suites=suites, shapes=shapes, timing=modes,
                      sizes_bytes=tuple(sorted({int(m["bytes"]) for m in ar})) or (256 << 10,),
                      dtypes=tuple(dict.fromkeys(m["dtype"] for m in ar)) or ("float32",),
                      ngpus=tuple(sorted({int(m["ngpus"]) for m in ar})) or None)


def rejudged(run: RunArchive, gates: Thresholds) -> list[GateState]:
    """Today's speed gates judged on the run's timed records with the rule the bench uses (gates.evaluate),
    so a gate added after the run still shows what that run measured."""
    opts = _options_of(run)
    if opts is None:
        return []
    _, attached = gating.evaluate(run.records, run.skipped, opts, gates, run.device.kind)
    return gate_states(run.model_copy(update={"records": attached}), gates.noise.min_rel_noise)


def newest(folders: Iterable[Path], default_noise: float, gates: Thresholds | None = None) -> list[GateState]:
    """Per gate key, the state in the newest run (by creation time) that has it; with `gates`, only the
    gates it still holds, and also those of its gates the run was not judged by (added since) as its
    records judge them today."""
    best: dict[tuple[str, ...], GateState] = {}
    for folder in folders:
        try:
            run = RunArchive.model_validate_json((folder / "results.json").read_text())
        except (OSError, ValidationError):
            continue  # not a run folder this schema can read; `index` skips it the same way
        states = gate_states(run, _noise(folder, default_noise))
        if gates is not None:
            stored = {s.key for s in states}
            states += [s for s in rejudged(run, gates) if s.key not in stored]
        for s in states:
            if gates is not None and not is_current(s, gates):
                continue
            if s.key not in best or s.created_utc > best[s.key].created_utc:
                best[s.key] = s
    return sorted(best.values(), key=_order)


def _order(s: GateState) -> tuple:
    """Device, suite, then sizes in numeric order (8K before 16M), then candidate and peer."""
    chunks = tuple((0, int(c), "") if c.isdigit() else (1, 0, c) for c in re.split(r"(\d+)", s.config))
    return s.device, s.suite, chunks, s.impl, s.peer, s.timing


def _where(s: GateState) -> str:
    day, time = s.created_utc[:10], s.created_utc[11:16]
    return f"[{s.run_id}](bench_results/{s.run_id}/COMPARE.md), {day} {time} UTC, {s.git_sha[:8]}"


def markdown(states: list[GateState]) -> str:
    """The table of gates whose newest state is not a pass, and one line naming the ones that pass."""
    short = [s for s in states if s.status != "pass"]
    met = [s for s in states if s.status == "pass"]
    lines = [("Speed gates (`thresholds.toml`) that the newest archived run measuring them did not pass. "
              "speedup = peer p50 / our p50; short by = how far below the floor."), ""]
    if short:
        lines += ["| device | gate | speedup (ours vs peer p50) | floor | short by | state | newest run |",
                  "|---|---|---|---|---|---|---|"]
        for s in short:
            gate = f"{s.suite} {s.config} {s.timing}: {s.impl} ({s.kernel}) vs {s.peer}"
            if s.ratio is not None:
                measured = f"{s.ratio:.2f}x ({s.ours_us:.2f} vs {s.peer_us:.2f} us)"
                floor = f"{s.floor:.2f}x"
            else:
                measured = floor = "-"
            state = {"not_measured": "peer not measured", "untimed": "mode not timed"}.get(s.status, s.status)
            by = f"{s.short_by:.0%}" if s.short_by is not None else "-"
            lines.append(f"| {s.device} | {gate} | {measured} | {floor} | {by} | {state} | {_where(s)} |")
    else:
        lines.append("Every gate passed in its newest archived run.")
    if met:
        lines += ["", "Met in their newest run: " + "; ".join(
            f"{s.device} {s.suite} {s.config} {s.timing} {s.impl} vs {s.peer} {s.ratio:.2f}x (floor {s.floor:.2f}x, "
            f"{s.created_utc[:10]}, {s.git_sha[:8]})" for s in met) + "."]
    return "\n".join(lines) + "\n"


def section(readme: Path | None = None) -> str | None:
    """What lies between the markers now; None when the file or the markers are missing."""
    try:
        text = (readme or README_FILE).read_text()
    except OSError:
        return None
    start, end = text.find(BEGIN), text.find(END)
    return text[start + len(BEGIN) + 1: end] if 0 <= start < end else None


def write_readme(table: str, readme: Path | None = None) -> bool:
    """Replace what lies between the markers; False (and nothing written) when the file has no markers."""
    readme = readme or README_FILE
    try:
        text = readme.read_text()
    except OSError:
        return False
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return False
    new = text[: start + len(BEGIN)] + "\n" + table + text[end:]
    if new != text:
        tmp = readme.with_name(f".{readme.name}.tmp")
        try:
            tmp.write_text(new)
            os.replace(tmp, readme)
        except BaseException:  # no half-written copy left beside the README
            tmp.unlink(missing_ok=True)
            raise
    return True
