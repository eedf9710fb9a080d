"""CPU reference for the FP8 (simulated E4M3) SDPA kernels in kernels_cuda/sdpa_fp8/.

numpy only, float64.  The kernel stores K and V as uint8 E4M3 codes (1 sign bit, 4 exponent
bits with bias 7, 3 mantissa bits, subnormals, no infinities, 0x7F/0xFF = NaN) with one
float32 scale per tensor; `decode_e4m3_sim` is exactly the decode the kernel performs (every
E4M3 value is exactly representable in fp16, so the kernel's decode is exact; the scales are
applied in fp32 outside the matrix products).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

E4M3_MAX = 448.0
# Scores per block of query rows in `reference` (4 Mi float64 = 32 MiB).
_BLOCK_ELEMS = 1 << 22


def _decode_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    normal = (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0)
    subnormal = (man / 8.0) * 2.0**-6
    val = sign * np.where(exp == 0, subnormal, normal)
    val[(codes & 0x7F) == 0x7F] = np.nan
    return val


_DECODE = _decode_table()
_DECODE.setflags(write=False)
# Non-negative finite magnitudes, indexed by code 0x00..0x7E (monotonically increasing).
_POS = _DECODE[:0x7F].copy()


def decode_e4m3_sim(u8: np.ndarray) -> np.ndarray:
    """uint8 E4M3 codes -> float64 values (0x7F / 0xFF decode to NaN)."""
    a = np.asarray(u8)
    if a.dtype != np.uint8:
        raise TypeError(f"decode_e4m3_sim expects uint8 codes, got {a.dtype}")
    return _DECODE[a]


_PARALLEL_ELEMS = 1 << 20  # encode larger arrays in chunks of this many elements, on half the cores


def encode_e4m3_sim(x: np.ndarray) -> np.ndarray:
    """float -> uint8 E4M3 codes: round to nearest, ties to even, saturating at +-448.

    Never produces the NaN codes 0x7F / 0xFF.  NaN input raises ValueError; +-inf saturates.
    The sign of zero is kept (-0.0 -> 0x80). Elementwise, so a large array is encoded in chunks on
    half the cores (numpy releases the GIL in its loops): the same codes, several times sooner.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.size <= 2 * _PARALLEL_ELEMS:
        return _encode(a)
    flat = a.reshape(-1)
    out = np.empty(flat.size, dtype=np.uint8)

    def chunk(start: int) -> None:
        out[start:start + _PARALLEL_ELEMS] = _encode(flat[start:start + _PARALLEL_ELEMS])

    starts = range(0, flat.size, _PARALLEL_ELEMS)
    with ThreadPoolExecutor(min(len(starts), max(1, (os.cpu_count() or 2) // 2))) as pool:  # half the cores
        list(pool.map(chunk, starts))
    return out.reshape(a.shape)


def _encode(a: np.ndarray) -> np.ndarray:
    """The codes by arithmetic, not by search: a finite magnitude m <= 448 has the binade e = max(floor(log2 m), -6)
    (-6: E4M3's smallest normal binade, which also spaces the subnormals), and its codes in that binade are
    spaced 2^(e-3) apart; so q = rint(m / 2^(e-3)) (numpy's rint rounds half to even) is the rounded value in
    those steps, and the code is 8 e + 48 + q: the binade's first code (8 (e + 7) for exponent field e + 7; 0 for
    the subnormals) plus q - 8. q = 16 (rounded up into the next binade) lands on that binade's first code,
    and the code's parity is q's, so ties go to the even code. Scaling by a power of two is exact, so this
    is the nearest code, as the search over every code value was (tests/test_sdpa_reference.py keeps that
    search as the oracle); it is about ten times faster, which the bench's inputs of 100 M values feel."""
    if np.isnan(a).any():
        raise ValueError("encode_e4m3_sim: NaN input")
    mag = np.minimum(np.abs(a), E4M3_MAX)
    _, e = np.frexp(mag)  # mag = f * 2^e with f in [0.5, 1): floor(log2 mag) = e - 1
    e = np.maximum(e - 1, -6)
    e[mag == 0] = -6  # frexp(0) gives e = 0
    q = np.rint(np.ldexp(mag, 3 - e))
    code = (8 * e + 48).astype(np.int16) + q.astype(np.int16)
    code = code.astype(np.uint8)
    code |= np.signbit(a).astype(np.uint8) << 7
    return code


@dataclass(frozen=True)
class Distribution:
    """A named family of SDPA inputs: Q, K, V in float64 before they are stored (Q as fp16, K and V as
    E4M3 with a per-tensor scale), drawn from one seeded generator. `what` says what it stands for."""

    name: str
    what: str
    draw: Callable[[np.random.Generator, tuple[int, int, int, int]], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _normal(rng, shape, q_std=1.0, k_std=1.0, v_std=1.0):
    # Q, then K, then V from the one generator: with every std 1 these are exactly the values the
    # `normal` inputs always had.
    return rng.standard_normal(shape) * q_std, rng.standard_normal(shape) * k_std, rng.standard_normal(shape) * v_std


OUTLIER_CHANNELS, OUTLIER_GAIN = 4, 20.0  # head-dim channels of K that are 20x larger
SINK_LOGIT = 10.0  # the mean score (after 1/sqrt(D)) of every query against the sink key


def _outlier_channels(rng, shape):
    """K with a few channels OUTLIER_GAIN times the rest, as keys of LLMs have (KIVI, Liu et al. 2024: per-
    channel key outliers): under one per-tensor E4M3 scale, the other channels keep few significant bits."""
    q, k, v = _normal(rng, shape)
    channels = rng.choice(shape[3], size=min(OUTLIER_CHANNELS, shape[3]), replace=False)
    k[..., channels] *= OUTLIER_GAIN
    return q, k, v


def _sink(rng, shape):
    """Every query shares a component b (per head); key 0 of each head points along b, so that
    q . k0 / sqrt(D) is SINK_LOGIT on average for every query: one key all queries attend to."""
    q, k, v = _normal(rng, shape)
    d = shape[3]
    b = rng.standard_normal((shape[0], shape[1], 1, d))
    b *= 2.0 / np.linalg.norm(b, axis=-1, keepdims=True)  # |b| = 2
    q += b
    k[:, :, :1, :] = b * (SINK_LOGIT * math.sqrt(d) / 4.0)  # b . k0 = |b|^2 * SINK_LOGIT sqrt(D) / 4
    return q, k, v


DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (
    Distribution("normal", "Q, K, V ~ N(0, 1): scores of std 1", _normal),
    Distribution("large_logits_4", "Q and K with std 4: scores of std 16 (no QK-norm)",
                 lambda rng, shape: _normal(rng, shape, 4.0, 4.0)),
    Distribution("large_logits_8", "Q and K with std 8: scores of std 64, a few keys take all the weight",
                 lambda rng, shape: _normal(rng, shape, 8.0, 8.0)),
    Distribution("outlier_channels", f"{OUTLIER_CHANNELS} head-dim channels of K {OUTLIER_GAIN:g}x larger "
                 "(the key outlier channels of LLMs)", _outlier_channels),
    Distribution("sink", f"one key per head that every query scores {SINK_LOGIT:g} above the rest on average "
                 "(attention sink)", _sink),
    Distribution("tiny", "Q, K, V with std 0.01: tiny magnitudes", lambda rng, shape: _normal(rng, shape, 0.01, 0.01, 0.01)),
    Distribution("large_v", "V with std 100: a large output scale", lambda rng, shape: _normal(rng, shape, 1.0, 1.0, 100.0)),
)}


def make_inputs(shape, seed: int, distribution: str = "normal"):
    """Deterministic inputs for one shape (B, H, S, D), seed and distribution (`DISTRIBUTIONS`).

    Returns (q_f16, k_u8, v_u8, k_scale, v_scale): Q rounded to fp16; K, V in float64, per-tensor
    scale = amax / 448 (rounded to float32, as the kernel receives it), stored as encode(x / scale).
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) != 4 or min(shape) < 1:
        raise ValueError(f"shape must be (B, H, S, D) with positive entries, got {shape}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r} (known: {', '.join(DISTRIBUTIONS)})")
    rng = np.random.default_rng(seed)
    q64, k64, v64 = DISTRIBUTIONS[distribution].draw(rng, shape)
    out = [q64.astype(np.float16)]
    scales = []
    for x in (k64, v64):
        amax = float(np.max(np.abs(x)))
        scale = float(np.float32(amax / E4M3_MAX)) if amax > 0 else 1.0
        out.append(encode_e4m3_sim(x / scale))
        scales.append(scale)
    return out[0], out[1], out[2], scales[0], scales[1]


def reference(q: np.ndarray, k_u8: np.ndarray, v_u8: np.ndarray, k_scale: float, v_scale: float, *,
              workers: int | None = None) -> np.ndarray:
    """softmax(Q K^T / sqrt(D)) V in float64 with K = decode(k_u8) * k_scale (same for V).

    Inputs are [B, H, S, D]. Each (b, h) head is computed in blocks of query rows (at most
    `_BLOCK_ELEMS` scores at a time, so the S x S matrix of a long sequence never exists and
    a block stays in cache), in place; heads run on `workers` threads (default: every core),
    numpy releasing the GIL inside its loops and matrix products.
    """
    q = np.asarray(q)
    if q.ndim != 4 or k_u8.shape != q.shape or v_u8.shape != q.shape:
        raise ValueError(f"q, k, v must share one [B,H,S,D] shape, got {q.shape}, {k_u8.shape}, {v_u8.shape}")
    B, H, S, D = q.shape
    out = np.empty((B, H, S, D), dtype=np.float64)
    scale = 1.0 / math.sqrt(D)

    def head(bh: tuple[int, int]) -> None:
        b, h = bh
        qh = q[b, h].astype(np.float64) * scale
        kt = np.ascontiguousarray((decode_e4m3_sim(k_u8[b, h]) * float(k_scale)).T)
        vh = decode_e4m3_sim(v_u8[b, h]) * float(v_scale)
        rows = max(1, min(S, _BLOCK_ELEMS // S))
        for r0 in range(0, S, rows):
            s = qh[r0:r0 + rows] @ kt
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            o = s @ vh
            o /= s.sum(axis=1, keepdims=True)
            out[b, h, r0:r0 + rows] = o

    heads = [(b, h) for b in range(B) for h in range(H)]
    n = min(len(heads), workers or os.cpu_count() or 1)
    if n <= 1:
        for bh in heads:
            head(bh)
    else:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(head, heads))
    return out
