"""Gate: every verdict in one place. Correctness from the verify stage's metrics, speed ratios
against the peers measured in the same run, the static build gates, and the run's exit decision.

The thresholds come from thresholds.toml (validated in driver/thresholds.py); nothing here
measures anything.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from driver.errors import DriverError, PerfGateFailed, WrongResults
from driver.records import AllreduceLine, RunArchive, SdpaLine, TargetBuild, Verdict
from driver.targets import Target
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


def _mode_not_timed(peer: str, gate_mode: str, modes: Collection[str]) -> Verdict:
    """A gate whose timing mode the run did not measure fails: never passed by omission."""
    why = f"gate vs {peer} is on {gate_mode} timing, which this run did not measure (--timing {','.join(modes)})"
    return Verdict(status="fail", reasons=[why])


def allreduce_speed(line: AllreduceLine, mode: str, peers: dict[tuple[str, str, int], AllreduceLine],
                    modes: tuple[str, ...], gates: Thresholds) -> Verdict | None:
    """Our line (timed in `mode`) against every speedup gate of its (bytes, dtype, GPU count) on that
    mode; `peers` is keyed (impl, mode, bytes). A gate on a mode the run did not time fails, on the
    line of the run's first mode. None when no gate names the line."""
    verdicts = []
    for g in gates.allreduce.speedup:
        if (g.bytes, g.dtype, g.ngpus) != (line.bytes, line.dtype, line.ngpus):
            continue
        if g.timing not in modes:
            if mode == modes[0]:
                verdicts.append(_mode_not_timed(g.peer, g.timing, modes))
            continue
        if g.timing != mode:
            continue
        peer = peers.get((g.peer, mode, line.bytes))
        if peer is None:
            verdicts.append(Verdict(status="skip", reasons=[f"peer {g.peer} not measured ({mode})"]))
            continue
        verdicts.append(ratio_verdict(f"{mode} p50 vs {g.peer}", ours_us=line.p50_us, peer_us=peer.p50_us,
                                      min_ratio=g.min_ratio, noise=gates.noise.min_rel_noise))
    return Verdict.combine(verdicts) if verdicts else None


def sdpa_speed(shape_name: str, lines: dict[tuple[str, str], SdpaLine], ours: Collection[str],
               modes: tuple[str, ...], gates: Thresholds) -> dict[tuple[str, str], Verdict]:
    """Per (impl, mode), the speedup gates that name it for this shape (`best`: the fastest of `ours`
    in the gate's mode). A gate on a mode the run did not time fails, on the run's first mode."""
    out: dict[tuple[str, str], list[Verdict]] = {}
    for g in gates.sdpa.speedup:
        if g.shape != shape_name:
            continue
        if g.timing not in modes:
            for impl in (ours if g.impl == "best" else (g.impl,)):
                out.setdefault((impl, modes[0]), []).append(_mode_not_timed(g.peer, g.timing, modes))
            continue
        mine = {impl: ln for (impl, mode), ln in lines.items() if impl in ours and mode == g.timing}
        impl = min(mine, key=lambda k: mine[k].p50_us) if g.impl == "best" and mine else g.impl
        if (impl, g.timing) not in lines or (g.peer, g.timing) not in lines:
            out.setdefault((impl, g.timing), []).append(
                Verdict(status="skip", reasons=[f"{g.peer} not measured ({g.timing})"]))
            continue
        out.setdefault((impl, g.timing), []).append(
            ratio_verdict(f"{g.timing} p50 vs {g.peer}", ours_us=lines[(impl, g.timing)].p50_us,
                          peer_us=lines[(g.peer, g.timing)].p50_us, min_ratio=g.min_ratio,
                          noise=gates.noise.min_rel_noise))
    return {k: Verdict.combine(v) for k, v in out.items()}


# ---------------------------------------------------------------- correctness


def allreduce_correctness(line: AllreduceLine, gates: Thresholds) -> Verdict:
    """One line: checked, finite, at most max_wrong wrong elements, and (ours) the kernel the GPU
    confirmed is the one the host selected, which is the one asked for."""
    reasons = []
    if not line.checked and line.elements > 0:
        reasons.append("result was not checked")
    if line.max_abs_err is None:
        reasons.append("some output is NaN or infinite")
    if line.wrong > gates.allreduce.max_wrong:
        reasons.append(f"{line.wrong} wrong elements (max_abs_err {line.max_abs_err})")
    if line.impl == "ours" and line.elements > 0:  # nothing is launched for 0 elements
        if line.kernel_confirmed != line.kernel_selected:
            reasons.append(f"host selected {line.kernel_selected} but the GPU ran {line.kernel_confirmed}")
        req = line.kernel_requested
        if req != "auto" and not line.kernel_selected.startswith(req):
            reasons.append(f"override {req} was not honoured: {line.kernel_selected} selected")
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)


def sdpa_correctness(m: SdpaErrors, gates: SdpaGates) -> Verdict:
    reasons = []
    if m.max_abs_err is None:
        reasons.append(f"output holds NaN or infinity ({m.nonfinite} elements)")
    elif m.max_abs_err > gates.max_abs_err:
        reasons.append(f"max_abs_err {m.max_abs_err:.4g} > {gates.max_abs_err}")
    if m.bad_frac > gates.max_bad_frac:
        reasons.append(f"{m.bad_frac:.2%} of elements off by > {gates.bad_err} (max {gates.max_bad_frac:.1%})")
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)


def sdpa_runner_resources(line: SdpaLine, gates: BuildGates) -> list[str]:
    """Dynamic shared memory is known only to the runner: the static gate of the kernel that ran
    (line.kernel: wgmma_sm90 has its own), checked on its line."""
    limit = gates.smem_limit(line.kernel)
    if line.smem_bytes > limit:
        return [f"{line.smem_bytes} B shared memory per block > {limit} ({line.kernel or 'default'} gate)"]
    return []


# ---------------------------------------------------------------- static (build)


def static_violations(t: Target, rec: TargetBuild, gates: BuildGates) -> list[str]:
    """Resource gates (ptxas) and instruction expectations (PTX) for one built target."""
    bad: list[str] = []
    where = f"{rec.target} {rec.arch}"
    for k in rec.ptxas:
        g = gates.for_entry(k.name)  # the kernel family's own gates (thresholds.toml [[build.kernels]]) or the defaults
        if k.registers > g.max_registers_per_thread:
            bad.append(f"{where} {k.name}: {k.registers} registers > {g.max_registers_per_thread}")
        if k.smem_bytes > g.max_smem_bytes_per_block:
            bad.append(f"{where} {k.name}: {k.smem_bytes} B static smem > {g.max_smem_bytes_per_block}")
        spill = k.spill_store_bytes + k.spill_load_bytes
        if spill > g.max_spill_bytes:
            bad.append(f"{where} {k.name}: {k.spill_store_bytes} B spill stores, {k.spill_load_bytes} B spill loads")
    if t.lang == "cuda" and not rec.ptxas:
        bad.append(f"{where}: no ptxas report was parsed")
    for exp in t.ptx:
        hits = [k for k in rec.ptx_kernels if exp.pattern in k.name]
        if not hits:
            bad.append(f"{where}: no PTX kernel matches {exp.pattern!r}")
            continue
        for k in hits:
            if exp.cp_async is not None and k.has_cp_async != exp.cp_async:
                bad.append(f"{where} {k.name}: cp.async {'missing' if exp.cp_async else 'present'} in PTX")
            if exp.mma is not None and k.has_mma != exp.mma:
                bad.append(f"{where} {k.name}: mma {'missing' if exp.mma else 'present'} in PTX")
    return bad + sass_violations(t, rec)


def sass_violations(t: Target, rec: TargetBuild) -> list[str]:
    """The target's SASS expectations for this arch, where the SASS was read (cuobjdump present)."""
    if rec.sass is None:
        return []
    bad = []
    for exp in (e for e in t.sass if e.arch == rec.arch):
        bad += [f"{rec.target} {rec.arch}: {ins} missing in SASS" for ins in exp.require if not rec.sass.get(ins)]
        bad += [f"{rec.target} {rec.arch}: {ins} present in SASS" for ins in exp.forbid if rec.sass.get(ins)]
    return bad


# ---------------------------------------------------------------- the run's exit


def exit_decision(run: RunArchive, folder: Path) -> DriverError | None:
    """The error the run exits with (wrong results before slow ones), or None when every gate held."""
    wrong = [r for r in run.records if not r.passed]
    if wrong:
        return WrongResults(f"{len(wrong)} record(s) failed correctness, e.g. {wrong[0].config} {wrong[0].impl}: "
                            + "; ".join(wrong[0].correctness.reasons), f"archived in {folder}")
    slow = [r for r in run.records if r.performance and r.performance.status == "fail"]
    if slow:
        return PerfGateFailed(f"{len(slow)} gate(s) failed, e.g. {slow[0].config} {slow[0].impl}: "
                              + "; ".join(slow[0].performance.reasons), f"archived in {folder}")
    return None
