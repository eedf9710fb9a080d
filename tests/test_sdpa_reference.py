"""CPU tests of the FP8 SDPA reference (driver/reference/sdpa.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from driver.reference.sdpa import (
    decode_e4m3_sim,
    encode_e4m3_sim,
    make_inputs,
    reference,
)

NAN_CODES = {0x7F, 0xFF}


def test_known_codes():
    cases = {
        0x00: 0.0,
        0x38: 1.0,
        0xB8: -1.0,
        0x40: 2.0,
        0x30: 0.5,
        0x3C: 1.5,
        0x7E: 448.0,
        0xFE: -448.0,
        0x08: 2.0**-6,  # smallest normal
        0x01: 2.0**-9,  # smallest subnormal
        0x07: 7 * 2.0**-9,  # largest subnormal
    }
    codes = np.array(list(cases), dtype=np.uint8)
    got = decode_e4m3_sim(codes)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.array(list(cases.values())))
    neg_zero = decode_e4m3_sim(np.array([0x80], dtype=np.uint8))[0]
    assert neg_zero == 0.0 and math.copysign(1.0, neg_zero) == -1.0


def test_nan_codes():
    assert np.isnan(decode_e4m3_sim(np.array([0x7F, 0xFF], dtype=np.uint8))).all()


def test_round_trip_all_codes():
    codes = np.array([c for c in range(256) if c not in NAN_CODES], dtype=np.uint8)
    assert codes.size == 254
    vals = decode_e4m3_sim(codes)
    assert np.isfinite(vals).all()
    np.testing.assert_array_equal(encode_e4m3_sim(vals), codes)


def test_decode_monotonic_and_fp16_exact():
    pos = decode_e4m3_sim(np.arange(0x7F, dtype=np.uint8))
    assert np.all(np.diff(pos) > 0)
    # every E4M3 value is an fp16 value (the kernel decodes to fp16 exactly)
    np.testing.assert_array_equal(pos.astype(np.float16).astype(np.float64), pos)


def test_saturation():
    x = np.array([448.0, 449.0, 464.0, 1e6, np.inf, -500.0, -np.inf])
    np.testing.assert_array_equal(encode_e4m3_sim(x), np.array([0x7E] * 5 + [0xFE] * 2, dtype=np.uint8))
    with pytest.raises(ValueError):
        encode_e4m3_sim(np.array([np.nan]))


def test_round_to_nearest_even():
    # between 1.0 (0x38) and 1.125 (0x39): midpoint ties to the even code 0x38
    assert encode_e4m3_sim(np.array([1.0625]))[0] == 0x38
    # between 1.125 (0x39) and 1.25 (0x3A): midpoint ties to 0x3A
    assert encode_e4m3_sim(np.array([1.1875]))[0] == 0x3A
    assert encode_e4m3_sim(np.array([1.07]))[0] == 0x39
    # half the smallest subnormal ties to zero; slightly more rounds up
    assert encode_e4m3_sim(np.array([2.0**-10]))[0] == 0x00
    assert encode_e4m3_sim(np.array([2.0**-10 * 1.01]))[0] == 0x01
    # negative zero keeps its sign
    assert encode_e4m3_sim(np.array([-0.0]))[0] == 0x80


def _nearest_code_by_search(a: np.ndarray) -> np.ndarray:
    """The oracle: the code whose value is nearest |a| (saturated at 448), ties to the even code, found by
    searching every non-negative code value; the encoder computes it by arithmetic instead."""
    pos = decode_e4m3_sim(np.arange(0x7F, dtype=np.uint8))
    mag = np.minimum(np.abs(a), 448.0)
    hi = np.minimum(np.searchsorted(pos, mag, side="left"), 0x7E)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - pos[lo], pos[hi] - mag
    take_hi = (d_hi == 0) | (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return (np.where(take_hi, hi, lo) | np.where(np.signbit(a), 0x80, 0)).astype(np.uint8)


def test_encode_is_the_nearest_code_everywhere():
    """Every code value, every midpoint between neighbours and the doubles either side of it, the edges
    (zero, subnormals, the smallest double, 448 and beyond, inf), both signs, and normals at six scales:
    the arithmetic encoder gives the searched nearest code for each."""
    pos = decode_e4m3_sim(np.arange(0x7F, dtype=np.uint8))
    mids = (pos[1:] + pos[:-1]) / 2
    edges = [0.0, 2.0**-12, 2.0**-10, 2.0**-9, 2.0**-6, 5e-324, 1e-300, 448.0, 449.0, 464.0, 480.0, 1e9, np.inf]
    x = np.concatenate([pos, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), edges])
    rng = np.random.default_rng(7)
    x = np.concatenate([x, -x, [-0.0], *(rng.standard_normal(100_000) * s for s in (1e-4, 1e-2, 1, 10, 100, 1e4))])
    np.testing.assert_array_equal(encode_e4m3_sim(x), _nearest_code_by_search(x))


def test_encode_error_bound():
    rng = np.random.default_rng(123)
    x = rng.uniform(-448, 448, size=10000)
    y = decode_e4m3_sim(encode_e4m3_sim(x))
    normal = np.abs(x) >= 2.0**-6
    rel = np.abs(y - x)[normal] / np.abs(x)[normal]
    assert rel.max() <= 2.0**-4 + 1e-12  # half an ulp of a 3-bit mantissa


def _naive(q, k, v):
    B, H, S, D = q.shape
    out = np.zeros((B, H, S, D))
    for b in range(B):
        for h in range(H):
            for i in range(S):
                logits = np.array([np.dot(q[b, h, i], k[b, h, j]) / math.sqrt(D) for j in range(S)])
                w = np.exp(logits - logits.max())
                w /= w.sum()
                out[b, h, i] = (w[:, None] * v[b, h]).sum(axis=0)
    return out


def test_reference_matches_naive_softmax():
    q, k_u8, v_u8, ks, vs = make_inputs((1, 2, 5, 8), seed=7)
    ref = reference(q, k_u8, v_u8, ks, vs)
    k = decode_e4m3_sim(k_u8) * ks
    v = decode_e4m3_sim(v_u8) * vs
    np.testing.assert_allclose(ref, _naive(q.astype(np.float64), k, v), rtol=1e-12, atol=1e-12)
    assert ref.shape == (1, 2, 5, 8) and ref.dtype == np.float64


def test_make_inputs_deterministic_and_seeded():
    a = make_inputs((1, 2, 16, 64), seed=0)
    b = make_inputs((1, 2, 16, 64), seed=0)
    c = make_inputs((1, 2, 16, 64), seed=1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[1], c[1])
    q, k, v, ks, vs = a
    assert q.dtype == np.float16 and k.dtype == np.uint8 and v.dtype == np.uint8
    assert isinstance(ks, float) and isinstance(vs, float) and ks > 0 and vs > 0
    assert ks == float(np.float32(ks)) and vs == float(np.float32(vs))
    assert not np.isin(k, list(NAN_CODES)).any() and not np.isin(v, list(NAN_CODES)).any()
    # the largest |K| maps to (about) the top code
    assert np.abs(decode_e4m3_sim(k)).max() >= 416.0


def test_reference_blocks_and_threads_do_not_change_the_result(monkeypatch):
    """Blocks of one query row and heads on several threads: the same numbers as one block, one thread."""
    from driver.reference import sdpa as ref_mod

    q, k_u8, v_u8, ks, vs = make_inputs((2, 3, 40, 16), seed=5)
    whole = reference(q, k_u8, v_u8, ks, vs, workers=1)
    monkeypatch.setattr(ref_mod, "_BLOCK_ELEMS", 40)  # 40 keys per block: one query row at a time
    split = reference(q, k_u8, v_u8, ks, vs, workers=4)
    np.testing.assert_allclose(split, whole, rtol=1e-13, atol=1e-15)
    k = decode_e4m3_sim(k_u8) * ks
    v = decode_e4m3_sim(v_u8) * vs
    np.testing.assert_allclose(split, _naive(q.astype(np.float64), k, v), rtol=1e-12, atol=1e-12)


def test_reference_rejects_shapes_that_disagree():
    q, k_u8, v_u8, ks, vs = make_inputs((1, 2, 8, 16), seed=0)
    with pytest.raises(ValueError, match="share one"):
        reference(q, k_u8[:, :, :4], v_u8, ks, vs)


def test_large_arrays_encode_in_chunks_to_the_same_codes(monkeypatch):
    """encode_e4m3_sim splits a large array over threads; the codes must be those of one pass, NaN still
    refused wherever it sits."""
    from driver.reference import sdpa as ref_mod

    monkeypatch.setattr(ref_mod, "_PARALLEL_ELEMS", 1000)  # chunks of 1000, the last one partial
    x = np.random.default_rng(3).standard_normal((3, 7, 1001)) * 300
    x.flat[::97] = 0.0
    x.flat[1::89] = -0.0
    assert np.array_equal(ref_mod.encode_e4m3_sim(x), ref_mod._encode(x))
    x.flat[20000] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ref_mod.encode_e4m3_sim(x)


def _scores(q, k_u8, ks):
    d = q.shape[-1]
    k = decode_e4m3_sim(k_u8) * ks
    return np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k) / np.sqrt(d)


def test_every_distribution_is_deterministic_and_seeded():
    from driver.reference.sdpa import DISTRIBUTIONS

    for name in DISTRIBUTIONS:
        a, b = make_inputs((1, 2, 16, 64), seed=3, distribution=name), make_inputs((1, 2, 16, 64), 3, name)
        assert all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b)), name
        c = make_inputs((1, 2, 16, 64), 4, name)
        assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[1], c[1]), name
    with pytest.raises(ValueError, match="unknown input distribution 'wide'.*large_logits_4"):
        make_inputs((1, 1, 4, 64), 0, "wide")


@pytest.mark.parametrize("name, lo, hi", [("normal", 0.8, 1.2), ("large_logits_4", 13, 19), ("large_logits_8", 52, 76)])
def test_large_logits_have_the_score_spread_they_are_named_for(name, lo, hi):
    q, k_u8, _v, ks, _vs = make_inputs((1, 4, 256, 64), seed=1, distribution=name)
    assert lo < _scores(q, k_u8, ks).std() < hi


def test_outlier_channels_are_four_key_channels_twenty_times_the_rest():
    q, k_u8, _v, ks, _vs = make_inputs((1, 2, 512, 64), seed=2, distribution="outlier_channels")
    per_channel = np.sort((decode_e4m3_sim(k_u8) * ks).std(axis=(0, 1, 2)))
    assert (per_channel[-4:] > 15 * np.median(per_channel)).all() and per_channel[-5] < 2 * np.median(per_channel)
    q_channel = np.sort(q.astype(np.float64).std(axis=(0, 1, 2)))
    assert q_channel[-1] < 1.5 * np.median(q_channel)  # Q stays plain


def test_the_sink_key_takes_a_large_share_of_every_heads_attention():
    q, k_u8, _v, ks, _vs = make_inputs((2, 3, 300, 64), seed=4, distribution="sink")
    s = _scores(q, k_u8, ks)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    share = p[..., 0].mean(axis=-1)  # per head: mean attention weight on key 0
    assert (share > 0.3).all(), share
    assert 8 < s[..., 0].mean() < 12  # the sink's mean score is SINK_LOGIT


@pytest.mark.parametrize("name, q_std, v_std", [("tiny", 0.01, 0.01), ("large_v", 1.0, 100.0)])
def test_magnitudes(name, q_std, v_std):
    q, _k, v_u8, _ks, vs = make_inputs((1, 2, 256, 64), seed=5, distribution=name)
    assert 0.9 * q_std < q.astype(np.float64).std() < 1.1 * q_std
    assert 0.9 * v_std < (decode_e4m3_sim(v_u8) * vs).std() < 1.1 * v_std
