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

// Consumer barriers (ptx.cuh NamedBarrier): the ping-pong turns kBarTurn0, kBarTurn1 (and kBarTurn2 with three
// consumer warpgroups, SDPA_SM90_NCWG3_D64: the turn goes round 0 -> 1 -> 2 -> 0), 256 threads each (one
// bar.sync, one bar.arrive); kBarConsumers for both consumer warpgroups (Q load and merge of the split
// configuration).
template <int NC = 2>
__device__ __forceinline__ void pingpong_wait_turn(int cw) {
    if (cw == 0) named_barrier<kBarTurn0, 256>();
    else if (NC == 2 || cw == 1) named_barrier<kBarTurn1, 256>();
    else named_barrier<kBarTurn2, 256>();
}
template <int NC = 2>
__device__ __forceinline__ void pingpong_pass_turn(int cw) {
    static_assert(NC == 2 || NC == 3, "ping-pong of two or three consumer warpgroups");
    if constexpr (NC == 2) {
        if (cw == 0) named_barrier_arrive<kBarTurn1, 256>();
        else named_barrier_arrive<kBarTurn0, 256>();
    } else {
        if (cw == 0) named_barrier_arrive<kBarTurn1, 256>();
        else if (cw == 1) named_barrier_arrive<kBarTurn2, 256>();
        else named_barrier_arrive<kBarTurn0, 256>();
    }
}
__device__ __forceinline__ void consumers_barrier() { named_barrier<kBarConsumers, 256>(); }

template <class T>
__device__ __forceinline__ void consumer_mainloop(ConsumerState<T>& st, uint8_t* smem, uint32_t bars, int cw,
                                                  int S, int ntiles, float scale_log2) {
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    // Split: this warpgroup's rows are rows 0..63 of the (64-row) Q tile, as for warpgroup 0.
    const uint32_t q_rows = smem_u32(smem + T::OFF_Q) + (T::SPLIT ? 0 : cw) * 64 * 128;
    const uint32_t f16 = smem_u32(smem + T::OFF_F16);
    const uint32_t scratch = smem_u32(smem + T::OFF_SCRATCH) + 4u * (uint32_t)(cw * 128 + ctid);
    constexpr bool kNoLoads = T::ABL == kAblNoLoads;
    constexpr int step = T::SPLIT ? 2 : 1;  // this warpgroup's tiles: first, first + step, ...
    const int first = T::SPLIT ? cw : 0;
    // no_loads: the first tile's buffer is reused for every tile
    auto kbuf = [&](int t) { return f16 + (kNoLoads ? first : t) % T::NF16 * 2 * T::T16_BYTES; };
    auto wait_full = [&](int base, int t) {
        if (!kNoLoads || t == first) mbar_wait(bar(base + t % T::NF16), (uint32_t)(t / T::NF16) & 1u);
    };
    // One arrival per warp, after the warp's wgmma reading the buffer completed.
    auto release = [&](int base, int t) {
        if (!kNoLoads && lane == 0) mbar_arrive(bar(base + t % T::NF16));
    };

#pragma unroll
    for (int i = 0; i < T::D / 2; ++i) st.o[i] = 0.f;
    if (first >= ntiles) return;  // (split with one tile: not selected; m = -inf, l = 0, O = 0)

    if constexpr (T::ABL == kAblNoCompute) {
        // Loads and decode only: take every tile and hand it back; one Q K^T on the first tile
        // keeps the tensor-core path in the binary and feeds the (meaningless) output.
        float s[T::BN / 2];
        for (int t = first; t < ntiles; t += step) {
            wait_full(T::BAR_KFULL, t);
            if (t == first) {
                wgmma_fence();
                issue_qk<T>(s, q_rows, kbuf(t));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
#pragma unroll
                for (int i = 0; i < T::D / 2; ++i) st.o[i] = s[i];
            }
            release(T::BAR_KEMPTY, t);
            wait_full(T::BAR_VFULL, t);
            release(T::BAR_VEMPTY, t);
        }
        st.sm.m[0] = st.sm.m[1] = 0.f;
        st.sm.l[0] = st.sm.l[1] = 1.f;
        return;
    }

    float s[T::BN / 2];
    uint32_t p[T::BN / 16][4];
    float alpha[2];
    if (T::PINGPONG && cw == 1) pingpong_pass_turn(cw);  // warpgroup 0 issues first

    // ---- first tile: S, softmax, P ---------------------------------------------------------
    if constexpr (T::PINGPONG) pingpong_wait_turn(cw);
    wait_full(T::BAR_KFULL, first);
    wgmma_fence();
    issue_qk<T>(s, q_rows, kbuf(first));
    wgmma_commit();
    if constexpr (T::PINGPONG) pingpong_pass_turn(cw);
    wgmma_wait<0>();
    fence_regs(s);
    release(T::BAR_KEMPTY, first);
    if (first * T::BN + T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, first * T::BN, S, lane);
    st.sm.step(s, scale_log2, alpha);
    pack_p<T::BN>(s, p);

    // ---- later tiles: S_t and P_{t-1} V_{t-1} in flight together ------------------------------
    int tp = first;  // the tile whose P is in p
    for (int t = first + step; t < ntiles; t += step) {
        fence_regs(s);
        fence_regs(st.o);
        fence_regs(p);
        if constexpr (T::PINGPONG) pingpong_wait_turn(cw);
        wait_full(T::BAR_KFULL, t);
        wgmma_fence();
        issue_qk<T>(s, q_rows, kbuf(t));
        wgmma_commit();
        wait_full(T::BAR_VFULL, tp);
        issue_pv<T>(st.o, p, kbuf(tp) + T::T16_BYTES);
        wgmma_commit();
        if constexpr (T::PINGPONG) pingpong_pass_turn(cw);
        wgmma_wait<1>();  // S_t done; P V of the previous tile may still run
        fence_regs(s);
        release(T::BAR_KEMPTY, t);
        const int n0 = t * T::BN;
        if (n0 + T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, n0, S, lane);
        st.sm.step(s, scale_log2, alpha);
        keep_above_wait(scratch, st.sm.l[0] + st.sm.l[1]);  // the exponentials run while P V does
        wgmma_wait<0>();  // P V done: O and P are free
        fence_regs(st.o);
        fence_regs(p);
        release(T::BAR_VEMPTY, tp);
        rescale_o<T::D>(st.o, alpha);
        pack_p<T::BN>(s, p);
        tp = t;
    }

    // ---- last P V ------------------------------------------------------------------------------
    fence_regs(st.o);
    fence_regs(p);
    if constexpr (T::PINGPONG) pingpong_wait_turn(cw);
    wait_full(T::BAR_VFULL, tp);
    wgmma_fence();
    issue_pv<T>(st.o, p, kbuf(tp) + T::T16_BYTES);
    wgmma_commit();
    // Every turn passed is taken: warpgroup 1 started by passing one, so it skips its last.
    if (T::PINGPONG && cw == 0) pingpong_pass_turn(cw);
    wgmma_wait<0>();
    fence_regs(st.o);
    release(T::BAR_VEMPTY, tp);
}

// Split configuration: warpgroup 1 hands its softmax state (m, per-lane l, O) to warpgroup 0
// through shared memory (the fp16 K/V buffers, free once both are done), which merges it into
// its own: m = max(m0, m1), w_i = 2^(m_i - m), l = w0 l0 + w1 l1, O = w0 O0 + w1 O1.  The lanes
// of both warpgroups hold the same rows and columns.  Returns true for the warpgroup that goes
// on to the epilogue.
template <class T>
__device__ __forceinline__ bool split_merge(ConsumerState<T>& st, uint8_t* smem, int cw) {
    if constexpr (!T::SPLIT) {
        return true;
    } else {
        constexpr int NO = T::D / 2;
        const int ctid = threadIdx.x % 128;
        float* red = reinterpret_cast<float*>(smem + T::OFF_MERGE) + ctid;  // [NO + 4][128], element-major
        consumers_barrier();  // both warpgroups are done with the fp16 buffers
        if (cw == 1) {
#pragma unroll
            for (int i = 0; i < NO; ++i) red[i * 128] = st.o[i];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                red[(NO + r) * 128] = st.sm.m[r];
                red[(NO + 2 + r) * 128] = st.sm.l[r];
            }
        }
        consumers_barrier();
        if (cw == 1) return false;
        float w0[2], w1[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float m1 = red[(NO + r) * 128];
            const float m = fmaxf(st.sm.m[r], m1);
            w0[r] = fast_exp2(st.sm.m[r] - m);
            w1[r] = fast_exp2(m1 - m);
            st.sm.m[r] = m;
            st.sm.l[r] = st.sm.l[r] * w0[r] + red[(NO + 2 + r) * 128] * w1[r];
        }
#pragma unroll
        for (int j = 0; j < T::D / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[4 * j + e] = st.o[4 * j + e] * w0[e >> 1] + red[(4 * j + e) * 128] * w1[e >> 1];
        return true;
    }
}

}  // namespace sdpa_sm90
