// The consumer warpgroups' main loop: S = Q K^T and O += P V on the tensor cores (wgmma),
// the online softmax of tile t overlapped with P V of tile t-1.
//
// Per consumer warpgroup (64 query rows), per K/V tile t (BN keys):
//   issue S_t = Q K_t^T        (SS wgmma: Q and fp16 K from shared memory, both K-major)
//   issue O += P_{t-1} V_{t-1} (RS wgmma: P in registers, fp16 V from shared memory, MN-major)
//   wait for S_t only, release K_t; softmax of S_t (runs while P V is on the tensor cores)
//   wait for P V, release V_{t-1}; rescale O; pack P_t to fp16
// and a last P V after the loop.
#pragma once

#include "ptx.cuh"
#include "softmax.cuh"
#include "traits.cuh"
#include "wgmma_ops.cuh"

namespace sdpa_sm90 {

template <int N>
struct SSOp;
template <>
struct SSOp<128> {
    __device__ __forceinline__ static void run(float (&d)[64], uint64_t a, uint64_t b, int acc) {
        wgmma::ss_m64n128k16(d, a, b, acc);
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

// S = Q K^T for one warpgroup: D/16 k-steps of m64nBNk16.
//   q_rows: shared address of this warpgroup's first Q row in panel 0 ([PANELS][BM][64] fp16)
//   k16:    shared address of the fp16 K tile ([PANELS][BN][64])
template <class T>
__device__ __forceinline__ void issue_qk(float (&s)[T::BN / 2], uint32_t q_rows, uint32_t k16) {
#pragma unroll
    for (int kk = 0; kk < T::D / 16; ++kk) {
        const uint32_t in_panel = (kk & 3) * 32;
        const uint32_t p = kk >> 2;
        const uint64_t da = smem_desc(q_rows + p * (T::BM * 128) + in_panel, 16, 1024);
        const uint64_t db = smem_desc(k16 + p * (T::BN * 128) + in_panel, 16, 1024);
        SSOp<T::BN>::run(s, da, db, kk > 0);
    }
}

// O += P V for one warpgroup: BN/16 k-steps of m64nDk16, V MN-major (panels of 64 columns
// BN*128 bytes apart).
template <class T>
__device__ __forceinline__ void issue_pv(float (&o)[T::D / 2], const uint32_t (&p)[T::BN / 16][4], uint32_t v16) {
#pragma unroll
    for (int kk = 0; kk < T::BN / 16; ++kk) {
        const uint64_t db = smem_desc(v16 + kk * 16 * 128, T::BN * 128, 1024);
        RSOp<T::D>::run(o, p[kk], db, 1);
    }
}

// Accumulators of one consumer warpgroup after its last tile.
template <class T>
struct ConsumerState {
    float o[T::D / 2];
    OnlineSoftmax<T::BN> sm;
};

template <class T>
__device__ __forceinline__ void consumer_mainloop(ConsumerState<T>& st, uint8_t* smem, uint32_t bars, int wg,
                                                  int S, int ntiles, float scale_log2) {
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    const uint32_t q_rows = smem_u32(smem + T::OFF_Q) + wg * 64 * 128;
    const uint32_t f16 = smem_u32(smem + T::OFF_F16);
    const uint32_t scratch = smem_u32(smem + T::OFF_SCRATCH) + 4u * (uint32_t)(wg * 128 + ctid);
    constexpr bool kNoLoads = T::ABL == kAblNoLoads;
    auto kbuf = [&](int t) { return f16 + (kNoLoads ? 0 : t % T::NF16) * 2 * T::T16_BYTES; };
    auto parity = [&](int t) { return (uint32_t)(t / T::NF16) & 1u; };
    // One arrival per warp, after the warp's wgmma reading the buffer completed.
    auto release = [&](int i) {
        if (!kNoLoads && lane == 0) mbar_arrive(bar(i));
    };
    auto wait_full = [&](int i, int t) {
        if (!kNoLoads || t == 0) mbar_wait(bar(i), parity(t));
    };

#pragma unroll
    for (int i = 0; i < T::D / 2; ++i) st.o[i] = 0.f;

    if constexpr (T::ABL == kAblNoCompute) {
        // Loads and decode only: take every tile and hand it back; one Q K^T on tile 0 keeps
        // the tensor-core path in the binary and feeds the (meaningless) output.
        float s[T::BN / 2];
        for (int t = 0; t < ntiles; ++t) {
            wait_full(T::BAR_KFULL + t % T::NF16, t);
            if (t == 0) {
                wgmma_fence();
                issue_qk<T>(s, q_rows, kbuf(0));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
#pragma unroll
                for (int i = 0; i < T::D / 2; ++i) st.o[i] = s[i];
            }
            release(T::BAR_KEMPTY + t % T::NF16);
            wait_full(T::BAR_VFULL + t % T::NF16, t);
            release(T::BAR_VEMPTY + t % T::NF16);
        }
        st.sm.m[0] = st.sm.m[1] = 0.f;
        st.sm.l[0] = st.sm.l[1] = 1.f;
        return;
    }

    float s[T::BN / 2];
    uint32_t p[T::BN / 16][4];
    float alpha[2];

    // ---- tile 0: S_0, softmax, P_0 -------------------------------------------------------
    wait_full(T::BAR_KFULL + 0, 0);
    wgmma_fence();
    issue_qk<T>(s, q_rows, kbuf(0));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    release(T::BAR_KEMPTY + 0);
    if (T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, 0, S, lane);
    st.sm.step(s, scale_log2, alpha);
    pack_p<T::BN>(s, p);

    // ---- tiles 1 .. ntiles-1 ---------------------------------------------------------------
    for (int t = 1; t < ntiles; ++t) {
        const int b = t % T::NF16, bp = (t - 1) % T::NF16;
        wait_full(T::BAR_KFULL + b, t);
        fence_regs(s);
        fence_regs(st.o);
        fence_regs(p);
        wgmma_fence();
        issue_qk<T>(s, q_rows, kbuf(t));
        wgmma_commit();
        wait_full(T::BAR_VFULL + bp, t - 1);
        issue_pv<T>(st.o, p, kbuf(t - 1) + T::T16_BYTES);
        wgmma_commit();
        wgmma_wait<1>();  // S_t done; P V of tile t-1 may still run
        fence_regs(s);
        release(T::BAR_KEMPTY + b);
        const int n0 = t * T::BN;
        if (n0 + T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, n0, S, lane);
        st.sm.step(s, scale_log2, alpha);
        keep_above_wait(scratch, st.sm.l[0] + st.sm.l[1]);  // the exponentials run while P V does
        wgmma_wait<0>();  // P V of tile t-1 done: O and P are free
        fence_regs(st.o);
        fence_regs(p);
        release(T::BAR_VEMPTY + bp);
        rescale_o<T::D>(st.o, alpha);
        pack_p<T::BN>(s, p);
    }

    // ---- last P V ----------------------------------------------------------------------------
    const int last = ntiles - 1;
    wait_full(T::BAR_VFULL + last % T::NF16, last);
    fence_regs(st.o);
    fence_regs(p);
    wgmma_fence();
    issue_pv<T>(st.o, p, kbuf(last) + T::T16_BYTES);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(st.o);
    release(T::BAR_VEMPTY + last % T::NF16);
}

}  // namespace sdpa_sm90
