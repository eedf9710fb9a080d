"""CPU check of the fp8 tier's V transpose by ldmatrix / stmatrix (kernels_cuda/sdpa_fp8_sm90/fp8_load.cuh,
SDPA_SM90_VT_LDSM), no GPU needed.

The head-dim-128 producer turns a V tile [BN keys][128 dims] of E4M3 codes into V^T, the K-major B operand of P V,
with its keys permuted (vt_key_perm) and swizzled (vt_chunk). Today it does so with 4-byte loads, byte permutes and
16-byte stores (transpose_v_tile, transpose_v_tile_fast at 128 / 192 keys; the 256-key kernel's transpose_v_tile256
until 2026-11-29); SDPA_SM90_VT_LDSM, and the 256-key kernel since, do it with ldmatrix.trans, prmt and stmatrix from
a V stage the copy engine wrote with the 128-byte swizzle. The consumers read V^T unchanged, so the new transpose must write the same bytes at the same
addresses. This test restates, per lane and in Python, what each transpose does (addresses, words, prmt
selectors) and executes ldmatrix / stmatrix / prmt as the PTX ISA defines them, on random bytes, at 128, 192 and
256 keys: the two V^T images must be identical, and equal to the definition (V^T chunk of dim d, group G, position L
= V[16 G + vt_key_perm(L)][d]). It also checks that the new transpose's shared-memory accesses are free of bank
conflicts (each 8-row phase of an ldmatrix / stmatrix in 8 different 16-byte bank groups).
"""

import numpy as np
import pytest

D = 128
ROWSUM_ROWS = 8  # SDPA_SM90_ROWSUM_MMA: 8 ones rows after panel 0's D rows (not at BN 256: ONES_SEP)


class Traits:
    """fp8_traits.cuh Fp8TraitsN at head dim 128, the V^T geometry."""

    def __init__(self, bn: int):
        self.BN = bn
        self.VT_P1_KEYS = bn - 128
        vt_rows = D + (0 if bn == 256 else ROWSUM_ROWS)
        self.VT_P1_OFF = vt_rows * 128
        self.VT_BYTES = (vt_rows * bn + 1023) // 1024 * 1024
        self.VT_ITEMS = (bn // 16) * (D // 4) // 128


def vt_key_perm(L: int) -> int:
    return 8 * ((L >> 1) & 1) + 2 * (L >> 2) + (L & 1)


def vt_chunk(T: Traits, d: int, G: int) -> int:
    if T.VT_P1_KEYS == 0 or G < 8:
        return d * 128 + ((G ^ (d & 7)) << 4)
    if T.VT_P1_KEYS == 128:
        return T.VT_P1_OFF + d * 128 + (((G - 8) ^ (d & 7)) << 4)
    return T.VT_P1_OFF + d * 64 + (((G - 8) ^ ((d >> 1) & 3)) << 4)


def prmt(a: int, b: int, sel: int) -> int:
    """prmt.b32 default mode: byte i of the result is byte (sel >> 4i) & 7 of {b, a} (a = bytes 0-3)."""
    pool = (a & 0xFFFFFFFF) | ((b & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        n = (sel >> (4 * i)) & 7
        out |= ((pool >> (8 * n)) & 0xFF) << (8 * i)
    return out


def word(mem: np.ndarray, off: int) -> int:
    return int.from_bytes(mem[off:off + 4].tobytes(), "little")


def store_words(mem: np.ndarray, off: int, words) -> None:
    for k, w in enumerate(words):
        mem[off + 4 * k:off + 4 * k + 4] = np.frombuffer(int(w).to_bytes(4, "little"), np.uint8)


def vt_gather(w, sel):
    return [prmt(prmt(w[4 * b], w[4 * b + 1], sel), prmt(w[4 * b + 2], w[4 * b + 3], sel), 0x5410) for b in range(4)]


# ---- today's transposes (V stage unswizzled: key r at r * 128) ---------------------------------------------------
def transpose_generic(T, v, vt):
    """transpose_v_tile<T, false>: items of 16 keys x 4 dims, pair swap in odd groups, store slots rotated."""
    for ptid in range(128):
        for it in range(T.VT_ITEMS):
            item = ptid + 128 * it
            dq, G = item % (D // 4), item // (D // 4)
            swap = G & 1
            w = [word(v, (16 * G + (vt_key_perm(i) ^ swap)) * D + 4 * dq) for i in range(16)]
            rot = (dq >> 1) & 3
            for s in range(4):
                dd = (s + rot) & 3
                sel = ((dd + 4) | (dd << 4)) if swap else (dd | ((dd + 4) << 4))
                store_words(vt, vt_chunk(T, 4 * dq + dd, G), vt_gather(w, sel))


def transpose_fast(T, v, vt):
    """transpose_v_tile_fast (BN 128 / 192) with vt_fast_addr's offsets."""
    for ptid in range(128):
        dq, G = ptid & 31, ptid >> 5
        ld = 16 * G * D + 4 * dq
        rot = (dq >> 1) & 3
        st = [[0] * 4 for _ in range(3)]
        sel = [0] * 4
        for s in range(4):
            dd = (s + rot) & 3
            d = 4 * dq + dd
            st[0][s] = vt_chunk(T, d, G)
            st[1][s] = st[0][s] ^ 64
            if T.VT_ITEMS == 3:
                st[2][s] = vt_chunk(T, d, G + 8)
            sel[s] = dd | ((dd + 4) << 4)
        for it in range(T.VT_ITEMS):
            w = [word(v, ld + it * 64 * D + vt_key_perm(i) * D) for i in range(16)]
            for s in range(4):
                store_words(vt, st[it][s], vt_gather(w, sel[s]))


# ---- the new one: ldmatrix.trans / prmt / stmatrix from a 128-byte-swizzled V stage -----------------------------
def tma_swizzle128(v):
    """The copy engine's CU_TENSOR_MAP_SWIZZLE_128B into a 1024-byte-aligned stage: key r's chunk c at
    r * 128 + ((c ^ (r % 8)) << 4)."""
    st = np.zeros_like(v)
    for r in range(v.size // 128):
        for c in range(8):
            p = r * 128 + ((c ^ (r & 7)) << 4)
            st[p:p + 16] = v[r * 128 + 16 * c:r * 128 + 16 * c + 16]
    return st


def ldsm_x4_trans(mem, addrs):
    """ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: addrs[l] = row l % 8 of matrix l // 8 (16 bytes, 8 b16).
    Returns regs[l][j]: elements (2 (l % 4), l // 4) and (2 (l % 4) + 1, l // 4) of matrix j, low half first."""
    mats = [[[int.from_bytes(mem[addrs[8 * j + i] + 2 * e:addrs[8 * j + i] + 2 * e + 2].tobytes(), "little")
              for e in range(8)] for i in range(8)] for j in range(4)]
    return [[mats[j][2 * (l % 4)][l // 4] | (mats[j][2 * (l % 4) + 1][l // 4] << 16) for j in range(4)]
            for l in range(32)]


def stsm_x4(mem, addrs, regs):
    """stmatrix.sync.aligned.m8n8.x4.shared.b16: regs[l][j] -> matrix j, row l // 4, b16 columns 2 (l % 4) and
    2 (l % 4) + 1; row i of matrix j at addrs[8 j + i]."""
    for j in range(4):
        for l in range(32):
            store_words(mem, addrs[8 * j + l // 4] + 4 * (l % 4), [regs[l][j]])


def vt_ldsm_addr(T, ptid):
    """fp8_load.cuh vt_ldsm_addr (vraw0 = 0)."""
    w, l = ptid >> 5, ptid & 31
    j, i = l >> 3, l & 7
    c = 2 * w + (j >> 1)
    ld = (8 * (j & 1) + i) * 128 + ((c ^ i) << 4)
    d = 16 * c + 2 * i + ((j & 1) ^ (i >> 2))
    st0 = d * 128 + ((d & 7) << 4)
    st1 = d * 64 + (((d >> 1) & 3) << 4)
    sel_lo = 0x6420 if (l >> 2) < 4 else 0x7531
    return ld, st0, st1, sel_lo


def vt_ldsm_st(T, st0, st1, G):
    """vt_ldsm_panel's store address: the panel's offset + (the lane's row offset ^ (group in panel << 4))."""
    if T.VT_P1_KEYS == 0 or G < 8:
        return st0 ^ (G << 4)
    if T.VT_P1_KEYS == 128:
        return T.VT_P1_OFF + (st0 ^ ((G - 8) << 4))
    return T.VT_P1_OFF + (st1 ^ ((G - 8) << 4))


def bank_groups_distinct(addrs):
    """Each 8-address phase (one 8x8 matrix) in 8 different 16-byte bank groups (bits 4-6 of the address)."""
    return all(len({(a >> 4) & 7 for a in addrs[8 * j:8 * j + 8]}) == 8 for j in range(4))


def transpose_ldsm(T, stage, vt, conflicts):
    """transpose_v_tile_ldsm: warp w, group G: one ldmatrix.x4.trans, four prmt per lane, one stmatrix.x4."""
    for w in range(4):
        a = [vt_ldsm_addr(T, 32 * w + l) for l in range(32)]
        for G in range(T.BN // 16):
            ld = [a[l][0] + G * 16 * 128 for l in range(32)]
            regs = ldsm_x4_trans(stage, ld)
            out = []
            for l in range(32):
                r, sel_lo = regs[l], a[l][3]
                sel_hi = sel_lo ^ 0x1111
                out.append([prmt(r[0], r[1], sel_lo), prmt(r[0], r[1], sel_hi),
                            prmt(r[2], r[3], sel_lo), prmt(r[2], r[3], sel_hi)])
            st = [vt_ldsm_st(T, a[l][1], a[l][2], G) for l in range(32)]
            conflicts += [not bank_groups_distinct(ld), not bank_groups_distinct(st)]
            stsm_x4(vt, st, out)


def vt_definition(T, v):
    vt = np.zeros(T.VT_BYTES, np.uint8)
    vv = v.reshape(T.BN, D)
    for d in range(D):
        for G in range(T.BN // 16):
            off = vt_chunk(T, d, G)
            vt[off:off + 16] = [vv[16 * G + vt_key_perm(L), d] for L in range(16)]
    return vt


@pytest.mark.parametrize("bn", [128, 192, 256])
def test_ldsm_transpose_writes_todays_vt_bytes(bn):
    T = Traits(bn)
    rng = np.random.default_rng(bn)
    v = rng.integers(0, 256, T.BN * D, dtype=np.uint8)
    fill = np.uint8(0xA5)  # bytes no transpose writes (ones rows, padding) keep this in every image
    ref = vt_definition(T, v)
    written = np.zeros(T.VT_BYTES, bool)
    for d in range(D):
        for G in range(T.BN // 16):
            written[vt_chunk(T, d, G):vt_chunk(T, d, G) + 16] = True
    assert written.sum() == T.BN * D  # vt_chunk: a bijection onto BN * D bytes
    ref[~written] = fill

    images = {}
    for name, fn in (("generic", transpose_generic), ("fast", transpose_fast)):
        if name == "fast" and bn == 256:
            continue
        img = np.full(T.VT_BYTES, fill, np.uint8)
        fn(T, v, img)
        images[name] = img
    new = np.full(T.VT_BYTES, fill, np.uint8)
    conflicts: list[bool] = []
    transpose_ldsm(T, tma_swizzle128(v), new, conflicts)

    for name, img in images.items():
        assert np.array_equal(img, ref), f"today's {name} transpose against the definition, BN {bn}"
    assert np.array_equal(new, ref), f"ldmatrix transpose against the definition, BN {bn}"
    assert len(conflicts) == 2 * 4 * (bn // 16) and not any(conflicts), "a bank-conflicted ldmatrix / stmatrix phase"


def test_prmt_restatement():
    # prmt.b32: selector nibble n picks byte n of {b:a}; 0x5410 = low halves of a and b
    assert prmt(0x33221100, 0x77665544, 0x5410) == 0x55441100
    assert prmt(0x33221100, 0x77665544, 0x6420) == 0x66442200
    assert prmt(0x33221100, 0x77665544, 0x7531) == 0x77553311
