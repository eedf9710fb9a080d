"""CPU tests of the SDPA inputs' generator (driver/reference/inputs.py) and of the generalized reference (GQA head
groups, the bottom-right causal mask) against direct float64 computations. The GPU side (the same bits from torch on
a CUDA device) is checked by tests/gpu/test_reference_gpu.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from driver.reference import inputs
from driver.reference import sdpa as ref

NP = inputs.NUMPY
# Random123's published known answers for Philox4x32-10 (its kat_vectors): counter, key, output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr, key, want", PHILOX_KAT)
def test_philox_gives_random123s_known_answers(ctr, key, want):
    lanes = [np.array([c, 0], dtype=np.uint64) for c in ctr]
    got = inputs.philox(NP, *lanes, *key)
    assert tuple(int(x[0]) for x in got) == want
    assert tuple(inputs.philox(NP, *ctr, *key)) == want  # the integer path (a lane that is still one number)


def _split_mulhilo(x: np.ndarray, m: int):
    """TorchBackend.mulhilo's arithmetic (16-bit halves of m, every product < 2^49) on int64 numpy arrays."""
    t_lo, t_hi = x * (m & 0xFFFF), x * (m >> 16)
    s = t_lo + ((t_hi & 0xFFFF) << 16)
    return (t_hi >> 16) + (s >> 32), s & inputs.M32


def test_the_split_multiply_of_the_torch_side_is_the_full_product():
    x = np.concatenate([np.random.default_rng(0).integers(0, 1 << 32, 100_000), [0, 1, (1 << 32) - 1]])
    for m in inputs.PHILOX_M:
        hi, lo = _split_mulhilo(x.astype(np.int64), m)
        full = [int(v) * m for v in x]
        assert [int(h) for h in hi] == [f >> 32 for f in full] and [int(v) for v in lo] == [f & inputs.M32 for f in full]


def test_normals_are_standard_normal():
    """Mean, std, kurtosis and the Kolmogorov-Smirnov distance of 2^20 draws, each within 5 standard errors (KS:
    its 0.1% critical value)."""
    z = inputs.normals(NP, 0, inputs.STREAM_Q, 0, 1 << 20)
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.std() - 1) < 5 * math.sqrt(0.5 / n)
    assert abs(np.mean(z ** 4) - 3) < 5 * math.sqrt(96 / n)
    zs = np.sort(z[: 1 << 16])
    cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in zs]))
    m = zs.size
    ks = max(np.max(np.arange(1, m + 1) / m - cdf), np.max(cdf - np.arange(m) / m))
    assert ks < 1.95 / math.sqrt(m)
    assert np.abs(z).max() < 6.8  # u >= 2^-33


def test_an_elements_value_depends_on_its_index_only():
    whole = inputs.normals(NP, 5, inputs.STREAM_K, 0, 1000)
    np.testing.assert_array_equal(inputs.normals(NP, 5, inputs.STREAM_K, 400, 123), whole[400:523])
    assert not np.array_equal(inputs.normals(NP, 5, inputs.STREAM_V, 0, 1000), whole)
    assert not np.array_equal(inputs.normals(NP, 6, inputs.STREAM_K, 0, 1000), whole)
    far = inputs.normals(NP, 5, inputs.STREAM_K, (1 << 34) - 8, 16)  # counters past 2^32: the counter's high word
    assert np.isfinite(far).all() and not np.array_equal(far[:8], far[8:])


def test_the_polynomials_are_the_functions():
    u = np.concatenate([np.linspace(2.0 ** -33, 1 - 2.0 ** -33, 10_001), [0.5, 2.0 ** -33]])
    np.testing.assert_allclose(inputs._ln_unit(NP, u), np.log(u), rtol=4e-16, atol=4e-16)
    t = np.concatenate([np.geomspace(2.0 ** -33, 47, 10_001), [1.0, 4.0, 2.0]])
    assert np.all(np.abs(inputs._sqrt(NP, t) - np.sqrt(t)) <= np.spacing(np.sqrt(t)))  # within an ulp
    a = np.arange(0, 1 << 32, 4097, dtype=np.uint64)
    z0, z1 = inputs._normals_of(NP, np.full(a.size, 0x9E3779B9, np.uint64), a)
    r = math.sqrt(-2 * math.log((0x9E3779B9 + 0.5) * 2.0 ** -32))
    angle = 2 * np.pi * (a.astype(np.float64) + 0.5) * 2.0 ** -32
    np.testing.assert_allclose(z0, r * np.cos(angle), rtol=0, atol=1e-15)
    np.testing.assert_allclose(z1, r * np.sin(angle), rtol=0, atol=1e-15)


def test_encode_is_encode_e4m3_sim_on_every_kind_of_value():
    """The generator's encoder on the values that decide it (every code, the midpoints, the doubles either side,
    zero of both signs, subnormal doubles, 448 and past it) is the searched nearest code of test_sdpa_reference."""
    from tests.test_sdpa_reference import _nearest_code_by_search

    pos = ref.decode_e4m3_sim(np.arange(0x7F, dtype=np.uint8))
    mids = (pos[1:] + pos[:-1]) / 2
    x = np.concatenate([pos, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), [5e-324, 1e-310, 448.0, 449.0,
                                                                                        463.99, 464.0, 1e300]])
    x = np.concatenate([x, -x, [-0.0]])
    np.testing.assert_array_equal(inputs.encode_e4m3(NP, x), _nearest_code_by_search(x))


@pytest.mark.parametrize("q_shape, kv_shape", [((2, 8, 5, 64), (2, 2, 37, 64)), ((1, 4, 1, 128), (1, 1, 300, 128)),
                                               ((1, 2, 16, 64), (1, 2, 16, 64))])
def test_make_inputs_shapes_dtypes_and_scales(q_shape, kv_shape):
    q, k, v, ks, vs = ref.make_inputs(q_shape, kv_shape, 1, "normal")
    assert q.shape == q_shape and k.shape == kv_shape and v.shape == kv_shape
    assert q.dtype == np.float16 and k.dtype == np.uint8 and v.dtype == np.uint8
    assert ks == float(np.float32(ks)) and vs == float(np.float32(vs)) and ks > 0 and vs > 0
    assert not np.isin(k, [0x7F, 0xFF]).any() and not np.isin(v, [0x7F, 0xFF]).any()
    assert np.abs(ref.decode_e4m3_sim(k)).max() >= 416.0  # amax / scale is 448 (one ulp of float32 either way)
    # Q and K are the streams' normals, stored: Q fp16(fp32(z)); K encode(z / scale) with scale = fp32(amax / 448)
    z_q = inputs.normals(NP, 1, inputs.STREAM_Q, 0, math.prod(q_shape))
    np.testing.assert_array_equal(q.reshape(-1), z_q.astype(np.float32).astype(np.float16))
    z_k = inputs.normals(NP, 1, inputs.STREAM_K, 0, math.prod(kv_shape))
    assert ks == float(np.float32(np.abs(z_k).max() / 448.0))
    np.testing.assert_array_equal(k.reshape(-1), ref.encode_e4m3_sim(z_k / ks))


def test_the_square_call_form_is_the_general_one():
    a = ref.make_inputs((1, 2, 32, 64), 3, "sink")
    b = ref.make_inputs((1, 2, 32, 64), (1, 2, 32, 64), 3, "sink")
    c = ref.make_inputs((1, 2, 32, 64), seed=3, distribution="sink")
    for x, y, w in zip(a, b, c):
        assert np.array_equal(x, y) and np.array_equal(x, w)


def test_chunks_threads_and_the_two_pass_path_make_the_same_bytes(monkeypatch):
    """Chunks of 512 elements on 3 threads, K and V made twice (amax, then codes) instead of kept: the same bytes."""
    args = ((2, 8, 5, 64), (2, 2, 37, 64), 4)
    want = {d: ref.make_inputs(*args, d, workers=1) for d in ("sink", "outlier_channels", "large_v")}
    monkeypatch.setitem(inputs.CHUNK_ELEMS, "numpy", 512)
    monkeypatch.setitem(inputs.KEEP_ELEMS, "numpy", 1000)
    for d, w in want.items():
        got = ref.make_inputs(*args, d, workers=3)
        assert all(np.array_equal(x, y) for x, y in zip(got[:3], w[:3])) and got[3:] == w[3:], d


def test_write_files_are_make_inputs(tmp_path):
    files, scales = inputs.write_files(NP, tmp_path, (1, 4, 3, 64), (1, 2, 50, 64), 2, "outlier_channels")
    want = ref.make_inputs((1, 4, 3, 64), (1, 2, 50, 64), 2, "outlier_channels")
    for name, arr in zip("qkv", want[:3]):
        np.testing.assert_array_equal(np.load(files[name]), arr)
    np.testing.assert_array_equal(np.load(files["scales"]), np.array(want[3:], dtype=np.float32))
    assert scales == want[3:]


def test_the_sink_of_a_kv_head_is_shared_by_its_query_heads():
    q, k_u8, _v, ks, _vs = ref.make_inputs((2, 8, 64, 64), (2, 2, 256, 64), 4, "sink")
    k = ref.decode_e4m3_sim(k_u8) * ks
    for h in range(8):
        s = q[:, h].astype(np.float64) @ k[:, h // 4].transpose(0, 2, 1) / 8.0  # [B, Sq, Skv]
        assert 8 < s[..., 0].mean() < 12 and abs(s[..., 1:].mean()) < 1.5, (h, s[..., 0].mean())


def test_bad_shapes_are_refused_with_the_reason():
    for q_shape, kv_shape, causal, why in [((1, 6, 4, 64), (1, 4, 4, 64), False, "not a multiple"),
                                           ((1, 4, 9, 64), (1, 2, 8, 64), True, "see no key"),
                                           ((2, 4, 4, 64), (1, 4, 4, 64), False, "share B and D"),
                                           ((1, 4, 4, 64), (1, 4, 4), False, "positive entries")]:
        with pytest.raises(ValueError, match=why):
            inputs.check_shapes(q_shape, kv_shape, causal)
    q, k, v, ks, vs = ref.make_inputs((1, 4, 9, 64), (1, 2, 8, 64), 0)
    with pytest.raises(ValueError, match="see no key"):
        ref.reference(q, k, v, ks, vs, causal=True)


def _naive(q, k, v, causal: bool) -> np.ndarray:
    """Query head h against K/V head h // (Hq / Hkv), row i against keys j <= i + Skv - Sq when causal: loops."""
    b_, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    out = np.zeros(q.shape)
    for b in range(b_):
        for h in range(hq):
            kh, vh = k[b, h // (hq // hkv)], v[b, h // (hq // hkv)]
            for i in range(sq):
                keys = [j for j in range(skv) if not causal or j <= i + skv - sq]
                logits = np.array([np.dot(q[b, h, i], kh[j]) / math.sqrt(d) for j in keys])
                w = np.exp(logits - logits.max())
                out[b, h, i] = (w[:, None] * vh[keys]).sum(axis=0) / w.sum()
    return out


@pytest.mark.parametrize("q_shape, kv_shape, causal", [
    ((2, 4, 5, 8), (2, 2, 9, 8), True),  # GQA, Sq < Skv: row 0 sees 5 keys
    ((1, 4, 1, 16), (1, 1, 40, 16), True),  # MQA decode: one row sees every key
    ((1, 2, 7, 8), (1, 2, 7, 8), True),  # square causal: row i sees i + 1 keys
    ((1, 6, 3, 8), (1, 3, 11, 8), False),  # GQA, not causal
])
def test_reference_is_the_naive_masked_grouped_softmax(q_shape, kv_shape, causal, monkeypatch):
    q, k_u8, v_u8, ks, vs = ref.make_inputs(q_shape, kv_shape, 7, "large_logits_4")
    want = _naive(q.astype(np.float64), ref.decode_e4m3_sim(k_u8) * ks, ref.decode_e4m3_sim(v_u8) * vs, causal)
    got = ref.reference(q, k_u8, v_u8, ks, vs, causal=causal)
    assert got.shape == q_shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    monkeypatch.setattr(ref, "_BLOCK_ELEMS", 1)  # one row per block, on 3 threads
    np.testing.assert_allclose(ref.reference(q, k_u8, v_u8, ks, vs, causal=causal, workers=3), got, rtol=1e-13,
                               atol=1e-15 * np.abs(want).max())


def test_causal_is_bottom_right_aligned():
    """With Sq = 1 the one row sees every key (the causal and plain references agree); with Sq = Skv row 0 sees key 0
    only, so its output is V's row 0."""
    q, k, v, ks, vs = ref.make_inputs((1, 2, 1, 64), (1, 2, 50, 64), 0)
    np.testing.assert_array_equal(ref.reference(q, k, v, ks, vs, causal=True), ref.reference(q, k, v, ks, vs))
    q, k, v, ks, vs = ref.make_inputs((1, 2, 6, 64), (1, 2, 6, 64), 0)
    out = ref.reference(q, k, v, ks, vs, causal=True)
    np.testing.assert_allclose(out[:, :, 0], ref.decode_e4m3_sim(v[:, :, 0]) * vs, rtol=1e-15)


@pytest.mark.parametrize("args, why", [
    (["--q-shape", "2,5,3,64", "--kv-shape", "2,2,30,64"], "Hq = 5 is not a multiple of Hkv = 2"),
    (["--q-shape", "2,4,3", "--kv-shape", "2,2,30,64"], "a shape is B,H,S,D"),
    (["--q-shape", "2,4,3,64", "--kv-shape", "2,2,30,64", "--distribution", "wide"], "unknown input distribution"),
])
def test_the_gpu_workers_make_inputs_refuses_bad_input_before_torch(tmp_path, args, why):
    """One `error:` line and exit 2, before torch is imported (so it holds on a machine without torch or a GPU)."""
    import subprocess
    import sys

    full = ["--make-inputs", str(tmp_path), "--seed", "0", "--distribution", "normal", *args]
    res = subprocess.run([sys.executable, "-m", "driver.reference.sdpa_gpu", *full], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and why in res.stderr and res.stderr.count("\n") == 1, res.stderr
