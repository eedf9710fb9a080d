"""Typed records passed between the pipeline's stages.

configure -> build -> launch -> parse -> verify -> gate -> archive. Anything one
stage writes and another reads is one of these models: frozen, no extra fields,
no NaN or infinity, and with a JSON Schema written next to bench_results/.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    field_validator,
    model_validator,
)

from driver import registry
from driver.stats import Estimator

# 2: verdicts say "not_measured" (was "skip"), runs carry their gates, stress lines hold null (never 0)
# for what a check did not measure. Version-1 results still load (see Verdict.status).
# 3 (2026-11-26): SDPA lines carry their precision tier (`precision`, the peers' words moved to `arithmetic`),
# SDPA records their input distribution, their error relative to the output's scale (`max_abs_rel`) and their
# share of the tier's tensor peak (`tensor_frac`). Version-1 and -2 results still load (SdpaLine and
# ArchivedRecord fill the new fields from what old lines say).
# 4 (2026-11-27): timed SDPA records carry the SM clock and power while they were timed (`clock`,
# driver/clocks.py); older results load with it null.
# 5 (2026-11-28): allreduce and SDPA lines carry their raw timing samples (`samples_us`); the driver alone computes
# p50/p90/min/mean from them (driver/stats.py, one estimator) and says which (`estimator`) over how many (`samples`).
# Older results load with the three null: their statistics are their executable's own.
# 6 (2026-11-28): SDPA lines carry their case (q_shape, kv_shape, causal: grouped-query heads, Sq != Skv, the
# bottom-right causal mask) and their TF/s counts the unmasked work only; SDPA records of memory-bound cases carry
# `hbm_frac` (bytes moved / p50 over the device's copy bandwidth measured in the same run, in `ceilings_gbps`).
# Older results load with hbm_frac null and their lines as square, non-causal cases.
SCHEMA_VERSION = 6


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


# ---------------------------------------------------------------- toolchain, host


class ToolVersion(Record):
    name: str
    path: str
    version: str


class Toolchain(Record):
    mojo: ToolVersion | None = None
    nvcc: ToolVersion | None = None
    ptxas: ToolVersion | None = None
    python: str


class HostInfo(Record):
    hostname: str
    os: str
    cpu: str
    logical_cores: int
    ram_gib: float


# ---------------------------------------------------------------- device


class GpuInfo(Record):
    index: int
    name: str
    memory_mib: int
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    other_processes: int = 0


class ClockSummary(Record):
    """SM clock and power of one GPU while a record's case was timed (driver/clocks.py): NVML read every few
    milliseconds on a thread of the driver, over every timed round of the case. Only the samples drawn while
    the GPU did heavy work count (`busy_samples`: power at least `busy_w`, a share of the enforced limit), so an
    idle gap, an upload or the hold kernel between launches does not read as the kernel's clock."""

    samples: NonNegativeInt  # in the case's timed windows
    busy_samples: NonNegativeInt
    busy_w: NonNegativeFloat
    power_limit_w: NonNegativeFloat | None = None  # the enforced limit (700 W on an H100 SXM)
    sm_mhz_p50: NonNegativeFloat | None = None  # of the busy samples; None: fewer busy samples than counted
    sm_mhz_p10: NonNegativeFloat | None = None
    power_w_p50: NonNegativeFloat | None = None
    power_cap_frac: NonNegativeFloat | None = None  # busy samples held back by the power cap (sw_power_cap)
    thermal_frac: NonNegativeFloat | None = None  # busy samples held back by heat (sw or hw thermal slowdown)


class DeviceInfo(Record):
    driver_version: str
    gpus: list[GpuInfo]

    @property
    def kind(self) -> str:
        """Short name for folder names and tables, e.g. `2xH200`."""
        if not self.gpus:
            return "nogpu"
        model = self.gpus[0].name.replace("NVIDIA", "").strip().split()[0]
        return f"{len(self.gpus)}x{model}"


# ---------------------------------------------------------------- build


class PtxasKernel(Record):
    """One kernel's line in `nvcc -Xptxas -v` output."""

    name: str
    arch: str
    registers: NonNegativeInt
    smem_bytes: NonNegativeInt
    stack_frame_bytes: NonNegativeInt
    spill_store_bytes: NonNegativeInt
    spill_load_bytes: NonNegativeInt
    cmem_bytes: NonNegativeInt = 0
    # ptxas serialized the kernel's warpgroup MMAs (info C75xx, "wgmma.mma_async instructions are
    # serialized due to ..."): every wgmma waits for the one before; the reason ptxas gave and its code, else "".
    wgmma_serialized: str = ""


class PtxKernel(Record):
    """One `.entry` of the PTX embedded in (or emitted for) a target."""

    name: str
    has_cp_async: bool
    has_mma: bool


class BuiltFile(Record):
    """A file a build wrote into build/<arch>/ (the executable, the compiler's log), as its stamp holds it: the cache
    calls the target built only while every one still has this size and content."""

    name: str  # in the stamp's folder, so that a copied checkout's stamps still hold
    size_bytes: NonNegativeInt
    sha256: str


class TargetBuild(Record):
    target: str
    lang: Literal["mojo", "cuda"]
    arch: str
    source_hash: str
    command: list[str]
    defines: dict[str, str]
    flags: list[str]
    output: str
    build_seconds: NonNegativeFloat
    ptxas: list[PtxasKernel] = Field(default_factory=list)
    ptx_kernels: list[PtxKernel] = Field(default_factory=list)
    sass: dict[str, bool] | None = None
    # What the build wrote, checked before a cache hit; empty in stamps made before the cache checked its outputs
    # (2026-11-28), which are rebuilt once.
    outputs: list[BuiltFile] = Field(default_factory=list)


class BuildMeta(Record):
    schema_version: int = SCHEMA_VERSION
    created_utc: str
    git_sha: str
    git_dirty: bool
    toolchain: Toolchain
    host: HostInfo
    archs: list[str]
    targets: list[TargetBuild]

    def target(self, name: str, arch: str) -> TargetBuild:
        for t in self.targets:
            if t.target == name and t.arch == arch:
                return t
        raise KeyError(f"{name} for {arch} is not in build_meta.json")


# ---------------------------------------------------------------- kernel output lines

# The two timing modes every suite reports (docs/TIMING.md): cold = each launch timed alone
# (SDPA: L2 flushed first), hot = many launches back to back (a CUDA graph where the API allows it).
TimingMode = Literal["cold", "hot"]
# An allreduce line's method -> the mode it serves.
TIMING_METHOD_MODE: dict[str, str] = {"device": "cold", "host": "hot", "graph": "hot"}


class OutOfBound(Record):
    """The first element (lowest rank, then lowest index) outside the bound |out - s| <= gamma_{n-1} * sum_r |x_r|
    (docs/ALLREDUCE.md)."""

    rank: NonNegativeInt
    element: NonNegativeInt
    value: float | None  # None: NaN or infinite
    reference: float  # s, the float64 sum of the dtype-rounded inputs
    bound: NonNegativeFloat


class RankMismatch(Record):
    """The first element (lowest rank, then lowest index) whose bits differ from rank 0's."""

    rank: int = Field(ge=1)
    element: NonNegativeInt
    value: float | None  # None: NaN or infinite
    rank0_value: float | None


class AllreduceLine(Record):
    """One line printed by an allreduce executable (ours, upstream) or a torch-driven peer (NCCL, PyTorch's
    symmetric-memory one-shot and two-shot)."""

    suite: Literal["allreduce"]
    impl: Annotated[str, registry.Names(lambda: registry.impl_names("allreduce"))]  # driver/registry.py
    kernel_requested: str
    kernel_selected: str
    kernel_confirmed: str
    dtype: Literal["float32", "bfloat16", "float16"]
    ngpus: int = Field(ge=1, le=8)
    bytes: NonNegativeInt
    elements: NonNegativeInt
    iters: NonNegativeInt
    warmup: NonNegativeInt
    batch: int = Field(default=1, ge=1)  # iterations per timing sample (timing "host" or "graph")
    # How the executable timed (the mode it serves: TIMING_METHOD_MODE):
    # "device": one sample per iteration, CUDA events on a held stream (host launch latency not timed);
    # "host": wall clock around `batch` back-to-back iterations plus a synchronize;
    # "graph": `batch` iterations captured in a CUDA graph, one event pair per replay (the torch-driven peers).
    timing: Literal["device", "host", "graph"] = "host"
    hold_overruns: NonNegativeInt = 0  # device timing: iterations whose launches outlasted the stream hold
    timed: bool = True  # False: ours was wrong, nothing was timed (no samples, p50 etc. 0); a peer is timed anyway
    # p50_us .. busbw_gbps: the driver's, from samples_us (below); a line from before 2026-11-28: its executable's
    p50_us: NonNegativeFloat
    p90_us: NonNegativeFloat
    min_us: NonNegativeFloat
    mean_us: NonNegativeFloat
    algbw_gbps: NonNegativeFloat
    busbw_gbps: NonNegativeFloat
    # The raw timing samples in microseconds, as the executable measured them (cold: one per launch; hot: one per
    # batch, the batch's time / `batch`). The statistics around them are the driver's, never the executable's:
    # parse.parse_lines computes them from these by driver/stats.py and names the estimator and the sample count.
    # None (all three): a line from before 2026-11-28, whose statistics its executable computed by its own rule.
    samples_us: list[NonNegativeFloat] | None = None
    estimator: Estimator | None = None
    samples: NonNegativeInt | None = None
    max_abs_err: NonNegativeFloat | None  # None (JSON null): some output was NaN or infinite
    # Elements failing a property required of this impl: out_of_bound + rank_mismatch, and for ours also
    # run_to_run_mismatch. Lines from before 2026-11-26 counted elements outside an ad-hoc tolerance plus
    # elements whose bits differed from rank 0's, with none of the fields below (None there).
    wrong: NonNegativeInt
    checked: bool
    checked_iters: NonNegativeInt = 1  # launches poisoned, run and checked element by element
    # The bound (docs/ALLREDUCE.md): elements (over ranks and checked launches) with |out - s| > gamma_{n-1} *
    # sum_r |x_r| or not finite, the largest |out - s| / bound (None: some output not finite), the first one.
    out_of_bound: NonNegativeInt | None = None
    max_err_over_bound: NonNegativeFloat | None = None
    out_of_bound_first: OutOfBound | None = None
    # Rank agreement: elements of ranks 1..n-1 whose bits differ from rank 0's (rank 0 against every rank is
    # every pair, by transitivity), and the first one.
    rank_mismatch: NonNegativeInt | None = None
    rank_mismatch_first: RankMismatch | None = None
    # Same bits every run (required of ours only): rank 0's output of every later launch on the same inputs
    # (further checked launches, the last timed one) against the first checked launch's, bit for bit.
    # None: fewer than two launches were compared, or the impl does not record it (the torch-driven peers).
    same_bits_every_run: bool | None = None
    runs_compared: NonNegativeInt = 0
    run_to_run_mismatch: NonNegativeInt | None = None

    @model_validator(mode="after")
    def _samples(self) -> AllreduceLine:
        _samples_consistent(self)
        return self


def _samples_consistent(line: AllreduceLine | SdpaLine) -> None:
    """Raw samples come with the driver's estimator and their count; a line without them names neither."""
    if line.samples_us is None:
        if line.estimator is not None or line.samples is not None:
            raise ValueError("estimator or samples given without samples_us")
    elif line.estimator is None or line.samples != len(line.samples_us):
        raise ValueError("samples_us without the driver's estimator and sample count (parse.parse_lines adds them)")


# The SDPA precision tiers (docs/SDPA.md; config.PRECISIONS): fp16 = K/V decoded to fp16, fp16 MMA with fp32
# accumulators (Q and the probabilities P in fp16); fp8 = Q and P rounded to E4M3 for the MMAs.
Precision = Literal["fp16", "fp8"]
# The tier of each of our kernels, and of each SDPA peer (what its arithmetic is: torch SDPA and FlashAttention
# compute on fp16 operands, cuDNN's FP8 attention quantizes Q and P to E4M3).
SDPA_KERNEL_PRECISION: dict[str, str] = {"wgmma_sm90": "fp16", "mma_sync_sm80": "fp16", "wgmma_fp8_sm90": "fp8",
                                         "decode_sm89": "fp16", "decode_fp8_sm89": "fp8"}
SDPA_PEER_PRECISION = registry.SDPA_PEER_PRECISION  # derived from driver/registry.py (each peer's `precision`)


class SdpaLine(Record):
    """One line printed by an SDPA runner (ours) or a peer (driver/peers/sdpa_io.py)."""

    suite: Literal["sdpa"]
    impl: Annotated[str, registry.Names(lambda: registry.impl_names("sdpa"))]  # driver/registry.py
    # Which of our kernels ran (chosen by the tier and the GPU's architecture): the Hopper warpgroup-MMA
    # kernel on fp16 operands (wgmma_sm90: the fp16 tier on sm_90) or on E4M3 operands (wgmma_fp8_sm90: the
    # fp8 tier), or the mma.sync kernel of sm_80/sm_89 (the fp16 tier elsewhere); for few query rows per K/V head
    # (decode), the split-KV kernel of either tier (decode_sm89, decode_fp8_sm89: mma.sync, sm_89 and newer,
    # kernels_cuda/sdpa_decode/). Our runners always print it; peers leave it out.
    kernel: Literal["wgmma_fp8_sm90", "wgmma_sm90", "mma_sync_sm80", "decode_sm89", "decode_fp8_sm89"] | None = None
    # The precision tier the numbers belong to (ours: what --precision asked for; a peer: its arithmetic's).
    # Lines from before the tiers (2026-11-26) say none: ours then by the kernel that ran, a peer by its name.
    precision: Precision
    shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)]
    # The case in full (since 2026-11-28, kernels_cuda/sdpa_fp8/attn_shape.h): q [B, Hq, Sq, D] (= shape), k/v
    # [B, Hkv, Skv, D], and the bottom-right causal mask. None: a line from before, square non-causal MHA.
    q_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)] | None = None
    kv_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)] | None = None
    causal: bool = False
    iters: NonNegativeInt
    warmup: NonNegativeInt
    # p50_us .. tflops: the driver's, from samples_us (below); a line from before 2026-11-28: its executable's
    p50_us: NonNegativeFloat
    p90_us: NonNegativeFloat
    mean_us: NonNegativeFloat
    std_us: NonNegativeFloat
    min_us: NonNegativeFloat
    tflops: NonNegativeFloat
    # The raw timing samples in microseconds, as the executable measured them (cold: one per launch; hot: one per
    # batch, the batch's time / `batch`). The statistics around them are the driver's, never the executable's:
    # parse.parse_lines computes them from these by driver/stats.py and names the estimator and the sample count.
    # None (all three): a line from before 2026-11-28, whose statistics its executable computed by its own rule.
    samples_us: list[NonNegativeFloat] | None = None
    estimator: Estimator | None = None
    samples: NonNegativeInt | None = None
    # Diagnostics, present only when the runner was asked for them:
    ablate: Literal["none", "no_compute", "no_loads"] = "none"  # --ablate: the output is NOT a result
    split: int | None = Field(default=None, ge=1)  # --split: KV groups per block
    bn: int | None = Field(default=None, ge=1)  # keys per tile of the config that ran
    # The Hopper kernel's full and short row tiles per (b, h) (tile_plan.cuh; [0, 0] for mma_sync_sm80)
    tiles: Annotated[list[NonNegativeInt], Field(min_length=2, max_length=2)] | None = None
    # The Hopper kernel's key chunks per packed K/V head (its configuration for decode-shaped cases, since 2026-11-29:
    # kernels_cuda/sdpa_fp8_sm90 README "Decode-shaped cases"); None where another configuration ran
    kv_chunks: int | None = Field(default=None, ge=1)
    # The fp8 tier's Q in Q K^T: 1 or 2 E4M3 terms (kernel.cuh select_config, SDPA_SM90_FP8_Q2); None: the fp16
    # tier, a peer, or a line from before 2026-11-26 (one term).
    q_terms: int | None = Field(default=None, ge=1, le=2)
    soak_launches: NonNegativeInt = 0  # --soak: launches after the output run, each compared bit for bit with it
    soak_streams: int = Field(default=1, ge=1)
    soak_mismatched_elements: NonNegativeInt = 0
    grid: list[int] = Field(default_factory=list)
    block: list[int] = Field(default_factory=list)
    smem_bytes: NonNegativeInt = 0
    regs_per_thread: NonNegativeInt = 0
    # The timing mode (docs/TIMING.md); None: a line from before the modes existed.
    timing: TimingMode | None = None
    batch: int = Field(default=1, ge=1)  # launches per timing sample (hot: per graph replay)
    l2_flush_bytes: NonNegativeInt = 0  # bytes written before each sample, outside the timed interval (cold)
    hold_overruns: NonNegativeInt | None = None  # samples enqueued after their hold ended; None: not counted
    # Peers: what their numbers are made of, in words (e.g. cuDNN's per-tensor scale of Q), and the library
    # versions that ran. (Lines before 2026-11-26 had these words in `precision`.)
    arithmetic: str = ""
    peer_version: str = ""

    @model_validator(mode="before")
    @classmethod
    def _tier_of_older_lines(cls, data: object) -> object:
        """A line without a tier is from before the tiers: ours ran the tier of its kernel (no kernel named:
        the mma.sync kernel, the only one then, fp16), a peer the tier of its arithmetic; a peer's words in
        `precision` move to `arithmetic`. Anything else in `precision` is left for validation to refuse."""
        if not isinstance(data, dict) or data.get("precision") in ("fp16", "fp8"):
            return data
        impl, given, kernel = data.get("impl"), data.get("precision"), data.get("kernel")
        if not isinstance(impl, str) or not isinstance(kernel, str | None):
            return data  # validation says what is wrong with them
        out = dict(data)
        if impl in SDPA_PEER_PRECISION and (given is None or isinstance(given, str) and "arithmetic" not in data):
            out.pop("precision", None)
            if given:
                out["arithmetic"] = given
            out["precision"] = SDPA_PEER_PRECISION[impl]
        elif impl in registry.SDPA.variants and given in (None, ""):  # archived lines held the old default ""
            out["precision"] = SDPA_KERNEL_PRECISION.get(kernel or "mma_sync_sm80", "fp16")
        return out

    @model_validator(mode="after")
    def _tier_matches(self) -> SdpaLine:
        """The tier a line says must be the one its kernel (ours) or its arithmetic (a peer) computes in."""
        want = SDPA_PEER_PRECISION.get(self.impl) or (SDPA_KERNEL_PRECISION.get(self.kernel) if self.kernel else None)
        if want is not None and self.precision != want:
            what = f"kernel {self.kernel}" if self.impl not in SDPA_PEER_PRECISION else f"peer {self.impl}"
            raise ValueError(f"precision {self.precision!r} but {what} computes in the {want} tier")
        return self

    @model_validator(mode="after")
    def _samples(self) -> SdpaLine:
        _samples_consistent(self)
        return self


class CeilingLine(Record):
    """The link ceiling measured in the same run (driver/peers/p2p_copy.py)."""

    p2p_copy_gbps: NonNegativeFloat
    bytes: NonNegativeInt
    iters: NonNegativeInt


class CopyLine(Record):
    """The device's copy bandwidth measured in the same run (driver/peers/hbm_copy.py): a device-to-device copy of
    `bytes`, timed as everything else is (cold: each copy alone, L2 flushed, CUDA events); the driver computes the
    p50 from the samples (driver/stats.py) and the bandwidth from it, read + write: 2 x bytes / p50."""

    hbm_copy: Literal[True]
    bytes: int = Field(ge=1)
    timing: TimingMode
    samples_us: list[NonNegativeFloat] = Field(min_length=1)
    l2_flush_bytes: NonNegativeInt = 0
    device: str = ""  # torch's name of GPU 0


class ReferenceLine(Record):
    """A float64 SDPA reference computed on the GPU (driver/reference/sdpa_gpu.py): where it was written."""

    reference: str
    shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)]
    seconds: NonNegativeFloat


class InputsLine(Record):
    """One SDPA case's inputs made on the GPU (driver/reference/sdpa_gpu.py --make-inputs): the folder holding its
    q, k, v and scales .npy files, the shapes, the scales, and the generator that made them (its name and where)."""

    inputs: str
    q_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)]
    kv_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=4, max_length=4)]
    k_scale: PositiveFloat
    v_scale: PositiveFloat
    generator: str
    seconds: NonNegativeFloat


class StressLine(Record):
    """One stress config's outcome, written by the driver's stress suite. A field the check did
    not measure is null, never 0: a sanitizer run counts hazards, not wrong elements."""

    suite: Literal["stress"]
    check: Literal["soak", "watchdog", "sanitizer", "profile"]
    kernel: str
    config: str
    sizes_bytes: list[NonNegativeInt] = Field(default_factory=list)
    iterations: NonNegativeInt | None  # launches executed
    checked: NonNegativeInt | None  # of those, results compared element by element with the reference
    wrong: NonNegativeInt | None  # elements that disagreed with the reference (or with the checked output)
    max_abs_err: NonNegativeFloat | None  # null: not measured, or not finite (then `nonfinite`)
    nonfinite: bool = False  # some checked output element was NaN or infinite
    hazards: NonNegativeInt | None = None  # sanitizer: None = not measured (see detail)
    hang: bool = False
    seconds: NonNegativeFloat | None = None  # wall time of the check; None: nothing ran
    detail: str = ""
    counters: dict[str, float] = Field(default_factory=dict)  # profile: ncu counters or timings (see detail)


Measurement = Annotated[AllreduceLine | SdpaLine | StressLine, Field(discriminator="suite")]


# ---------------------------------------------------------------- verdicts and archive


# known and xpass are speed gates only, those thresholds.toml marks `known` (an expected shortfall, pytest's
# strict xfail): known = it failed as expected (reported, does not fail the run); xpass = it passed although
# marked (fails the run under --strict, so that the mark comes off). Archives before 2026-11-28 hold neither.
Status = Literal["pass", "fail", "inconclusive", "not_measured", "known", "xpass"]
# What outranks what when several verdicts describe one thing: a failure, then something that
# was not measured (absence is never a pass), then a known gate that passed (its mark is out of date), then a
# known shortfall, then a result inside the noise, then a pass.
STATUS_ORDER: tuple[Status, ...] = ("fail", "not_measured", "xpass", "known", "inconclusive", "pass")


class Verdict(Record):
    status: Status
    reasons: list[str] = Field(default_factory=list)

    @field_validator("status", mode="before")
    @classmethod
    def _legacy_skip(cls, value: object) -> object:
        return "not_measured" if value == "skip" else value  # schema 1 archives said "skip"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @classmethod
    def combine(cls, verdicts: list[Verdict]) -> Verdict:
        """The highest-ranked status of STATUS_ORDER, with every reason."""
        status = min((v.status for v in verdicts), key=STATUS_ORDER.index, default="not_measured")
        return cls(status=status, reasons=list(dict.fromkeys(r for v in verdicts for r in v.reasons)))


class GateResult(Record):
    """One gate of one run: pass, fail, inconclusive (inside the noise, or timed on a GPU another process used),
    not measured (with why), and for a speed gate marked `known` in thresholds.toml: known (failed as expected)
    or xpass (passed although marked).

    `gate` is the id thresholds.toml's [[optional]] entries match, e.g.
    `allreduce/speed/ours-vs-nccl/float32/2gpu/262144B` or `stress/sanitizer/memcheck/sdpa_fp8_cpasync/small`.
    `kind` picks the exit code a failed or (required) unmeasured gate gives: correctness 7, speed 8."""

    gate: str
    kind: Literal["correctness", "speed"]
    status: Status
    optional: bool = False  # not measured, and thresholds.toml lets it go unmeasured on this host
    reasons: list[str] = Field(default_factory=list)

    @property
    def blocking(self) -> bool:
        """Fails the run: a failure, or an absence thresholds.toml does not allow here (an xpass also fails it
        under --strict: gates.exit_decision)."""
        return self.status == "fail" or (self.status == "not_measured" and not self.optional)


class ArchivedRecord(Record):
    suite: Literal["allreduce", "sdpa", "stress"]
    impl: str
    kernel: str
    config: str
    device: str
    git_sha: str
    seed: int | None = None
    passed: bool  # correctness.status == "pass"
    max_abs_err: NonNegativeFloat | None = None  # null: not measured, or not finite (then `nonfinite`)
    nonfinite: bool = False  # some checked output element was NaN or infinite
    bad_frac: NonNegativeFloat | None = None
    rel_l2: NonNegativeFloat | None = None
    # SDPA: max|out - ref| / max|ref|, the worst element against the output's own scale (None: not measured)
    max_abs_rel: NonNegativeFloat | None = None
    # SDPA: the input distribution the output was checked on (reference/sdpa.py DISTRIBUTIONS); records before
    # 2026-11-26 were all checked on `normal` and read so. None for the other suites.
    distribution: str | None = None
    correctness: Verdict  # a peer that is only timed: not_measured, and no gate reads it
    performance: Verdict | None = None  # the speed gates that name this record, combined
    measurement: Measurement
    round_p50_us: list[NonNegativeFloat] = Field(default_factory=list)
    timing: TimingMode | None = None  # the mode of the timing above; None: not timed (or archived before the modes)
    # allreduce: algbw over the link ceiling measured in the same run (p2p_copy); None when not measured
    link_frac: NonNegativeFloat | None = None
    # SDPA: TFLOP/s over the dense tensor peak of the record's tier on this GPU (config.tensor_peak_tflops);
    # None when not timed or the GPU's peak is not in the table
    tensor_frac: NonNegativeFloat | None = None
    # SDPA, memory-bound cases (config.AttnCase.memory_bound): the bytes the case must move (K and V as the impl
    # reads them, Q and O in fp16) over the p50, divided by the device's copy bandwidth measured in the same run
    # (ceilings_gbps, driver/peers/hbm_copy.py); None when not timed, not memory-bound, or the copy not measured
    hbm_frac: NonNegativeFloat | None = None
    telemetry_before: list[GpuInfo] = Field(default_factory=list)
    telemetry_after: list[GpuInfo] = Field(default_factory=list)
    # SDPA timed records since 2026-11-27: the GPU's SM clock and power while this case was timed (None: not
    # timed, no NVML, or archived before)
    clock: ClockSummary | None = None
    flags: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _older_sdpa_records(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("suite") == "sdpa" and data.get("distribution") is None:
            return {**data, "distribution": "normal"}  # the only inputs any check fed before the distributions
        return data

    @property
    def precision(self) -> str | None:
        """SDPA: the precision tier of the record (its line's); None for the other suites."""
        return self.measurement.precision if self.measurement.suite == "sdpa" else None

    @property
    def timing_mode(self) -> str:
        """`timing`; for a run archived before the modes existed, read from its line (allreduce: the
        method's mode; SDPA: an event pair per launch, i.e. cold, without the L2 flush)."""
        if self.timing:
            return self.timing
        m = self.measurement
        return TIMING_METHOD_MODE.get(m.timing, "cold") if m.suite == "allreduce" else "cold"

    @property
    def timing_method(self) -> str:
        """How the executable timed, in words (docs/TIMING.md): two records are timed alike
        only when their modes and methods agree."""
        m = self.measurement
        if m.suite == "allreduce":
            return {"device": "events", "host": f"host batch x{m.batch}", "graph": f"graph x{m.batch}"}[m.timing]
        if m.suite != "sdpa":
            return ""
        if self.timing_mode == "hot":
            return f"graph x{m.batch}"
        return "events, L2 flushed" if m.l2_flush_bytes else "events"


class Skip(Record):
    suite: str
    impl: str
    reason: str


class RunArchive(Record):
    """`results.json.gz` of one archived run."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_utc: str
    command: list[str]
    git_sha: str
    git_dirty: bool
    device: DeviceInfo
    device_after: DeviceInfo | None = None
    host: HostInfo
    records: list[ArchivedRecord]
    skipped: list[Skip] = Field(default_factory=list)
    ceilings_gbps: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    gates: list[GateResult] = Field(default_factory=list)  # every gate of the run (empty in schema 1 archives)
    wall_s: NonNegativeFloat | None = None  # the whole run, start to archive (None in archives before it existed)
    # Where the wall time went (driver/phases.py): build, each worker's start-up, checks, timing, the
    # reference's waits on the critical path and its background time, report.
    phases_s: dict[str, NonNegativeFloat] = Field(default_factory=dict)



# ---------------------------------------------------------------- cluster runs (driver/cluster/)


class ClusterTask(Record):
    """One task of a Slurm job array: one suite on one GPU kind and count of one partition."""

    index: NonNegativeInt  # SLURM_ARRAY_TASK_ID
    suite: Literal["bench", "stress"]
    partition: str
    gpu_type: str  # the GRES type Slurm names the partition's GPUs by, e.g. h100
    arch: str  # what the bundle was built for, from driver/cluster/gpus.py
    gpus: int = Field(ge=1)
    driver_args: list[str]  # `./bundle/run ARGS` on the node

    @property
    def gres(self) -> str:
        """The GPU request in Slurm's own vocabulary (`--gres=gpu:h100:2`)."""
        return f"gpu:{self.gpu_type}:{self.gpus}"

    @property
    def label(self) -> str:
        return f"{self.partition}/{self.gpus}x{self.gpu_type}/{self.suite}"


class Submission(Record):
    """`submission.json` in the shared folder: what was submitted, and where its tasks write."""

    schema_version: int = SCHEMA_VERSION
    submission_id: str
    created_utc: str
    command: list[str]
    git_sha: str
    git_dirty: bool
    folder: str  # on the shared filesystem: bundle/, job.sh, logs/, results/, status/
    job_id: str  # the array's Slurm job id
    time_limit_min: int = Field(ge=1)
    archs: list[str]
    tasks: list[ClusterTask]


class TaskState(Record):
    """One array task as Slurm (or, once Slurm has forgotten it, the task itself) last reported it."""

    index: NonNegativeInt
    state: str  # Slurm's JobState: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str = ""
    exit_code: int | None = None  # the batch script's exit status; None while it runs or when unknown
    signal: int | None = None
    elapsed_s: NonNegativeInt = 0
    node: str = ""
    source: Literal["scontrol", "sacct", "task"] = "scontrol"


class TaskOutcome(Record):
    task: ClusterTask
    state: TaskState
    collected: list[str] = Field(default_factory=list)  # run ids moved into bench_results/
    problem: str | None = None  # None: the task completed with exit 0
    log_tail: list[str] = Field(default_factory=list)


class ClusterReport(Record):
    """`bench_results/cluster/<submission id>/cluster.json`: every task's end and what it archived."""

    schema_version: int = SCHEMA_VERSION
    collected_utc: str
    submission: Submission
    outcomes: list[TaskOutcome]

SCHEMA_MODELS: dict[str, type[Record]] = {
    "build_meta": BuildMeta,
    "results": RunArchive,
    "allreduce_line": AllreduceLine,
    "sdpa_line": SdpaLine,
    "stress_line": StressLine,
    "cluster_report": ClusterReport,
}


def published_schema(name: str) -> dict:
    """What `python -m driver schema` writes as bench_results/schema/<name>.schema.json: the model's JSON Schema
    with a "$comment" first (JSON has no comments; JSON Schema keeps the "$comment" keyword for notes)."""
    model = SCHEMA_MODELS[name]
    return {"$comment": f"Generated by `python -m driver schema` from {model.__name__} in driver/records.py; "
                        "do not edit.", **model.model_json_schema()}
