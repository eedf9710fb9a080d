"""The SDPA inputs: one counter-based generator whose integers and floats are the same bits in numpy (on the CPU) and
in torch (on a GPU), so that the inputs of a case do not depend on where they were made.

    make(backend, q_shape, kv_shape, seed, distribution, target)   Q [B,Hq,Sq,D] fp16; K, V [B,Hkv,Skv,D] E4M3
                                                                   codes with per-tensor scales amax / 448

The generator, from the integers up (every step exact or one IEEE-754 rounding, in the same order in both):
- Integers: Philox4x32-10 (Salmon et al., SC'11; the generator of cuRAND and of torch's CUDA RNG), keyed by
  (seed, stream): one stream per tensor (Q, K, V) and for the two small draws of `sink` and `outlier_channels`.
  Counter c gives 4 words, which become elements 4c..4c+3 of the tensor in its flat (row-major) order: an element's
  value depends only on (seed, stream, its flat index). Checked against Random123's published answers.
  Exact integer arithmetic in both libraries: numpy multiplies in uint64 (a 32 x 32-bit product fits); torch in int64
  with the multiplier split in 16-bit halves, so that no product overflows.
- Normals: Box-Muller on each pair of words (a, b): r = sqrt(-2 ln u) with u = (a + 1/2) 2^-32 (never 0), and the
  angle 2 pi (b + 1/2) 2^-32, its quadrant from b's top two bits. ln, sin and cos are polynomials evaluated here with
  float64 +, -, x, / and sqrt only (IEEE-754 correctly rounded in numpy and in CUDA; no fused multiply-add, as each
  torch operation is its own kernel, and no division by a scalar, which torch's CUDA kernels turn into a multiply by
  the reciprocal). So the float64 normals are the same bits; their error against the true ln, sin, cos is ~1e-16.
  |z| <= 6.77 (u >= 2^-33): a normal passes it once in 8e10 draws.
- Stored: Q = fp16(fp32(x)) (two roundings to nearest even, as torch converts a float64 to fp16); K, V: scale =
  fp32(amax|x| / 448) (1 where amax is 0), codes = encode_e4m3(x / scale) by integer and power-of-two arithmetic
  (round to nearest even, saturating at 448: encode_e4m3_sim's codes, bit for bit).

A tensor's amax comes before its codes: it is kept whole in float64 while small (KEEP_ELEMS); past that it is made
twice in chunks (amax, then codes), so a K or V of 2^31 elements never exists in float64 on any device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

E4M3_MAX = 448.0
M32 = 0xFFFFFFFF
# Philox4x32-10's multipliers and Weyl key increments (Random123).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
PHILOX_ROUNDS = 10
# Streams (Philox key word 1) per seed (key word 0).
STREAM_Q, STREAM_K, STREAM_V, STREAM_SINK, STREAM_OUTLIER = 1, 2, 3, 4, 5
GENERATOR = "philox4x32-10 + box-muller (float64, +-x/ sqrt only), per (seed, tensor) stream"

# Coefficients as Python floats, computed once: the same doubles on both sides.
_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_LOG_C = tuple(1.0 / (2 * k + 1) for k in range(12))  # ln m = 2 s sum s^2k / (2k+1), |s| <= 0.172
_SIN_C = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(12))  # on [0, pi/2]
_COS_C = tuple((-1) ** k / math.factorial(2 * k) for k in range(13))
_ANGLE = (math.pi / 2) * 2.0 ** -30  # one step of the 30-bit angle within a quadrant


class NumpyBackend:
    """numpy on the CPU: lanes are uint64 holding 32-bit words (a 32 x 32-bit product fits). Every operation of the
    generator is one of these methods or an operator (+ - * / & ^ >> <<, comparisons), exact or one IEEE rounding."""

    name = "numpy"
    lane = np.uint64

    def arange(self, start, stop):
        return np.arange(start, stop, dtype=np.uint64)

    def mulhilo(self, x, m):
        if isinstance(x, int):
            p = x * m
            return p >> 32, p & M32
        p = x * np.uint64(m)  # < 2^64: exact in uint64
        return p >> np.uint64(32), p & np.uint64(M32)

    def f64(self, x):
        return x.astype(np.float64)

    def i64(self, x):
        return x.astype(np.int64)

    def bits(self, x):
        return x.view(np.int64)

    def from_bits(self, x):
        return x.astype(np.int64).view(np.float64)

    def where(self, c, a, b):
        return np.where(c, a, b)

    def sqrt(self, x):
        return np.sqrt(x)

    def rint(self, x):
        return np.rint(x)

    def clamp_max(self, x, hi):
        return np.minimum(x, hi)

    def max_int(self, x, lo):
        return np.maximum(x, lo)

    def concat(self, xs):
        return np.concatenate(xs)

    def interleave(self, xs):
        return np.stack(xs, axis=-1).reshape(-1)

    def div_scalar(self, x, s):
        return x / s

    def amax(self, x):
        return float(np.max(np.abs(x))) if x.size else 0.0

    def to_f16(self, x):
        return x.astype(np.float32).astype(np.float16)

    def to_u8(self, x):
        return x.astype(np.uint8)

    def host(self, x):
        return x

    def device(self, x):
        return x

    def empty_f64(self, n):
        return np.empty(n, dtype=np.float64)

    def keep_elems(self) -> int:
        return KEEP_ELEMS["numpy"]


class TorchBackend:
    """torch on `device` (a CUDA GPU; "cpu" works too). Lanes are int64 holding 32-bit words."""

    def __init__(self, torch, device: str = "cuda"):
        self.t, self.dev = torch, device
        self.name = f"torch {torch.__version__} {device}"

    def arange(self, start, stop):
        return self.t.arange(start, stop, dtype=self.t.int64, device=self.dev)

    def mulhilo(self, x, m):
        if isinstance(x, int):
            p = x * m
            return p >> 32, p & M32
        # x < 2^32, m = mh 2^16 + ml: x ml and x mh < 2^48; x m = s + (x mh >> 16) 2^32 with s < 2^49
        t_lo, t_hi = x * (m & 0xFFFF), x * (m >> 16)
        s = t_lo + ((t_hi & 0xFFFF) << 16)
        return (t_hi >> 16) + (s >> 32), s & M32

    def f64(self, x):
        return x.to(self.t.float64)

    def i64(self, x):
        return x.to(self.t.int64)

    def bits(self, x):
        return x.view(self.t.int64)

    def from_bits(self, x):
        return x.to(self.t.int64).view(self.t.float64)

    def where(self, c, a, b):
        return self.t.where(c, a, b)

    def sqrt(self, x):
        return self.t.sqrt(x)

    def rint(self, x):
        return self.t.round(x)  # half to even

    def clamp_max(self, x, hi):
        return self.t.clamp(x, max=hi)

    def max_int(self, x, lo):
        return self.t.clamp(x, min=lo)

    def concat(self, xs):
        return self.t.cat(xs)

    def interleave(self, xs):
        return self.t.stack(xs, dim=-1).reshape(-1)

    def div_scalar(self, x, s):
        # a divisor on the device: torch divides by a CPU scalar as a multiply by its reciprocal
        return x / self.t.full((1,), s, dtype=self.t.float64, device=self.dev)

    def amax(self, x):
        return float(x.abs().max().item()) if x.numel() else 0.0

    def to_f16(self, x):
        return x.to(self.t.float32).to(self.t.float16)

    def to_u8(self, x):
        return x.to(self.t.uint8)

    def host(self, x):
        return x.cpu().numpy()

    def device(self, x):
        return self.t.from_numpy(np.ascontiguousarray(x)).to(self.dev)

    def empty_f64(self, n):
        return self.t.empty(n, dtype=self.t.float64, device=self.dev)

    def keep_elems(self) -> int:
        free = self.t.cuda.mem_get_info()[0] if self.dev.startswith("cuda") else 1 << 62
        return min(KEEP_ELEMS["torch"], free // 3 // 8)


Backend = NumpyBackend | TorchBackend
NUMPY = NumpyBackend()


# ---------------------------------------------------------------------------------------------- integers
def philox(be: Backend, c0, c1, c2, c3, k0: int, k1: int):
    """Philox4x32-10 of counters (c0, c1, c2, c3) (arrays of 32-bit words or ints) under key (k0, k1)."""
    for _ in range(PHILOX_ROUNDS):
        hi0, lo0 = be.mulhilo(c0, PHILOX_M[0])
        hi1, lo1 = be.mulhilo(c2, PHILOX_M[1])
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + PHILOX_W[0]) & M32, (k1 + PHILOX_W[1]) & M32
    return c0, c1, c2, c3


def _key(seed: int) -> int:
    if not 0 <= seed <= M32:
        raise ValueError(f"seed must be in [0, 2^32), got {seed}")
    return seed


def words(be: Backend, seed: int, stream: int, first: int, count: int):
    """4 x `count` words: those of counters first .. first + count - 1, word j of counter c at 4 (c - first) + j."""
    ctr = be.arange(first, first + count)
    hi = first + count - 1 >= 1 << 32
    out = philox(be, ctr & M32, (ctr >> 32) if hi else 0, 0, 0, _key(seed), stream)
    return be.interleave([x if not isinstance(x, int) else ctr * 0 + x for x in out])


# ---------------------------------------------------------------------------------------------- floats
def _poly(x, coefs: tuple[float, ...]):
    """sum coefs[k] x^k by Horner: (c_n x + c_{n-1}) x + ..., one rounding per + and x."""
    p = x * coefs[-1] + coefs[-2]
    for c in reversed(coefs[:-2]):
        p = p * x + c
    return p


def _ln_unit(be: Backend, u):
    """ln u for u in (0, 1): u = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1))."""
    b = be.bits(u)
    m = be.from_bits((b & ((1 << 52) - 1)) | (1023 << 52))  # [1, 2)
    big = m > _SQRT2
    m = be.where(big, m * 0.5, m)
    e = be.f64((b >> 52) - 1023 + be.i64(big))
    s = (m - 1.0) / (m + 1.0)
    return e * _LN2 + (s * _poly(s * s, _LOG_C)) * 2.0


def _sqrt(be: Backend, t):
    """sqrt t for t in [2^-33, 47] by Newton's iteration y <- (y + t / y) / 2 from a guess by halving t's exponent
    (within 6%): the relative error squares each step (6e-2, 2e-3, 2e-6, 1e-12, 1e-16 at the fifth: within an ulp of
    the rounded root). Library square roots are not the same bits everywhere (torch's CPU kernels differ from numpy's
    in 1 value of 40)."""
    y = be.from_bits(((be.bits(t) - (1023 << 52)) >> 1) + (1023 << 52))
    for _ in range(5):
        y = (y + t / y) * 0.5
    return y


def _normals_of(be: Backend, a, b):
    """Box-Muller: the pair of normals (r cos t, r sin t) of each pair of words (a, b)."""
    u = (be.f64(a) + 0.5) * 2.0 ** -32
    r = _sqrt(be, _ln_unit(be, u) * -2.0)
    quadrant = b >> 30
    phi = (be.f64(b & ((1 << 30) - 1)) + 0.5) * _ANGLE  # (0, pi/2)
    x2 = phi * phi
    s, c = phi * _poly(x2, _SIN_C), _poly(x2, _COS_C)
    # t = quadrant pi/2 + phi: (cos t, sin t) = (c, s), (-s, c), (-c, -s), (s, -c)
    odd, upper = (quadrant & 1) == 1, quadrant >= 2
    cos_t = be.where(odd, -s, c)
    sin_t = be.where(odd, c, s)
    cos_t = be.where(upper, -cos_t, cos_t)
    sin_t = be.where(upper, -sin_t, sin_t)
    return r * cos_t, r * sin_t


def normals(be: Backend, seed: int, stream: int, start: int, count: int):
    """Elements start .. start + count - 1 of the stream's standard normals (float64); start a multiple of 4."""
    if start % 4:
        raise ValueError("normals: start must be a multiple of 4")
    n_ctr = (count + 3) // 4
    w = words(be, seed, stream, start // 4, n_ctr)
    w4 = [w[j::4] for j in range(4)]
    z0, z1 = _normals_of(be, be.concat([w4[0], w4[2]]), be.concat([w4[1], w4[3]]))
    out = be.interleave([z0[:n_ctr], z1[:n_ctr], z0[n_ctr:], z1[n_ctr:]])
    return out[:count]


# ---------------------------------------------------------------------------------------------- E4M3
def encode_e4m3(be: Backend, a):
    """float64 -> uint8 E4M3 codes, round to nearest even, saturating at +-448 (never 0x7F / 0xFF); the sign of
    zero kept. |a| = f 2^e (binade e, at least -6: E4M3's smallest normal binade, which also spaces the
    subnormals) has its codes spaced 2^(e-3) apart: q = rint(|a| 2^(3-e)) (a power-of-two product: exact), and the
    code is 8 e + 48 + q (q = 16 lands on the next binade's first code; the code's parity is q's, so ties go to the
    even code). NaN is the caller's to refuse."""
    neg = be.bits(a) < 0
    mag = be.clamp_max(abs(a), E4M3_MAX)
    e = be.max_int((be.bits(mag) >> 52) - 1023, -6)  # a zero or subnormal double: -1023 -> -6
    q = be.rint(mag * be.from_bits((1026 - e) << 52))  # 2^(3 - e), e in [-6, 8]
    code = e * 8 + 48 + be.i64(q)
    return be.to_u8(be.where(neg, code + 128, code))


# ---------------------------------------------------------------------------------------------- distributions
OUTLIER_CHANNELS, OUTLIER_GAIN = 4, 20.0  # head-dim channels of K that are 20x larger
SINK_LOGIT = 10.0  # the mean score (after 1/sqrt(D)) of every query against the sink key


@dataclass(frozen=True)
class Distribution:
    """A named family of SDPA inputs: standard normals (one stream per tensor) times a std per tensor, with the
    changes `outlier_channels` and `sink` (below) where set. `what` says what it stands for."""

    name: str
    what: str
    q_std: float = 1.0
    k_std: float = 1.0
    v_std: float = 1.0
    outlier_channels: bool = False  # OUTLIER_CHANNELS head-dim channels of K times OUTLIER_GAIN (the same in every head)
    sink: bool = False  # key 0 of every K/V head is one every query of its group scores SINK_LOGIT on average


DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (
    Distribution("normal", "Q, K, V ~ N(0, 1): scores of std 1"),
    Distribution("large_logits_4", "Q and K with std 4: scores of std 16 (no QK-norm)", q_std=4.0, k_std=4.0),
    Distribution("large_logits_8", "Q and K with std 8: scores of std 64, a few keys take all the weight",
                 q_std=8.0, k_std=8.0),
    Distribution("outlier_channels", f"{OUTLIER_CHANNELS} head-dim channels of K {OUTLIER_GAIN:g}x larger "
                 "(the key outlier channels of LLMs)", outlier_channels=True),
    Distribution("sink", f"one key per head that every query scores {SINK_LOGIT:g} above the rest on average "
                 "(attention sink)", sink=True),
    Distribution("tiny", "Q, K, V with std 0.01: tiny magnitudes", q_std=0.01, k_std=0.01, v_std=0.01),
    Distribution("large_v", "V with std 100: a large output scale", v_std=100.0),
)}


def distribution_of(name: str) -> Distribution:
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {name!r} (known: {', '.join(DISTRIBUTIONS)})")
    return DISTRIBUTIONS[name]


def outlier_channels(seed: int, d: int) -> np.ndarray:
    """The K channels `outlier_channels` scales: the OUTLIER_CHANNELS smallest words of its stream (ties by index)."""
    w = words(NUMPY, seed, STREAM_OUTLIER, 0, (d + 3) // 4)[:d]
    return np.sort(np.argsort(w, kind="stable")[:min(OUTLIER_CHANNELS, d)])


def sink_vectors(seed: int, b: int, hkv: int, d: int) -> np.ndarray:
    """[B * Hkv, D] float64 of |b| = 2: the component every query of a K/V head's group shares (made on the host in
    numpy, the same array for either backend). Key 0 of that head is b SINK_LOGIT sqrt(D) / 4, so q . k0 / sqrt(D)
    = |b|^2 SINK_LOGIT / 4 = SINK_LOGIT on average."""
    v = normals(NUMPY, seed, STREAM_SINK, 0, b * hkv * d).reshape(b * hkv, d)
    return v * (2.0 / np.sqrt(np.sum(v * v, axis=1, keepdims=True)))


# ---------------------------------------------------------------------------------------------- shapes
def check_shapes(q_shape, kv_shape, causal: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Q [B, Hq, Sq, D] and K/V [B, Hkv, Skv, D] of one attention case, or ValueError saying what is wrong."""
    q, kv = tuple(int(s) for s in q_shape), tuple(int(s) for s in kv_shape)
    if len(q) != 4 or min(q) < 1:
        raise ValueError(f"Q's shape must be [B, Hq, Sq, D] with positive entries, got {list(q)}")
    if len(kv) != 4 or min(kv) < 1:
        raise ValueError(f"K/V's shape must be [B, Hkv, Skv, D] with positive entries, got {list(kv)}")
    if q[0] != kv[0] or q[3] != kv[3]:
        raise ValueError(f"Q {list(q)} and K/V {list(kv)} must share B and D")
    if q[1] % kv[1]:
        raise ValueError(f"Hq = {q[1]} is not a multiple of Hkv = {kv[1]}")
    if causal and q[2] > kv[2]:
        raise ValueError(f"causal with Sq = {q[2]} > Skv = {kv[2]}: the first {q[2] - kv[2]} query rows would "
                         "see no key (bottom-right alignment)")
    return q, kv


# ---------------------------------------------------------------------------------------------- making a case
CHUNK_ELEMS = {"numpy": 1 << 18, "torch": 1 << 26}  # elements per chunk (whole rows of D, a multiple of 4)
# A K or V past this many elements is made twice (amax, then codes), never kept whole in float64; on a GPU also past a
# third of its free memory.
KEEP_ELEMS = {"numpy": 1 << 26, "torch": 1 << 31}


@dataclass
class CaseArrays:
    """Where the arrays go: flat, writable numpy arrays (in memory, or an open .npy memmap)."""

    q: np.ndarray  # float16, B*Hq*Sq*D
    k: np.ndarray  # uint8, B*Hkv*Skv*D
    v: np.ndarray
    k_scale: float = 1.0
    v_scale: float = 1.0


def _chunks(n: int, step: int):
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def make(be: Backend, q_shape, kv_shape, seed: int, distribution: str, target: CaseArrays,
         workers: int = 1) -> CaseArrays:
    """Fill `target` with the case's inputs; `workers` threads over the chunks (numpy releases the GIL)."""
    (b, hq, sq, d), (_, hkv, skv, _) = check_shapes(q_shape, kv_shape)
    dist = distribution_of(distribution)
    kind = "numpy" if isinstance(be, NumpyBackend) else "torch"
    step = max(1, CHUNK_ELEMS[kind] // (4 * d)) * 4 * d
    group = hq // hkv
    sink = sink_vectors(seed, b, hkv, d) if dist.sink else None
    gain = None
    if dist.outlier_channels:
        g = np.ones(d)
        g[outlier_channels(seed, d)] = OUTLIER_GAIN
        gain = be.device(g)

    def run(fn: Callable[[int, int], Any], n: int) -> list:
        spans = _chunks(n, step)
        if workers <= 1 or len(spans) == 1:
            return [fn(s, e) for s, e in spans]
        with ThreadPoolExecutor(min(workers, len(spans))) as pool:
            return list(pool.map(lambda se: fn(*se), spans))

    sink_q = be.device(sink) if sink is not None else None

    def q_chunk(s: int, e: int) -> None:
        x = normals(be, seed, STREAM_Q, s, e - s)
        if dist.q_std != 1.0:
            x = x * dist.q_std
        if sink_q is not None:  # row r = (b Hq + h) Sq + i sees its K/V head's vector
            rows = be.arange(s // d, e // d)
            head = rows // sq
            x = (x.reshape(-1, d) + sink_q[(head // hq) * hkv + (head % hq) // group]).reshape(-1)
        target.q[s:e] = be.host(be.to_f16(x))

    run(q_chunk, b * hq * sq * d)

    def kv_values(stream: int, std: float, s: int, e: int):
        x = normals(be, seed, stream, s, e - s)
        if std != 1.0:
            x = x * std
        if stream == STREAM_K and gain is not None:
            x = (x.reshape(-1, d) * gain).reshape(-1)
        if stream == STREAM_K and sink is not None:
            first = -(-(s // d) // skv) * skv  # the first row at or after s that is key 0 of its head
            rows = list(range(first, e // d, skv))
            if rows:
                x = x.reshape(-1, d)
                x[be.device(np.array(rows, dtype=np.int64) - s // d)] = be.device(
                    sink[np.array(rows) // skv] * (SINK_LOGIT * math.sqrt(d) / 4.0))
                x = x.reshape(-1)
        return x

    n_kv = b * hkv * skv * d

    def kv_tensor(stream: int, std: float, out: np.ndarray) -> float:
        """The codes of K or V into `out`; its scale."""
        whole = be.empty_f64(n_kv) if n_kv <= be.keep_elems() else None

        def values(s: int, e: int) -> float:
            x = kv_values(stream, std, s, e)
            if whole is not None:
                whole[s:e] = x
            return be.amax(x)

        amax = max(run(values, n_kv))  # kept whole, or made again below for the codes
        scale = float(np.float32(amax / E4M3_MAX)) if amax > 0 else 1.0

        def codes(s: int, e: int) -> None:
            x = whole[s:e] if whole is not None else kv_values(stream, std, s, e)
            out[s:e] = be.host(encode_e4m3(be, be.div_scalar(x, scale)))

        run(codes, n_kv)
        return scale

    target.k_scale = kv_tensor(STREAM_K, dist.k_std, target.k)
    target.v_scale = kv_tensor(STREAM_V, dist.v_std, target.v)
    return target


def in_memory(q_shape, kv_shape) -> CaseArrays:
    q, kv = check_shapes(q_shape, kv_shape)
    return CaseArrays(np.empty(math.prod(q), np.float16), np.empty(math.prod(kv), np.uint8),
                  np.empty(math.prod(kv), np.uint8))


def to_files(folder, q_shape, kv_shape) -> tuple[CaseArrays, dict[str, Any], list]:
    """A CaseArrays whose arrays are the .npy files the runners read (`q k v` in `folder`), written in place."""
    from pathlib import Path

    folder = Path(folder)
    q, kv = check_shapes(q_shape, kv_shape)
    files = {name: folder / f"{name}.npy" for name in ("q", "k", "v", "scales")}
    maps = [np.lib.format.open_memmap(files["q"], mode="w+", dtype=np.float16, shape=q),
            np.lib.format.open_memmap(files["k"], mode="w+", dtype=np.uint8, shape=kv),
            np.lib.format.open_memmap(files["v"], mode="w+", dtype=np.uint8, shape=kv)]
    return CaseArrays(*(m.reshape(-1) for m in maps)), files, maps


def write_files(be: Backend, folder, q_shape, kv_shape, seed: int, distribution: str, workers: int = 1):
    """The case's four .npy files in `folder` (q, k, v, scales [k_scale, v_scale] float32); (files, scales)."""
    target, files, maps = to_files(folder, q_shape, kv_shape)
    make(be, q_shape, kv_shape, seed, distribution, target, workers)
    # No flush (msync): a shared mapping's writes are in the page cache, which every reader of the file reads; a
    # flush would only wait for the disk (these files live for one shape, then go).
    del maps, target.q, target.k, target.v
    np.save(files["scales"], np.array([target.k_scale, target.v_scale], dtype=np.float32))
    return files, (target.k_scale, target.v_scale)
