"""Configure: turn user strings into validated values, once, before anything runs.

Every parser here raises ConfigError with a message that says what was wrong and
what is accepted, so a typo never reaches a compiler or a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from driver.errors import ConfigError

T = TypeVar("T")

SUPPORTED_ARCHS = ("sm_90", "sm_89", "sm_80")
DEFAULT_ARCH = "sm_90"
DTYPES = ("float32", "bfloat16", "float16")
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SUPPORTED_NGPUS = (2, 4, 8)
CPASYNC_STAGES = (2, 3, 4)
# The allreduce kernels, by the name the GPU confirms it ran (kernel_name in kernels_mojo/allreduce/
# dispatch.mojo): the one list --kernel, the sweep, stress, the GPU tests and the dispatch test read.
ALLREDUCE_KERNEL_NAMES = ("1stage", "2stage", "1stage_push", "2stage_push", "1stage_pushflag", "1stage_bulk",
                          "2stage_ce", *(f"1stage_cpasync_s{s}" for s in CPASYNC_STAGES))
# Kernels with a size window of their own, in the order select_kernel (dispatch.mojo) checks them, and the stem
# of their defines: AR_<stem>_MIN_BYTES_<n>GPU / AR_<stem>_MAX_BYTES_<n>GPU.
WINDOWED_KERNELS: dict[str, str] = {"2stage_ce": "2STAGE_CE", "2stage_push": "2STAGE_PUSH",
                                    "1stage_pushflag": "PUSHFLAG", "1stage_bulk": "BULK"}
# What --kernel takes besides those: auto (the dispatch table) and 1stage_cpasync (the build's stage count).
ALLREDUCE_KERNELS = ("auto", *dict.fromkeys(re.sub(r"_s\d+$", "", k) for k in ALLREDUCE_KERNEL_NAMES))
SUITES = ("allreduce", "sdpa", "all")
TIMING_MODES = ("cold", "hot")  # docs/TIMING.md; records.TimingMode
TIMING_ALIASES = {"device": "cold", "host": "hot"}  # the allreduce executables' names for the same methods
# Modes a suite runs when --timing is not given. Allreduce: cold only, because the Mojo executables
# cannot be graph-timed (their hot is the host back-to-back batch, a measurement of the host launch
# path, not of the kernel) and cold NCCL already agrees with a CUDA-graph timing of NCCL.
DEFAULT_TIMING: dict[str, tuple[str, ...]] = {"sdpa": ("cold", "hot"), "allreduce": ("cold",), "sweep": ("cold",)}

# (B, H, S, D) of the named SDPA shapes: the seeds' and issue 4's, then issue 13's (odd sizes with
# tails, many heads, a batch, head dim 128 at 2K and 8K keys).
SDPA_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "small": (1, 2, 128, 64),
    "mission": (1, 8, 512, 64),
    "tail": (1, 8, 1000, 64),
    "large": (2, 16, 2048, 64),
    "odd": (3, 5, 777, 64),
    "heads32": (4, 32, 4096, 64),
    "batch8": (8, 8, 1024, 64),
    "large_d128": (2, 16, 2048, 128),
    "long_d128": (1, 16, 8192, 128),
    # Sanitizer shapes for the Hopper kernel's unsplit configurations (132-SM H100/H200): 264 blocks of
    # 192 rows (three consumer warpgroups, the second row block mostly past S) and 132 of 128 rows at
    # head dim 128, two K/V tiles each with a tail (128 keys at S 250, 192 at S 380: the tile width is
    # chosen by S), small enough for racecheck.
    "unsplit3_d64": (1, 132, 250, 64),
    "unsplit_d128": (1, 66, 250, 128),
    "unsplit_wide_d128": (1, 44, 380, 128),
    # The fp8 tier's two-term kernels at head dim 128 (SDPA_SM90_FP8_Q2: short launches, fewer work units than
    # SMs): unsplit (80 blocks of 128 rows, too many to split) and split (64 of 64 rows), two K/V tiles with a
    # tail. Head dim 64's are the seeds' small (unsplit) and mission / tail (split).
    "short_d128": (1, 40, 250, 128),
    "short_split_d128": (1, 16, 250, 128),
    # The split configuration with an odd count of K/V tiles (five of 128 keys at S 600, in both tiers): warpgroup 0
    # takes the last tile, and warpgroup 1's merge writes over the K buffer it was decoded into (mainloop.cuh).
    "split_odd_d128": (1, 4, 600, 128),
}
SDPA_HEAD_DIMS = (64, 128)
E4M3_BYTES, FP16_BYTES = 1, 2  # an element of our K/V (E4M3 codes) and of Q and O (fp16)


@dataclass(frozen=True)
class AttnCase:
    """One attention case, as the runners take it (kernels_cuda/sdpa_fp8/attn_shape.h): Q and O [B, Hq, Sq, D]
    fp16, K and V [B, Hkv, Skv, D] E4M3 codes, query head h reading K/V head h // (Hq / Hkv) (Hkv = Hq: MHA; fewer:
    GQA; 1: MQA); `causal` is bottom-right aligned, as FlashAttention (since 2.1) and inference engines align it:
    query row i sees keys j <= i + Skv - Sq. A case that `problem` names is bad input. The square case (Q, K, V of
    one shape, no mask) is every shape before 2026-11-28, and keeps its name and records (`square`)."""

    q_shape: tuple[int, int, int, int]
    kv_shape: tuple[int, int, int, int]
    causal: bool = False

    @classmethod
    def of(cls, value: object) -> AttnCase:
        """A case from what names one: a case; anything with q_shape and kv_shape (and causal); a square
        (B, H, S, D), not causal; or (q_shape, kv_shape[, causal])."""
        if isinstance(value, AttnCase):
            return value
        if hasattr(value, "q_shape") and hasattr(value, "kv_shape"):
            return cls(tuple(int(x) for x in value.q_shape), tuple(int(x) for x in value.kv_shape),  # type: ignore
                       bool(getattr(value, "causal", False)))
        spec = tuple(value)  # type: ignore[call-overload]
        if len(spec) == 4 and not any(isinstance(x, Sequence) for x in spec):
            dims = tuple(int(x) for x in spec)
            return cls(dims, dims)  # type: ignore[arg-type]
        if len(spec) in (2, 3):
            return cls(tuple(int(x) for x in spec[0]), tuple(int(x) for x in spec[1]),  # type: ignore[arg-type]
                       bool(spec[2]) if len(spec) == 3 else False)
        raise ValueError(f"not an attention case: {value!r}")

    @property
    def b(self) -> int:
        return self.q_shape[0]

    @property
    def hq(self) -> int:
        return self.q_shape[1]

    @property
    def sq(self) -> int:
        return self.q_shape[2]

    @property
    def d(self) -> int:
        return self.q_shape[3]

    @property
    def hkv(self) -> int:
        return self.kv_shape[1]

    @property
    def skv(self) -> int:
        return self.kv_shape[2]

    @property
    def square(self) -> bool:
        """Q, K and V of one shape, no mask: the case every shape was before 2026-11-28."""
        return self.q_shape == self.kv_shape and not self.causal

    @property
    def name(self) -> str:
        """The case in the --shapes syntax, shortest form: `BxHxSxD` (square), `BxHqxSqxD:BxHkvxSkvxD` (K/V of
        their own shape), `:causal` after either (CASE_SYNTAX)."""
        text = "x".join(map(str, self.q_shape))
        if self.kv_shape != self.q_shape:
            text += ":" + "x".join(map(str, self.kv_shape))
        return text + (":causal" if self.causal else "")

    def words(self) -> str:
        """The case for a reader: q [..], k/v [..], causal or not."""
        return (f"q {list(self.q_shape)}, k/v {list(self.kv_shape)}, "
                f"{'causal (bottom-right)' if self.causal else 'not causal'}")

    def keys_seen(self) -> int:
        """Keys all query rows of one head see, summed over the rows: Sq Skv, or with the mask
        sum over i of (i + 1 + Skv - Sq) = Sq (Skv - Sq) + Sq (Sq + 1) / 2 (Sq <= Skv)."""
        if not self.causal:
            return self.sq * self.skv
        return self.sq * (self.skv - self.sq) + self.sq * (self.sq + 1) // 2

    def flops(self) -> int:
        """The unmasked work: 2 D flops for each (row, key) score of Q K^T and 2 D for each of P V, per query
        head: 4 B Hq D keys_seen. A masked score is work no one needs, so a causal case's TF/s does not count it."""
        return 4 * self.b * self.hq * self.d * self.keys_seen()

    @property
    def input_bytes(self) -> int:
        """Q (fp16) and K, V (one byte a code) as files."""
        q_elems = self.b * self.hq * self.sq * self.d
        return FP16_BYTES * q_elems + 2 * E4M3_BYTES * self.kv_elements()

    def kv_elements(self) -> int:
        """Elements of K (and of V)."""
        return self.kv_shape[0] * self.kv_shape[1] * self.kv_shape[2] * self.kv_shape[3]

    def bytes_moved(self, kv_elem_bytes: int = E4M3_BYTES) -> int:
        """What the case must move through memory at least: K and V read once (`kv_elem_bytes` each: 1 for our
        E4M3 codes, 2 for a peer's fp16 K/V), Q read and O written once in fp16."""
        q_elems = self.b * self.hq * self.sq * self.d
        return 2 * self.kv_elements() * kv_elem_bytes + 2 * q_elems * FP16_BYTES

    def flops_per_byte(self) -> float:
        """Arithmetic intensity with our E4M3 K/V: the unmasked flops over bytes_moved()."""
        return self.flops() / self.bytes_moved()

    @property
    def memory_bound(self) -> bool:
        """Whether the case is bound by reading K/V rather than by the tensor cores (MEMORY_BOUND_FLOPS_PER_BYTE):
        its records carry hbm_frac, the share of the device's measured copy bandwidth they reach."""
        return self.flops_per_byte() < MEMORY_BOUND_FLOPS_PER_BYTE

    def problem(self) -> str | None:
        """Why the runners refuse this case (bad input, exit 2), or None: the checks of runner.cu, made before
        anything is built or launched."""
        (b, hq, sq, d), (bk, hkv, skv, dk) = self.q_shape, self.kv_shape
        if min(*self.q_shape, *self.kv_shape) < 1:
            return "has a zero dimension: B, H, S and D must be at least 1"
        if max(*self.q_shape, *self.kv_shape) > SHAPE_DIM_MAX:
            return f"has a dimension above {SHAPE_DIM_MAX}"
        if (b, d) != (bk, dk):
            return f"q [B,Hq,Sq,D] = {list(self.q_shape)} and k/v [B,Hkv,Skv,D] = {list(self.kv_shape)} differ in " \
                   f"{'B' if b != bk else 'D'}: q and k/v share the batch and the head dim"
        if d not in SDPA_HEAD_DIMS:
            return f"has unsupported head dim {d} (supported: {', '.join(map(str, SDPA_HEAD_DIMS))})"
        if hq % hkv:
            return f"has Hq = {hq} query heads over Hkv = {hkv} K/V heads: Hq must be a multiple of Hkv"
        if max(sq, skv) > SEQ_MAX:
            return f"has a sequence of more than {SEQ_MAX} (2^30) rows, more than the runners take"
        if self.causal and sq > skv:
            return (f"is causal with Sq = {sq} > Skv = {skv}: bottom-right alignment leaves query rows "
                    f"0..{sq - skv - 1} without a key (refused, not defined)")
        return None


# The --shapes syntax of a case (config.parse_shape; docs/SDPA.md "Cases"): ASCII digits, no comma or space, so a
# comma-separated list stays unambiguous.
CASE_SYNTAX = "BxHqxSqxD[:BxHkvxSkvxD][:causal]"
CASE_EXAMPLE = "8x32x4x128:8x8x32768x128:causal"  # speculative decode: 4 new rows of 32 heads on 8 K/V heads
SEQ_MAX = 1 << 30  # Sq and Skv: the runners refuse more (runner.cu)

# A case is memory-bound (its records carry hbm_frac) below this many unmasked flops per byte it must move (with
# E4M3 K/V): the ridge point of the H100/H200 tier of fp16 tensor cores over HBM, 989 TFLOP/s dense (the datasheets,
# TENSOR_PEAK_TFLOPS) over the H200's 4.8 TB/s. Decode (Sq = 1, 4 query heads a K/V head) sits at 8, the Sq = 16
# decode at 128, chunked prefill (Sq 512 on Skv 8K) at 2600 and the square prefill shapes above 900.
MEMORY_BOUND_FLOPS_PER_BYTE = 989e12 / 4.8e12

K = 1024
# Inference cases (issue 50), each a bench preset: decode (one query row per sequence against a long KV cache),
# speculative decode (4 or 16 rows), grouped-query heads of other ratios, chunked prefill (a chunk of new rows
# against the cached keys) and causal prefill of the square shapes. Llama 3's heads: 32 query heads on 8 K/V heads,
# head dim 128. Decode at B = 64 with Skv = 128K is left out: its K and V are 2 x 8 GiB of E4M3, 2 x 16 GiB as the
# torch peer's fp16 copy, and the float64 check of its outputs reads them decoded (2 x 64 GiB): more than an H200's
# 141 GiB and the GPU host's 128 GiB of memory.
DECODE_CASES: dict[str, AttnCase] = {
    **{f"decode_b{b}_{skv // K}k": AttnCase((b, 32, 1, 128), (b, 8, skv, 128))
       for b in (1, 8, 64) for skv in (4 * K, 32 * K, 128 * K) if (b, skv) != (64, 128 * K)},
    # speculative decode: 4 and 16 draft rows per sequence, causal among themselves (bottom-right)
    "decode_b8_32k_sq4": AttnCase((8, 32, 4, 128), (8, 8, 32 * K, 128), causal=True),
    "decode_b8_32k_sq16": AttnCase((8, 32, 16, 128), (8, 8, 32 * K, 128), causal=True),
    # Llama 3 70B's 64 query heads on 8; one K/V head for 32 query heads (MQA)
    "decode_b8_32k_hq64": AttnCase((8, 64, 1, 128), (8, 8, 32 * K, 128)),
    "decode_b8_32k_mqa": AttnCase((8, 32, 1, 128), (8, 1, 32 * K, 128)),
}
CHUNKED_PREFILL_CASES: dict[str, AttnCase] = {
    "chunk_sq512_8k": AttnCase((1, 32, 512, 128), (1, 8, 8 * K, 128), causal=True),
    "chunk_sq2048_32k": AttnCase((1, 32, 2048, 128), (1, 8, 32 * K, 128), causal=True),
}
# Causal prefill at the five large default shapes (MHA, square): each with its non-causal twin, the shape itself,
# against which thresholds.toml's [[sdpa.causal_ratio]] gates compare it.
CAUSAL_TWINS: dict[str, str] = {f"{n}_causal": n for n in ("large", "heads32", "batch8", "large_d128", "long_d128")}
CAUSAL_PREFILL_CASES: dict[str, AttnCase] = {
    name: AttnCase(SDPA_SHAPES[twin], SDPA_SHAPES[twin], causal=True) for name, twin in CAUSAL_TWINS.items()}
# The inference kernels' paths at sizes the sanitizers get through (stress; on 132-SM H100/H200): the decode kernel
# with its chunks merged by the last block (2 x 2 K/V heads, 94 key tiles: 11 chunks; one warp a key group), with 32
# rows a K/V head (MQA: two warps a key group) and with 64 rows (four warps) at head dim 64 under the mask; the
# Hopper kernels with grouped heads, Sq != Skv and the mask (head dim 128, G 4) and without it (head dim 64, G 2,
# tails in Sq and Skv).
SANITIZER_CASES: dict[str, AttnCase] = {
    "san_decode_split": AttnCase((2, 8, 1, 128), (2, 2, 3000, 128)),
    "san_decode_rows32": AttnCase((1, 32, 1, 128), (1, 1, 2000, 128)),
    # 32 rows per K/V head in chunks long enough for the fp16 tier's two row tiles per warp (kernels_cuda/sdpa_decode
    # plan.h: 16 tiles a key group): 48 (b, hkv) in 2 chunks of 128 tiles on 132 SMs, the mask.
    "san_decode_two_tiles_d64": AttnCase((12, 32, 4, 64), (12, 4, 8192, 64), causal=True),
    # 64 rows per K/V head: since 2026-11-29 both tiers run these on the Hopper kernel's key chunks (kernels_cuda/
    # sdpa_fp8_sm90 KVCHUNK: 2 chunks, the packed rows' mask; san_decode_rows32 too in the fp8 tier, from 17 rows);
    # san_kv_chunks_d128 the key chunks without the mask over 3 chunks (12 tiles, the last with a tail).
    "san_decode_rows64_d64": AttnCase((1, 8, 16, 64), (1, 2, 1000, 64), causal=True),
    "san_kv_chunks_d128": AttnCase((1, 16, 16, 128), (1, 4, 1500, 128)),
    "san_gqa_causal_d128": AttnCase((1, 8, 300, 128), (1, 2, 700, 128), causal=True),
    "san_gqa_d64": AttnCase((2, 6, 200, 64), (2, 3, 450, 64)),
    # Since 2026-11-29 the fp8 tier's rule takes the 256-key kernel at head dim 128 where it pads no more keys
    # (unsplit_d128 reaches it without the mask) and, with the mask, from 8192 keys: its causal kernel over 33
    # tiles with a tail, 68 units (unsplit on 132 SMs); and the 128-key kernel unsplit with Q in one term, over five
    # tiles with a tail, that unsplit_d128 reached before.
    "san_bn256_causal_d128": AttnCase((1, 68, 128, 128), (1, 4, 8292, 128), causal=True),
    "unsplit128_d128": AttnCase((1, 14, 600, 128), (1, 14, 600, 128)),
    # Since 2026-11-29 the fp8 tier at head dim 128 runs three consumer warpgroups on 128-key tiles where a makespan
    # model finds them faster than the 256-key kernel (kernels_cuda/sdpa_fp8_sm90 SDPA_SM90_NCWG3_D128): here 128 units
    # on 132 SMs against the 256-key kernel's 160, each head's last unit one warpgroup's 64 rows.
    "san_ncwg3_d128": AttnCase((1, 32, 640, 128), (1, 8, 768, 128)),
}
# SDPA shapes run under every sanitizer: small, mission and tail run the split-KV configs the
# heuristic picks for them (head dim 64); unsplit3_d64, unsplit_d128 and unsplit_wide_d128 the Hopper
# kernel's unsplit configurations (three consumer warpgroups at head dim 64, two at 128 with 128- and
# 192-key tiles) over two K/V tiles with a tail; split_odd_d128 the split configuration over five K/V tiles
# (the merge after warpgroup 0's last tile); `large` is left out because racecheck takes minutes
# over its blocks.
# Since 2026-11-29 also the inference kernels' paths (config.SANITIZER_CASES: the decode kernel split and with 64
# rows, the Hopper kernels with grouped heads, Sq != Skv and the mask). Names of SDPA_CASES; `stress
# --sanitizer-shapes` runs others.
SANITIZED_SHAPES = ("small", "mission", "tail", "unsplit3_d64", "unsplit_d128", "unsplit_wide_d128", "short_d128",
                    "short_split_d128", "split_odd_d128", *SANITIZER_CASES)
# Sanitizer cases that also run with each tier's decode kernel forced (`--kernel decode_sm89|decode_fp8_sm89`): on an
# sm_90 GPU `--kernel auto` gives their rows to the Hopper kernel's key chunks (from 33 rows per K/V head in the fp16
# tier, 17 in the fp8 tier: kernels_cuda/sdpa_fp8_sm90 kv_auto_min_rows), and the decode kernel's two- and four-warp
# groups are still what sm_89 builds and `--kernel decode_*` run. (Elsewhere a forced run repeats auto's.)
SANITIZER_FORCED_DECODE = ("san_decode_rows32", "san_decode_rows64_d64")
# Every named case: the square shapes above, then the inference presets.
SDPA_CASES: dict[str, AttnCase] = {**{n: AttnCase.of(d) for n, d in SDPA_SHAPES.items()}, **DECODE_CASES,
                                   **CHUNKED_PREFILL_CASES, **CAUSAL_PREFILL_CASES, **SANITIZER_CASES}
# Names that stand for several cases in --shapes, in this order. causal_prefill takes each causal case's twin
# before it, so that its [[sdpa.causal_ratio]] gates have both sides in the run.
SDPA_CASE_GROUPS: dict[str, tuple[str, ...]] = {
    "decode": tuple(DECODE_CASES),
    "chunked_prefill": tuple(CHUNKED_PREFILL_CASES),
    "causal_prefill": tuple(n for causal, twin in CAUSAL_TWINS.items() for n in (twin, causal)),
}
# What `bench` times and checks by default: every shape above but the seeds' small and tail.
BENCH_SDPA_SHAPES = ("mission", "large", "odd", "heads32", "batch8", "large_d128", "long_d128")
BENCH_SDPA_SEEDS = (0, 1, 2)
# The SDPA precision tiers (records.Precision; docs/SDPA.md): fp16 = fp16 compute on the FP8-stored K/V (the
# contract users read, and the default), fp8 = Q and P rounded to E4M3 for the FP8 tensor cores (Hopper only).
PRECISIONS = ("fp16", "fp8")
# The fp8 tier's Q in Q K^T (the runner's --q-terms): auto = the kernel's policy (two E4M3 terms in short launches,
# one elsewhere: kernels_cuda/sdpa_fp8_sm90/config.cuh SDPA_SM90_FP8_Q2); 1 = one term at every shape (the same
# numerics everywhere); 2 = two, an error at a shape whose fp8 kernel has one.
Q_TERMS = ("auto", "1", "2")
DEFAULT_PRECISIONS = ("fp16",)
# The input distributions `bench` checks every shape on (reference/sdpa.py DISTRIBUTIONS names them all; stress
# and the GPU tests check every one): N(0, 1) and the large logits that separate the tiers. Timing stays on
# `normal`: the time of a launch does not depend on the values it reads.
BENCH_SDPA_DISTRIBUTIONS = ("normal", "large_logits_4", "large_logits_8")

# Dense tensor-core peak per precision tier, TFLOP/s without sparsity, by the GPU model that DeviceInfo.kind
# names (`2xH200` -> H200): NVIDIA's H100 SXM5 and H200 datasheets (989 fp16/bf16, 1979 FP8). H100 PCIe and
# H100 NVL boards carry the same model word with other clocks and SM counts, so their full names (as NVML
# reports them) get no peak; neither does any GPU not in the table. Read by tensor_peak_tflops only.
TENSOR_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"fp16": 989.0, "fp8": 1979.0},
    "H200": {"fp16": 989.0, "fp8": 1979.0},
}
_OTHER_BOARDS = ("PCIe", "NVL")


def tensor_peak_tflops(device_kind: str, gpu_name: str, precision: str) -> float | None:
    """The dense tensor peak of `precision` on this GPU (TENSOR_PEAK_TFLOPS), or None where it is not known."""
    model = device_kind.split("x", 1)[1] if "x" in device_kind else device_kind
    if any(board in gpu_name for board in _OTHER_BOARDS):
        return None
    return TENSOR_PEAK_TFLOPS.get(model, {}).get(precision)

_SIZE_RE = re.compile(r"([0-9]+)([KMG]?)")  # ASCII digits: \d and str.isdigit also take `٣` and `²`
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_SIZE_BYTES = 16 << 30
# The most digits a number on the command line may have: more than any option takes (16G is 11 digits), and few
# enough that int() never refuses the text (it does past 4300 digits) nor float() overflows on it.
MAX_DIGITS = 12

# The whole-number options and the range each takes (parse_whole). The SDPA runners refuse more than 10^7 timed or
# warm-up launches and more than 10^5 launches a batch (kernels_cuda/sdpa_fp8/runner.cu): the driver refuses
# them first, for every executable.
WHOLE_RANGES: dict[str, tuple[int, int]] = {
    "--iters": (1, 10_000_000),
    "--warmup": (0, 10_000_000),
    "--batch": (1, 100_000),
    "--rounds": (1, 1000),
    "--timeout": (1, 7 * 24 * 3600),  # seconds before a launch counts as hung
    "--poll": (1, 3600),  # seconds between Slurm state queries
    "--gpus": (1, 1024),  # GPUs per cluster task
}
TASK_TIME_LIMIT_S = (60, 365 * 24 * 3600)  # submit --timeout: a Slurm task's time limit, seconds
SEED_RANGE = (0, (1 << 32) - 1)  # --seeds: numpy's generator takes any, a 32-bit seed is what anyone passes
SHAPE_DIM_MAX = (1 << 31) - 1  # B, H, S and D of an explicit shape: a CUDA grid dimension's int
MAX_SOAK_MINUTES = 7 * 24 * 60


def _brief(text: str) -> str:
    """A user's string for an error line, its first characters only where it is long (a 5000-digit --sizes)."""
    return repr(text if len(text) <= 24 else text[:20] + "...")


def parse_whole(text: str, what: str, bounds: tuple[int, int] | None = None) -> int:
    """A whole number in [lo, hi] (`bounds`, else WHOLE_RANGES[what]): ASCII digits only, at most MAX_DIGITS of
    them, around them only blanks. The one parser of every whole-number option."""
    lo, hi = bounds or WHOLE_RANGES[what]
    token = text.strip()
    hint = f"{what} must be a whole number >= {lo}, at most {hi}"
    if not re.fullmatch(r"[0-9]+", token):
        raise ConfigError(f"malformed {what} {_brief(text)}", hint)
    if len(token) > MAX_DIGITS or not lo <= int(token) <= hi:
        raise ConfigError(f"{what} {_brief(token)} is out of range", hint)
    return int(token)


def fold(values: Sequence[T],
         key: Callable[[T], object] = lambda v: v) -> tuple[tuple[T, ...], tuple[tuple[T, T], ...]]:
    """Each value once, in the order first given, and every later repeat with the value it repeats (same `key`).
    A list option that names a value twice runs it once, and the CLI says which it folded (docs/BUILD.md)."""
    kept: dict[object, T] = {}
    repeats: list[tuple[T, T]] = []
    for v in values:
        k = key(v)
        if k in kept:
            repeats.append((v, kept[k]))
        else:
            kept[k] = v
    return tuple(kept.values()), tuple(repeats)


def parse_size(text: str) -> int:
    """`256K` -> 262144. Suffixes are powers of 1024, as in nccl-tests."""
    token = text.strip().upper()
    if token.endswith("B") and len(token) > 1 and token[-2] in "KMG":
        token = token[:-1]
    m = _SIZE_RE.fullmatch(token)
    if not m:
        raise ConfigError(
            f"malformed size {_brief(text)}",
            "sizes are whole byte counts with an optional K, M or G suffix, e.g. 256K,16M,1G",
        )
    if len(m.group(1)) > MAX_DIGITS:
        raise ConfigError(f"size {_brief(text)} is above the {MAX_SIZE_BYTES >> 30}G limit")
    value = int(m.group(1)) * _UNITS[m.group(2)]
    if value > MAX_SIZE_BYTES:
        raise ConfigError(f"size {_brief(text)} is {value} bytes, above the {MAX_SIZE_BYTES >> 30}G limit")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """`256K,16M` -> every size given, in order (a repeat too: the CLI folds them, config.fold)."""
    parts = [p for p in text.split(",")]
    if not text.strip() or any(not p.strip() for p in parts):
        raise ConfigError(f"malformed size list {_brief(text)}", "give comma-separated sizes, e.g. 256K,16M")
    return tuple(parse_size(p) for p in parts)


def size_problem(nbytes: int, dtype: str) -> str | None:
    """Why no run can time `nbytes` of `dtype` (None: it can): the executables take whole elements only,
    at least one, and --sizes stops at MAX_SIZE_BYTES."""
    if nbytes == 0:
        return "size 0 is no element at all: an allreduce of nothing times nothing"
    if nbytes > MAX_SIZE_BYTES:
        return f"size {nbytes} bytes is above the {MAX_SIZE_BYTES >> 30}G limit"
    if nbytes % ELEM_BYTES[dtype]:
        shown = format_size(nbytes) + ("" if format_size(nbytes) == str(nbytes) else f" ({nbytes} bytes)")
        return f"size {shown} is not a multiple of the {ELEM_BYTES[dtype]}-byte {dtype} element"
    return None


def check_sizes(sizes: tuple[int, ...], dtypes: tuple[str, ...]) -> None:
    """Refuse, before any build, a size the executables would refuse only once a GPU was found."""
    for nbytes in sizes:
        for dtype in dtypes:
            why = size_problem(nbytes, dtype)
            if why:
                step = max(ELEM_BYTES[d] for d in dtypes)  # 4 or 2: each is a multiple of the other
                raise ConfigError(f"--sizes: {why}", f"with --dtype {','.join(dtypes)} give sizes of at least "
                                  f"{step} bytes, multiples of {step}, e.g. 256K,16M")


def format_size(nbytes: int) -> str:
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def _parse_choice_list(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise ConfigError(f"empty {what} list", f"choose from {', '.join(allowed)}")
    for item in items:
        if item not in allowed:
            raise ConfigError(f"unknown {what} {_brief(item)}", f"choose from {', '.join(allowed)}")
    return items


def parse_archs(text: str) -> tuple[str, ...]:
    return _parse_choice_list(text, SUPPORTED_ARCHS, "GPU architecture")


def parse_registered(text: str, kind: str) -> tuple[str, ...]:
    """`bench --peers` / `--variants`: names among driver/registry.py's registered peers or variants."""
    from driver import registry

    return _parse_choice_list(text, registry.registered(kind), kind.removesuffix("s"))


def parse_dtypes(text: str) -> tuple[str, ...]:
    return _parse_choice_list(text, DTYPES, "dtype")


def parse_suite(text: str) -> tuple[str, ...]:
    """`allreduce,sdpa` -> both, in that order; `all` -> every suite (a suite named twice is there twice)."""
    items = _parse_choice_list(text, SUITES, "suite")
    return tuple(s for item in items for s in (("allreduce", "sdpa") if item == "all" else (item,)))


def parse_timing(text: str) -> tuple[str, ...]:
    """`--timing cold,hot` -> ("cold", "hot"); `device` and `host` are aliases of cold and hot."""
    allowed = (*TIMING_MODES, *TIMING_ALIASES)
    items = _parse_choice_list(text, allowed, "timing mode")
    return tuple(TIMING_ALIASES.get(i, i) for i in items)


def parse_kernel(text: str) -> str:
    """An allreduce kernel name (ALLREDUCE_KERNELS) or 1stage_cpasync_sN."""
    name = text.strip()
    if name in ALLREDUCE_KERNELS or name in ALLREDUCE_KERNEL_NAMES:
        return name
    allowed = dict.fromkeys([*ALLREDUCE_KERNELS, *ALLREDUCE_KERNEL_NAMES])
    raise ConfigError(f"unknown kernel {_brief(text)}", f"choose from {', '.join(allowed)}")


def kernel_flags(kernel: str) -> list[str]:
    """The allreduce executable's flags for a kernel name: `1stage_cpasync_s3` -> --kernel 1stage_cpasync --stages 3."""
    m = re.fullmatch(r"(.+)_s(\d+)", kernel)
    return ["--kernel", m.group(1), "--stages", m.group(2)] if m else ["--kernel", kernel]


def parse_ngpus(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(rf"[0-9]{{1,{MAX_DIGITS}}}", part) or int(part) not in SUPPORTED_NGPUS:
            raise ConfigError(
                f"unsupported GPU count {_brief(part)}",
                f"the allreduce kernels are built for {', '.join(map(str, SUPPORTED_NGPUS))} GPUs",
            )
        out.append(int(part))
    return tuple(out)


_DIMS = r"([0-9]+)[xX]([0-9]+)[xX]([0-9]+)[xX]([0-9]+)"
_CASE_RE = re.compile(rf"{_DIMS}(?::{_DIMS})?(:causal)?")


def _case_hint() -> str:
    return (f"use a name (mission, large, decode_b8_32k, ...: `bench --help` lists them), a group "
            f"({', '.join(SDPA_CASE_GROUPS)}) or {CASE_SYNTAX} (q, then k/v where it differs, then the bottom-right "
            f"mask), e.g. 1x8x512x64 or {CASE_EXAMPLE}")


def parse_shape(text: str) -> tuple[str, AttnCase]:
    """One case of --shapes: a name (SDPA_CASES) or CASE_SYNTAX in ASCII digits; (the name runs call it by, the
    case). `BxHxSxD` is the square case, named as before 2026-11-28. Bad input (runner.cu's checks, made here
    before anything runs) is one ConfigError."""
    name = text.strip()
    if name in SDPA_CASES:
        return name, SDPA_CASES[name]
    m = _CASE_RE.fullmatch(name)
    if not m:
        raise ConfigError(f"malformed shape {_brief(text)}", _case_hint())
    given = [p for p in m.groups()[:8] if p is not None]
    if any(len(p) > MAX_DIGITS or int(p) > SHAPE_DIM_MAX for p in given):
        raise ConfigError(f"shape {_brief(text)} has a dimension above {SHAPE_DIM_MAX}",
                          f"B, H, S and D are whole numbers from 1 to {SHAPE_DIM_MAX}")
    q = tuple(int(p) for p in given[:4])
    kv = tuple(int(p) for p in given[4:]) or q
    case = AttnCase(q, kv, causal=m.group(9) is not None)  # type: ignore[arg-type]
    if q[2] == 0 or kv[2] == 0:
        seq = "S" if q == kv else "Sq" if q[2] == 0 else "Skv"
        raise ConfigError(f"shape {_brief(text)} has {seq} = 0: there is no sequence to attend over",
                          "Sq and Skv must be at least 1")
    why = case.problem()
    if why:
        raise ConfigError(f"shape {_brief(text)} {why}", _case_hint())
    return case.name, case


def parse_shapes(text: str) -> tuple[tuple[str, AttnCase], ...]:
    """`--shapes`: cases (parse_shape) and groups (SDPA_CASE_GROUPS: each stands for its cases), in order."""
    items = text.split(",")
    if not text.strip() or any(not p.strip() for p in items):
        raise ConfigError("empty shape list", _case_hint())
    out: list[tuple[str, AttnCase]] = []
    for item in items:
        names = SDPA_CASE_GROUPS.get(item.strip(), (item,))
        out += [parse_shape(n) for n in names]
    return tuple(out)


def noncausal_twin(name: str) -> str | None:
    """The name runs give the same case without its mask (a preset's name where one has that case, e.g. large for
    large_causal; else the syntax), or None where `name` is no causal case."""
    try:
        _, case = parse_shape(name)
    except ConfigError:
        return None
    if not case.causal:
        return None
    twin = AttnCase(case.q_shape, case.kv_shape)
    return next((n for n, c in SDPA_CASES.items() if c == twin), twin.name)


def parse_seeds(text: str) -> tuple[int, ...]:
    """`0,1,2` -> every seed given, in order."""
    if not text.strip() or any(not p.strip() for p in text.split(",")):
        raise ConfigError(f"malformed seed list {_brief(text)}", "give comma-separated whole numbers, e.g. 0,1,2")
    return tuple(parse_whole(p, "--seeds", SEED_RANGE) for p in text.split(","))


def parse_precisions(text: str) -> tuple[str, ...]:
    """`--precision fp16,fp8`: the SDPA precision tiers to check and time, in that order."""
    return _parse_choice_list(text, PRECISIONS, "precision tier")


def parse_q_terms(text: str, precisions: tuple[str, ...]) -> str:
    """`--q-terms auto|1|2`: the fp8 tier's E4M3 terms of Q, passed to our runners for that tier only."""
    value = text.strip()
    if value not in Q_TERMS:
        raise ConfigError(f"unknown --q-terms {_brief(text)}", f"give one of {', '.join(Q_TERMS)} (docs/SDPA.md)")
    if value != "auto" and "fp8" not in precisions:
        raise ConfigError(f"--q-terms {value} applies to the fp8 tier, and --precision {','.join(precisions)} "
                          "leaves it out", "add fp8 to --precision, or leave --q-terms out")
    return value


def parse_distributions(text: str) -> tuple[str, ...]:
    """`--distributions normal,large_logits_8`: names of reference/sdpa.py DISTRIBUTIONS (`all`: every one)."""
    from driver.reference.sdpa import DISTRIBUTIONS  # numpy: loaded only where SDPA inputs are asked for

    names = tuple(DISTRIBUTIONS)
    if text.strip() == "all":
        return names
    return _parse_choice_list(text, names, "input distribution")


def parse_minutes(text: str) -> float:
    """`--minutes`: a non-negative number of minutes, ASCII digits with an optional decimal point (0 = soak by
    count only), at most MAX_SOAK_MINUTES."""
    token = text.strip()
    hint = f"give a number of minutes >= 0, at most {MAX_SOAK_MINUTES}, e.g. --minutes 10"
    if not re.fullmatch(rf"[0-9]{{1,{MAX_DIGITS}}}(\.[0-9]{{0,{MAX_DIGITS}}})?|\.[0-9]{{1,{MAX_DIGITS}}}", token):
        raise ConfigError(f"malformed --minutes {_brief(text)}", hint)
    value = float(token)
    if value > MAX_SOAK_MINUTES:
        raise ConfigError(f"--minutes {_brief(token)} is out of range", hint)
    return value
