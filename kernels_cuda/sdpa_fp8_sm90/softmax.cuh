// Online softmax on the wgmma accumulator fragment of S = Q K^T (m64nBN, f32).
//
// Warp w of a consumer warpgroup owns rows 16w .. 16w+15 of the warpgroup's 64; lane l holds
// rows 16w + l/4 (r = 0) and 16w + l/4 + 8 (r = 1), columns 8j + 2(l%4) + {0,1} for every
// 8-column chunk j: s[4j + 2r + {0,1}].  A row lives in one lane quad (shuffles over xor 1, 2).
// The running max is kept in the log2 domain (scores times log2(e) k_scale / sqrt(D)); the
// running sum l is a per-lane partial sum, quad-reduced once in the epilogue.
#pragma once

#include "config.cuh"  // SDPA_SM90_EXP2_POLY, SDPA_SM90_EXP2_POLY_D128
#include "ptx.cuh"

namespace sdpa_sm90 {

// 2^x for x <= 127 on the FMA and integer pipes: x = j + f, j = round(x) (the 1.5 * 2^23 trick:
// the low bits of t hold j), f in [-0.5, 0.5], 2^f by a degree-2 polynomial (relative error
// 1.8e-3), j added to the exponent field.  x is clamped at -126 (-inf from the tail mask gives
// 2^-126 * 2^f, a value that rounds to 0 in E4M3 and adds nothing visible to l).
__device__ __forceinline__ float poly_exp2(float x) {
    x = fmaxf(x, -126.f);
    const float t = __fadd_rn(x, 12582912.f);
    const float f = __fsub_rn(x, __fsub_rn(t, 12582912.f));
    const float p = fmaf(fmaf(0.23783102f, f, 0.70340002f), f, 1.00051396f);
    return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));
}

// Whether chunk j (of BN/8) of a row takes the polynomial: n of every 16, spread evenly.
template <int N>
__host__ __device__ constexpr bool poly_chunk(int j) {
    return N > 0 && ((j % 16) * N) / 16 != ((j % 16 + 1) * N) / 16;
}

// The running max a row starts from with the causal mask: finite, so that a row none of whose keys a tile shows
// (the split configuration's warpgroup 1 starts at tile 1, which rows near the diagonal do not reach) keeps it,
// with alpha = 2^0 and probabilities 2^-inf = 0, instead of -inf - -inf = NaN.  Far below any scaled score, so
// the first tile with a key replaces it (alpha = 2^(-1e30 - m) = 0, as 2^-inf is: the same results).  Without
// the mask every tile has a key for every row, and rows start at -inf (kRowMaxInitAll) as before the mask.
constexpr float kRowMaxInit = -1e30f;
constexpr float kRowMaxInitAll = -INFINITY;

template <int BN>
struct OnlineSoftmax {
    float m[2] = {kRowMaxInitAll, kRowMaxInitAll};
    float l[2] = {0.f, 0.f};

    // Keys at or past S (the last tile's tail) get score -inf: the kernels without the mask (S = Skv).
    __device__ __forceinline__ static void mask_tail(float (&s)[BN / 2], int n0, int S, int lane) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (n0 + 8 * j + 2 * (lane & 3) + (e & 1) >= S) s[4 * j + e] = -INFINITY;
    }

    // With the causal mask (bottom-right), keys a row does not see get score -inf: keys j >= lim0 for the
    // warpgroup's first row, one key more per row after it (row 16 warp + lane/4, +8 for r = 1, of the
    // warpgroup's 64; ctid: the thread in the warpgroup).  (The tail of Skv is past every row's limit.)
    __device__ __forceinline__ static void mask_keys(float (&s)[BN / 2], int n0, int lim0, int ctid) {
        const int lane = ctid & 31;
        const int row = 16 * (ctid >> 5) + (lane >> 2);
        const int c0 = n0 + 2 * (lane & 3) - lim0 - row;  // key - limit of row r = 0 at j = 0, e = 0
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (c0 + 8 * j + (e & 1) >= ((e >> 1) ? 8 : 0)) s[4 * j + e] = -INFINITY;
    }

    // The causal mask on packed rows (KVCHUNK kernels, tile_plan.cuh CaseTraits ROWMASK): row r of the warpgroup's 64
    // is query r % sq, whose keys j >= lim0 + r % sq get score -inf (lim0: the limit of query 0, relative to the
    // chunk's first key).  Asked only of tiles that reach past lim0 (the last few of Skv).
    __device__ __forceinline__ static void mask_rows(float (&s)[BN / 2], int n0, int lim0, int sq, int ctid) {
        const int lane = ctid & 31;
        const int row = 16 * (ctid >> 5) + (lane >> 2);
        const int lim[2] = {lim0 + row % sq, lim0 + (row + 8) % sq};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (n0 + 8 * j + 2 * (lane & 3) + (e & 1) >= lim[e >> 1]) s[4 * j + e] = -INFINITY;
    }

    // s (raw scores) -> unnormalised probabilities p = 2^(s * scale - m_new) in place; returns
    // in alpha the factor 2^(m_old - m_new) by which O must be rescaled.  scale_log2 > 0, and every tile holds
    // a key of every row (without the mask) or m starts finite (kRowMaxInit, with it), so m_new is finite even
    // for a row the tile masks entirely. (The fp16 kernel's step: one scale for both rows, no bias.)
    __device__ __forceinline__ void step(float (&s)[BN / 2], float scale_log2, float (&alpha)[2]) {
        const float both[2] = {scale_log2, scale_log2};
        step_rows<false>(s, both, 0.f, alpha);
    }

    // Row r's new running max (the tile's max in log2 units, four partial reductions, then the quad's), its factor
    // alpha for what came before, and m updated: the first half of step_rows, and max_rows.
    __device__ __forceinline__ float new_max(const float (&s)[BN / 2], int r, float scale_log2, float& alpha) {
        constexpr int NJ = BN / 8;
        static_assert(NJ % 4 == 0, "four partial reductions");
        float mx4[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) mx4[q] = fmaxf(s[4 * q + 2 * r], s[4 * q + 2 * r + 1]);
#pragma unroll
        for (int j = 4; j < NJ; ++j) mx4[j & 3] = fmaxf(mx4[j & 3], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        float mx = fmaxf(fmaxf(mx4[0], mx4[1]), fmaxf(mx4[2], mx4[3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * scale_log2);
        alpha = fast_exp2(m[r] - m_new);
        m[r] = m_new;
        return m_new;
    }

    // The FP8 kernel's step: a score scale per row (the row's Q scale folded in) and
    // probabilities 2^bias * 2^(s * scale - m_new), scaled for their rounding to E4M3 (l sums the
    // same scaled values, so the factor cancels in O / l).
    // kSum = false: l is left alone (the row sums come from elsewhere: SDPA_SM90_ROWSUM_MMA).
    template <bool kBias = true, int kPoly = 0, bool kSum = true>
    __device__ __forceinline__ void step_rows(float (&s)[BN / 2], const float (&scale_log2)[2], float bias,
                                              float (&alpha)[2]) {
        // Reductions as trees / four partial sums: a serial chain of BN/4 dependent FMNMX or
        // FADD would put ~BN clocks of latency on every tile's critical path.
        constexpr int NJ = BN / 8;
        static_assert(NJ % 4 == 0, "four partial reductions");
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float m_new = new_max(s, r, scale_log2[r], alpha[r]);
            const float off = kBias ? bias - m_new : -m_new;  // 0 - m_new would cost an FADD per row
            float sum4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float x = fmaf(s[4 * j + 2 * r + e], scale_log2[r], off);
                    const float p = poly_chunk<kPoly>(j) ? poly_exp2(x) : fast_exp2(x);
                    s[4 * j + 2 * r + e] = p;
                    if constexpr (kSum) sum4[j & 3] += p;
                }
            }
            if constexpr (kSum) l[r] = fmaf(l[r], alpha[r], (sum4[0] + sum4[1]) + (sum4[2] + sum4[3]));
        }
    }

    // step_rows in two parts, the same arithmetic (the 256-key loop with SDPA_SM90_BN256_LOOP=1, which issues P V of
    // the first keys while it takes the exponentials of the rest; the row sums from the tensor core, so no sums):
    // the row maxima, alpha and each row's exponent offset (bias - m_new) ...
    __device__ __forceinline__ void max_rows(const float (&s)[BN / 2], const float (&scale_log2)[2], float bias,
                                             float (&alpha)[2], float (&off)[2]) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float m_new = new_max(s, r, scale_log2[r], alpha[r]);
            off[r] = bias - m_new;
        }
    }
    // ... then the probabilities of 8-column chunks J0 .. J1 - 1.
    template <int J0, int J1, int kPoly = 0>
    __device__ __forceinline__ static void exp_chunks(float (&s)[BN / 2], const float (&scale_log2)[2],
                                                      const float (&off)[2]) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int j = J0; j < J1; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float x = fmaf(s[4 * j + 2 * r + e], scale_log2[r], off[r]);
                    s[4 * j + 2 * r + e] = poly_chunk<kPoly>(j) ? poly_exp2(x) : fast_exp2(x);
                }
    }
};

// O (m64nD accumulator fragment, same layout as S) *= alpha per row.
template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

// P (fp32 probabilities in the S fragment) -> fp16 A fragments of P V, one per 16 keys:
// the m64nN accumulator layout of columns 16k .. 16k+15 is exactly the m64k16 A register
// layout, so this is a pack, no shuffle.
template <int BN>
__device__ __forceinline__ void pack_p(const float (&s)[BN / 2], uint32_t (&p)[BN / 16][4]) {
#pragma unroll
    for (int k = 0; k < BN / 16; ++k) {
        p[k][0] = pack_half2(s[8 * k + 0], s[8 * k + 1]);
        p[k][1] = pack_half2(s[8 * k + 2], s[8 * k + 3]);
        p[k][2] = pack_half2(s[8 * k + 4], s[8 * k + 5]);
        p[k][3] = pack_half2(s[8 * k + 6], s[8 * k + 7]);
    }
}

// P (fp32, scaled) -> E4M3 A fragments of P V, one per 32 keys, in the order the thread holds
// them: register [0] row r=0 columns 8j + 2t + {0,1} for j = 4k, 4k+1; [1] the same for row r=1;
// [2], [3] j = 4k+2, 4k+3.  V^T's keys are permuted to match (fp8_load.cuh, vt_key_perm).
template <int BN>
__device__ __forceinline__ void pack_p_e4m3(const float (&s)[BN / 2], uint32_t (&p)[BN / 32][4]) {
#pragma unroll
    for (int k = 0; k < BN / 32; ++k) {
        const float* x = s + 16 * k;
        p[k][0] = pack_e4m3x4(x[0], x[1], x[4], x[5]);
        p[k][1] = pack_e4m3x4(x[2], x[3], x[6], x[7]);
        p[k][2] = pack_e4m3x4(x[8], x[9], x[12], x[13]);
        p[k][3] = pack_e4m3x4(x[10], x[11], x[14], x[15]);
    }
}

// pack_p_e4m3 of k-steps K0 .. K1 - 1 only.
template <int BN, int K0, int K1>
__device__ __forceinline__ void pack_p_e4m3_steps(const float (&s)[BN / 2], uint32_t (&p)[BN / 32][4]) {
#pragma unroll
    for (int k = K0; k < K1; ++k) {
        const float* x = s + 16 * k;
        p[k][0] = pack_e4m3x4(x[0], x[1], x[4], x[5]);
        p[k][1] = pack_e4m3x4(x[2], x[3], x[6], x[7]);
        p[k][2] = pack_e4m3x4(x[8], x[9], x[12], x[13]);
        p[k][3] = pack_e4m3x4(x[10], x[11], x[14], x[15]);
    }
}

}  // namespace sdpa_sm90
