"""`bench --plan`: what a bench run with these options would do, without a GPU and without building.

The cases (per suite: sizes or shapes, dtypes or precision tiers, distributions, seeds, timing modes), our
variants, the peers (and why one cannot run on this host), and every gate of the thresholds file with whether
this run measures it: `measured`; `not measured` with the reason where the run asks for it but this host cannot
produce it (a peer not installed, a GPU count the host lacks: "needs N GPUs", a timing mode not timed), marked
optional where `[[optional]]` names it for the host's device kind (else it fails the run); `not in this run`
with the option that leaves it out where no case of the run can produce it. A gate is never dropped.

Our variants, the peers and the gates are read where they are declared (the suites' constants, `peers.of_suite`,
`gates.speed_gates`), each through a small function below (`variants`, `peers_of`, `speed_gate_universe`).
"""

from __future__ import annotations

from dataclasses import dataclass

from driver import config, device, gates, peers, targets
from driver.errors import ConfigError, NoGPU
from driver.options import RunOptions
from driver.records import SDPA_PEER_PRECISION, DeviceInfo
from driver.suites import allreduce, sdpa
from driver.thresholds import Thresholds

PLAN_SUITES = ("allreduce", "sdpa")  # the suites a bench runs, in its order


def variants(suite: str) -> dict[str, str]:
    """Our implementations of a suite: impl -> the target that builds its executable."""
    return {"ours": allreduce.EXE} if suite == "allreduce" else dict(sdpa.VARIANTS)


def peers_of(suite: str) -> tuple[str, ...]:
    """The peers a suite times ours against (allreduce: upstream, a built executable, then the Python ones)."""
    return ("upstream", *peers.of_suite("allreduce")) if suite == "allreduce" else tuple(sdpa.PEERS)


AnyGate = gates.SpeedGate | gates.HbmGate | gates.CausalGate


def _all_gates(opts: RunOptions, limits: Thresholds) -> list[AnyGate]:
    """The speed gates of a run: the peers' ratios, the hbm_frac floors and the causal-ratio gates."""
    return [*gates.speed_gates(opts, limits), *gates.hbm_gates(opts, limits), *gates.causal_gates(opts, limits)]


def speed_gate_universe(limits: Thresholds) -> list[AnyGate]:
    """Every speed gate of the thresholds file, resolved as a run asking for all of them would: the run's own
    `gates.speed_gates` (and hbm and causal-ratio gates) applied to options that leave nothing out."""
    shapes = {n for table in (limits.sdpa.speedup, limits.sdpa.hbm, limits.sdpa.causal_ratio)
              for g in table for n in g.names}
    everything = RunOptions(
        suites=PLAN_SUITES,
        sizes_bytes=tuple(sorted({g.bytes for g in limits.allreduce.speedup})) or (1,),
        dtypes=tuple(sorted({g.dtype for g in limits.allreduce.speedup})) or ("float32",),
        ngpus=None,
        shapes=tuple(config.parse_shape(name) for name in sorted(shapes)),  # thresholds.load checked every name
        precisions=tuple(config.PRECISIONS),
    )
    return _all_gates(everything, limits)


@dataclass(frozen=True)
class Host:
    """What the plan knows of the GPUs here: their count, GPU 0's arch, the device kind (or why none)."""

    gpus: int
    arch: str | None
    kind: str
    no_gpu: str | None = None

    @classmethod
    def probe(cls) -> Host:
        try:
            dev = device.probe()
            return cls(len(dev.gpus), device.arch_of(0), dev.kind)
        except NoGPU as exc:
            return cls(0, None, DeviceInfo(driver_version="", gpus=[]).kind, exc.message)


@dataclass(frozen=True)
class PlannedGate:
    gate: str
    state: str  # "measured", "not measured", "not in this run"
    why: str = ""

    def line(self) -> str:
        return f"  {self.state:<16} {self.gate}" + (f"  ({self.why})" if self.why else "")


def _counts(opts: RunOptions, host: Host) -> tuple[int, ...]:
    """The allreduce GPU counts the run takes: --ngpus, else every supported count the host has."""
    return opts.ngpus or tuple(n for n in config.SUPPORTED_NGPUS if n <= host.gpus)


def _peer_missing(name: str, host: Host) -> str | None:
    if name not in peers.PEERS or peers.PEERS[name].module is None:
        return None  # one of ours, or upstream (an executable we build)
    return peers.missing(name, host.arch)


def _sdpa_here(tier: str, host: Host, opts: RunOptions) -> str | None:
    """Why this host cannot time the SDPA suite in `tier`, or None."""
    if host.gpus == 0:
        return "needs 1 GPU (this host has 0)"
    return sdpa.fp8_not_offered(host.arch, opts.arch or host.arch) if tier == "fp8" else None


def _left_out(g: AnyGate, opts: RunOptions) -> str | None:
    """The option that leaves gate `g` out of this run (no case of it produces the gate), or None."""
    if g.suite not in opts.suites:
        return f"--suite {','.join(opts.suites)} leaves out {g.suite}"
    if g.suite == "allreduce":
        dtype, ngpus, nbytes = g.config.split("/")
        if int(nbytes.removesuffix("B")) not in opts.sizes_bytes:
            return f"size {config.format_size(int(nbytes.removesuffix('B')))} is not in --sizes"
        if dtype not in opts.dtypes:
            return f"{dtype} is not in --dtype"
        n = int(ngpus.removesuffix("gpu"))
        return f"{n} GPUs is not in --ngpus" if opts.ngpus is not None and n not in opts.ngpus else None
    if g.config not in {name for name, _ in opts.shapes}:
        same = [name for name, case in opts.shapes if _case(g.config) == case]
        return f"shape {g.config} is not in --shapes" + (
            f" (the run's {same[0]} is this case, but a gate matches a case by its name: write "
            f"shape = \"{same[0]}\")" if same else "")
    return f"the {g.precision} tier is not in --precision" if g.precision not in opts.precisions else None


def _case(shape: str) -> config.AttnCase | None:
    try:
        return config.parse_shape(shape)[1]
    except ConfigError:
        return None


def _not_here(g: AnyGate, opts: RunOptions, host: Host) -> list[str]:
    """Why this host leaves a gate of the run unmeasured (empty: it is measured)."""
    why = []
    if g.timing not in opts.modes(g.suite):
        why.append(f"{g.timing} is not in --timing {','.join(opts.modes(g.suite))}")
    if g.suite == "allreduce":
        n = int(g.config.split("/")[1].removesuffix("gpu"))
        if n > host.gpus or n not in _counts(opts, host):
            why.append(f"needs {n} GPUs (this host has {host.gpus})")
    else:
        why += [w for w in (_sdpa_here(g.precision or "fp16", host, opts),) if w]
    if isinstance(g, gates.CausalGate) and g.twin not in {name for name, _ in opts.shapes}:
        why.append(f"its non-causal twin {g.twin} is not in --shapes (the group causal_prefill takes both)")
    why += [f"peer {g.peer}: {w}" for w in (_peer_missing(g.peer, host),) if w]
    return why


def _judged(gate: str, why: list[str], limits: Thresholds, host: Host) -> PlannedGate:
    if not why:
        return PlannedGate(gate, "measured")
    optional = limits.optional_reason(gate, host.kind)
    tail = f"; optional on {host.kind}: {optional}" if optional else "; fails the run"
    return PlannedGate(gate, "not measured", "; ".join(why) + tail)


def planned_gates(opts: RunOptions, limits: Thresholds, host: Host) -> list[PlannedGate]:
    """Every speed and accuracy gate of the thresholds file with its state for this run on this host."""
    out: list[PlannedGate] = []
    asked = {g.gate for g in _all_gates(opts, limits)}
    for g in speed_gate_universe(limits):
        left_out = _left_out(g, opts) if g.gate not in asked else None
        out.append(PlannedGate(g.gate, "not in this run", left_out or "no case of this run produces it")
                   if g.gate not in asked else _judged(g.gate, _not_here(g, opts, host), limits, host))
    asked_acc = gates.accuracy_gates(opts, limits)
    for a in limits.sdpa.accuracy:
        mine = [g for g in asked_acc if (g.peer, g.precision) == (a.peer, a.precision)]
        if not mine:
            why = ("--suite leaves out sdpa" if "sdpa" not in opts.suites
                   else f"the {a.precision} tier is not in --precision")
            out.append(PlannedGate(f"sdpa/accuracy/ours-vs-{a.peer}/{a.precision}/*/*", "not in this run", why))
        for g in mine:
            why = [w for w in (_sdpa_here(g.precision, host, opts),) if w]
            why += [f"peer {g.peer}: {w}" for w in (_peer_missing(g.peer, host),) if w]
            out.append(_judged(g.gate, why, limits, host))
    return out


def _peer_line(name: str, host: Host) -> str:
    tier = f" {SDPA_PEER_PRECISION[name]}" if name in SDPA_PEER_PRECISION else ""
    why = _peer_missing(name, host)
    return f"{name}{tier}" + (f" [cannot run here: {why}]" if why else "")


def render(opts: RunOptions, limits: Thresholds, host: Host, thresholds_name: str) -> str:
    """The plan as text: the host, the cases per suite, ours and the peers, the build's static gates, every
    gate with its state."""
    lines = ["bench plan: nothing is built or launched",
             f"host: {host.kind}" + (f" ({host.no_gpu}: a run here builds, then stops with exit 5)" if host.no_gpu
                                     else f", {host.gpus} GPU(s), GPU 0 {host.arch}"),
             f"rounds: at most {opts.rounds}; iters {opts.iters}, warmup {opts.warmup}, hot batch {opts.batch}"]
    for suite in (s for s in PLAN_SUITES if s in opts.suites):
        modes = ", ".join(opts.modes(suite))
        if suite == "allreduce":
            counts = _counts(opts, host)
            lines += [(f"suite allreduce: sizes {', '.join(config.format_size(s) for s in opts.sizes_bytes)}; dtypes "
                      f"{', '.join(opts.dtypes)}; GPU counts "
                      f"{', '.join(map(str, counts)) or f'none (needs 2 GPUs, this host has {host.gpus})'}; "
                      f"timing {modes}; kernel {opts.kernel}")]
        else:
            shapes = ", ".join(f"{n} ({case.name})" for n, case in opts.shapes)
            lines += [(f"suite sdpa: shapes {shapes}; tiers {', '.join(opts.precisions)}; distributions "
                      f"{', '.join(opts.distributions)}; seeds {', '.join(map(str, opts.seeds))} (each checked); "
                      f"timed: seed {opts.seeds[0]}, {sdpa.TIMED_DISTRIBUTION} inputs, timing {modes}")]
        ours = ", ".join(f"{impl} ({exe})" for impl, exe in variants(suite).items())
        lines += [f"  ours: {ours}", f"  peers: {', '.join(_peer_line(p, host) for p in peers_of(suite))}"]
    built = targets.select(",".join(s for s in PLAN_SUITES if s in opts.suites))
    lines += [f"static gates (the build's: ptxas limits, PTX and SASS expectations of {thresholds_name} [build] and "
              f"driver/targets.py): " + ("not checked (--no-build: the existing build's were checked when it was "
                                         "built)" if not opts.build else
                                         f"checked when {', '.join(t.name for t in built)} build")]
    correctness = " and ".join(f"every {s} record of ours" for s in PLAN_SUITES if s in opts.suites)
    lines += [f"correctness gates: {correctness} (a peer's correctness is recorded, never gated)"]
    planned = planned_gates(opts, limits, host)
    counts = {s: sum(p.state == s for p in planned) for s in ("measured", "not measured", "not in this run")}
    lines += [f"gates of {thresholds_name}: {len(planned)}; " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    lines += [p.line() for p in planned]
    return "\n".join(lines)
