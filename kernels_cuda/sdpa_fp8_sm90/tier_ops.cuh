// What the consumers do differently per tier: the operands of the two matrix products.  The main loop
// (mainloop.cuh) is one for both tiers and calls these (FlashAttention-3's hopper/ has one mainloop
// templated on the element type the same way); everything else it runs (rings, waits, ping-pong, the
// online softmax, the epilogue) is the same code.
//
//                   fp16 tier (wgmma_sm90, traits.cuh)        fp8 tier (wgmma_fp8_sm90, fp8_traits.cuh)
//   Q fragments     fp16 A fragments in registers (Q_REGS;    E4M3 A fragments in registers, each row
//                   0: fp16 Q from shared memory, SS), one     scaled to 448, 1/scale in its score scale;
//                   score scale                                short launches: two terms, hi + lo (Q2)
//   Q K^T           m64nBNk16, K fp16 (decoded), K-major       m64nBNk32, K as stored (E4M3), K-major
//   P               fp16, the accumulator layout as is         E4M3 with the 2^8 bias, thread order
//   P V             m64nDk16, V fp16 (decoded), MN-major       m64nDk32, V^T (transposed), K-major;
//                                                              the row sums from the tensor core
//   producer's work decode K and V to fp16 (tile_load.cuh)     V transposed (fp8_load.cuh)
#pragma once

#include "fp8_traits.cuh"  // kE4M3Max
#include "ptx.cuh"
#include "softmax.cuh"
#include "traits.cuh"
#include "wgmma_ops.cuh"

namespace sdpa_sm90 {

// A fragments of Q per thread: fp8 tier D/32 k-steps of E4M3 (twice as many with Q2: the second term's); fp16
// tier (Q_REGS) D/16 k-steps of fp16.
template <class T>
__host__ __device__ constexpr int qa_k() { return T::FP8 ? (T::Q2 ? 2 : 1) * (T::D / 32) : T::D / 16; }

// ------------------------------------------------------------------------------ fp16 tier
template <int N>
struct SSOp;
template <>
struct SSOp<128> {
    __device__ __forceinline__ static void run(float (&d)[64], uint64_t a, uint64_t b, int acc) {
        wgmma::ss_m64n128k16(d, a, b, acc);
    }
};
template <>
struct SSOp<192> {
    __device__ __forceinline__ static void run(float (&d)[96], uint64_t a, uint64_t b, int acc) {
        wgmma::ss_m64n192k16(d, a, b, acc);
    }
};

template <int N>
struct RSOp;
template <>
struct RSOp<64> {
    __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc) {
        wgmma::rs_m64n64k16_tb(d, a, b, acc);
    }
};
template <>
struct RSOp<128> {
    __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int acc) {
        wgmma::rs_m64n128k16_tb(d, a, b, acc);
    }
};

// S = Q K^T for one warpgroup, fp16: D/16 k-steps of m64nBNk16, A = Q and B = K from shared memory, both
// K-major in 64-column panels (128-byte swizzle).  qd: the warpgroup's first Q row in panel 0
// (smem_desc(q_rows, 16, 1024)); kd: the K buffer's (smem_desc(k, 16, 1024)).  A k-step inside a panel adds
// 32 bytes to the address field (+2), a panel BM (Q) or BN (K) rows of 128 bytes.
template <class T>
__device__ __forceinline__ void issue_qk_f16(float (&s)[T::BN / 2], const uint32_t (&qa)[qa_k<T>()][4], uint64_t qd,
                                             uint64_t kd) {
#pragma unroll
    for (int kk = 0; kk < T::D / 16; ++kk) {
        const uint64_t in_panel = (uint64_t)((kk & 3) * 2), p = (uint64_t)(kk >> 2);
        if constexpr (T::Q_REGS) wgmma::rs_m64n128k16(s, qa[kk], kd + p * (T::BN * 128 / 16) + in_panel, kk > 0);
        else SSOp<T::BN>::run(s, qd + p * (T::BM * 128 / 16) + in_panel, kd + p * (T::BN * 128 / 16) + in_panel, kk > 0);
    }
}

// Q_REGS: the thread's fp16 A fragments of Q (mma.sync m16n8k16's A layout per warp: k-step kk, [0] row g,
// columns 16kk + 2t, +1; [1] row g+8; [2] row g, columns 16kk + 8 + 2t, +1; [3] row g+8), g = 16 warp +
// lane/4 of the warpgroup's 64 rows.  q: the warpgroup's first row in Q's panel 0.
template <class T>
__device__ __forceinline__ void load_q_f16(const uint8_t* q, uint32_t (&qa)[qa_k<T>()][4], int ctid) {
    const int lane = ctid & 31, warp = ctid >> 5, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < T::D / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * warp + (lane >> 2) + 8 * (e & 1), col = 16 * kk + 8 * (e >> 1) + 2 * t;
            qa[kk][e] = *reinterpret_cast<const uint32_t*>(q + (col >> 6) * (T::BM * 128) + swz128(row, (col & 63) >> 3) +
                                                           (col & 7) * 2);
        }
}

// O += P V for one warpgroup, fp16: BN/16 k-steps of m64nDk16, V MN-major (panels of 64 columns BN*128
// bytes apart: the descriptor's LBO); vd: the V buffer's (smem_desc(v, BN * 128, 1024)); a k-step of 16 keys
// adds 16 rows of 128 bytes.
// ROWSUM: then rs = P 1, this tile's row sums: BN/16 m64n8k16 with B = the ones tile (od: smem_desc(ones, 128, 128,
// no swizzle); every k-step reads the same 16 rows) into a fresh accumulator, column 0 (lanes with lane % 4 == 0).
template <class T>
__device__ __forceinline__ void issue_pv_f16(float (&o)[T::D / 2], float (&rs)[4], const uint32_t (&p)[T::BN / 16][4],
                                             uint64_t vd, uint64_t od) {
#pragma unroll
    for (int kk = 0; kk < T::BN / 16; ++kk) RSOp<T::D>::run(o, p[kk], vd + (uint64_t)(kk * (16 * 128 / 16)), 1);
    if constexpr (T::ROWSUM) {
#pragma unroll
        for (int kk = 0; kk < T::BN / 16; ++kk) wgmma::rs_m64n8k16_tb(rs, p[kk], od, kk > 0);
    }
}

// ------------------------------------------------------------------------------ fp8 tier
template <int N>
struct RsE4m3;
template <>
struct RsE4m3<64> {
    __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc) {
        wgmma::rs_e4m3_m64n64k32(d, a, b, acc);
    }
};
template <>
struct RsE4m3<128> {
    __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int acc) {
        wgmma::rs_e4m3_m64n128k32(d, a, b, acc);
    }
};

// The thread's E4M3 A fragments of Q (rows g = 16 warp + lane/4 and g + 8 of the warpgroup's 64,
// k-step kk: [0] row g, columns 32kk + 4t .. +3; [1] row g+8, same; [2] row g, 32kk + 16 + 4t ..;
// [3] row g+8), and each row's 1/scale.  q: the warpgroup's first row in Q's panel 0.
// T::Q2 (SDPA_SM90_FP8_Q2): k-steps D/32 .. 2D/32 - 1 hold the second term, the rest of each scaled value
// (q s - hi, exact in fp32: hi is q s rounded) rounded to E4M3, so hi + lo is q s within about 2^-8 of it.
template <class T>
__device__ __forceinline__ void load_q_e4m3(const uint8_t* q, uint32_t (&qa)[qa_k<T>()][4], float (&qinv)[2],
                                            int ctid) {
    const int lane = ctid & 31, warp = ctid >> 5, t = lane & 3;
    uint2 h[T::D / 32][4];
    float amax[2] = {0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < T::D / 32; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e & 1, row = 16 * warp + (lane >> 2) + 8 * r, col = 32 * kk + 16 * (e >> 1) + 4 * t;
            h[kk][e] = *reinterpret_cast<const uint2*>(q + (col >> 6) * (T::BM * 128) + swz128(row, (col & 63) >> 3) +
                                                       (col & 7) * 2);
            const __half2 a = __habs2(*reinterpret_cast<const __half2*>(&h[kk][e].x));
            const __half2 b = __habs2(*reinterpret_cast<const __half2*>(&h[kk][e].y));
            const __half2 m = __hmax2(a, b);
            amax[r] = fmaxf(amax[r], fmaxf(__low2float(m), __high2float(m)));
        }
    float qs[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 1));
        amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 2));
        qs[r] = amax[r] > 0.f ? kE4M3Max / amax[r] : 1.f;
        qinv[r] = amax[r] > 0.f ? amax[r] / kE4M3Max : 1.f;
    }
#pragma unroll
    for (int kk = 0; kk < T::D / 32; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h[kk][e].x));
            const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&h[kk][e].y));
            const float s = qs[e & 1];
            const float x0 = a.x * s, x1 = a.y * s, x2 = b.x * s, x3 = b.y * s;
            qa[kk][e] = pack_e4m3x4(x0, x1, x2, x3);
            if constexpr (T::Q2) {
                uint32_t h01, h23;
                decode4(qa[kk][e], h01, h23);
                const float2 d01 = __half22float2(*reinterpret_cast<const __half2*>(&h01));
                const float2 d23 = __half22float2(*reinterpret_cast<const __half2*>(&h23));
                qa[kk + T::D / 32][e] = pack_e4m3x4(x0 - d01.x, x1 - d01.y, x2 - d23.x, x3 - d23.y);
            }
        }
}

// Q_SMEM: the warpgroup's E4M3 A fragments written to shared memory at q8 (64 rows of D = 128 bytes,
// K-major, 128-byte swizzle: the layout the copy engine gives K), for Q K^T from shared memory.
template <class T>
__device__ __forceinline__ void store_q_e4m3(uint8_t* q8, const uint32_t (&qa)[qa_k<T>()][4], int ctid) {
    static_assert(T::D == 128, "rows of 128 bytes");
    const int lane = ctid & 31, warp = ctid >> 5, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < T::D / 32; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = 16 * warp + (lane >> 2) + 8 * (e & 1), c = 32 * kk + 16 * (e >> 1) + 4 * t;
            *reinterpret_cast<uint32_t*>(q8 + swz128(r, c >> 4) + (c & 15)) = qa[kk][e];
        }
}

// S = Q K^T for one warpgroup: D/32 k-steps of m64nBNk32, K-major K (+32 bytes per step: +2 in the
// descriptor's address field); T::Q2: then D/32 more with Q's second term and the same K.  kd: the K stage's
// descriptor (smem_desc(stage, 16, K_SBO, K_SWIZZLE)).
// Q_SMEM: A from shared memory (qd: smem_desc(q8, 16, 1024)), qa unused.
template <class T>
__device__ __forceinline__ void issue_qk_fp8(float (&s)[T::BN / 2], const uint32_t (&qa)[qa_k<T>()][4], uint64_t qd,
                                             uint64_t kd) {
#pragma unroll
    for (int kk = 0; kk < T::D / 32; ++kk) {
        if constexpr (T::Q_SMEM) wgmma::ss_e4m3_m64n192k32(s, qd + 2u * kk, kd + 2u * kk, kk > 0);
        else RsE4m3<T::BN>::run(s, qa[kk], kd + 2u * kk, kk > 0);
    }
    if constexpr (T::Q2) {
#pragma unroll
        for (int kk = 0; kk < T::D / 32; ++kk) RsE4m3<T::BN>::run(s, qa[kk + T::D / 32], kd + 2u * kk, 1);
    }
}

// BN 256 (T::LEAN), and 128 in LEAN3: S = Q K^T, D/32 k-steps of m64nBNk32, A = Q's E4M3 codes in shared memory
// (qd), B the K stage.  The first k-step writes S without reading it (ss_e4m3_m64nBNk32_zero), so that S's
// registers are free until the call (with "+f" they would stay live from the last softmax, beside P).
template <class T>
__device__ __forceinline__ void issue_qk256(float (&s)[T::BN / 2], uint64_t qd, uint64_t kd) {
    static_assert((T::LEAN && T::BN == 256) || (T::LEAN3 && T::BN == 128), "256-key tiles, or 128 with three warpgroups");
    if constexpr (T::BN == 256) {
        wgmma::ss_e4m3_m64n256k32_zero(s, qd, kd);
#pragma unroll
        for (int kk = 1; kk < T::D / 32; ++kk) wgmma::ss_e4m3_m64n256k32(s, qd + 2u * kk, kd + 2u * kk, 1);
    } else {
        wgmma::ss_e4m3_m64n128k32_zero(s, qd, kd);
#pragma unroll
        for (int kk = 1; kk < T::D / 32; ++kk) wgmma::ss_e4m3_m64n128k32(s, qd + 2u * kk, kd + 2u * kk, 1);
    }
}

// Descriptor of k-step kk of a V^T buffer (32 keys) at row `row` (0: V^T; D: the ones rows), a
// multiple of 8; vd: the buffer's panel-0 descriptor (smem_desc(buffer, 16, 1024): rows of 128 bytes,
// 128-byte swizzle).  Panel 1 (BN 192: keys 128..191, rows of 64 bytes, 64-byte swizzle) differs from
// it by a constant: address + VT_P1_OFF, SBO 512 instead of 1024, swizzle field 2 instead of 1 (disjoint
// fields, none carries).  A k-step adds 32 bytes to the address (+2).
template <class T>
__device__ __forceinline__ uint64_t vt_step(uint64_t vd, int kk, int row) {
    constexpr uint64_t kP1 = (uint64_t)(T::VT_P1_OFF >> 4) - ((uint64_t)((1024 - 512) >> 4) << 32) +
                             ((uint64_t)(kSwizzle64B - kSwizzle128B) << 62);
    // BN 256: panel 1 (keys 128..255) has panel 0's layout, VT_P1_OFF on
    if constexpr (T::VT_P1_KEYS == 128)
        return vd + (uint64_t)(row * 128 / 16 + 2 * (kk & 3)) + (kk < 4 ? 0 : (uint64_t)(T::VT_P1_OFF >> 4));
    return kk < 4 ? vd + (uint64_t)(row * 128 / 16 + 2 * kk) : vd + kP1 + (uint64_t)(row * 64 / 16 + 2 * (kk - 4));
}

// O += P V for one warpgroup: BN/32 k-steps of m64nDk32, B = V^T [D][BN] (rows of keys).
// ROWSUM: then rs = P 1 (this tile's row sums: column 0 of the ones rows below V^T), a fresh
// accumulator.  ONES_SEP (BN 256): the ones rows are the ones block (od: smem_desc(ones, 16, 1024, 128-byte
// swizzle)); its row 0 is 1.0 in every byte and rows 1..7 zero, so every k-step reads the same 32 bytes per row.
template <class T>
__device__ __forceinline__ void issue_pv_fp8(float (&o)[T::D / 2], float (&rs)[4], const uint32_t (&p)[T::BN / 32][4],
                                             uint64_t vd, [[maybe_unused]] uint64_t od) {
#pragma unroll
    for (int kk = 0; kk < T::BN / 32; ++kk) RsE4m3<T::D>::run(o, p[kk], vt_step<T>(vd, kk, 0), 1);
    if constexpr (T::ROWSUM) {
#pragma unroll
        for (int kk = 0; kk < T::BN / 32; ++kk) {
            if constexpr (T::ONES_SEP) wgmma::rs_e4m3_m64n8k32(rs, p[kk], od, kk > 0);
            else wgmma::rs_e4m3_m64n8k32(rs, p[kk], vt_step<T>(vd, kk, T::D), kk > 0);
        }
    }
}

// BN 256, SDPA_SM90_BN256_LOOP=1: half H of O += P V (keys 128 H .. 128 H + 127: k-steps 4 H .. 4 H + 3) and of the
// row sums (the first half starts them).
template <class T, int H>
__device__ __forceinline__ void issue_pv256_half(float (&o)[T::D / 2], float (&rs)[4], const uint32_t (&p)[T::BN / 32][4],
                                                 uint64_t vd, uint64_t od) {
    static_assert(T::LEAN && T::ONES_SEP && (H == 0 || H == 1), "256-key tiles, the ones block");
#pragma unroll
    for (int kk = 4 * H; kk < 4 * H + 4; ++kk) RsE4m3<T::D>::run(o, p[kk], vt_step<T>(vd, kk, 0), 1);
#pragma unroll
    for (int kk = 4 * H; kk < 4 * H + 4; ++kk) wgmma::rs_e4m3_m64n8k32(rs, p[kk], od, kk > 0);
}

// ------------------------------------------------------------------------------ by tier
// qa / qd: the fp8 tier's Q fragments (or, 192-key tiles, Q's E4M3 descriptor); the fp16 tier's Q descriptor
// in qd.  kd, vd: the K and V buffers' descriptors.  rs: the fp8 tier's row sums (ROWSUM).
template <class T>
__device__ __forceinline__ void issue_qk(float (&s)[T::BN / 2], const uint32_t (&qa)[qa_k<T>()][4], uint64_t qd,
                                         uint64_t kd) {
    if constexpr (T::FP8) issue_qk_fp8<T>(s, qa, qd, kd);
    else issue_qk_f16<T>(s, qa, qd, kd);
}
// od: the fp16 tier's ones tile (ROWSUM).
template <class T>
__device__ __forceinline__ void issue_pv(float (&o)[T::D / 2], float (&rs)[4], const uint32_t (&p)[T::P_KSTEPS][4],
                                         uint64_t vd, uint64_t od) {
    if constexpr (T::FP8) issue_pv_fp8<T>(o, rs, p, vd, od);
    else issue_pv_f16<T>(o, rs, p, vd, od);
}
// P (the softmax's probabilities in the S fragment) -> the A fragments of P V.
template <class T>
__device__ __forceinline__ void pack_p_tier(const float (&s)[T::BN / 2], uint32_t (&p)[T::P_KSTEPS][4]) {
    if constexpr (T::FP8) pack_p_e4m3<T::BN>(s, p);
    else pack_p<T::BN>(s, p);
}

}  // namespace sdpa_sm90
