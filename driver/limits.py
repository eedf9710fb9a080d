"""Known limits: the newest archived state of every speed gate that is not met.

Reads the run folders in bench_results/ (each run's results.json.gz and the thresholds.toml it used) and keeps,
per (device, suite, config, candidate, peer), the gate state of the newest run that measured it. The gate
stage archives one verdict per record with one reason per gate (`p50 vs <peer>: <ratio>x (ours .. us, peer
.. us, floor <floor>x)`, or `<peer> not measured`); this module splits those reasons back into one state
per gate with the same rule the gate used (`ratio_verdict`, with the run's own noise setting).

Each row also says whether its run measured what HEAD builds (`History.freshness`): a run whose commit does
not contain the last change to the gate's kernel sources or the dispatch windows (the source globs of its
suite's targets in driver/targets.py), or whose checkout has uncommitted changes to them, is stale, and says
what changed; where there is no git history to ask (a bundle, a shallow clone) the row says so.

`python -m driver limits` prints the table; `--write` (and `python -m driver index`) puts it into docs/LIMITS.md
between the two markers (the README links there), so the known limits follow the newest archived runs. Only the
checkout's own bench_results/ holding archived runs writes it (`why_not_written`): a BENCH_RESULTS_DIR elsewhere,
or a folder with no runs, leaves the tracked table alone.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from driver import archive, paths, source_text
from driver import gates as gating
from driver import targets as build_targets
from driver.config import DEFAULT_PRECISIONS, PRECISIONS, parse_shape
from driver.errors import ConfigError
from driver.gates import ratio_verdict
from driver.launch import run_process
from driver.options import RunOptions
from driver.records import Record, RunArchive
from driver.reference.sdpa import DISTRIBUTIONS
from driver.thresholds import AllreduceSpeedup, SdpaSpeedup, Thresholds

TABLE_FILE = paths.ROOT / "docs" / "LIMITS.md"  # the README links to it (one screen, issue of 2026-11-26)
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
# What the gate stage says after a ratio: a p50 it does not trust (host time inside the hold, or another process
# on the GPU: that ratio's gates read inconclusive), a peer's own wrong result, a known gate's mark.
_UNTRUSTED = re.compile(rf"^(?:(?P<impl>\S+) timing not trusted: |{re.escape(gating.SHARED_GPU_NOTE)} )")
_NOTE = re.compile(rf"^(?:\S+'s own result was wrong |{re.escape(gating.KNOWN_NOTE)}: |"
                   rf"{re.escape(gating.XPASS_NOTE)}: )")
# The gates of [[sdpa.hbm]] and [[sdpa.causal_ratio]] (driver/gates.py: hbm_frac against its floor, a causal case's
# ratio against its non-causal twin's): COMPARE.md lists their states; the known-limits table holds the ratio gates
# of [[allreduce.speedup]] and [[sdpa.speedup]] only, so these reasons are understood and left out of it.
_OTHER_GATE = re.compile(r"^(?:(?:cold |hot )?hbm_frac [0-9.]+ of the measured copy bandwidth |(?:cold |hot )?p50 vs \S+: causal "
                         r"|gate on hbm_frac is on |\S+ at \S+ has no hbm_frac|the non-causal twin |\S+ not timed at "
                         r"|\S+ not measured at "
                         # a skip one case caused, said at its gates (driver/gates.py _CASE_SKIP), and why a gate
                         # may go unmeasured on this host ([[optional]])
                         r"|\S+ (?:cold|hot): |optional here: )")
_SEED = re.compile(r"/seed\d+$")
NO_RUNS = "No archived run measured a speed gate of thresholds.toml: nothing is known, nothing passed."


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
    known: str | None = None  # today's thresholds.toml marks the gate known (why, since when, which run)
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
    def state(self) -> str:
        """The state cell: a known gate's failure is KNOWN, its pass XPASS (the mark is out of date)."""
        if self.known and self.status in ("fail", "pass"):
            return "KNOWN" if self.status == "fail" else "XPASS"
        word = {"not_measured": "peer not measured", "untimed": "mode not timed"}.get(self.status, self.status)
        return f"{word} (known)" if self.known else word

    @property
    def short_by(self) -> float | None:
        """How far the ratio is below the floor, as a fraction of the floor (0.08 = 8% short)."""
        if self.ratio is None or not self.floor or self.ratio >= self.floor:
            return None
        return 1 - self.ratio / self.floor


def _noise(folder: Path, default: float) -> float:
    """The noise band the run was gated with (its own thresholds.toml), else the current one."""
    try:
        data = tomllib.loads(archive.thresholds_text(folder))
        return float(data["noise"]["min_rel_noise"])
    except (OSError, EOFError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
        return default


def gate_states(run: RunArchive, noise: float) -> list[GateState]:
    """One state per gate reason of every gated record in one run."""
    out = []
    for r in run.records:
        if r.suite == "stress" or r.performance is None:
            continue
        common = {"device": run.device.kind, "suite": r.suite, "config": _SEED.sub("", r.config), "impl": r.impl,
                  "kernel": r.kernel, "run_id": run.run_id, "created_utc": run.created_utc, "git_sha": run.git_sha}
        # A p50 the gate did not trust leaves each of its ratios inconclusive: every gate of this record where
        # another process shared the GPU or ours outlasted the hold, else the gates against the untrusted peer.
        untrusted = {m["impl"] or "*" for reason in r.performance.reasons if (m := _UNTRUSTED.match(reason))}
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
                if untrusted & {"*", r.impl, m["peer"]}:
                    status = "inconclusive"
                out.append(GateState(peer=m["peer"], timing=mode, status=status, ratio=float(m["ratio"]),
                                     floor=floor, ours_us=ours, peer_us=peer_us, **common))
            else:
                out.append(GateState(peer=m["peer"], timing=mode, status="inconclusive" if m.re is _ZERO else "not_measured",
                                     **common))
    return out


_AR_CONFIG = re.compile(r"^(?P<dtype>\w+)/(?P<ngpus>\d+)gpu/(?P<bytes>\d+)B$")


def current_gate(s: GateState, gates: Thresholds) -> AllreduceSpeedup | SdpaSpeedup | None:
    """The gate of `gates` (today's thresholds.toml) that still holds what this state measured, mode included;
    None for a state from a gate that has since changed its mode or was dropped."""
    if s.suite == "allreduce":
        m = _AR_CONFIG.match(s.config)
        return next((g for g in gates.allreduce.speedup if m and (g.bytes, g.dtype, g.ngpus, g.peer, g.timing) ==
                     (int(m["bytes"]), m["dtype"], int(m["ngpus"]), s.peer, s.timing)), None)
    return next((g for g in gates.sdpa.speedup
                 if s.config in g.names and (g.peer, g.timing) == (s.peer, s.timing) and g.impl in (s.impl, "best")),
                None)


def is_current(s: GateState, gates: Thresholds) -> bool:
    """Whether today's thresholds.toml still holds the gate (a dropped or changed one is no known limit)."""
    return current_gate(s, gates) is not None


def _refloored(s: GateState, floor: float, noise: float) -> dict:
    """A state's ratio judged against today's floor where the gate's floor changed since the run (the 2-GPU 256 KiB
    NCCL gate's 4.0x became 1.5x on 2026-11-28): the update to make, empty where nothing changes. A state the run
    read as inconclusive for another reason than its ratio (an untrusted p50) stays so."""
    if s.ratio is None or s.floor is None or s.ours_us is None or s.peer_us is None or s.floor == floor:
        return {}
    then = ratio_verdict("", ours_us=s.ours_us, peer_us=s.peer_us, min_ratio=s.floor, noise=noise).status
    if then != s.status:
        return {}
    return {"floor": floor, "status": ratio_verdict("", ours_us=s.ours_us, peer_us=s.peer_us, min_ratio=floor,
                                                     noise=noise).status}


def _options_of(run: RunArchive) -> RunOptions | None:
    """What the run measured, as the options that would ask for it: its suites, named SDPA shapes, allreduce
    sizes, dtypes and GPU counts, and the timing modes it timed (sweeps and stress runs have no speed gates)."""
    shapes = tuple(c for n in dict.fromkeys(r.config.split("/")[0] for r in run.records if r.suite == "sdpa")
                   if (c := _named_case(n)) is not None)
    ar = [m for r in run.records if r.suite == "allreduce" and (m := _AR_CONFIG.match(r.config))]
    suites = tuple(s for s, present in (("allreduce", bool(ar)), ("sdpa", bool(shapes))) if present)
    modes = tuple(dict.fromkeys(r.timing_mode for r in run.records if r.round_p50_us))
    if not suites or not modes:
        return None
    tiers = {r.precision for r in run.records if r.suite == "sdpa" and r.round_p50_us}
    dists = {r.distribution for r in run.records if r.suite == "sdpa"}
    return RunOptions(suites=suites, shapes=shapes, timing=modes,
                      precisions=tuple(t for t in PRECISIONS if t in tiers) or DEFAULT_PRECISIONS,
                      distributions=tuple(d for d in DISTRIBUTIONS if d in dists) or ("normal",),
                      sizes_bytes=tuple(sorted({int(m["bytes"]) for m in ar})) or (256 << 10,),
                      dtypes=tuple(dict.fromkeys(m["dtype"] for m in ar)) or ("float32",),
                      ngpus=tuple(sorted({int(m["ngpus"]) for m in ar})) or None)


def _named_case(name: str):
    """(name, case) of a config name runs give (a preset or the --shapes syntax), or None for one that is not."""
    try:
        got = parse_shape(name)
    except ConfigError:
        return None
    return got if got[0] == name else None


def case_words(suite: str, config: str) -> str:
    """A config as the table shows it: an SDPA preset that is not a square case says its shapes and mask."""
    named = _named_case(config) if suite == "sdpa" else None
    if named is None or named[1].square:
        return config
    case = named[1]
    return config if config == case.name else f"{config} ({case.name})"


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
        run = archive.try_load_run(folder)
        if isinstance(run, archive.Unreadable):
            continue  # the commands name it (archive.readable_runs); `index` skips it the same way
        noise_of = functools.partial(_noise, default=default_noise)
        states = gate_states(run, noise_of(folder))
        if gates is not None:
            stored = {s.key for s in states}
            states += [s for s in rejudged(run, gates) if s.key not in stored]
        for s in states:
            if gates is not None:
                gate = current_gate(s, gates)
                if gate is None:
                    continue
                s = s.model_copy(update={"known": gate.known, **_refloored(s, gate.min_ratio, noise_of(folder))})
            if s.key not in best or s.created_utc > best[s.key].created_utc:
                best[s.key] = s
    return sorted(best.values(), key=_order)


def _order(s: GateState) -> tuple:
    """Device, suite, then sizes in numeric order (8K before 16M), then candidate and peer."""
    chunks = tuple((0, int(c), "") if c.isdigit() else (1, 0, c) for c in re.split(r"(\d+)", s.config))
    return s.device, s.suite, chunks, s.impl, s.peer, s.timing


@dataclass(frozen=True)
class Sources:
    """One group of files a gate's kernel is built from, and its name in a stale row."""

    label: str  # "SDPA kernel sources", "allreduce kernel sources", "dispatch windows"
    globs: tuple[str, ...]  # relative to the checkout, as in Target.source_globs


_SUITE_WORDS = {"sdpa": "SDPA", "allreduce": "allreduce"}


def sources_of(suite: str) -> tuple[Sources, ...]:
    """What the suite's executables are built from (driver/targets.py, the build table): the kernel sources,
    and for allreduce the dispatch windows file apart, so that a stale row says which of the two changed."""
    windows = build_targets.DISPATCH_WINDOWS_FILE.relative_to(paths.ROOT).as_posix()
    globs = tuple(dict.fromkeys(g for t in build_targets.all_targets() if t.suite == suite for g in t.source_globs))
    groups = [Sources(f"{_SUITE_WORDS.get(suite, suite)} kernel sources", tuple(g for g in globs if g != windows))]
    if windows in globs:
        groups.append(Sources("dispatch windows", (windows,)))
    return tuple(g for g in groups if g.globs)


@dataclass(frozen=True)
class Freshness:
    """Whether a run measured what HEAD builds: current, stale (why: what changed since, or the commit is
    unknown here), or not known (why: no git history to ask)."""

    status: Literal["current", "stale", "not_known"]
    why: str = ""

    def cell(self) -> str:
        current = f"current ({self.why})" if self.why else "current"
        return {"current": current, "stale": f"stale: {self.why}", "not_known": f"not known: {self.why}"}[self.status]


GIT_TIMEOUT_S = 30.0


class History:
    """The git history of a checkout, asked once per question. The answers do not name the commit of the
    last change, only what changed: the table written before a kernel change is committed is the table the
    commit then expects (uncommitted changes count as changes)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or paths.ROOT
        self._answers: dict[tuple[str, str], Freshness] = {}

    def _git(self, *args: str) -> tuple[int, str] | None:
        try:
            res = run_process(["git", "-C", str(self.root), *args], timeout_s=GIT_TIMEOUT_S)
        except OSError:  # no git on PATH
            return None
        return (124 if res.timed_out else res.returncode), res.stdout.strip()

    @functools.cached_property
    def problem(self) -> str | None:
        """Why this checkout's history cannot say which runs are stale; None where it can."""
        if (self.root / paths.BUNDLE_MARKER.name).is_file():
            return "a bundle carries no git history"
        shallow = self._git("rev-parse", "--is-shallow-repository")
        if shallow is None:
            return "git is not installed here"
        head = self._git("rev-parse", "--verify", "-q", "HEAD^{commit}")
        if shallow[0] != 0 or head is None or head[0] != 0:
            return "this folder is not a git checkout with commits"
        if shallow[1] == "true":
            return "this is a shallow clone: its history may stop before the runs"
        return None

    def _has_commit(self, sha: str) -> bool:
        if not re.fullmatch(r"[0-9a-f]{4,40}", sha):
            return False
        out = self._git("rev-parse", "--verify", "-q", f"{sha}^{{commit}}")
        return bool(out) and out[0] == 0 and out[1].startswith(sha)

    def _changed_since(self, group: Sources, sha: str) -> Literal["code", "comments", "none"] | None:
        """How the group's files in this checkout may differ from what commit `sha` held. They differ when the
        last commit that changed them is not `sha` or one of its ancestors (`git merge-base --is-ancestor`), or
        they have uncommitted changes (untracked files included); "comments" where the difference is comments
        and blank lines of C-family sources only (_how_files_differ: a comment can change no kernel), "code"
        otherwise, "none" where they do not differ. None where git did not answer."""
        specs = [f":(glob){g}" for g in group.globs]
        dirty = self._git("status", "--porcelain", "--untracked-files=all", "--", *specs)
        last = self._git("log", "-1", "--format=%H", "HEAD", "--", *specs)
        if dirty is None or last is None or dirty[0] != 0 or last[0] != 0:
            return None
        if not dirty[1] and not last[1]:  # never committed and nothing in the tree: nothing the run could predate
            return "none"
        if not dirty[1]:
            contains = self._git("merge-base", "--is-ancestor", last[1], sha)
            if contains is None or contains[0] not in (0, 1):
                return None
            if contains[0] == 0:
                return "none"
        return self._how_files_differ(specs, sha, dirty[1])

    def _how_files_differ(self, specs: list[str], sha: str, status: str) -> Literal["code", "comments", "none"]:
        """How the group's files in this checkout differ from commit `sha`'s: "none" (the same content), "comments"
        (comments and blank lines of C-family sources only, driver/source_text.py) or "code": a file added,
        removed or renamed, an untracked one, any other kind of file, or one the reader cannot follow."""
        if any(line.startswith("??") for line in status.splitlines()):
            return "code"
        diff = self._git("diff", "--name-status", "--no-renames", sha, "--", *specs)
        if diff is None or diff[0] != 0:
            return "code"
        for line in diff[1].splitlines():
            kind, _, rel = line.partition("\t")
            if kind != "M" or Path(rel).suffix not in source_text.C_SUFFIXES:
                return "code"
            old = self._git("show", f"{sha}:{rel}")
            if old is None or old[0] != 0:
                return "code"
            try:
                new = (self.root / rel).read_text()
            except (OSError, UnicodeDecodeError):
                return "code"
            before, after = source_text.c_code_lines(old[1]), source_text.c_code_lines(new)
            if before is None or before != after:
                return "code"
        return "comments" if diff[1] else "none"

    def freshness(self, suite: str, sha: str) -> Freshness:
        """Whether a run of `suite` at commit `sha` measured the kernel sources and dispatch windows HEAD builds."""
        key = (suite, sha)
        if key not in self._answers:
            self._answers[key] = self._freshness(suite, sha)
        return self._answers[key]

    def _freshness(self, suite: str, sha: str) -> Freshness:
        if problem := self.problem:
            return Freshness("not_known", problem)
        short = sha[:8]
        if not self._has_commit(sha):
            return Freshness("stale", f"commit {short} not in this history")
        answers = {}
        for group in sources_of(suite):
            answer = self._changed_since(group, sha)
            if answer is None:
                return Freshness("not_known", f"git could not compare {group.label} with {short}")
            answers[group.label] = answer
        if changed := [label for label, answer in answers.items() if answer == "code"]:
            return Freshness("stale", f"the {' and the '.join(changed)} changed since {short}")
        return Freshness("current", f"only comments changed since {short}" if "comments" in answers.values() else "")


def _where(s: GateState) -> str:
    day, time = s.created_utc[:10], s.created_utc[11:16]
    return f"[{s.run_id}](../bench_results/{s.run_id}/COMPARE.md), {day} {time} UTC, {s.git_sha[:8]}"


def markdown(states: list[GateState], history: History | None = None) -> str:
    """The table of gates whose newest state is not a pass, and one line naming the ones that pass; each
    says whether its run measured what HEAD builds (`history`: this checkout's, by default)."""
    history = history or History()
    short = [s for s in states if s.status != "pass" or s.known]
    met = [s for s in states if s.status == "pass" and not s.known]
    lines = [("Speed gates (`thresholds.toml`) that the newest archived run measuring them did not pass, and those "
              "marked `known` (KNOWN: failed as marked, not failing a run; XPASS: passed although marked, the mark "
              "is out of date). speedup = peer p50 / our p50; short by = how far below the floor; at HEAD = whether "
              "that run measured the kernel sources and dispatch windows HEAD builds (uncommitted changes count; "
              "comments and blank lines in C-family sources do not), and if not, what changed since."), ""]
    if short:
        lines += ["| device | gate | speedup (ours vs peer p50) | floor | short by | state | newest run | at HEAD |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in short:
            gate = f"{s.suite} {case_words(s.suite, s.config)} {s.timing}: {s.impl} ({s.kernel}) vs {s.peer}"
            if s.ratio is not None:
                measured = f"{s.ratio:.2f}x ({s.ours_us:.2f} vs {s.peer_us:.2f} us)"
                floor = f"{s.floor:.2f}x"
            else:
                measured = floor = "-"
            by = f"{s.short_by:.0%}" if s.short_by is not None else "-"
            fresh = history.freshness(s.suite, s.git_sha).cell()
            lines.append(f"| {s.device} | {gate} | {measured} | {floor} | {by} | {s.state} | {_where(s)} | {fresh} |")
        if any(s.known for s in short):
            lines += ["", ("KNOWN, XPASS and (known): gates marked `known` in `thresholds.toml`, whose mark says why, "
                           "since when and which archived runs measured the shortfall.")]
    elif met:
        lines.append("Every gate passed in its newest archived run.")
    else:  # nothing archived (or nothing gated): that passes no gate
        lines.append(NO_RUNS)
    if met:
        def mark(s: GateState) -> str:
            f = history.freshness(s.suite, s.git_sha)
            return "" if f.status == "current" else "; stale" if f.status == "stale" else "; not known"

        lines += ["", "Met in their newest run: " + "; ".join(
            f"{s.device} {s.suite} {s.config} {s.timing} {s.impl} vs {s.peer} {s.ratio:.2f}x (floor {s.floor:.2f}x, "
            f"{s.created_utc[:10]}, {s.git_sha[:8]}{mark(s)})" for s in met) + "."]
        seen = [history.freshness(s.suite, s.git_sha) for s in met]
        notes = [f"{word}: " + "; ".join(dict.fromkeys(f.why for f in seen if f.status == status))
                 for status, word in (("stale", "stale"), ("not_known", "not known")) if any(f.status == status for f in seen)]
        if notes:
            lines += ["", "Of those, " + ". ".join(notes) + "."]
    return "\n".join(lines) + "\n"


def section(readme: Path | None = None) -> str | None:
    """What lies between the markers now; None when the file or the markers are missing."""
    return paths.read_between(readme or TABLE_FILE, BEGIN, END)


def why_not_written(folders: list[Path]) -> str | None:
    """Why the archived runs `folders` (of paths.results_dir()) must not rewrite the tracked table; None where
    they may: they are the checkout's own bench_results/ and there is at least one."""
    root = paths.results_dir()
    if not paths.own_results():
        return f"{root} is not this checkout's bench_results/, whose runs alone the tracked table follows"
    if not folders:
        return f"{root} holds no archived runs"
    return None


def write_table(table: str, readme: Path | None = None) -> bool:
    """Replace what lies between the markers; False (and nothing written) when the file has no markers."""
    return paths.write_between(readme or TABLE_FILE, BEGIN, END, table)
