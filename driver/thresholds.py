"""Gates: the one versioned thresholds file, validated before anything runs."""

from __future__ import annotations

import fnmatch
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, ValidationError, field_validator, model_validator

from driver import config, paths, registry
from driver.errors import ConfigError
from driver.records import SDPA_PEER_PRECISION, Precision, Record, TimingMode


class SerializedOk(Record):
    """A kernel whose wgmma ptxas may serialize: a diagnostic whose output is not a result (an ablation), never
    what a gate times or checks. `reason` says so; an entry without one does not load."""

    pattern: str = Field(min_length=1)  # a substring of the PTX entry name
    reason: str = Field(min_length=1)


class KernelGates(Record):
    """Resource gates for one kernel family, or for one build target's kernels, in place of [build]'s defaults.

    A family's entry: `pattern` picks its PTX entries (ptxas report) in every target; `kernel` is the name its
    runner prints in the JSON line, whose shared memory per block (dynamic + static: only the runner knows) is
    gated too. A target's entry: `target` names one build target of driver/targets.py (load() refuses a name that
    is not one) and its limits hold for that target's PTX entries (those holding `pattern`, where it is given),
    ahead of any family's; it has no `kernel` (a runner's line names its kernel, not its target).
    """

    kernel: str | None = Field(default=None, min_length=1)
    pattern: str | None = Field(default=None, min_length=1)
    target: str | None = Field(default=None, min_length=1)
    max_registers_per_thread: int = Field(gt=0)
    max_smem_bytes_per_block: int = Field(gt=0)
    max_spill_bytes: int = Field(ge=0)
    wgmma_serialized_ok: list[SerializedOk] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> KernelGates:
        if self.target is None and (self.kernel is None or self.pattern is None):
            raise ValueError("an entry names a kernel family (`kernel` and `pattern`) or a build target (`target`, "
                             "and `pattern` to pick some of its kernels)")
        if self.target is not None and self.kernel is not None:
            raise ValueError(f"target {self.target!r} with kernel {self.kernel!r}: a runner's shared memory is gated "
                             "per kernel family, not per target (a family's entry has `kernel`; drop it here)")
        return self

    def serialized_ok(self, name: str) -> SerializedOk | None:
        return next((ok for ok in self.wgmma_serialized_ok if ok.pattern in name), None)


class BuildGates(Record):
    max_registers_per_thread: int = Field(gt=0)
    max_smem_bytes_per_block: int = Field(gt=0)
    max_spill_bytes: int = Field(ge=0)
    kernels: list[KernelGates] = Field(default_factory=list)

    def serialized_ok(self, name: str) -> SerializedOk | None:
        return None  # the defaults allow no serialized wgmma

    def for_entry(self, name: str, target: str | None = None) -> KernelGates | BuildGates:
        """The gates for one PTX entry of a build target: the target's own entry (the first whose pattern, if any,
        the name holds), else its family's, else the defaults."""
        own = (k for k in self.kernels if k.target is not None and k.target == target and (k.pattern or "") in name)
        family = (k for k in self.kernels if k.target is None and k.pattern and k.pattern in name)
        return next(own, None) or next(family, self)

    def smem_limit(self, kernel: str | None) -> int:
        """Shared memory per block allowed for a runner's `kernel` (the defaults for any other)."""
        return next((k.max_smem_bytes_per_block for k in self.kernels if k.target is None and k.kernel == kernel),
                    self.max_smem_bytes_per_block)


# The names a gate may give, derived from driver/registry.py when a thresholds file is read.
AllreducePeer = Annotated[str, registry.Names(lambda: registry.peer_names("allreduce"))]
SdpaImpl = Annotated[str, registry.Names(lambda: (*registry.variant_names("sdpa"), "best"))]
SdpaOther = Annotated[str, registry.Names(lambda: registry.impl_names("sdpa"))]  # a peer, or another variant
SdpaPeer = Annotated[str, registry.Names(lambda: registry.peer_names("sdpa"))]


class AllreduceSpeedup(Record):
    peer: AllreducePeer
    timing: TimingMode  # the mode both sides are timed in; a run that did not time it fails the gate
    bytes: int = Field(ge=0)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    ngpus: int = 2
    min_ratio: PositiveFloat
    known: str | None = None  # an expected shortfall: why, since when, the archived run that measured it


class AllreduceGates(Record):
    max_wrong: int = Field(ge=0)
    speedup: list[AllreduceSpeedup] = Field(default_factory=list)


class _SdpaShapes(Record):
    """A gate on one case (`shape`) or the same gate on each of several (`shapes`): one gate per case either way."""

    shape: str | None = None
    shapes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> _SdpaShapes:
        if (self.shape is None) == (not self.shapes):
            raise ValueError("give `shape` (one case) or `shapes` (a list of cases), not both, not neither")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """The cases the entry gates, each a gate of its own."""
        return (self.shape,) if self.shape is not None else tuple(self.shapes)


class SdpaSpeedup(_SdpaShapes):
    impl: SdpaImpl
    peer: SdpaOther
    timing: TimingMode  # the mode both sides are timed in; a run that did not time it fails the gate
    min_ratio: PositiveFloat
    # The tier ours is timed in: a peer's gate is in the peer's tier (SDPA_PEER_PRECISION, and may only say
    # so); ours against ours defaults to fp16. A run that does not ask for the tier does not ask for the gate.
    precision: Precision | None = None
    known: str | None = None  # an expected shortfall: why, since when, the archived run that measured it

    @property
    def tier(self) -> str:
        return self.precision or SDPA_PEER_PRECISION.get(self.peer, "fp16")


class SdpaHbm(_SdpaShapes):
    """Ours (a variant, or `best`: the fastest timed) at a memory-bound case reaches at least `min_frac` of the
    device's copy bandwidth measured in the same run (records' hbm_frac), in one timing mode and tier."""

    impl: SdpaImpl
    timing: TimingMode
    min_frac: PositiveFloat
    precision: Precision = "fp16"
    known: str | None = None


class SdpaCausalRatio(_SdpaShapes):
    """At a causal case (each of `shapes`), ours to the peer (peer p50 / our p50) is at least `min_ratio` times the
    same ratio at the case's non-causal twin (config.noncausal_twin: the same shapes without the mask), both timed
    in the same run and mode: skipping the masked work must gain ours at least as much as it gains the peer."""

    impl: SdpaImpl
    peer: SdpaPeer
    timing: TimingMode
    min_ratio: PositiveFloat
    known: str | None = None

    @property
    def tier(self) -> str:
        return SDPA_PEER_PRECISION.get(self.peer, "fp16")


# fp16's subnormals (magnitudes below 2^-14) have the fixed spacing 2^-24: a rounding there errs by at most half of it,
# with rms spacing / sqrt(12) for values spread over the interval (SdpaBound.at_scale).
FP16_SUBNORMAL_HALF_SPACING = 2.0**-25
FP16_SUBNORMAL_RMS = 2.0**-24 / math.sqrt(12.0)


class SdpaBound(Record):
    """The error a precision tier may have on some input distributions, relative to the output's scale and
    derived from the tier's arithmetic (thresholds.toml says how, beside each entry). Holds without a peer."""

    precision: Precision
    distributions: list[str] = Field(min_length=1)
    # The rms of the scores Q.K^T/sqrt(D) of these inputs, which the fp8 tier's bound grows with (a relative
    # error d in Q moves a score s by d*s); tests/test_sdpa_bounds.py measures it from make_inputs.
    logit_std: PositiveFloat | None = None
    max_rel_l2: PositiveFloat  # ||out - ref||_2 / ||ref||_2
    max_abs_rel: PositiveFloat  # max|out - ref| / max|ref|

    def at_scale(self, ref_rms: float | None, ref_amax: float | None) -> tuple[float, float]:
        """(max_rel_l2, max_abs_rel) for an output of this rms and largest magnitude: the entry's bounds with the fp16
        output's absolute rounding floor added (thresholds.toml, above [[sdpa.bounds]]). Where an output element
        is below fp16's smallest normal (2^-14) it is stored with the absolute spacing 2^-24, so its rounding error
        has rms 2^-24 / sqrt(12) and at most 2^-25, whatever its value: relative to the output's rms that is
        E_sub = FP16_SUBNORMAL_RMS / ref_rms, added in quadrature to the entry's E (rel_l2 = 2 E:
        2 sqrt(E^2 + E_sub^2)), and 2^-25 / max|ref| added to max_abs_rel. Outputs of normal scale (rms above
        ~1e-5) are unchanged by more than a percent."""
        rel, worst = self.max_rel_l2, self.max_abs_rel
        if ref_rms:
            rel = 2.0 * math.hypot(rel / 2.0, FP16_SUBNORMAL_RMS / ref_rms)
        if ref_amax:
            worst += FP16_SUBNORMAL_HALF_SPACING / ref_amax
        return rel, worst


class SdpaAccuracy(Record):
    """Ours against the strongest peer of a tier, on the same inputs and reference in the same run: for every
    checked shape and distribution, each variant's rel_l2 (worst of the seeds) <= max_ratio x the peer's."""

    precision: Precision
    peer: SdpaPeer
    max_ratio: PositiveFloat


# The tier seed 003's absolute gates (max_abs_err, bad_err, max_bad_frac) were set for: its fp16 arithmetic. The
# fp8 tier rounds Q and P to E4M3 and is held to its own derived bounds ([[sdpa.bounds]]) and to cuDNN FP8's error
# on the same inputs ([[sdpa.accuracy]]), never to the fp16 tier's absolute numbers.
SEED_TIER = "fp16"


class SdpaGates(Record):
    # Seed 003's absolute gates, set for N(0, 1) inputs and the fp16 tier: applied on the `normal` distribution of
    # SEED_TIER only (an absolute error means something only for the output scale and arithmetic it was set at).
    max_abs_err: PositiveFloat
    bad_err: PositiveFloat
    max_bad_frac: float = Field(ge=0, le=1)
    bounds: list[SdpaBound] = Field(default_factory=list)
    accuracy: list[SdpaAccuracy] = Field(default_factory=list)
    speedup: list[SdpaSpeedup] = Field(default_factory=list)
    hbm: list[SdpaHbm] = Field(default_factory=list)
    causal_ratio: list[SdpaCausalRatio] = Field(default_factory=list)

    def bound(self, precision: str, distribution: str) -> SdpaBound:
        """The bound of a tier on a distribution (load() makes sure there is exactly one)."""
        return next(b for b in self.bounds if b.precision == precision and distribution in b.distributions)

    def absolute(self, precision: str, distribution: str) -> bool:
        """Whether seed 003's absolute gates bind an output: the seeds' tier on the seeds' inputs."""
        return precision == SEED_TIER and distribution == "normal"

    def bad_err_for(self, precision: str, distribution: str, ref_amax: float) -> float:
        """The error above which an element counts as bad: bad_err where the seed's absolute gates bind, elsewhere
        the tier's bound on the worst element at this output's scale, with the fp16 output's subnormal floor
        (SdpaBound.at_scale: the same worst-element bound the max_abs_rel gate applies; an absolute bad_err means
        nothing at another scale or in another tier's arithmetic)."""
        if self.absolute(precision, distribution):
            return self.bad_err
        return self.bound(precision, distribution).at_scale(None, ref_amax)[1] * ref_amax


class NoiseModel(Record):
    min_rel_noise: float = Field(ge=0, lt=1)
    target_spread: float = Field(gt=0, lt=1)


# The suites a gate id starts with, and the kinds of check that follow (driver/gates.py makes the ids).
GATE_SUITES = ("allreduce", "sdpa", "stress")
GATE_CHECKS = ("speed", "correct", "accuracy", "soak", "watchdog", "sanitizer", "profile")
_HOST = re.compile(r"^[\w*?\[\]-]+$")


class OptionalGate(Record):
    """Gates that may go unmeasured on some hosts: a gate whose id matches `gates` (shell wildcards)
    and that was not measured on a host whose device kind matches one of `hosts` is shown as
    "not measured (optional)" instead of failing the run. A failure is a failure everywhere."""

    gates: str
    hosts: list[str] = Field(min_length=1)  # device kinds as in run ids: "1xH100", "2xH200", "*" for any host
    reason: str = Field(min_length=1)  # why the absence is acceptable there, shown beside the gate

    @field_validator("gates")
    @classmethod
    def _known_gate(cls, pattern: str) -> str:
        parts = pattern.split("/")
        if len(parts) < 2 or not any(fnmatch.fnmatchcase(s, parts[0]) for s in GATE_SUITES) or \
                not any(fnmatch.fnmatchcase(c, parts[1]) for c in GATE_CHECKS):
            raise ValueError(f"{pattern!r} names no gate: ids are <{'|'.join(GATE_SUITES)}>/"
                             f"<{'|'.join(GATE_CHECKS)}>/..., as COMPARE.md's gate table shows them")
        return pattern

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for h in hosts:
            if not _HOST.match(h):
                raise ValueError(f"{h!r} is not a device kind pattern such as 2xH200, 1xH100 or *")
        return hosts

    def covers(self, gate: str, device_kind: str) -> bool:
        return fnmatch.fnmatchcase(gate, self.gates) and any(fnmatch.fnmatchcase(device_kind, h) for h in self.hosts)


# The thresholds.toml version this driver reads (its `version`; the file's header says what each bump changed):
# bump both together. A file of another version is refused, not read as if its gates meant what they mean now.
VERSION = 5


class Thresholds(Record):
    version: int
    build: BuildGates
    allreduce: AllreduceGates
    sdpa: SdpaGates
    noise: NoiseModel
    optional: list[OptionalGate] = Field(default_factory=list)

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version != VERSION:
            raise ValueError(f"version {version} is not the one this driver reads ({VERSION})")
        return version

    def optional_reason(self, gate: str, device_kind: str) -> str | None:
        """Why `gate` may go unmeasured on this host, or None: then its absence fails the run."""
        return next((o.reason for o in self.optional if o.covers(gate, device_kind)), None)


def _entry(table: str, i: int, gate: Record | dict) -> str:
    """A gate as thresholds.toml writes it: `[[sdpa.speedup]] #3 (impl = "best", ..., shape = "missoin", ...)`
    (its `known` mark left out: a sentence, not what names the gate)."""
    data = gate if isinstance(gate, dict) else gate.model_dump()
    fields = ", ".join(f"{k} = {json.dumps(v)}" for k, v in data.items()
                       if k != "known" and not isinstance(v, dict) and not (isinstance(v, list) and
                                                                           any(isinstance(x, dict) for x in v)))
    return f"[[{table}]] #{i} ({fields})"


# Where thresholds.toml may say `known`: the speed gates. Every other table is a correctness, accuracy or static gate
# (a wrong result or a broken build is never an expected failure), or names no gate at all.
KNOWN_TABLES = ("allreduce.speedup", "sdpa.speedup", "sdpa.hbm", "sdpa.causal_ratio")
_GATE_TABLES = {"build": "static gates", "build.kernels": "static gates", "allreduce": "correctness gates",
                "sdpa": "correctness gates", "sdpa.bounds": "accuracy bounds", "sdpa.accuracy": "accuracy gates"}


_KNOWN_WORDS = ", ".join(f"[[{t}]]" for t in KNOWN_TABLES)


def _tables(data: object, where: tuple[str, ...] = ()):
    """Every table of the file: (its dotted name, its number in an array of tables or None, its keys)."""
    if isinstance(data, dict):
        yield ".".join(where), None, data
        for key, value in data.items():
            if isinstance(value, list):
                for i, item in enumerate(value, 1):
                    if isinstance(item, dict):
                        yield from ((t, i if t == ".".join((*where, key)) else n, d)
                                    for t, n, d in _tables(item, (*where, key)))
            else:
                yield from _tables(value, (*where, key))


def _known_marks(data: object) -> list[str]:
    """A `known` mark anywhere but on a speed gate, and an empty one on a speed gate, each naming its gate."""
    bad = []
    for table, i, keys in _tables(data):
        if "known" not in keys:
            continue
        name = (_entry(table, i, keys) if i is not None else f"[{table}]") if table else "the top level"
        if table in KNOWN_TABLES:
            if isinstance(keys["known"], str) and not keys["known"].strip():
                bad.append(f"{name}: known is empty (say why the gate is known to fail, since when, and the archived "
                           "run that measured it; or remove the mark)")
        elif kind := _GATE_TABLES.get(table):
            bad.append(f"{name}: known on {kind}, which cannot be marked known (only the speed gates of "
                       f"{_KNOWN_WORDS} can)")
        else:
            bad.append(f"{name}: known names no gate (only the speed gates of {_KNOWN_WORDS} can be marked known)")
    return bad


def _sdpa_tiers(t: Thresholds) -> list[str]:
    """Bounds that do not cover every (tier, distribution) exactly once, name unknown distributions, or peers'
    gates in another tier than the peer's."""
    from driver.reference.sdpa import DISTRIBUTIONS

    bad = []
    for i, b in enumerate(t.sdpa.bounds, 1):
        unknown = [d for d in b.distributions if d not in DISTRIBUTIONS]
        if unknown:
            bad.append(f"{_entry('sdpa.bounds', i, b)}: unknown distribution(s) {', '.join(unknown)} "
                       f"(known: {', '.join(DISTRIBUTIONS)})")
    for tier in config.PRECISIONS:
        for dist in DISTRIBUTIONS:
            n = sum(1 for b in t.sdpa.bounds if b.precision == tier and dist in b.distributions)
            if n != 1:
                bad.append(f"[[sdpa.bounds]]: {n} entries for precision {tier!r} on distribution {dist!r}, "
                           "not exactly one")
    for i, a in enumerate(t.sdpa.accuracy, 1):
        if SDPA_PEER_PRECISION[a.peer] != a.precision:
            bad.append(f"{_entry('sdpa.accuracy', i, a)}: {a.peer} computes in the {SDPA_PEER_PRECISION[a.peer]} tier")
    for i, g in enumerate(t.sdpa.speedup, 1):
        if g.precision and g.peer in SDPA_PEER_PRECISION and g.precision != SDPA_PEER_PRECISION[g.peer]:
            bad.append(f"{_entry('sdpa.speedup', i, g)}: {g.peer} is timed in the {SDPA_PEER_PRECISION[g.peer]} tier")
    return bad


def _unmeasurable(t: Thresholds) -> list[str]:
    """Speed gates whose config no run can produce. gates.speed_gates keeps a gate only when the run asked
    for its config, so such a gate would never be judged, nor listed as not measured: it is silently void."""
    bad = []
    for i, a in enumerate(t.allreduce.speedup, 1):
        why = config.size_problem(a.bytes, a.dtype)
        if a.ngpus not in config.SUPPORTED_NGPUS:
            why = f"no run uses {a.ngpus} GPUs (the allreduce kernels are built for " \
                  f"{', '.join(map(str, config.SUPPORTED_NGPUS))})"
        if why:
            bad.append(f"{_entry('allreduce.speedup', i, a)}: {why}")
    for table, entries in (("sdpa.speedup", t.sdpa.speedup), ("sdpa.hbm", t.sdpa.hbm),
                           ("sdpa.causal_ratio", t.sdpa.causal_ratio)):
        for i, g in enumerate(entries, 1):
            for shape in g.names:
                why = _case_problem(table, shape)
                if why:
                    bad.append(f"{_entry(table, i, g)}: {why}")
    return bad


def _case_problem(table: str, shape: str) -> str | None:
    """Why no run can measure a gate of `table` at the case `shape` (None: one can)."""
    try:
        name, case = config.parse_shape(shape)
    except ConfigError as exc:
        return exc.message + (f" ({exc.hint})" if exc.hint else "")
    if name != shape:
        return f"runs name this shape {name!r}, never {shape!r}"
    if table == "sdpa.hbm" and not case.memory_bound:
        return (f"{shape} is not memory-bound ({case.flops_per_byte():.0f} flops per byte, at least "
                f"{config.MEMORY_BOUND_FLOPS_PER_BYTE:.0f}): its records carry no hbm_frac")
    if table == "sdpa.causal_ratio" and config.noncausal_twin(shape) is None:
        return f"{shape} is not a causal case: it has no non-causal twin to compare with"
    return None


def _field_error(e) -> str:
    """One pydantic error as `sdpa.speedup.0.min_ratio: Input should be a valid number (got true)`: a value of the
    wrong type (float_type, int_type, ...) is shown as the file has it."""
    text = f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
    if e["type"].endswith("_type") and isinstance(e.get("input"), (bool, int, float, str)):
        text += f" (got {json.dumps(e['input'])[:40]})"  # as TOML writes it: true, 1.5, "x"
    return text


def load(path: Path | None = None) -> Thresholds:
    """thresholds.toml, validated strictly: a number field takes a TOML number, never a boolean or a string
    (pydantic's lax mode would read `min_ratio = true` as 1.0), and only the VERSION this driver knows. A
    byte-order mark before the first line (some editors save one) is skipped."""
    path = path or paths.thresholds_file()
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as exc:
        raise ConfigError(f"cannot read thresholds file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # a binary file, or text in another encoding
        raise ConfigError(f"thresholds file {path} is not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r})", "TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"thresholds file {path} is not valid TOML: {exc}") from None
    bad = _known_marks(data)  # before the model's own check, which would say only "extra inputs"
    if bad:
        raise ConfigError(f"thresholds file {path}: {'; '.join(bad)}",
                          "a known shortfall is a speed gate's "
                          '`known = "<why, since when, the run that measured it>"`')
    try:
        gates = Thresholds.model_validate(data, strict=True)
    except ValidationError as exc:
        # A misspelt field shows up twice (unknown + missing): name the unknown one.
        errs = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise ConfigError(f"thresholds file {path}: {'; '.join(_field_error(e) for e in errs)}") from None
    bad = _unmeasurable(gates)
    if bad:
        raise ConfigError(f"thresholds file {path}: {'; '.join(bad)}",
                          "no run can measure such a gate: fix its shape or size, or remove it")
    bad = _sdpa_tiers(gates)
    if bad:
        raise ConfigError(f"thresholds file {path}: {'; '.join(bad)}",
                          "every precision tier needs one bound per input distribution (docs/SDPA.md)")
    _check_static_gates(path, gates)
    return gates


def _check_static_gates(path: Path, gates: Thresholds) -> None:
    """The build's static gates must each be able to hold: a [[build.kernels]] entry's `target` is a CUDA target
    of the build table, and every SASS instruction the table requires or forbids is one the inspector reads
    (else a forbidden one would pass unread). Checked here, before anything builds."""
    from driver import build_gates, targets  # build_gates imports this module

    table = targets.all_targets()
    bad = build_gates.unknown_targets(gates.build, table)
    if bad:
        raise ConfigError(f"thresholds file {path}: {'; '.join(bad)}",
                          "a [[build.kernels]] entry's `target` is the name of a CUDA target in driver/targets.py")
    bad = build_gates.unknown_sass(table)
    if bad:
        raise ConfigError(f"driver/targets.py: {'; '.join(bad)}",
                          "name an instruction of inspect_ptx.SASS_INSTRUCTIONS, or add it there so that the "
                          "inspector reads it")
