"""CPU check of the decode kernel's register layouts (kernels_cuda/sdpa_decode/), no GPU needed.

The kernel never stages Q, K or V in the layouts the MMAs document: each lane reads 16 contiguous bytes of a key
(K) or of a row of V and gives them to mma.sync in a permuted order (tile_load.cuh's header). That order is right
only if every lane's registers, put through the PTX ISA's fragment layouts, make the products Q K^T and P V.
This test restates, per lane and in Python, what tile_load.cuh and tier_ops.cuh do (the words fetched, the byte
permutes, the decode, the A/B register packing, the output channel of each accumulator) and multiplies the
registers as the tensor core would (the fragment layouts of mma.m16n8k16 .f16 and mma.m16n8k32 .e4m3 written out
below from the PTX ISA), for both tiers and head dims: S and O must equal numpy's products exactly (every value is
exact: fp16 or E4M3 operands, small sums). It also checks the shared-memory swizzle of the cpasync build: a
bijection, the stage fetch's address shortcuts equal to the full formula, and the fetch and copy patterns free of
bank conflicts.
"""

import numpy as np
import pytest

from driver.reference import sdpa as ref

LANES = range(32)
KEYS = 32  # plan.h kTileKeys


def _g(lane):
    return lane // 4


def _t(lane):
    return lane % 4


# ---------------------------------------------------------------- PTX fragment layouts (PTX ISA 8.x, mma.sync)
def a_f16(lane, i):  # m16n8k16 A (.f16): element i of the lane's 8 -> (row, k)
    return _g(lane) + 8 * ((i // 2) % 2), 2 * _t(lane) + i % 2 + 8 * (i // 4)


def b_f16(lane, i):  # m16n8k16 B: element i of 4 -> (k, n)
    return 2 * _t(lane) + i % 2 + 8 * (i // 2), _g(lane)


def a_e4m3(lane, i):  # m16n8k32 A (.e4m3): element i of 16 -> (row, k)
    return _g(lane) + 8 * ((i // 4) % 2), 4 * _t(lane) + i % 4 + 16 * (i // 8)


def b_e4m3(lane, i):  # m16n8k32 B: element i of 8 -> (k, n)
    return 4 * _t(lane) + i % 4 + 16 * (i // 4), _g(lane)


def c_f32(lane, i):  # the accumulator (both shapes): element i of 4 -> (row, n)
    return _g(lane) + 8 * (i // 2), 2 * _t(lane) + i % 2


def _f16_elems(regs):  # registers of fp16 pairs, low half first
    out = []
    for r in regs:
        out += [np.array([r & 0xFFFF], np.uint16).view(np.float16)[0], np.array([r >> 16], np.uint16).view(np.float16)[0]]
    return [float(x) for x in out]


def _e4m3_elems(regs):  # registers of four E4M3 codes, byte 0 first
    codes = np.array([(r >> (8 * b)) & 0xFF for r in regs for b in range(4)], np.uint8)
    return list(ref.decode_e4m3_sim(codes))


def mma(a_regs, b_regs, fp8):
    """C (16x8) = A B from every lane's registers, as the tensor core reads them: lists of 32 lanes' registers."""
    k = 32 if fp8 else 16
    A, B = np.full((16, k), np.nan), np.full((k, 8), np.nan)
    for lane in LANES:
        ea = _e4m3_elems(a_regs[lane]) if fp8 else _f16_elems(a_regs[lane])
        eb = _e4m3_elems(b_regs[lane]) if fp8 else _f16_elems(b_regs[lane])
        for i, x in enumerate(ea):
            A[(a_e4m3 if fp8 else a_f16)(lane, i)] = x
        for i, x in enumerate(eb):
            B[(b_e4m3 if fp8 else b_f16)(lane, i)] = x
    assert not np.isnan(A).any() and not np.isnan(B).any()  # every element given by exactly the layout
    C = A @ B
    return [[C[c_f32(lane, i)] for i in range(4)] for lane in LANES]


# ---------------------------------------------------------------- the PTX the kernel uses (ptx.cuh, half_ops.cuh)
def word(b):  # 4 bytes -> a little-endian word
    return int(b[0]) | int(b[1]) << 8 | int(b[2]) << 16 | int(b[3]) << 24


def prmt(a, b, sel):
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * k)) & 7] << (8 * k) for k in range(4))


def f16_bits(x):
    return int(np.array([x], np.float16).view(np.uint16)[0])


def decode4(x):  # cvt.rn.f16x2.e4m3x2 twice: lo = codes 0, 1 (code 0 in the low half), hi = codes 2, 3
    v = ref.decode_e4m3_sim(np.array([(x >> (8 * i)) & 0xFF for i in range(4)], np.uint8))
    return f16_bits(v[0]) | f16_bits(v[1]) << 16, f16_bits(v[2]) | f16_bits(v[3]) << 16


def pack_half2(lo, hi):
    return f16_bits(lo) | f16_bits(hi) << 16


def pack_e4m3x4(a, b, c, d):
    return word(ref.encode_e4m3_sim(np.array([a, b, c, d], np.float64)))


def transpose4x4(r0, r1, r2, r3):  # tier_ops.cuh
    t0, t1 = prmt(r0, r1, 0x5140), prmt(r0, r1, 0x7362)
    t2, t3 = prmt(r2, r3, 0x5140), prmt(r2, r3, 0x7362)
    return [prmt(t0, t2, 0x5410), prmt(t0, t2, 0x7632), prmt(t1, t3, 0x5410), prmt(t1, t3, 0x7632)]


def vrow(r, t):  # tile_load.cuh
    return 2 * t + (r & 1) + 8 * ((r >> 1) & 1) + 16 * (r >> 2)


# ---------------------------------------------------------------- the kernel's lane code, restated
def fetch(kc, vc, lane, d):
    """fetch_k_* / fetch_v_*: K words [4][D/16], V words [8][D/32] of one lane."""
    g, t = _g(lane), _t(lane)
    kw = [[word(kc[8 * i + g, 64 * h + 16 * t + 4 * w:][:4]) for h in range(d // 64) for w in range(4)] for i in range(4)]
    vw = [[word(vc[vrow(r, t), (d // 8) * g + 4 * q:][:4]) for q in range(d // 32)] for r in range(8)]
    return kw, vw


def q_words(q16, lane, d):
    """load_q: half2 words of rows g, g+8, slices [64h + 16t, +16)."""
    g, t = _g(lane), _t(lane)
    return [[[pack_half2(q16[g + 8 * rr, 64 * h + 16 * t + 2 * k], q16[g + 8 * rr, 64 * h + 16 * t + 2 * k + 1])
              for k in range(8)] for h in range(d // 64)] for rr in range(2)]


def p_of_lane(p, lane):  # S's accumulator: [i][e] -> row g + 8 (e // 2), key 8 i + 2 t + e % 2
    g, t = _g(lane), _t(lane)
    return [[p[g + 8 * (e // 2), 8 * i + 2 * t + e % 2] for e in range(4)] for i in range(4)]


def scores_and_output(d, fp8, q, kc, vc, p):
    """S (16 x 32) and O (16 x D) as the lanes compute them: Q K^T of the tile, then P V with the given P."""
    lanes_k, lanes_v = zip(*(fetch(kc, vc, lane, d) for lane in LANES), strict=True)
    S = np.full((16, KEYS), np.nan)
    O = np.full((16, d), np.nan)
    acc_s = [[[0.0] * 4 for _ in range(4)] for _ in LANES]
    acc_o = [[[0.0] * 4 for _ in range(d // 8)] for _ in LANES]
    if not fp8:
        qw = [q_words(q, lane, d) for lane in LANES]
        for s in range(d // 16):  # Fp16Ops::qk
            h, w = s // 4, s % 4
            qa = [[qw[ln][0][h][2 * w], qw[ln][1][h][2 * w], qw[ln][0][h][2 * w + 1], qw[ln][1][h][2 * w + 1]]
                  for ln in LANES]
            for i in range(4):
                c = mma(qa, [list(decode4(lanes_k[ln][i][s])) for ln in LANES], False)
                for ln in LANES:
                    acc_s[ln][i] = [x + y for x, y in zip(acc_s[ln][i], c[ln], strict=True)]
        for s in range(2):  # Fp16Ops::pv
            pl = [p_of_lane(p, ln) for ln in LANES]
            a = [[pack_half2(pl[ln][2 * s][0], pl[ln][2 * s][1]), pack_half2(pl[ln][2 * s][2], pl[ln][2 * s][3]),
                  pack_half2(pl[ln][2 * s + 1][0], pl[ln][2 * s + 1][1]),
                  pack_half2(pl[ln][2 * s + 1][2], pl[ln][2 * s + 1][3])] for ln in LANES]
            for qq in range(d // 32):
                b01, b23 = [], []
                for ln in LANES:
                    v0, v1, v2, v3 = (lanes_v[ln][4 * s + r][qq] for r in range(4))
                    b01.append([*decode4(prmt(v0, v1, 0x5140)), *decode4(prmt(v0, v1, 0x7362))])
                    b23.append([*decode4(prmt(v2, v3, 0x5140)), *decode4(prmt(v2, v3, 0x7362))])
                for e in range(4):
                    c = mma(a, [[b01[ln][e], b23[ln][e]] for ln in LANES], False)
                    for ln in LANES:
                        acc_o[ln][4 * qq + e] = [x + y for x, y in zip(acc_o[ln][4 * qq + e], c[ln], strict=True)]
    else:
        for s in range(d // 32):  # Fp8Ops::init (with Q already on the E4M3 grid, scale 1) and qk
            qa = []
            for ln in LANES:
                g, t = _g(ln), _t(ln)
                regs = [0] * 4
                for e in range(2):
                    w = 2 * s + e
                    h, k = w // 4, 2 * (w % 4)
                    for rr in range(2):
                        regs[2 * e + rr] = pack_e4m3x4(*q[g + 8 * rr, 64 * h + 16 * t + 2 * k:][:4])
                qa.append(regs)
            for i in range(4):
                c = mma(qa, [[lanes_k[ln][i][2 * s], lanes_k[ln][i][2 * s + 1]] for ln in LANES], True)
                for ln in LANES:
                    acc_s[ln][i] = [x + y for x, y in zip(acc_s[ln][i], c[ln], strict=True)]
        pl = [p_of_lane(p, ln) for ln in LANES]  # Fp8Ops::pv
        a = [[pack_e4m3x4(P[0][0], P[0][1], P[1][0], P[1][1]), pack_e4m3x4(P[0][2], P[0][3], P[1][2], P[1][3]),
              pack_e4m3x4(P[2][0], P[2][1], P[3][0], P[3][1]), pack_e4m3x4(P[2][2], P[2][3], P[3][2], P[3][3])]
             for P in pl]
        for qq in range(d // 32):
            b0 = [transpose4x4(*(lanes_v[ln][r][qq] for r in range(4))) for ln in LANES]
            b1 = [transpose4x4(*(lanes_v[ln][r][qq] for r in range(4, 8))) for ln in LANES]
            for e in range(4):
                c = mma(a, [[b0[ln][e], b1[ln][e]] for ln in LANES], True)
                for ln in LANES:
                    acc_o[ln][4 * qq + e] = [x + y for x, y in zip(acc_o[ln][4 * qq + e], c[ln], strict=True)]
    for ln in LANES:
        for i in range(4):
            for e in range(4):
                r, n = c_f32(ln, e)
                assert np.isnan(S[r, 8 * i + n])
                S[r, 8 * i + n] = acc_s[ln][i][e]
        for j in range(d // 8):
            for e in range(4):
                r, n = c_f32(ln, e)
                ch = (d // 8) * n + j  # the epilogue's channel of column tile j, column n
                assert np.isnan(O[r, ch])
                O[r, ch] = acc_o[ln][j][e]
    return S, O


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("fp8", [False, True], ids=["fp16", "fp8"])
def test_lane_registers_make_the_products(d, fp8):
    rng = np.random.default_rng(d + fp8)
    kc = ref.encode_e4m3_sim(rng.standard_normal((KEYS, d)) * 4)
    vc = ref.encode_e4m3_sim(rng.standard_normal((KEYS, d)) * 4)
    kd, vd = ref.decode_e4m3_sim(kc), ref.decode_e4m3_sim(vc)
    grid = ref.decode_e4m3_sim if fp8 else (lambda x: x)
    q = rng.standard_normal((16, d)).astype(np.float16).astype(np.float64)
    p = rng.random((16, KEYS)).astype(np.float16).astype(np.float64)
    if fp8:  # operands the E4M3 MMA can hold exactly
        q = grid(ref.encode_e4m3_sim(q))
        p = grid(ref.encode_e4m3_sim(p * 256))
    S, O = scores_and_output(d, fp8, q, kc, vc, p)
    np.testing.assert_array_equal(S, q @ kd.T)
    np.testing.assert_allclose(O, p @ vd, rtol=1e-12, atol=1e-9)


# ---------------------------------------------------------------- the cpasync stage layout (tile_load.cuh)
def stage_offset(d, row, byte):
    if d == 128:
        sw = (row & 6) ^ ((row & 1) << 2)
        return row * 128 + (((byte >> 4) ^ sw) << 4) + (byte & 15)
    line = row >> 1
    slot = (((row & 1) << 2) | (byte >> 4)) ^ ((line & 3) << 1)
    return line * 128 + (slot << 4) + (byte & 15)


def _conflict_free(offsets, width):
    """One warp's shared-memory access of `width` bytes per lane: the phases (128 bytes each: 8 lanes of 16 bytes,
    16 of 8) touch distinct bank groups."""
    per = 128 // width
    for p0 in range(0, 32, per):
        slots = [(o % 128) // width for o in offsets[p0:p0 + per]]
        if len(set(slots)) != per:
            return False
    return True


@pytest.mark.parametrize("d", [64, 128])
def test_stage_swizzle(d):
    offs = [stage_offset(d, r, b) for r in range(KEYS) for b in range(d)]
    assert sorted(offs) == list(range(KEYS * d))  # a bijection on the tile
    for lane in LANES:  # fetch_k_stage / fetch_v_stage's shortcuts: one base, constants
        g, t = _g(lane), _t(lane)
        for h in range(d // 64):
            for i in range(4):
                assert stage_offset(d, 8 * i + g, 64 * h + 16 * t) == stage_offset(d, g, 64 * h + 16 * t) + 8 * i * d
        for q in range(8):
            base = stage_offset(d, 2 * t + (q & 1), (d // 8) * g)
            assert stage_offset(d, vrow(q, t), (d // 8) * g) == base + (8 * ((q >> 1) & 1) + 16 * (q >> 2)) * d
    for h in range(d // 64):  # K fetch, 16 bytes per lane
        for i in range(4):
            assert _conflict_free([stage_offset(d, 8 * i + _g(ln), 64 * h + 16 * _t(ln)) for ln in LANES], 16)
    for q in range(8):  # V fetch, 16 (D 128) or 8 (D 64) bytes per lane
        assert _conflict_free([stage_offset(d, vrow(q, _t(ln)), (d // 8) * _g(ln)) for ln in LANES], d // 8)
    for nthreads in (32, 64, 128):  # issue_stage: the group's copies, pass by pass
        row_chunks = d // 16
        for pss in range(KEYS // (nthreads // row_chunks)):
            for w in range(nthreads // 32):
                offs = [stage_offset(d, gt // row_chunks + pss * (nthreads // row_chunks), (gt % row_chunks) * 16)
                        for gt in range(32 * w, 32 * w + 32)]
                assert _conflict_free(offs, 16)
