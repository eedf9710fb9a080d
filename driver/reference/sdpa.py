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
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from driver.reference import inputs
from driver.reference.inputs import (  # noqa: F401 - the names callers know from here
    DISTRIBUTIONS,
    OUTLIER_CHANNELS,
    OUTLIER_GAIN,
    SINK_LOGIT,
    Distribution,
)

E4M3_MAX = inputs.E4M3_MAX
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
    """The codes by arithmetic, not by search (inputs.encode_e4m3, the one encoder the generator uses in numpy and in
    torch: exact integer and power-of-two steps); tests/test_sdpa_reference.py keeps the search over every code value
    as the oracle."""
    if np.isnan(a).any():
        raise ValueError("encode_e4m3_sim: NaN input")
    return inputs.encode_e4m3(inputs.NUMPY, a)


def make_inputs(q_shape, kv_shape=None, seed=0, distribution="normal", *, workers: int | None = None):
    """Deterministic inputs for one case: Q [B, Hq, Sq, D], K and V [B, Hkv, Skv, D], a seed and a distribution
    (`DISTRIBUTIONS`), made in numpy by the generator of driver/reference/inputs.py (the same bits as on a GPU).

    Returns (q_f16, k_u8, v_u8, k_scale, v_scale): Q in fp16; K, V as E4M3 codes of x / scale, scale = amax / 448
    rounded to float32 (as the kernel receives it). The square case's form `make_inputs(shape, seed, distribution)`
    (one [B, H, S, D] for all three) is accepted too. `workers`: threads over chunks (default: half the cores)."""
    if kv_shape is None or isinstance(kv_shape, int | np.integer):  # make_inputs(shape, seed[, distribution])
        if isinstance(kv_shape, int | np.integer):
            seed, distribution = int(kv_shape), seed if isinstance(seed, str) else distribution
        kv_shape = q_shape
    q_shape, kv_shape = inputs.check_shapes(q_shape, kv_shape)
    inputs.distribution_of(distribution)
    target = inputs.make(inputs.NUMPY, q_shape, kv_shape, int(seed), distribution,
                         inputs.in_memory(q_shape, kv_shape), workers or max(1, (os.cpu_count() or 2) // 2))
    return (target.q.reshape(q_shape), target.k.reshape(kv_shape), target.v.reshape(kv_shape), target.k_scale,
            target.v_scale)


# Decoded K and V of the (batch, K/V head) groups that `reference` holds at once, at most (float64): its threads
# are fewer where one group's keys are many (decode at Skv = 128K: 256 MiB a group).
_GROUP_BYTES = 2 << 30


def reference(q: np.ndarray, k_u8: np.ndarray, v_u8: np.ndarray, k_scale: float, v_scale: float, *,
              causal: bool = False, workers: int | None = None) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) + mask) V in float64 with K = decode(k_u8) * k_scale (same for V).

    Q is [B, Hq, Sq, D]; K and V are [B, Hkv, Skv, D] with Hq a multiple of Hkv: query head h reads K/V head
    h // (Hq / Hkv). `causal`: bottom-right aligned, query row i sees keys j <= i + Skv - Sq (Sq <= Skv). Each (b, K/V
    head) group stacks its Hq / Hkv query heads' rows and computes them in blocks of rows (at most `_BLOCK_ELEMS`
    scores at a time, so the score matrix of a long sequence never exists and a block stays in cache; a causal block
    reads only the keys its last row sees), in place; groups run on `workers` threads (default: every core, fewer
    where the decoded K/V would pass `_GROUP_BYTES`), numpy releasing the GIL inside its loops and matrix products.
    """
    q = np.asarray(q)
    if k_u8.shape != v_u8.shape:
        raise ValueError(f"K and V must share one [B,Hkv,Skv,D] shape, got {k_u8.shape} and {v_u8.shape}")
    (B, Hq, Sq, D), (_, Hkv, Skv, _) = inputs.check_shapes(q.shape, k_u8.shape, causal)
    group = Hq // Hkv
    rows = group * Sq
    out = np.empty((B, Hq, Sq, D), dtype=np.float64)
    scale = 1.0 / math.sqrt(D)
    block = max(1, min(rows, _BLOCK_ELEMS // Skv))

    def one(bh: tuple[int, int]) -> None:
        b, h = bh
        qg = q[b, h * group:(h + 1) * group].reshape(rows, D).astype(np.float64) * scale  # row g Sq + i
        kt = np.ascontiguousarray((decode_e4m3_sim(k_u8[b, h]) * float(k_scale)).T)
        vh = decode_e4m3_sim(v_u8[b, h]) * float(v_scale)
        og = np.empty((rows, D), dtype=np.float64)
        for r0 in range(0, rows, block):
            r1 = min(rows, r0 + block)
            if causal:
                last = np.arange(r0, r1) % Sq + (Skv - Sq)  # the last key each row sees
                keys = int(last.max()) + 1
                s = qg[r0:r1] @ kt[:, :keys]
                s[np.arange(keys)[None, :] > last[:, None]] = -np.inf
            else:
                keys = Skv
                s = qg[r0:r1] @ kt
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            o = s @ vh[:keys]
            o /= s.sum(axis=1, keepdims=True)
            og[r0:r1] = o
        out[b, h * group:(h + 1) * group] = og.reshape(group, Sq, D)

    groups = [(b, h) for b in range(B) for h in range(Hkv)]
    n = min(len(groups), workers or os.cpu_count() or 1, max(1, _GROUP_BYTES // (2 * Skv * D * 8)))
    if n <= 1:
        for bh in groups:
            one(bh)
    else:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(one, groups))
    return out
