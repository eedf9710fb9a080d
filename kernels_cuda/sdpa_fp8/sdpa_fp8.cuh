// FP8 (simulated E4M3) scaled-dot-product attention, forward, non-causal.
//
//   O = softmax(Q K^T / sqrt(D)) V,  K = decode(K_u8) * k_scale,  V = decode(V_u8) * v_scale
//
// Q: fp16 [B,H,S,D]; K, V: uint8 E4M3 codes [B,H,S,D]; O: fp16 [B,H,S,D].
//
// Design (FlashAttention-2 style, one warp owns 16 query rows):
//   * K/V tiles of BN keys are brought into shared memory as uint8, decoded ONCE per block
//     to fp16 (exact: every E4M3 value is an fp16 value) into padded fp16 tiles, and the
//     per-tensor scales are folded out of the matrix products (k_scale into the softmax
//     exponent, v_scale into the final normalisation).
//   * Tensor cores: mma.sync.m16n8k16 (fp16 in, fp32 accumulate), operands fetched with
//     ldmatrix (ldmatrix.trans for V). S = Q K^T stays in registers, the online softmax is
//     done on the accumulator fragments, and P is re-packed to fp16 A fragments in registers
//     (no shared-memory round trip of S or P).
//   * Intra-block split-KV (NSPLIT > 1): the block's warps form NSPLIT groups of NWM warps;
//     every group owns the same BM = 16*NWM query rows and the tiles t = g, g+NSPLIT, ...
//     of the key range, with its own fp16 tiles, its own uint8 stage(s) and its own named
//     barrier (bar.sync 1+g, 32*NWM), so the groups run independently.  At the end the
//     NSPLIT softmax states (m, l, O) are merged through shared memory; group g normalises
//     and stores the output columns [g*D/NSPLIT, (g+1)*D/NSPLIT).  More independent warps
//     per SM, no redundant decode inside a block.
//   * USE_CP_ASYNC=0 (baseline): each iteration loads the uint8 tile with ordinary 16-byte
//     global loads into registers, then decodes into the fp16 tiles.
//   * USE_CP_ASYNC=1: the uint8 tiles are staged in shared memory with cp.async (16-byte
//     chunks, rows past S zero-filled); with two stages tile t+1 is fetched while tile t is
//     decoded and consumed, with one stage (where two do not fit in 64 KiB) tile t+1 is
//     fetched while tile t is consumed.
//   * Ablations (template parameter ABL, for diagnostics only; outputs are NOT correct):
//     kAblNoCompute runs the tile load path for every tile but skips QK^T/softmax/PV;
//     kAblNoLoads loads and decodes only the first tile of each group and runs the math for
//     every tile on it.
//
// Head dims: 64 (Q fragments kept in registers) and 128 (Q re-read from shared memory).
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

#include "half_ops.cuh"

#ifndef USE_CP_ASYNC
#define USE_CP_ASYNC 0
#endif

// 0: decode with the hardware cvt.rn.f16x2.e4m3x2 (sm_89+).  1: integer bit manipulation
// (value * 2^-8, the 2^8 is folded into the scales).  Both are exact decodes of E4M3.
#ifndef SDPA_FP8_ALU_DECODE
#define SDPA_FP8_ALU_DECODE 0
#endif

namespace sdpa_fp8 {

constexpr bool kCpAsync = (USE_CP_ASYNC != 0);

// ------------------------------------------------------------------------------------------
// small PTX wrappers
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// D(16x8 f32) += A(16x16 f16, row) * B(16x8 f16, col)
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

using sdpa_half_ops::fast_exp2;
using sdpa_half_ops::pack_half2;

#if USE_CP_ASYNC
// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

using sdpa_half_ops::group_barrier;
using sdpa_half_ops::named_barrier;

__device__ __forceinline__ int read_tid_x() {
    int x;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(x));
    return x;
}

// Four E4M3 codes (little-endian in x) -> two half2 words (lo: codes 0,1; hi: codes 2,3).
__device__ __forceinline__ void decode4(uint32_t x, uint32_t& lo, uint32_t& hi) {
#if SDPA_FP8_ALU_DECODE
    // fp16 bits of (value * 2^-8): sign<<15 | (code & 0x7f) << 7.  Put each code in the high
    // byte of its 16-bit half, shift right by one (sign lands on bit 14), then move that bit
    // to bit 15 by adding it to itself.
    uint32_t u0 = __byte_perm(x, 0u, 0x1404) >> 1;
    uint32_t u1 = __byte_perm(x, 0u, 0x3424) >> 1;
    lo = u0 + (u0 & 0x40004000u);
    hi = u1 + (u1 & 0x40004000u);
#else
    sdpa_half_ops::decode4_e4m3(x, lo, hi);
#endif
}

// Multiplier that turns the decoded fp16 value into the true E4M3 value.
constexpr float kDecodeFactor = SDPA_FP8_ALU_DECODE ? 256.0f : 1.0f;


// ------------------------------------------------------------------------------------------
// configuration
// ------------------------------------------------------------------------------------------
// Ablation modes (diagnostics only; see the header comment).  Compile-time in the kernel,
// all three instantiated in every binary and picked at run time by the runner's --ablate.
enum Ablate : int { kAblNone = 0, kAblNoCompute = 1, kAblNoLoads = 2 };

template <int D_, int BN_, int NWM_, int NSPLIT_, bool QREGS_>
struct Cfg {
    static constexpr int D = D_;
    static constexpr int BN = BN_;            // keys per tile
    static constexpr int NWM = NWM_;          // warps per KV group (16 query rows each)
    static constexpr int NSPLIT = NSPLIT_;    // KV groups per block (intra-block split-KV)
    static constexpr int NWARPS = NWM * NSPLIT;
    static constexpr bool QREGS = QREGS_;     // Q fragments live in registers for the whole kernel
    static constexpr int BM = 16 * NWM;       // query rows per block (shared by all groups)
    static constexpr int T = 32 * NWARPS;     // threads per block
    static constexpr int TG = 32 * NWM;       // threads per KV group
    static constexpr int LDH = D + 8;         // padded fp16 row (halves): ldmatrix conflict-free
    static constexpr int KV16_BYTES = 2 * BN * LDH * 2;        // one group's fp16 K and V tiles
    static constexpr int KV16_ALL = NSPLIT * KV16_BYTES;
    static constexpr int Q16_BYTES = BM * LDH * 2;
    // Merge buffer of the split-KV epilogue: [NSPLIT][D/2 + 4 floats][TG], aliases the fp16 tiles.
    static constexpr int MERGE_E = D / 2 + 4;
    static constexpr int MERGE_BYTES = NSPLIT > 1 ? NSPLIT * MERGE_E * TG * 4 : 0;
    // With QREGS the Q staging tile aliases the fp16 K/V tiles (it is consumed before tile 0).
    static constexpr int F16_MAIN = QREGS ? (KV16_ALL > Q16_BYTES ? KV16_ALL : Q16_BYTES) : KV16_ALL + Q16_BYTES;
    static constexpr int F16_BYTES = F16_MAIN > MERGE_BYTES ? F16_MAIN : MERGE_BYTES;
    static constexpr int U8_TILE = BN * D;                     // bytes of one uint8 K or V tile
    static constexpr int U8_STAGE = NSPLIT * 2 * U8_TILE;      // one stage: [group][K,V]
    // cp.async: two uint8 stages where they fit in 64 KiB, else one.
    static constexpr int NSTAGE = !kCpAsync ? 0 : (F16_BYTES + 2 * U8_STAGE <= 64 * 1024 ? 2 : 1);
    static constexpr int U8_BYTES = NSTAGE * U8_STAGE;
    static constexpr int SMEM = F16_BYTES + U8_BYTES;
    static constexpr int KV_CHUNKS = BN * D / 16;   // 16-byte chunks per uint8 tile
    static constexpr int KV_PER_T = KV_CHUNKS / TG; // per thread of a group
    static constexpr int Q_CHUNKS = BM * D / 8;     // 16-byte chunks of the Q tile
    static_assert(D % 16 == 0 && BN % 16 == 0, "tile shape");
    static_assert(KV_CHUNKS % TG == 0, "uint8 tile chunks must divide evenly over a group's threads");
    static_assert(Q_CHUNKS % T == 0, "Q tile chunks must divide evenly over the threads");
    static_assert((D / 8) % NSPLIT == 0, "output column blocks must divide evenly over the groups");
    static_assert(BN >= 32, "the no-compute probe reads row `lane` of a tile");
    static_assert(NSPLIT + 1 <= 16, "named barriers 1..NSPLIT");
    static_assert(SMEM <= 64 * 1024, "shared memory budget");
    static constexpr int MIN_BLOCKS = (512 / T) > 0 ? (512 / T) : 1;  // caps registers at 128
};

// Barrier among the threads of one KV group (the whole block when there is one group).
template <class C>
__device__ __forceinline__ void group_sync(int grp) {
    if constexpr (C::NSPLIT == 1) {
        __syncthreads();
    } else {
        group_barrier<C::TG, 0, C::NSPLIT>(grp);
    }
}

// ------------------------------------------------------------------------------------------
// the kernel
// ------------------------------------------------------------------------------------------
template <class C, int ABL>
__global__ void __launch_bounds__(C::T, C::MIN_BLOCKS)
sdpa_fp8_fwd_kernel(const __half* __restrict__ Q, const uint8_t* __restrict__ K, const uint8_t* __restrict__ V,
                    __half* __restrict__ O, int S, int mblocks, float qk_scale_log2, float out_scale) {
    constexpr int D = C::D, BN = C::BN, LDH = C::LDH, T = C::T, TG = C::TG, NSPLIT = C::NSPLIT;
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int grp = NSPLIT == 1 ? 0 : warp / C::NWM;    // KV group
    const int wm = NSPLIT == 1 ? warp : warp % C::NWM;  // row warp inside the group
    const int gtid = NSPLIT == 1 ? tid : tid % TG;      // thread index inside the group

    __half* sF16 = reinterpret_cast<__half*>(smem);
    __half* sK = sF16 + grp * 2 * BN * LDH;              // this group's [BN][LDH]
    __half* sV = sK + BN * LDH;                          // this group's [BN][LDH]
    __half* sQ = C::QREGS ? sF16 : sF16 + NSPLIT * 2 * BN * LDH;  // [BM][LDH]

    const int mb = blockIdx.x % mblocks;
    const size_t bh = blockIdx.x / mblocks;
    const int m0 = mb * C::BM;
    const size_t base = bh * (size_t)S * D;
    const __half* Qg = Q + base;
    const uint8_t* Kg = K + base;
    const uint8_t* Vg = V + base;
    __half* Og = O + base;
    const int ntiles = (S + BN - 1) / BN;

#if USE_CP_ASYNC
    uint8_t* sU8 = smem + C::F16_BYTES + grp * 2 * C::U8_TILE;  // [stage][group][0:K, 1:V][BN*D]
    auto issue_tile = [&](int t, int stage) {
        uint8_t* dK = sU8 + stage * C::U8_STAGE;
        uint8_t* dV = dK + C::U8_TILE;
#pragma unroll
        for (int i = 0; i < C::KV_PER_T; ++i) {
            const int c = gtid + i * TG;
            const int r = c / (D / 16);
            const int col = (c % (D / 16)) * 16;
            const int gr = t * BN + r;
            const bool ok = gr < S;
            const size_t off = ok ? (size_t)gr * D + col : 0;  // clamp: never form an address past the tensor
            cp_async16(dK + r * D + col, Kg + off, ok ? 16 : 0);
            cp_async16(dV + r * D + col, Vg + off, ok ? 16 : 0);
        }
    };
#endif

    // ---- Q tile -> shared memory (rows past S are zero); all groups share it ----------------
#pragma unroll
    for (int i = 0; i < C::Q_CHUNKS / T; ++i) {
        const int c = tid + i * T;
        const int r = c / (D / 8);
        const int col = (c % (D / 8)) * 8;
        const int gr = m0 + r;
        const bool ok = gr < S;
        const size_t off = ok ? (size_t)gr * D + col : 0;
#if USE_CP_ASYNC
        cp_async16(sQ + r * LDH + col, Qg + off, ok ? 16 : 0);
#else
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (ok) v = __ldg(reinterpret_cast<const uint4*>(Qg + off));
        *reinterpret_cast<uint4*>(sQ + r * LDH + col) = v;
#endif
    }
#if USE_CP_ASYNC
    cp_async_commit();     // group: Q
    if (grp < ntiles) issue_tile(grp, 0);   // this KV group's first tile
    cp_async_commit();     // group: first K/V tile (empty for a group without tiles)
    cp_async_wait<1>();    // Q has landed (this thread's copies)
#endif
    __syncthreads();       // Q visible to all warps

    // ldmatrix lane addressing
    // A operand (16x16, row major): matrices (rows 0-7|8-15) x (cols 0-7|8-15)
    const int a_row = wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    const int a_col = (lane >> 4) * 8;
    // B operand from sK (non-trans): matrices (n-tile j|j+1) x (k lo|hi)
    const int k_row = (lane & 7) + (lane >> 4) * 8;
    const int k_col = ((lane >> 3) & 1) * 8;
    // B operand from sV (trans): matrices (k lo|hi) x (n-tile j|j+1)
    const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8;
    const int v_col = (lane >> 4) * 8;

    const uint32_t sQ_a = smem_addr(sQ + a_row * LDH + a_col);
    const uint32_t sK_b = smem_addr(sK + k_row * LDH + k_col);
    const uint32_t sV_b = smem_addr(sV + v_row * LDH + v_col);

    uint32_t qf[C::QREGS ? D / 16 : 1][4];
    if constexpr (C::QREGS) {
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc)
            ldsm_x4(sQ_a + kc * 32, qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3]);
        // sQ aliases the fp16 K/V tiles.  One group: the block-wide barrier B1 at the top of the
        // first iteration orders these reads before the first decode writes.  Several groups:
        // group 0's tiles hold sQ and every group reads it, while the per-group barriers
        // only order a group's own warps, hence this block-wide barrier.
        if constexpr (NSPLIT > 1) __syncthreads();
    }

    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.f, 0.f};
    float probe = 0.f;   // kAblNoCompute: one shared-memory value per tile, keeps the loads live

    for (int t = grp; t < ntiles; t += NSPLIT) {
        const int n0 = t * BN;
        const int it = NSPLIT == 1 ? t : (int)((unsigned)(t - grp) / NSPLIT);  // the group's iteration
        // kAblNoLoads: only the group's first tile is loaded and decoded; later iterations run
        // the math on the fp16 tiles already in shared memory (no loads, decode or barriers).
        const bool do_load = (ABL != kAblNoLoads) || it == 0;
#if USE_CP_ASYNC
        const bool prefetch = (ABL != kAblNoLoads) && (t + NSPLIT < ntiles);
#endif
        if (do_load) {
#if USE_CP_ASYNC
            if constexpr (C::NSTAGE == 2) {
                // Prefetch the group's next tile into the other stage.  That stage was last read
                // by the decode of iteration it-1, which every thread of the group finished
                // before the second barrier (B2) of iteration it-1.
                if (prefetch) issue_tile(t + NSPLIT, (it + 1) & 1);
                cp_async_commit();          // (possibly empty) group keeps the counting uniform
                cp_async_wait<1>();         // everything but the newest group done: tile t has landed
            } else {
                cp_async_wait<0>();         // one stage: tile t (issued after B2 of it-1) has landed
            }
            group_sync<C>(grp);            // B1: tile t visible to the group; the group is done with its fp16 tiles (it-1)
            const uint8_t* uK = sU8 + (C::NSTAGE == 2 ? (it & 1) : 0) * C::U8_STAGE;
            const uint8_t* uV = uK + C::U8_TILE;
#pragma unroll
            for (int i = 0; i < C::KV_PER_T; ++i) {
                const int c = gtid + i * TG;
                const int r = c / (D / 16);
                const int col = (c % (D / 16)) * 16;
                const uint4 kw = *reinterpret_cast<const uint4*>(uK + r * D + col);
                const uint4 vw = *reinterpret_cast<const uint4*>(uV + r * D + col);
#else
            uint4 kreg[C::KV_PER_T], vreg[C::KV_PER_T];
#pragma unroll
            for (int i = 0; i < C::KV_PER_T; ++i) {
                const int c = gtid + i * TG;
                const int r = c / (D / 16);
                const int col = (c % (D / 16)) * 16;
                const int gr = n0 + r;
                kreg[i] = vreg[i] = make_uint4(0u, 0u, 0u, 0u);
                if (gr < S) {
                    kreg[i] = __ldg(reinterpret_cast<const uint4*>(Kg + (size_t)gr * D + col));
                    vreg[i] = __ldg(reinterpret_cast<const uint4*>(Vg + (size_t)gr * D + col));
                }
            }
            group_sync<C>(grp);            // B1: the group is done with its fp16 tiles of iteration it-1 (and with sQ)
#pragma unroll
            for (int i = 0; i < C::KV_PER_T; ++i) {
                const int c = gtid + i * TG;
                const int r = c / (D / 16);
                const int col = (c % (D / 16)) * 16;
                const uint4 kw = kreg[i];
                const uint4 vw = vreg[i];
#endif
                uint4 k0, k1, v0, v1;
                decode4(kw.x, k0.x, k0.y);
                decode4(kw.y, k0.z, k0.w);
                decode4(kw.z, k1.x, k1.y);
                decode4(kw.w, k1.z, k1.w);
                decode4(vw.x, v0.x, v0.y);
                decode4(vw.y, v0.z, v0.w);
                decode4(vw.z, v1.x, v1.y);
                decode4(vw.w, v1.z, v1.w);
                *reinterpret_cast<uint4*>(sK + r * LDH + col) = k0;
                *reinterpret_cast<uint4*>(sK + r * LDH + col + 8) = k1;
                *reinterpret_cast<uint4*>(sV + r * LDH + col) = v0;
                *reinterpret_cast<uint4*>(sV + r * LDH + col + 8) = v1;
            }
            group_sync<C>(grp);            // B2: fp16 tiles complete; the group is done reading the uint8 stage
#if USE_CP_ASYNC
            if constexpr (C::NSTAGE == 1) {
                // One stage: fetch the group's next tile now, overlapped with compute(t).  The
                // stage was read by decode(t), which every thread of the group finished before B2.
                if (prefetch) issue_tile(t + NSPLIT, 0);
                cp_async_commit();
            }
#endif
        }

        if constexpr (ABL == kAblNoCompute) {
            // Read one decoded value per tile (after B2, before the next B1) instead of the math.
            probe += __half2float(sK[lane * LDH + (warp & 7)]) + __half2float(sV[lane * LDH + 8 + (warp & 7)]);
        } else {
            // ---- S = Q K^T (16 x BN per warp, fp32 in registers) --------------------------------
            float s[BN / 8][4];
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kc = 0; kc < D / 16; ++kc) {
                uint32_t a[4];
                if constexpr (C::QREGS) {
                    a[0] = qf[kc][0]; a[1] = qf[kc][1]; a[2] = qf[kc][2]; a[3] = qf[kc][3];
                } else {
                    ldsm_x4(sQ_a + kc * 32, a[0], a[1], a[2], a[3]);
                }
#pragma unroll
                for (int j = 0; j < BN / 8; j += 2) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sK_b + (j * 8 * LDH + kc * 16) * 2, b0, b1, b2, b3);
                    mma16816(s[j], a, b0, b1);
                    mma16816(s[j + 1], a, b2, b3);
                }
            }

            // ---- scale into the log2 domain, mask keys past S ------------------------------------
            const bool partial = (n0 + BN > S);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = s[j][e] * qk_scale_log2;
                    if (partial) {
                        const int col = n0 + j * 8 + 2 * (lane & 3) + (e & 1);
                        if (col >= S) v = -INFINITY;
                    }
                    s[j][e] = v;
                }
            }

            // ---- online softmax (rows lane/4 and lane/4+8; a row lives in one lane quad) ----------
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m_run[r], mx);   // finite: every tile has >= 1 valid key
                const float alpha = fast_exp2(m_run[r] - m_new);
                m_run[r] = m_new;
                float rs = 0.f;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const float p0 = fast_exp2(s[j][2 * r] - m_new);
                    const float p1 = fast_exp2(s[j][2 * r + 1] - m_new);
                    s[j][2 * r] = p0;
                    s[j][2 * r + 1] = p1;
                    rs += p0 + p1;
                }
                l_run[r] = l_run[r] * alpha + rs;   // per-lane partial sum; quad-reduced at the end
#pragma unroll
                for (int j = 0; j < D / 8; ++j) {
                    o[j][2 * r] *= alpha;
                    o[j][2 * r + 1] *= alpha;
                }
            }

            // ---- O += P V -------------------------------------------------------------------------
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                uint32_t a[4];
                a[0] = pack_half2(s[2 * kc][0], s[2 * kc][1]);
                a[1] = pack_half2(s[2 * kc][2], s[2 * kc][3]);
                a[2] = pack_half2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
                a[3] = pack_half2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
                for (int j = 0; j < D / 8; j += 2) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(sV_b + (kc * 16 * LDH + j * 8) * 2, b0, b1, b2, b3);
                    mma16816(o[j], a, b0, b1);
                    mma16816(o[j + 1], a, b2, b3);
                }
            }
        }
    }
#if USE_CP_ASYNC
    cp_async_wait<0>();
#endif

    if constexpr (ABL == kAblNoCompute) {
        // Output from the probe, through one mma so that every kernel entry holds mma.
        const uint32_t pk = pack_half2(probe, probe);
        const uint32_t a[4] = {pk, pk, pk, pk};
#pragma unroll
        for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = probe;
        mma16816(o[0], a, pk, pk);
        m_run[0] = m_run[1] = 0.f;
        l_run[0] = l_run[1] = 1.f;
    }

    if constexpr (NSPLIT == 1) {
        // ---- epilogue: O / l * v_scale -----------------------------------------------------
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = l_run[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = out_scale / l;
            const int row = m0 + wm * 16 + (lane >> 2) + 8 * r;
            if (row < S) {
                __half* dst = Og + (size_t)row * D + 2 * (lane & 3);
#pragma unroll
                for (int j = 0; j < D / 8; ++j)
                    *reinterpret_cast<uint32_t*>(dst + j * 8) = pack_half2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
            }
        }
    } else {
        // ---- split-KV epilogue: merge the NSPLIT softmax states -------------------------------
        // Thread (grp, wm, lane) holds, for rows wm*16 + lane/4 (+8), the running max m (equal
        // across the lane quad), a per-lane partial sum l and O columns j*8 + 2*(lane&3) + {0,1}.
        // Every thread writes its whole state to the buffer [NSPLIT][MERGE_E][TG] floats
        // (element-major: consecutive threads, consecutive words), which aliases the fp16 tiles;
        // then group g merges and stores the column blocks j in [g*JG, (g+1)*JG) of the same rows
        // (the thread with the same (wm, lane) in every group holds the same rows and columns).
        // A group without tiles has m = -inf, l = 0, O = 0 and merges with weight 0 (group 0
        // always has tile 0, so the merged max is finite).
        constexpr int JN = D / 8, JG = JN / NSPLIT, E = C::MERGE_E;
        float* red = reinterpret_cast<float*>(smem);
        __syncthreads();   // M1: every group is done with its fp16 tiles (and sQ): the region is free
        // Thread indices re-read here (volatile: not hoisted) so that the epilogue's addresses
        // are not computed before the loop and kept live across it (register pressure).
        const int tid_e = read_tid_x();
        const int lane_e = tid_e & 31, grp_e = (tid_e >> 5) / C::NWM, wm_e = (tid_e >> 5) % C::NWM;
        const int gtid_e = tid_e % TG;
        float* mine = red + grp_e * E * TG + gtid_e;
#pragma unroll
        for (int j = 0; j < JN; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) mine[(j * 4 + c) * TG] = o[j][c];
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mine[(D / 2 + r) * TG] = m_run[r];
            mine[(D / 2 + 2 + r) * TG] = l_run[r];
        }
        __syncthreads();   // M2: every group's state is in the buffer
        const float* col = red + gtid_e;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mh[NSPLIT], wgt[NSPLIT];
            float mmax = -INFINITY;
#pragma unroll
            for (int h = 0; h < NSPLIT; ++h) {
                mh[h] = col[(h * E + D / 2 + r) * TG];
                mmax = fmaxf(mmax, mh[h]);
            }
            float l = 0.f;
#pragma unroll
            for (int h = 0; h < NSPLIT; ++h) {
                wgt[h] = fast_exp2(mh[h] - mmax);   // 0 for a group without tiles (m = -inf)
                l += col[(h * E + D / 2 + 2 + r) * TG] * wgt[h];
            }
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = out_scale / l;
            const int row = m0 + wm_e * 16 + (lane_e >> 2) + 8 * r;
            if (row < S) {
                __half* dst = Og + (size_t)row * D + 2 * (lane_e & 3);
#pragma unroll
                for (int jj = 0; jj < JG; ++jj) {
                    const int j = grp_e * JG + jj;   // runtime index: shared-memory address only
                    float v0 = 0.f, v1 = 0.f;
#pragma unroll
                    for (int h = 0; h < NSPLIT; ++h) {
                        v0 += col[(h * E + j * 4 + 2 * r) * TG] * wgt[h];
                        v1 += col[(h * E + j * 4 + 2 * r + 1) * TG] * wgt[h];
                    }
                    *reinterpret_cast<uint32_t*>(dst + j * 8) = pack_half2(v0 * inv, v1 * inv);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// host side
// ------------------------------------------------------------------------------------------
struct LaunchInfo {
    const void* func = nullptr;
    int grid = 0;
    int block = 0;
    int smem = 0;
    int nwarps = 0;   // warps per block (all groups)
    int bn = 0;
    int bm = 0;       // query rows per block
    int nsplit = 1;   // KV groups per block
    int ablate = kAblNone;
};

using Cfg64w2 = Cfg<64, 32, 2, 1, true>;  // BN 32: keeps the baseline's load registers in budget
using Cfg64w4 = Cfg<64, 64, 4, 1, true>;
using Cfg64w8 = Cfg<64, 64, 8, 1, true>;
using Cfg128w4 = Cfg<128, 32, 4, 1, false>;
// Intra-block split-KV configs (8 warps each): few blocks, more independent warps per SM.
// Q fragments re-read from shared memory in s2: with them in registers the cp.async build
// needs a few more than 128 registers (ptxas spilled l).
using Cfg64s2 = Cfg<64, 64, 4, 2, false>;  // BM 64, 2 groups x 4 warps, BN 64
using Cfg64s4 = Cfg<64, 32, 2, 4, true>;  // BM 32, 4 groups x 2 warps, BN 32

template <class C, int ABL>
inline LaunchInfo info_for(int BH, int S) {
    LaunchInfo li;
    li.func = reinterpret_cast<const void*>(&sdpa_fp8_fwd_kernel<C, ABL>);
    const int mblocks = (S + C::BM - 1) / C::BM;
    li.grid = mblocks * BH;
    li.block = C::T;
    li.smem = C::SMEM;
    li.nwarps = C::NWARPS;
    li.bn = C::BN;
    li.bm = C::BM;
    li.nsplit = C::NSPLIT;
    li.ablate = ABL;
    return li;
}

template <class C>
inline LaunchInfo info_for(int BH, int S, int ablate) {
    switch (ablate) {
        case kAblNoCompute: return info_for<C, kAblNoCompute>(BH, S);
        case kAblNoLoads: return info_for<C, kAblNoLoads>(BH, S);
        default: return info_for<C, kAblNone>(BH, S);
    }
}

// Pick the kernel for a problem.
//   nwarps_override: 0 = heuristic; else 2, 4 or 8 (D = 64 only): the unsplit config with that
//                    many warps (as before split-KV existed; implies split 1).
//   split_override:  0 = heuristic; 1 = unsplit configs; 2 / 4 = the split-KV configs (D = 64).
//   ablate:          kAblNone / kAblNoCompute / kAblNoLoads.
// Returns false when the head dim / override is unsupported (why in *err).
// Split-KV configs are used only when every group gets the same number of KV tiles.  Measured
// (H200, compute-sanitizer racecheck, both variants): S = 128, 512, 1000 (even groups) report 0
// hazards; S = 300 (10 tiles of 32 over 4 groups, 5 of 64 over 2) reports shared-memory hazards
// between the merge's state writes and reads, although two __syncthreads separate them in the
// source.  Not understood (a real race, or racecheck losing track of the groups' named barriers
// when groups run different numbers of iterations); until it is, uneven splits are not used.
inline bool split_tiles_even(int S, int split) {
    const int bn = split == 4 ? 32 : 64;
    return ((S + bn - 1) / bn) % split == 0;
}

inline bool select_config(int BH, int S, int D, int num_sms, int nwarps_override, int split_override, int ablate,
                          LaunchInfo* li, const char** err) {
    if (ablate < kAblNone || ablate > kAblNoLoads) { *err = "bad ablation mode"; return false; }
    if (split_override != 0 && split_override != 1 && split_override != 2 && split_override != 4) {
        *err = "--split must be 0, 1, 2 or 4"; return false;
    }
    if (D == 128) {
        if (nwarps_override != 0 && nwarps_override != 4) { *err = "head dim 128 supports --warps 4 only"; return false; }
        if (split_override > 1) { *err = "head dim 128 supports --split 0 or 1 only"; return false; }
        *li = info_for<Cfg128w4>(BH, S, ablate);
        return true;
    }
    if (D != 64) { *err = "unsupported head dim (supported: 64, 128)"; return false; }
    if (nwarps_override != 0 && split_override > 1) { *err = "--warps applies to --split 0 or 1 only"; return false; }
    int split = split_override;
    if (split == 0 && nwarps_override != 0) split = 1;
    if (split == 0) {
        // Split-KV when the unsplit grid would leave SMs with one warp per sub-partition:
        // 4 groups of BN-32 tiles while BM-32 blocks fit in one wave (each group >= 1 tile),
        // else 2 groups of BN-64 tiles while BM-64 blocks fit in one wave (each group >= 1 tile).
        // Only where the KV tiles divide evenly over the groups (see split_tiles_even).
        const long nb32 = (long)BH * ((S + 31) / 32);
        const long nb64 = (long)BH * ((S + 63) / 64);
        if (nb32 <= num_sms && S > 3 * 32 && split_tiles_even(S, 4)) split = 4;
        else if (nb64 <= num_sms && S > 64 && split_tiles_even(S, 2)) split = 2;
        else split = 1;
    }
    if (split > 1 && !split_tiles_even(S, split)) {
        *err = "--split 2/4 needs the KV tiles (ceil(S/64) for 2, ceil(S/32) for 4) to divide evenly over the "
               "groups: with uneven groups compute-sanitizer racecheck reports shared-memory hazards "
               "(experiments/2026-11-22-sdpa-split-kv/racecheck_h200.txt); use --split 1";
        return false;
    }
    if (split == 2) { *li = info_for<Cfg64s2>(BH, S, ablate); return true; }
    if (split == 4) { *li = info_for<Cfg64s4>(BH, S, ablate); return true; }
    int nw = nwarps_override;
    if (nw == 0) {
        // 8 warps (fewest redundant K/V decodes) once there are two waves of blocks, else 4.
        // Measured on H200 (2026-11-22, experiments/2026-11-22-sdpa-cpasync-h200):
        // (1,8,512,64) w4 < w2 < w8; (2,16,2048,64) w8 < w4 < w2.
        const long blocks8 = (long)BH * ((S + 127) / 128);
        nw = blocks8 >= 2L * num_sms ? 8 : 4;
    }
    switch (nw) {
        case 2: *li = info_for<Cfg64w2>(BH, S, ablate); return true;
        case 4: *li = info_for<Cfg64w4>(BH, S, ablate); return true;
        case 8: *li = info_for<Cfg64w8>(BH, S, ablate); return true;
        default: *err = "--warps must be 2, 4 or 8"; return false;
    }
}

// Backwards-compatible form (no split override, no ablation).
inline bool select_config(int BH, int S, int D, int num_sms, int nwarps_override, LaunchInfo* li, const char** err) {
    return select_config(BH, S, D, num_sms, nwarps_override, 0, kAblNone, li, err);
}

// Launch the selected kernel on `stream`.  Returns the launch error (cudaSuccess if queued).
inline cudaError_t launch(const LaunchInfo& li, int D, const __half* q, const uint8_t* k, const uint8_t* v,
                          __half* o, int S, float k_scale, float v_scale, cudaStream_t stream) {
    const float qk_scale_log2 = k_scale * kDecodeFactor * 1.4426950408889634f / sqrtf((float)D);
    const float out_scale = v_scale * kDecodeFactor;
    const int BM = li.bm;
    int mblocks = (S + BM - 1) / BM;
    void* args[] = {(void*)&q, (void*)&k, (void*)&v, (void*)&o, (void*)&S, (void*)&mblocks,
                    (void*)&qk_scale_log2, (void*)&out_scale};
    cudaError_t e = cudaLaunchKernel(li.func, dim3(li.grid), dim3(li.block), args, (size_t)li.smem, stream);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
}

}  // namespace sdpa_fp8
