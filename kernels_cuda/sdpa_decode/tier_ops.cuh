// What a warp computes per 32-key tile, per tier, on the registers tile_load.cuh fetched; and the online softmax
// both tiers share.
//
//                 fp16 tier (decode_sm89)                       fp8 tier (decode_fp8_sm89)
//   Q             fp16 A fragments, as given                    rounded to E4M3 with a per-row scale (the row's
//                                                               largest |q| becomes 448), 1/scale in the row's
//                                                               exponent scale
//   Q K^T         K decoded E4M3 -> fp16 (exact, cvt), mma      K as stored, mma m16n8k32 e4m3 (sm_89+), fp32
//                 m16n8k16, fp32 accumulators                   accumulators
//   P             2^(s - m) rounded to fp16                     2^(s - m + 8) rounded to E4M3 (the 2^8 keeps
//                                                               probabilities down to 2^-14 normal; it cancels
//                                                               in O / l)
//   P V           V decoded to fp16, m16n8k16                   V as stored (4x4 byte transposes), m16n8k32
//   l (row sums)  of the rounded P, on the tensor core: P times a column of ones in the same MMA shape
//
// Layouts (the lane's channels and keys): tile_load.cuh's header.  The scales stay out of the products:
// k_scale * log2(e) / sqrt(D) in the exponent (score_scale), v_scale at the end with 1 / l.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "ptx.cuh"
#include "tile_load.cuh"

namespace sdpa_decode {

// Q of the warp's rows g and g+8 (rows >= `rows` as zeros): halves [64h + 16t, 64h + 16t + 16) of each, as
// half2 words, w[row][h][k] = halves 2k, 2k+1 of that slice.
template <int D>
struct QRegs {
    uint32_t w[2][D / 64][8];
};

template <int D>
__device__ __forceinline__ void load_q(QRegs<D>& q, const __half* qg, int64_t r0, int64_t rows, int t) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        const int64_t r = r0 + 8 * rr;
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
            uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
            if (r < rows) {
                const __half* p = qg + r * D + 64 * h + 16 * t;
                a = ldg16(p);
                b = ldg16(p + 8);
            }
            q.w[rr][h][0] = a.x, q.w[rr][h][1] = a.y, q.w[rr][h][2] = a.z, q.w[rr][h][3] = a.w;
            q.w[rr][h][4] = b.x, q.w[rr][h][5] = b.y, q.w[rr][h][6] = b.z, q.w[rr][h][7] = b.w;
        }
    }
}

// ------------------------------------------------------------------------------------------------ fp16 tier
// SDPA_DECODE_LAZY_RESCALE (fp16 tier): 1 (default) = a warp moves its rows' reference max m (and rescales O and l)
// only when some row's tile max exceeds it by more than 8 (log2 units); P = 2^(s - m) then lies in [0, 2^8], which
// fp16 holds at the same relative precision (and fewer P fall below its normal range).  0 = every tile, as before
// 2026-11-29 (the ablation).  1x H200: 3.4-3.7% faster at decode_b8_32k_mqa (16 tiles per key group, two warps of 16
// rows each rescaling 64 accumulators a tile), within 0.5% elsewhere; rel_l2 against float64 the same to 3% on random,
// large-logit and late-sink inputs (experiments/2026-11-29-sdpa-decode-lazy-rescale).  Not the fp8 tier: its E4M3 P
// already uses the 2^8 (kPBias) and has no room above it.
#ifndef SDPA_DECODE_LAZY_RESCALE
#define SDPA_DECODE_LAZY_RESCALE 1
#endif
static_assert(SDPA_DECODE_LAZY_RESCALE == 0 || SDPA_DECODE_LAZY_RESCALE == 1, "SDPA_DECODE_LAZY_RESCALE: 0 or 1");

template <int D>
struct Fp16Ops {
    static constexpr float kPBias = 0.f;  // P = 2^(s - m) <= 1
    static constexpr bool kLazy = SDPA_DECODE_LAZY_RESCALE != 0;
    static constexpr int kSteps = D / 16;
    uint32_t qa[kSteps][4];  // A fragment of k16 step s = 4h + w: channels 64h + 16t + 4w + {0,1 | 2,3}
    float c[2];              // rows g, g+8: raw score -> log2 units

    // Q's A fragment of k16 step s (Fp16Ops2 keeps the same words in shared memory).
    __device__ __forceinline__ static void q_fragment(const QRegs<D>& q, int s, uint32_t (&a)[4]) {
        const int h = s / 4, w = s % 4;
        a[0] = q.w[0][h][2 * w];      // row g,   k 2t, 2t+1   <- channels +0, +1
        a[1] = q.w[1][h][2 * w];      // row g+8
        a[2] = q.w[0][h][2 * w + 1];  // row g,   k 2t+8, 2t+9 <- channels +2, +3
        a[3] = q.w[1][h][2 * w + 1];
    }
    // P's A fragment of the tile's k16 step s (keys 16s ..: S column tiles 2s, 2s+1), rounded to fp16.
    __device__ __forceinline__ static void p_fragment(const float (&P)[4][4], int s, uint32_t (&a)[4]) {
        a[0] = pack_half2(P[2 * s][0], P[2 * s][1]);
        a[1] = pack_half2(P[2 * s][2], P[2 * s][3]);
        a[2] = pack_half2(P[2 * s + 1][0], P[2 * s + 1][1]);
        a[3] = pack_half2(P[2 * s + 1][2], P[2 * s + 1][3]);
    }
    // V's B fragments of k16 step s and word q, decoded to fp16: keys 16s + 2t, +1 (k 2t, 2t+1) in b01 and
    // 16s + 2t + 8, +9 (k 2t+8, 2t+9) in b23; byte e of word q is column tile 4q + e.
    __device__ __forceinline__ static void v_fragments(const VRegs<D>& v, int s, int q, uint32_t (&b01)[4],
                                                       uint32_t (&b23)[4]) {
        const uint32_t v0 = v.w[4 * s + 0][q], v1 = v.w[4 * s + 1][q];
        const uint32_t v2 = v.w[4 * s + 2][q], v3 = v.w[4 * s + 3][q];
        decode4_e4m3(prmt(v0, v1, 0x5140u), b01[0], b01[1]);
        decode4_e4m3(prmt(v0, v1, 0x7362u), b01[2], b01[3]);
        decode4_e4m3(prmt(v2, v3, 0x5140u), b23[0], b23[1]);
        decode4_e4m3(prmt(v2, v3, 0x7362u), b23[2], b23[3]);
    }

    __device__ __forceinline__ void init(const QRegs<D>& q, float score_scale) {
#pragma unroll
        for (int s = 0; s < kSteps; ++s) q_fragment(q, s, qa[s]);
        c[0] = c[1] = score_scale;
    }

    // Step-major: each k16 step decodes one word per column tile and issues four independent MMAs, so that few
    // decoded fragments are live at once.
    __device__ __forceinline__ void qk(float (&S)[4][4], const KRegs<D>& k) const {
#pragma unroll
        for (int i = 0; i < 4; ++i) S[i][0] = S[i][1] = S[i][2] = S[i][3] = 0.f;
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                uint32_t lo, hi;  // channels +0,+1 (k 2t, 2t+1) and +2,+3 (k 2t+8, 2t+9) of key 8i + g
                decode4_e4m3(k.w[i][s], lo, hi);
                mma_f16(S[i], qa[s], lo, hi);
            }
    }

    // O += P V and l += P 1 over the tile's 32 keys: two k16 steps of 16 keys (S column tiles 2s, 2s+1).
    __device__ __forceinline__ void pv(float (&O)[D / 8][4], float (&L)[4], const float (&P)[4][4],
                                       const VRegs<D>& v) const {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            uint32_t a[4];
            p_fragment(P, s, a);
            mma_f16(L, a, 0x3C003C00u, 0x3C003C00u);  // B = ones (fp16 1.0)
#pragma unroll
            for (int q = 0; q < D / 32; ++q) {
                uint32_t b01[4], b23[4];
                v_fragments(v, s, q, b01, b23);
#pragma unroll
                for (int e = 0; e < 4; ++e) mma_f16(O[4 * q + e], a, b01[e], b23[e]);
            }
        }
    }
};

// The fp16 tier with two 16-row tiles per warp (plan.h plan_decode: 17-32 rows per K/V head with long chunks; 8 key
// groups of one warp): rows g, g+8 of tile 0 and 16+g, 24+g of tile 1.  Per row the words, MMAs and their order are
// Fp16Ops's (the outputs equal two warps of 16 rows bit for bit where the key groups take the same tiles), but each K
// and V word is decoded once for both tiles.  Q's A fragments wait in shared memory, not in registers (two tiles'
// worth, 64 registers at head dim 128, would not fit beside 128 accumulators): [tile][step][lane], 16 bytes a lane,
// conflict-free, written by the block's warps 0 and 1 (every warp of the block holds the same rows).
template <int D>
struct Fp16Ops2 {
    static constexpr float kPBias = 0.f;
    static constexpr bool kLazy = SDPA_DECODE_LAZY_RESCALE != 0;
    static constexpr int kSteps = D / 16;
    static constexpr int kQBytes = 2 * kSteps * 32 * 16;  // the fragments' shared memory
    const uint4* qs;  // this lane's fragment of tile rt, step s: qs[(rt * kSteps + s) * 32]
    float c[2];

    // qg: the (b, hkv)'s slab of rows; m0: the block's first row; buf: kQBytes of shared memory.  The caller syncs
    // the block before the first qk.
    __device__ __forceinline__ void init(const __half* qg, int64_t m0, int64_t rows, int warp, int lane, uint8_t* buf,
                                         float score_scale) {
        uint4* q4 = reinterpret_cast<uint4*>(buf);
        if (warp < 2) {
            QRegs<D> q;
            load_q<D>(q, qg, m0 + 16 * warp + (lane >> 2), rows, lane & 3);
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
                uint32_t a[4];
                Fp16Ops<D>::q_fragment(q, s, a);
                q4[(warp * kSteps + s) * 32 + lane] = make_uint4(a[0], a[1], a[2], a[3]);
            }
        }
        qs = q4 + lane;
        c[0] = c[1] = score_scale;
    }

    // The k16 steps of K's 64-channel slice h (steps 4h .. 4h + 3; the first slice zeroes S): the baseline loads
    // and multiplies one slice at a time (tile_load.cuh fetch_k_global's h).
    __device__ __forceinline__ void qk_slice(float (&S)[2][4][4], const KRegs<D>& k, int h) const {
        if (h == 0) {
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
#pragma unroll
                for (int i = 0; i < 4; ++i) S[rt][i][0] = S[rt][i][1] = S[rt][i][2] = S[rt][i][3] = 0.f;
        }
#pragma unroll
        for (int s = 4 * h; s < 4 * h + 4; ++s) {
            uint32_t a[2][4];
#pragma unroll
            for (int rt = 0; rt < 2; ++rt) {
                const uint4 x = qs[(rt * kSteps + s) * 32];
                a[rt][0] = x.x, a[rt][1] = x.y, a[rt][2] = x.z, a[rt][3] = x.w;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                uint32_t lo, hi;
                decode4_e4m3(k.w[i][s], lo, hi);
                mma_f16(S[0][i], a[0], lo, hi);
                mma_f16(S[1][i], a[1], lo, hi);
            }
        }
    }
    __device__ __forceinline__ void qk(float (&S)[2][4][4], const KRegs<D>& k) const {
#pragma unroll
        for (int h = 0; h < D / 64; ++h) qk_slice(S, k, h);
    }

    __device__ __forceinline__ void pv(float (&O)[2][D / 8][4], float (&L)[2][4], const float (&P)[2][4][4],
                                       const VRegs<D>& v) const {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            uint32_t a[2][4];
#pragma unroll
            for (int rt = 0; rt < 2; ++rt) {
                Fp16Ops<D>::p_fragment(P[rt], s, a[rt]);
                mma_f16(L[rt], a[rt], 0x3C003C00u, 0x3C003C00u);
            }
#pragma unroll
            for (int q = 0; q < D / 32; ++q) {
                uint32_t b01[4], b23[4];
                Fp16Ops<D>::v_fragments(v, s, q, b01, b23);  // decoded once for both tiles
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    mma_f16(O[0][4 * q + e], a[0], b01[e], b23[e]);
                    mma_f16(O[1][4 * q + e], a[1], b01[e], b23[e]);
                }
            }
        }
    }
};

// ------------------------------------------------------------------------------------------------ fp8 tier
// Four codes of four rows -> four words, word e = byte e of each row (row k in byte k).
__device__ __forceinline__ void transpose4x4(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3, uint32_t (&o)[4]) {
    const uint32_t t0 = prmt(r0, r1, 0x5140u), t1 = prmt(r0, r1, 0x7362u);
    const uint32_t t2 = prmt(r2, r3, 0x5140u), t3 = prmt(r2, r3, 0x7362u);
    o[0] = prmt(t0, t2, 0x5410u);
    o[1] = prmt(t0, t2, 0x7632u);
    o[2] = prmt(t1, t3, 0x5410u);
    o[3] = prmt(t1, t3, 0x7632u);
}

template <int D>
struct Fp8Ops {
    static constexpr float kPBias = 8.f;  // P = 2^(s - m + 8) in [0, 256]
    static constexpr bool kLazy = false;  // (E4M3 P has no room above 2^8 + 8)
    static constexpr int kSteps = D / 32;
    uint32_t qa[kSteps][4];  // A fragment of k32 step s: K words 2s (k 4t..4t+3) and 2s+1 (k 16+4t..)
    float c[2];

    __device__ __forceinline__ static float2 h2f(uint32_t w) {
        return __half22float2(*reinterpret_cast<const __half2*>(&w));
    }

    __device__ __forceinline__ void init(const QRegs<D>& q, float score_scale) {
        float sc[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            float mx = 0.f;
#pragma unroll
            for (int h = 0; h < D / 64; ++h)
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const float2 f = h2f(q.w[rr][h][k]);
                    mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y)));
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            sc[rr] = mx > 0.f ? 448.f / mx : 1.f;
            c[rr] = score_scale / sc[rr];
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int w = 2 * s + e, h = w / 4, k = 2 * (w % 4);  // K word w <- Q halves 2k .. 2k+3 of slice h
#pragma unroll
                for (int rr = 0; rr < 2; ++rr) {
                    const float2 a = h2f(q.w[rr][h][k]), b = h2f(q.w[rr][h][k + 1]);
                    qa[s][2 * e + rr] = pack_e4m3x4(a.x * sc[rr], a.y * sc[rr], b.x * sc[rr], b.y * sc[rr]);
                }
            }
    }

    __device__ __forceinline__ void qk(float (&S)[4][4], const KRegs<D>& k) const {
#pragma unroll
        for (int i = 0; i < 4; ++i) S[i][0] = S[i][1] = S[i][2] = S[i][3] = 0.f;
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) mma_e4m3(S[i], qa[s], k.w[i][2 * s], k.w[i][2 * s + 1]);
    }

    // One k32 step over the tile: k 4t..4t+3 <- keys 2t, 2t+1, 8+2t, 9+2t (S column tiles 0, 1), k 16+4t.. <-
    // keys 16+2t, 17+2t, 24+2t, 25+2t (tiles 2, 3): the P bytes in the order the lane holds them, and V's rows
    // vrow(0..3) and vrow(4..7) in the same order.
    __device__ __forceinline__ void pv(float (&O)[D / 8][4], float (&L)[4], const float (&P)[4][4],
                                       const VRegs<D>& v) const {
        const uint32_t a[4] = {pack_e4m3x4(P[0][0], P[0][1], P[1][0], P[1][1]),
                               pack_e4m3x4(P[0][2], P[0][3], P[1][2], P[1][3]),
                               pack_e4m3x4(P[2][0], P[2][1], P[3][0], P[3][1]),
                               pack_e4m3x4(P[2][2], P[2][3], P[3][2], P[3][3])};
        mma_e4m3(L, a, 0x38383838u, 0x38383838u);  // B = ones (E4M3 1.0)
#pragma unroll
        for (int q = 0; q < D / 32; ++q) {
            uint32_t b0[4], b1[4];
            transpose4x4(v.w[0][q], v.w[1][q], v.w[2][q], v.w[3][q], b0);
            transpose4x4(v.w[4][q], v.w[5][q], v.w[6][q], v.w[7][q], b1);
#pragma unroll
            for (int e = 0; e < 4; ++e) mma_e4m3(O[4 * q + e], a, b0[e], b1[e]);
        }
    }
};

// Online softmax over one tile's scores S (rows g: S[i][0..1], g+8: S[i][2..3]; key key0 + 8i + 2t + e%2), in
// log2 units: keys at or past a row's limit are masked; m, l, O rescaled; S becomes P (with the tier's bias).
// A row with no key seen yet keeps m = -inf and takes 0 as the subtrahend (no inf - inf).  LAZY (the fp16 tier,
// SDPA_DECODE_LAZY_RESCALE): the warp's rows move m, and O and l are rescaled, only in a tile where some row's max
// exceeds its m by more than 8 (one vote per warp); otherwise m stays and P reaches at most 2^8.
template <int D, bool LAZY = false>
__device__ __forceinline__ void softmax_tile(float (&S)[4][4], float (&m)[2], float (&O)[D / 8][4], float (&L)[4],
                                             const float (&c)[2], int key0, const int (&lim)[2], int t, float bias) {
    const float kNegInf = -__int_as_float(0x7f800000);
    if constexpr (LAZY) {
        float mx[2];
        bool move = false;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            mx[rr] = kNegInf;
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& s = S[i][2 * rr + e];
                    if (key0 + 8 * i + 2 * t + e >= lim[rr]) s = kNegInf;
                    mx[rr] = fmaxf(mx[rr], s);
                }
            mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 1));
            mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 2));
            move |= mx[rr] * c[rr] > m[rr] + 8.f;  // (m = -inf: any key seen moves it)
        }
        if (__any_sync(0xffffffffu, move)) {
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                const float m_new = fmaxf(m[rr], mx[rr] * c[rr]);
                const float m_use = m_new == kNegInf ? 0.f : m_new;
                const float alpha = fast_exp2(m[rr] - m_use);
                m[rr] = m_new;
#pragma unroll
                for (int j = 0; j < D / 8; ++j) {
                    O[j][2 * rr] *= alpha;
                    O[j][2 * rr + 1] *= alpha;
                }
                L[2 * rr] *= alpha;
                L[2 * rr + 1] *= alpha;
            }
        }
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const float sub = (m[rr] == kNegInf ? 0.f : m[rr]) - bias;
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) S[i][2 * rr + e] = fast_exp2(fmaf(S[i][2 * rr + e], c[rr], -sub));
        }
        return;
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        float mx = kNegInf;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& s = S[i][2 * rr + e];
                if (key0 + 8 * i + 2 * t + e >= lim[rr]) s = kNegInf;
                mx = fmaxf(mx, s);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[rr], mx * c[rr]);
        const float m_use = m_new == kNegInf ? 0.f : m_new;
        const float alpha = fast_exp2(m[rr] - m_use);
        m[rr] = m_new;
        const float sub = m_use - bias;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) S[i][2 * rr + e] = fast_exp2(fmaf(S[i][2 * rr + e], c[rr], -sub));
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            O[j][2 * rr] *= alpha;
            O[j][2 * rr + 1] *= alpha;
        }
        L[2 * rr] *= alpha;
        L[2 * rr + 1] *= alpha;
    }
}

}  // namespace sdpa_decode
