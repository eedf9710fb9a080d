"""Gate: the run's gates (every `GateResult`) and the per-record correctness rules. Correctness from the
verify stage's metrics, speed ratios against the peers measured in the same run, and the run's exit decision.
The build's static gates (ptxas, PTX, SASS) are driver/build_gates.py's.

The thresholds come from thresholds.toml (validated in driver/thresholds.py); nothing here
measures anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from driver import config, peers, registry
from driver.errors import DriverError, PerfGateFailed, WrongResults
from driver.options import RunOptions
from driver.records import (
    SDPA_PEER_PRECISION,
    STATUS_ORDER,
    AllreduceLine,
    ArchivedRecord,
    GateResult,
    RunArchive,
    SdpaLine,
    Skip,
    Verdict,
)
from driver.thresholds import BuildGates, SdpaGates, Thresholds
from driver.verify import SdpaErrors

# ---------------------------------------------------------------- speed


def ratio_verdict(label: str, *, ours_us: float, peer_us: float, min_ratio: float, noise: float) -> Verdict:
    """Speedup = peer time / our time. Within `noise` of the floor is inconclusive."""
    if ours_us <= 0:
        return Verdict(status="inconclusive", reasons=[f"{label}: our time is 0"])
    ratio = peer_us / ours_us
    text = f"{label}: {ratio:.2f}x (ours {ours_us:.2f} us, peer {peer_us:.2f} us, floor {min_ratio:.2f}x)"
    if abs(ratio - min_ratio) <= noise * min_ratio:
        return Verdict(status="inconclusive", reasons=[text])
    return Verdict(status="pass" if ratio >= min_ratio else "fail", reasons=[text])


@dataclass(frozen=True)
class SpeedGate:
    """One speedup gate of thresholds.toml, resolved for a suite: which record is ours, which is the
    peer's, the timing mode both are compared in, and the floor. `config` is the records' config the
    gate reads (SDPA: the shape)."""

    suite: str
    impl: str  # ours ("ours"; SDPA: a variant, or "best" = the fastest variant timed)
    peer: str
    timing: str  # cold or hot (docs/TIMING.md)
    config: str
    min_ratio: float
    precision: str | None = None  # SDPA: the tier both sides are timed in (None: allreduce)
    named_tier: bool = False  # SDPA: the tier is not the one the peer implies, so the gate id says it
    known: str | None = None  # thresholds.toml's `known` mark: an expected shortfall (why, since when, which run)

    @property
    def gate(self) -> str:
        tier = f"/{self.precision}" if self.named_tier else ""
        return f"{self.suite}/speed/{self.impl}-vs-{self.peer}/{self.timing}{tier}/{self.config}"


def speed_gates(opts: RunOptions, limits: Thresholds) -> list[SpeedGate]:
    """The speedup gates this run asked for: those whose config is among the requested ones, in
    every timing mode. Each must be measured (its mode timed, both sides run); one that is not
    fails the run unless thresholds.toml marks it optional for the host."""
    out: list[SpeedGate] = []
    if "allreduce" in opts.suites:
        for g in limits.allreduce.speedup:
            if g.bytes in opts.sizes_bytes and g.dtype in opts.dtypes and (opts.ngpus is None or g.ngpus in opts.ngpus):
                out.append(SpeedGate("allreduce", "ours", g.peer, g.timing, allreduce_config(g.dtype, g.ngpus, g.bytes),
                                     g.min_ratio, known=g.known))
    if "sdpa" in opts.suites:
        shapes = [name for name, _ in opts.shapes]
        out += [SpeedGate("sdpa", g.impl, g.peer, g.timing, shape, g.min_ratio, g.tier,
                          g.tier != SDPA_PEER_PRECISION.get(g.peer, "fp16"), g.known)
                for g in limits.sdpa.speedup for shape in g.names if shape in shapes and g.tier in opts.precisions]
    return out


def allreduce_config(dtype: str, ngpus: int, nbytes: int) -> str:
    return f"{dtype}/{ngpus}gpu/{nbytes}B"


# (impl, config, mode, tier) -> the record with timings; tier None for allreduce
Timed = dict[tuple[str, str, str, str | None], ArchivedRecord]


def _timed(records: list[ArchivedRecord]) -> Timed:
    """Timed records by (impl, config, mode, tier); an SDPA record by its shape (only the first seed of the
    normal inputs is timed) and its precision tier."""
    out: Timed = {}
    for r in records:
        if r.round_p50_us and r.suite in ("allreduce", "sdpa"):
            config = r.config.split("/")[0] if r.suite == "sdpa" else r.config
            out.setdefault((r.impl, config, r.timing_mode, r.precision), r)
    return out


def _speed(g: SpeedGate, timed: Timed, skipped: list[Skip], modes: tuple[str, ...],
           noise: float) -> tuple[GateResult, ArchivedRecord | None]:
    """The gate's result and the record of ours it judges (None when ours was not timed in its mode)."""
    if g.timing not in modes:  # the run did not time this mode at all: never passed by omission
        why = f"gate vs {g.peer} is on {g.timing} timing, which this run did not measure (--timing {','.join(modes)})"
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=[why]), None
    subject = _best(timed, g.impl, g.config, g.timing, g.precision)
    peer = timed.get((g.peer, g.config, g.timing, g.precision))

    def why(impl: str) -> list[str]:
        names = (impl, "*", *((tier_skip(g.precision),) if g.precision and not peers.is_peer(impl) else ()))
        return _skips(skipped, g.suite, names, g.config if g.suite == "sdpa" else None)

    tier = f", {g.precision} tier" if g.precision else ""
    missing = [f"{g.impl} not timed at {g.config} ({g.timing}{tier})", *why(g.impl)] if subject is None else []
    missing += [f"{g.peer} not measured ({g.timing})", *why(g.peer)] if peer is None else []
    if missing:
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=missing), subject
    v = ratio_verdict(f"{g.timing} p50 vs {g.peer}", ours_us=subject.measurement.p50_us,
                      peer_us=peer.measurement.p50_us, min_ratio=g.min_ratio, noise=noise)
    untrusted = _untrusted(subject, peer)
    # A wrong peer is still a peer to time against (it is a comparison, never gated); the gate says so.
    notes = [f"{g.peer}'s own result was wrong (recorded, not gated): {'; '.join(peer.correctness.reasons)}"
             ] if peer.correctness.status == "fail" else []
    status, marked = _marked("inconclusive" if untrusted else v.status, g.known)
    return GateResult(gate=g.gate, kind="speed", status=status,
                      reasons=[*v.reasons, *untrusted, *marked, *notes]), subject


def _untrusted(*recs: ArchivedRecord) -> list[str]:
    """Why some of these timed records' p50s are not to be trusted (each reason once)."""
    return list(dict.fromkeys(why for rec in recs for why in (overrun_reason(rec), shared_gpu_reason(rec)) if why))


def _marked(status: str, known: str | None) -> tuple[str, list[str]]:
    """A speed gate's status under its `known` mark, and the reason the mark adds: a known gate that failed is
    KNOWN, one that passed XPASS; inside the noise (or on an untrusted ratio) it shows neither the shortfall nor its
    end and stays inconclusive."""
    if not known:
        return status, []
    if status == "fail":
        return "known", [f"{KNOWN_NOTE}: {known}"]
    if status == "pass":
        return "xpass", [f"{XPASS_NOTE}: {known}"]
    return status, [f"{KNOWN_NOTE}: {known}"]


def _best(timed: Timed, impl: str, config: str, mode: str, tier: str | None) -> ArchivedRecord | None:
    """Ours at a config: the variant named, or for `best` the fastest variant timed there."""
    if impl != "best":
        return timed.get((impl, config, mode, tier))
    mine = [r for (i, c, m, t), r in timed.items() if (c, m, t) == (config, mode, tier) and not peers.is_peer(i)]
    return min(mine, key=lambda r: r.measurement.p50_us, default=None)


# A skip that one case caused (a peer dropped at that case: "decode_b8_32k cold: kernel failed: ...") is said at
# that case's gates only, not at every gate of the peer.
_CASE_SKIP = re.compile(r"^(?P<case>\S+) (?:cold|hot): ")


def _skips(skipped: list[Skip], suite: str, names, case: str | None = None) -> list[str]:
    """The reasons of the skips of these impls (names) in a suite, without those a case other than `case` caused."""
    def about(reason: str) -> bool:
        m = _CASE_SKIP.match(reason)
        return case is None or m is None or m["case"] == case
    return list(dict.fromkeys(s.reason for s in skipped if s.suite == suite and s.impl in names and about(s.reason)))


def _skip_reasons(skipped: list[Skip], names: tuple[str, ...], case: str | None = None) -> list[str]:
    return _skips(skipped, "sdpa", names, case)


# ---------------------------------------------------------------- memory-bound cases: hbm_frac


@dataclass(frozen=True)
class HbmGate:
    """One [[sdpa.hbm]] entry at one case: ours reaches at least `min_frac` of the copy bandwidth (hbm_frac)."""

    impl: str
    timing: str
    config: str
    min_frac: float
    precision: str = "fp16"
    known: str | None = None
    suite: str = "sdpa"
    peer: str = "hbm_copy"  # what it divides by: the copy bandwidth measured in the same run

    @property
    def gate(self) -> str:
        tier = f"/{self.precision}" if self.precision != "fp16" else ""
        return f"sdpa/speed/{self.impl}-hbm_frac/{self.timing}{tier}/{self.config}"


def hbm_gates(opts: RunOptions, limits: Thresholds) -> list[HbmGate]:
    """The hbm_frac gates this run asked for: those at a case of the run, in a tier it asked for."""
    if "sdpa" not in opts.suites:
        return []
    shapes = [name for name, _ in opts.shapes]
    return [HbmGate(g.impl, g.timing, shape, g.min_frac, g.precision, g.known)
            for g in limits.sdpa.hbm for shape in g.names if shape in shapes and g.precision in opts.precisions]


def _hbm(g: HbmGate, timed: Timed, skipped: list[Skip], modes: tuple[str, ...],
         noise: float) -> tuple[GateResult, ArchivedRecord | None]:
    """hbm_frac of ours against the floor; within `noise` of it (relative), inconclusive."""
    if g.timing not in modes:
        why = f"gate on hbm_frac is on {g.timing} timing, which this run did not measure (--timing {','.join(modes)})"
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=[why]), None
    subject = _best(timed, g.impl, g.config, g.timing, g.precision)
    if subject is None:
        reasons = [f"{g.impl} not timed at {g.config} ({g.timing}, {g.precision} tier)",
                   *_skip_reasons(skipped, (g.impl, "*", tier_skip(g.precision)), g.config)]
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=reasons), None
    if subject.hbm_frac is None:
        reasons = [f"{subject.impl} at {g.config} has no hbm_frac: the copy bandwidth was not measured in this run",
                   *_skip_reasons(skipped, ("hbm_copy",))]
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=reasons), subject
    frac = subject.hbm_frac
    text = (f"{g.timing} hbm_frac {frac:.2f} of the measured copy bandwidth ({subject.impl}, p50 "
            f"{subject.measurement.p50_us:.2f} us, floor {g.min_frac:.2f})")
    status = "inconclusive" if abs(frac - g.min_frac) <= noise * g.min_frac else "pass" if frac >= g.min_frac else "fail"
    untrusted = _untrusted(subject)
    status, marked = _marked("inconclusive" if untrusted else status, g.known)
    return GateResult(gate=g.gate, kind="speed", status=status, reasons=[text, *untrusted, *marked]), subject


# ---------------------------------------------------------------- causal cases against their non-causal twins


@dataclass(frozen=True)
class CausalGate:
    """One [[sdpa.causal_ratio]] entry at one causal case: ours to the peer there, at least `min_ratio` times ours
    to the peer at the twin (the same shapes without the mask), in the same run and mode."""

    impl: str
    peer: str
    timing: str
    config: str
    twin: str
    min_ratio: float
    precision: str
    known: str | None = None
    suite: str = "sdpa"

    @property
    def gate(self) -> str:
        return f"sdpa/speed/{self.impl}-vs-{self.peer}-causal-vs-noncausal/{self.timing}/{self.config}"


def causal_gates(opts: RunOptions, limits: Thresholds) -> list[CausalGate]:
    """The causal-ratio gates this run asked for: at each causal case of the run, in a tier it asked for (the
    twin must be in the run too, else the gate is not measured and says so)."""
    if "sdpa" not in opts.suites:
        return []
    shapes = [name for name, _ in opts.shapes]
    return [CausalGate(g.impl, g.peer, g.timing, shape, config.noncausal_twin(shape) or "", g.min_ratio, g.tier,
                       g.known)
            for g in limits.sdpa.causal_ratio for shape in g.names if shape in shapes and g.tier in opts.precisions]


def _causal(g: CausalGate, timed: Timed, skipped: list[Skip], opts: RunOptions,
            noise: float) -> tuple[GateResult, ArchivedRecord | None]:
    """ratio_c = peer / ours at the causal case, ratio_n the same at its twin; pass where ratio_c >= min_ratio x
    ratio_n. Each ratio holds two p50s, each of which may be off by `noise`; their quotient holds four, so the
    band inside which the gate says neither pass nor fail is twice the speed gates' (2 x noise x min_ratio)."""
    if g.timing not in opts.modes("sdpa"):
        why = f"gate vs {g.peer} is on {g.timing} timing, which this run did not measure"
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=[why]), None
    if g.twin not in {name for name, _ in opts.shapes}:
        why = (f"the non-causal twin {g.twin} of {g.config} is not in this run: add it to --shapes (the group "
               f"causal_prefill takes both)")
        return GateResult(gate=g.gate, kind="speed", status="not_measured", reasons=[why]), None
    sides = {cfg: (_best(timed, g.impl, cfg, g.timing, g.precision), timed.get((g.peer, cfg, g.timing, g.precision)))
             for cfg in (g.config, g.twin)}
    missing = []
    for cfg, (ours, peer) in sides.items():
        missing += [f"{g.impl} not timed at {cfg} ({g.timing}, {g.precision} tier)"] if ours is None else []
        missing += [f"{g.peer} not measured at {cfg} ({g.timing})"] if peer is None else []
    subject = sides[g.config][0]
    if missing:
        names = (g.impl, "*", g.peer, tier_skip(g.precision))
        return GateResult(gate=g.gate, kind="speed", status="not_measured",
                          reasons=[*missing, *_skip_reasons(skipped, names)]), subject
    (ours_c, peer_c), (ours_n, peer_n) = sides[g.config], sides[g.twin]
    assert ours_c and peer_c and ours_n and peer_n
    recs = (ours_c, peer_c, ours_n, peer_n)
    if any(r.measurement.p50_us <= 0 for r in recs):
        return GateResult(gate=g.gate, kind="speed", status="inconclusive", reasons=["a p50 is 0"]), subject
    ratio_c = peer_c.measurement.p50_us / ours_c.measurement.p50_us
    ratio_n = peer_n.measurement.p50_us / ours_n.measurement.p50_us
    floor = g.min_ratio * ratio_n
    text = (f"{g.timing} p50 vs {g.peer}: causal {ratio_c:.2f}x at {g.config} (ours {ours_c.measurement.p50_us:.2f} "
            f"us, peer {peer_c.measurement.p50_us:.2f} us) against non-causal {ratio_n:.2f}x at {g.twin} (ours "
            f"{ours_n.measurement.p50_us:.2f} us, peer {peer_n.measurement.p50_us:.2f} us), floor "
            f"{g.min_ratio:.2f} x {ratio_n:.2f}x = {floor:.2f}x")
    status = ("inconclusive" if abs(ratio_c - floor) <= 2 * noise * floor else "pass" if ratio_c >= floor else "fail")
    untrusted = _untrusted(*recs)
    status, marked = _marked("inconclusive" if untrusted else status, g.known)
    return GateResult(gate=g.gate, kind="speed", status=status, reasons=[text, *untrusted, *marked]), subject


# The reasons a known gate's result carries after its ratio (driver/limits.py reads them back).
KNOWN_NOTE = "known shortfall (thresholds.toml)"
XPASS_NOTE = "XPASS: passed although marked known; remove the mark from thresholds.toml (--strict fails the run on it)"


def tier_skip(precision: str) -> str:
    """The `impl` of the Skip that says a precision tier of ours did not run on this host."""
    return f"ours/{precision}"


def overrun_reason(rec: ArchivedRecord) -> str | None:
    """Why a device-timed p50 is not to be trusted: more than half of its samples were enqueued after the
    stream hold ended, so host launch time sits inside their event pairs (the executables count these)."""
    m = rec.measurement
    overruns, samples = getattr(m, "hold_overruns", None) or 0, getattr(m, "iters", 0)
    if samples and overruns * 2 > samples:
        return (f"{rec.impl} timing not trusted: {overruns} of {samples} samples outlasted the stream hold "
                "(host enqueue time inside the interval); re-run with fewer launches per sample or a longer hold")
    return None


def shared_gpu_reason(rec: ArchivedRecord) -> str | None:
    """Why a p50 is not this kernel's alone: NVML saw another process on a GPU the case ran on, before or after
    it was timed (the records' telemetry, driver/device.py; the driver's own workers are not counted)."""
    busy: dict[int, int] = {}
    for gpu in (*rec.telemetry_before, *rec.telemetry_after):
        if gpu.other_processes:
            busy[gpu.index] = max(busy.get(gpu.index, 0), gpu.other_processes)
    if not busy:
        return None
    where = ", ".join(f"GPU{i}: {n} other process(es)" for i, n in sorted(busy.items()))
    return (f"{SHARED_GPU_NOTE} ({where}, NVML before or after the case): neither pass nor fail; "
            "re-run with the GPUs to itself")


SHARED_GPU_NOTE = "timed while another process used the GPU"


def allreduce_inconclusive(reps: dict[tuple[str, str, int], AllreduceLine], limits: Thresholds) -> bool:
    """Whether any allreduce speed gate over these representative lines, keyed (impl, mode, bytes),
    sits inside the noise (the suite then runs one more round)."""
    for g in limits.allreduce.speedup:
        ours, peer = reps.get(("ours", g.timing, g.bytes)), reps.get((g.peer, g.timing, g.bytes))
        if ours and peer and (ours.dtype, ours.ngpus) == (g.dtype, g.ngpus) and ours.timed and peer.timed:
            v = ratio_verdict("", ours_us=ours.p50_us, peer_us=peer.p50_us, min_ratio=g.min_ratio,
                              noise=limits.noise.min_rel_noise)
            if v.status == "inconclusive":
                return True
    return False


# ---------------------------------------------------------------- accuracy against the tier's peer


@dataclass(frozen=True)
class AccuracyGate:
    """One [[sdpa.accuracy]] entry on one shape and input distribution: each variant of ours in the entry's
    tier against its peer, rel_l2 of the worst seed on each side."""

    peer: str
    precision: str
    distribution: str
    shape: str
    max_ratio: float

    @property
    def gate(self) -> str:
        return f"sdpa/accuracy/ours-vs-{self.peer}/{self.precision}/{self.distribution}/{self.shape}"


def accuracy_gates(opts: RunOptions, limits: Thresholds) -> list[AccuracyGate]:
    """The accuracy gates this run asked for: every tier it asked for that has one, on every shape and
    distribution it checks. Each must be measured (ours and the peer checked): else not measured."""
    if "sdpa" not in opts.suites:
        return []
    return [AccuracyGate(a.peer, a.precision, dist, shape, a.max_ratio)
            for a in limits.sdpa.accuracy if a.precision in opts.precisions
            for dist in opts.distributions for shape, _ in opts.shapes]


def _worst_rel_l2(recs: list[ArchivedRecord]) -> tuple[float | None, list[str]]:
    """The largest rel_l2 of some records, or None and why (an output not checked, or not finite)."""
    if not recs:
        return None, []
    unknown = [r for r in recs if r.rel_l2 is None]
    if unknown:
        r = unknown[0]
        why = "output not finite" if r.nonfinite else "; ".join(r.correctness.reasons) or "no error recorded"
        return None, [f"{r.impl} {r.config}: {why}"]
    return max(r.rel_l2 for r in recs), []


def _accuracy(g: AccuracyGate, records: list[ArchivedRecord], skipped: list[Skip]) -> GateResult:
    def of(impl_ok) -> dict[str, list[ArchivedRecord]]:
        out: dict[str, list[ArchivedRecord]] = {}
        for r in records:
            if (r.suite == "sdpa" and impl_ok(r.impl) and r.precision == g.precision and
                    r.distribution == g.distribution and r.config.split("/")[0] == g.shape):
                out.setdefault(r.impl, []).append(r)
        return out

    mine, theirs = of(lambda impl: not peers.is_peer(impl)), of(lambda impl: impl == g.peer)
    peer_rel, peer_why = _worst_rel_l2(theirs.get(g.peer, []))
    where = f"{g.distribution} inputs at {g.shape}"
    if not mine or peer_rel is None:
        names = {tier_skip(g.precision), "*"} if not mine else set()
        names |= {g.peer} if peer_rel is None else set()
        reasons = [f"ours not checked in the {g.precision} tier on {where}"] if not mine else []
        reasons += [f"{g.peer} not checked on {where}", *peer_why] if peer_rel is None else []
        reasons += _skips(skipped, "sdpa", names, g.shape)
        return GateResult(gate=g.gate, kind="correctness", status="not_measured", reasons=reasons)
    reasons, failed = [], False
    for impl, recs in sorted(mine.items()):
        rel, why = _worst_rel_l2(recs)
        if rel is None:
            failed = True
            reasons += [f"{impl}: no rel_l2 ({'; '.join(why)})"]
            continue
        ratio = rel / peer_rel if peer_rel > 0 else (0.0 if rel == 0 else float("inf"))
        ok = rel <= g.max_ratio * peer_rel
        failed |= not ok
        reasons.append(f"{impl} rel_l2 {rel:.3g} vs {g.peer} {peer_rel:.3g}: {ratio:.2f}x "
                       f"({'<=' if ok else '>'} {g.max_ratio:g}x, worst of the seeds)")
    return GateResult(gate=g.gate, kind="correctness", status="fail" if failed else "pass", reasons=reasons)


# ---------------------------------------------------------------- correctness


def _value(v: float | None) -> str:
    return "NaN/inf" if v is None else f"{v:.9g}"


def allreduce_property_failures(line: AllreduceLine) -> list[str]:
    """Which property of docs/ALLREDUCE.md a checked line fails, each with its first element: the bound,
    rank agreement, and (ours only: a peer need not sum in a fixed order) the same bits every run."""
    out = []
    if line.out_of_bound:
        f = line.out_of_bound_first
        first = (f" (first: rank {f.rank} element {f.element}: {_value(f.value)} vs float64 sum {f.reference:.9g}, "
                 f"bound {f.bound:.3g})") if f else ""
        out.append(f"bound: {line.out_of_bound} element(s) outside |out - s| <= gamma_{line.ngpus - 1} * "
                   f"sum|x_r|{first}")
    if line.rank_mismatch:
        m = line.rank_mismatch_first
        first = (f" (first: rank {m.rank} element {m.element}: {_value(m.value)} vs rank 0's "
                 f"{_value(m.rank0_value)})") if m else ""
        out.append(f"rank agreement: {line.rank_mismatch} element(s) differ from rank 0's bits{first}")
    if line.impl == "ours" and line.same_bits_every_run is False:
        out.append(f"same bits every run: {line.run_to_run_mismatch} element(s) of rank 0's output changed between "
                   f"launches on the same inputs ({line.runs_compared} launch(es) compared with the first)")
    return out


def allreduce_correctness(line: AllreduceLine, gates: Thresholds) -> Verdict:
    """One line: checked, finite, at most max_wrong wrong elements, each failed property named with its first
    element (a line from before the properties existed says only how many were wrong), and (ours) the
    kernel the GPU confirmed is the one the host selected, which is the one asked for. The same rules
    judge every impl; whether a failure blocks the run is the gate stage's business (a peer's does not)."""
    reasons = []
    if not line.checked and line.elements > 0:
        reasons.append("result was not checked")
    if line.max_abs_err is None:
        reasons.append("some output is NaN or infinite")
    if line.wrong > gates.allreduce.max_wrong:
        reasons += allreduce_property_failures(line) or [f"{line.wrong} wrong elements (max_abs_err {line.max_abs_err})"]
    if line.impl == "ours" and line.elements > 0:  # nothing is launched for 0 elements
        if line.kernel_confirmed != line.kernel_selected:
            reasons.append(f"host selected {line.kernel_selected} but the GPU ran {line.kernel_confirmed}")
        req = line.kernel_requested
        if req != "auto" and not line.kernel_selected.startswith(req):
            reasons.append(f"override {req} was not honoured: {line.kernel_selected} selected")
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)


def _scale_note(entry: float, at_scale: float) -> str:
    """Where the fp16 output's rounding floor moved a bound: the entry's own number beside it."""
    return f"; {entry:g} + the fp16 output's subnormal floor" if at_scale > entry * 1.001 else ""


def sdpa_correctness(m: SdpaErrors, gates: SdpaGates, precision: str, distribution: str) -> Verdict:
    """One output of one precision tier on one input distribution: finite, within the tier's bounds for the
    distribution (relative to the output's scale), and in the fp16 tier on `normal` within seed 003's absolute gates
    too (set for that tier's arithmetic: the fp8 tier is held to its derived bound and, in the gate stage, to cuDNN
    FP8's error on the same inputs)."""
    reasons = []
    bound = gates.bound(precision, distribution)
    where = f"{precision} tier, {distribution} inputs"
    absolute = gates.absolute(precision, distribution)
    if m.max_abs_err is None:
        reasons.append(f"output holds NaN or infinity ({m.nonfinite} elements)")
    elif absolute and m.max_abs_err > gates.max_abs_err:
        reasons.append(f"max_abs_err {m.max_abs_err:.4g} > {gates.max_abs_err}")
    if absolute and m.bad_frac > gates.max_bad_frac:
        reasons.append(f"{m.bad_frac:.2%} of elements off by > {gates.bad_err} (max {gates.max_bad_frac:.1%})")
    if m.max_abs_err is not None and (m.rel_l2 is None or m.max_abs_rel is None):
        reasons.append("the reference is zero everywhere and the output is not")
    max_rel_l2, max_abs_rel = bound.at_scale(m.ref_rms, m.ref_amax)  # with the fp16 output's rounding floor
    if m.rel_l2 is not None and m.rel_l2 > max_rel_l2:
        reasons.append(f"rel_l2 {m.rel_l2:.3g} > {max_rel_l2:.3g} ({where}{_scale_note(bound.max_rel_l2, max_rel_l2)})")
    if m.max_abs_rel is not None and m.max_abs_rel > max_abs_rel:
        reasons.append(f"max_abs_rel {m.max_abs_rel:.3g} > {max_abs_rel:.3g} "
                       f"({where}{_scale_note(bound.max_abs_rel, max_abs_rel)})")
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)


def sdpa_runner_resources(line: SdpaLine, gates: BuildGates) -> list[str]:
    """Dynamic shared memory is known only to the runner: the static gate of the kernel that ran
    (line.kernel: the Hopper kernel has its own), checked on its line."""
    limit = gates.smem_limit(line.kernel)
    if line.smem_bytes > limit:
        return [f"{line.smem_bytes} B shared memory per block > {limit} ({line.kernel or 'default'} gate)"]
    return []


# ---------------------------------------------------------------- the run's gates and exit


def _correctness(records: list[ArchivedRecord]) -> list[GateResult]:
    """Every record's correctness is a gate, but a peer's: a peer is a comparison, not our product, so its
    correctness is recorded and reported (COMPARE.md), never gated (docs/ALLREDUCE.md)."""
    out = []
    for r in records:
        if r.suite != "stress" and peers.is_peer(r.impl):
            continue
        if r.suite == "stress":
            gate = f"stress/{r.measurement.check}/{r.kernel}/{r.config}"
            kind = "speed" if r.measurement.check == "profile" else "correctness"
        else:
            mode = f"/{r.timing}" if r.timing else ""  # a config timed in two modes ran twice: two gates
            # SDPA: one record per tier and input distribution of each config
            what = f"{r.precision}/{r.distribution}/" if r.suite == "sdpa" else ""
            gate, kind = f"{r.suite}/correct/{r.impl}/{what}{r.config}{mode}", "correctness"
        out.append(GateResult(gate=gate, kind=kind, status=r.correctness.status, reasons=r.correctness.reasons))
    return out


def evaluate(records: list[ArchivedRecord], skipped: list[Skip], opts: RunOptions, limits: Thresholds,
             device_kind: str) -> tuple[list[GateResult], list[ArchivedRecord]]:
    """Every gate of the run, and the records with the speed gates that judge them attached.

    A gate not measured here is optional only where thresholds.toml's [[optional]] names it for
    this device kind; else its absence blocks the run like a failure."""
    results = _correctness(records)
    results += [_accuracy(g, records, skipped) for g in accuracy_gates(opts, limits)]
    timed = _timed(records)
    judged: dict[int, list[GateResult]] = {}
    noise = limits.noise.min_rel_noise
    speed = [_speed(g, timed, skipped, opts.modes(g.suite), noise) for g in speed_gates(opts, limits)]
    speed += [_hbm(g, timed, skipped, opts.modes("sdpa"), noise) for g in hbm_gates(opts, limits)]
    speed += [_causal(g, timed, skipped, opts, noise) for g in causal_gates(opts, limits)]
    for result, subject in speed:
        results.append(result)
        if subject is not None:
            judged.setdefault(id(subject), []).append(result)
    out = []
    for g in results:
        if g.status == "not_measured" and any(r.startswith(registry.NOT_SELECTED) for r in g.reasons):
            out.append(g.model_copy(update={"optional": True}))  # bench --peers/--variants left its side out
            continue
        why = limits.optional_reason(g.gate, device_kind) if g.status == "not_measured" else None
        out.append(g.model_copy(update={"optional": True, "reasons": [*g.reasons, f"optional here: {why}"]})
                   if why else g)
    attached = [r.model_copy(update={"performance": Verdict.combine(
        [Verdict(status=g.status, reasons=g.reasons) for g in judged[id(r)]])}) if id(r) in judged else r
        for r in records]
    return out, attached


def requested_summary(opts: RunOptions, limits: Thresholds) -> str:
    """What a run that never started leaves unmeasured, for the one error line."""
    if "stress" in opts.suites:
        return f"every stress gate ({', '.join(opts.stress_parts)})"
    ids = [g.gate for g in (*speed_gates(opts, limits), *hbm_gates(opts, limits), *causal_gates(opts, limits))]
    ids += [f"{len(acc)} SDPA accuracy gate(s) against the tiers' peers"] if (acc := accuracy_gates(opts, limits)) else []
    return ", ".join([*ids, f"every {' and '.join(opts.suites)} correctness gate"])


def recorded(run: RunArchive) -> list[GateResult]:
    """The run's gates; for a schema-1 archive (no gate list), the verdicts its records stored."""
    if run.gates:
        return run.gates
    out = _correctness(run.records)
    for r in run.records:
        if r.performance is not None:
            out.append(GateResult(gate=f"{r.suite}/speed/{r.impl}/{r.config}", kind="speed",
                                  status=r.performance.status, reasons=r.performance.reasons))
    return out


def ordered(gates: list[GateResult]) -> list[GateResult]:
    """Failed first, then not measured (required before optional), inconclusive, passed."""
    return sorted(gates, key=lambda g: (STATUS_ORDER.index(g.status), g.optional))


def exit_decision(gates: list[GateResult], folder: Path, strict: bool = False) -> DriverError | None:
    """The error the run exits with (correctness before speed), or None when every gate held.
    A gate that was not measured blocks like a failure unless it is optional on this host; a known gate that
    failed (KNOWN) never blocks; one that passed (XPASS) blocks under `strict` (--strict) only."""
    for kind, error in (("correctness", WrongResults), ("speed", PerfGateFailed)):
        blocking = [g for g in gates if g.kind == kind and (g.blocking or (strict and g.status == "xpass"))]
        if not blocking:
            continue
        failed = [g for g in blocking if g.status == "fail"]
        missing = [g for g in blocking if g.status == "not_measured"]
        xpassed = [g for g in blocking if g.status == "xpass"]
        parts = [f"{len(group)} {kind} gate(s) {what}, e.g. {group[0].gate}: {'; '.join(group[0].reasons)}"
                 for group, what in ((failed, "failed"), (missing, "not measured"),
                                     (xpassed, "XPASS (passed although marked known; --strict)")) if group]
        parts += _known_part(gates) if kind == "speed" else []
        return error("; ".join(parts), f"archived in {folder}; COMPARE.md lists every gate")
    return None


def _known_part(gates: list[GateResult]) -> list[str]:
    known = [g for g in gates if g.status == "known"]
    return [(f"{len(known)} speed gate(s) KNOWN (marked known in thresholds.toml; reported, not failing the run), "
            f"e.g. {known[0].gate}")] if known else []


def exit_line(gates: list[GateResult], strict: bool = False) -> str:
    """The line a run that held every gate ends with: how many held, and the known gates' states (KNOWN: failed as
    marked; XPASS: passed although marked, which fails the run under --strict only)."""
    held = sum(1 for g in gates if g.status in ("pass", "inconclusive") or (g.status == "not_measured" and g.optional))
    parts = [f"gates: {held} of {len(gates)} held"]
    parts += _known_part(gates)
    xpassed = [g for g in gates if g.status == "xpass"]
    if xpassed:
        effect = "--strict fails the run on them" if strict else "reported, not failing the run without --strict"
        parts.append(f"{len(xpassed)} speed gate(s) XPASS (passed although marked known: remove the mark; {effect}), "
                     f"e.g. {xpassed[0].gate}")
    return "; ".join(parts)
