"""A test oracle of the generalized attention case (config.AttnCase), for the CPU tests of the case's threading
through the driver: inputs of a q shape and a k/v shape, and a float64 reference with grouped-query heads and the
bottom-right causal mask, in the signatures driver/suites/sdpa.py calls driver/reference/sdpa.py by
(make_inputs(q_shape, kv_shape, seed, distribution), reference(..., causal=..., workers=...)).

Written plainly (a loop over heads, the mask as a boolean matrix) so that it is easy to check by eye;
tests/test_sdpa_cases.py checks it against driver/reference/sdpa.py on square cases and against a materialized
mask by brute force. It is not the product's reference: driver/reference/ is.
"""

from __future__ import annotations

import math

import numpy as np

from driver.reference import sdpa as ref


def make_inputs(q_shape, kv_shape, seed: int, distribution: str = "normal"):
    """Q drawn at q's shape, then K and V at k/v's shape, from one seeded generator and the named distribution
    (reference/sdpa.py DISTRIBUTIONS), stored as make_inputs stores them: Q fp16, K and V E4M3 codes with a
    per-tensor scale amax / 448 rounded to float32. (A distribution that ties Q to K, the sink, keeps its K here but
    not its tie to Q: enough for threading tests, which compare an output with this module's own reference.)"""
    rng = np.random.default_rng(seed)
    draw = ref.DISTRIBUTIONS[distribution].draw
    q64 = draw(rng, tuple(q_shape))[0]
    _, k64, v64 = draw(rng, tuple(kv_shape))
    out: list = [q64.astype(np.float16)]
    scales = []
    for x in (k64, v64):
        amax = float(np.max(np.abs(x)))
        scale = float(np.float32(amax / ref.E4M3_MAX)) if amax > 0 else 1.0
        out.append(ref.encode_e4m3_sim(x / scale))
        scales.append(scale)
    return out[0], out[1], out[2], scales[0], scales[1]


def visible(sq: int, skv: int, causal: bool) -> np.ndarray:
    """[Sq, Skv] booleans: which keys each query row sees (bottom-right: j <= i + Skv - Sq)."""
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    return (j <= i + skv - sq) if causal else np.ones((sq, skv), dtype=bool)


def reference(q, k_u8, v_u8, k_scale, v_scale, *, causal: bool = False, workers=None) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) over the keys each row sees) V in float64; query head h reads K/V head h // G."""
    del workers
    b, hq, sq, d = q.shape
    _, hkv, skv, _ = k_u8.shape
    group = hq // hkv
    k = ref.decode_e4m3_sim(k_u8) * float(k_scale)
    v = ref.decode_e4m3_sim(v_u8) * float(v_scale)
    mask = visible(sq, skv, causal)
    out = np.empty((b, hq, sq, d))
    for bi in range(b):
        for h in range(hq):
            s = (q[bi, h].astype(np.float64) / math.sqrt(d)) @ k[bi, h // group].T
            s = np.where(mask, s, -np.inf)
            s -= s.max(axis=1, keepdims=True)
            w = np.exp(s)
            out[bi, h] = (w @ v[bi, h // group]) / w.sum(axis=1, keepdims=True)
    return out
