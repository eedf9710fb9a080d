// The consumer warpgroups of both tiers' kernels: S = Q K^T and O += P V on warpgroup MMA with fp32
// accumulators, the online softmax of tile t overlapped with P V of tile t-1, ping-pong between the
// consumer warpgroups, one work unit after another (persistent blocks).  What differs between the tiers
// is the operands (tier_ops.cuh): the fp16 tier takes Q's fp16 fragments from registers (loaded once per
// unit; from shared memory with SDPA_SM90_FP16_Q_REGS=0), reads the decoded fp16 K from shared memory and
// packs P to fp16; the fp8 tier turns Q into E4M3 fragments once per unit, reads K as stored and V^T, and packs P
// to E4M3 with the 2^8 bias.
//
// Per consumer warpgroup (64 query rows), per K/V tile t (BN keys):
//   issue S_t = Q K^T; issue O += P_{t-1} V_{t-1}   (both in flight, this warpgroup's turn)
//   wait for S_t only, release K_t; softmax of S_t (runs while P V is on the tensor cores)
//   wait for P V, release V_{t-1}; rescale O; pack P_t
// and a last P V after the loop.
#pragma once

#include "epilogue.cuh"  // consumer_wg_barrier, epilogue
#include "fp8_traits.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "tier_ops.cuh"
#include "tile_load.cuh"  // load_q_rows_global
#include "tile_plan.cuh"
#include "traits.cuh"

namespace sdpa_sm90 {

// Accumulators of one consumer warpgroup after its last tile.
template <class T>
struct ConsumerState {
    float o[T::D / 2];
    // With the causal mask a row's running max starts finite (softmax.cuh kRowMaxInit).
    // (So does a packed row's with its mask, ROWMASK: tile_plan.cuh CaseTraits.)
    static constexpr float kM0 = T::CAUSAL || T::ROWMASK ? kRowMaxInit : kRowMaxInitAll;
    OnlineSoftmax<T::BN> sm{{kM0, kM0}};
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

// A ring of N buffers walked `step` tiles at a time (step <= N): the buffer index and the
// mbarrier parity of the current tile, kept incrementally (no division by N per tile).
template <int N>
struct Ring {
    int i;
    uint32_t phase;
    __device__ __forceinline__ explicit Ring(int t) : i(t % N), phase((uint32_t)(t / N) & 1u) {}
    __device__ __forceinline__ void advance(int step) {
        i += step;
        if (i >= N) {
            i -= N;
            phase ^= 1u;
        }
    }
};

// The 256-key kernel's loop (fp8 tier, head dim 128, SDPA_SM90_BN_D128=256: fp8_traits.cuh LEAN).  S of a tile takes
// 128 registers, O 64 and P 32: the loop above, which has P_{t-1} V_{t-1} in flight while it computes the softmax
// of S_t, would need all three at once and 16 more for the rest, beyond the consumers' 224.  This loop never holds
// P of one tile and S of the next at once: per tile t, in this warpgroup's turn,
//   issue O += P_{t-1} V_{t-1} (and the row sums); wait for it (P is dead), release V_{t-1};
//   issue S_t = Q K_t^T (its first k-step writes S without reading it: ss_e4m3_m64n256k32_zero); pass the turn;
//   wait for S_t, release K_t; softmax of S_t; l and O rescaled; pack P_t.
// So the softmax of one warpgroup overlaps the other warpgroup's products (the ping-pong) and nothing of its own.
// (Issuing the first half of S_t, m64n128, behind P V and its second half once P V is done made ptxas serialize
// every wgmma of the kernel: C7512, at 224 and at 240 registers.)  The arithmetic per tile is the loop above's: the same
// softmax step, the same row sums from the tensor core, the same O rescale and packing, in the same order.  No
// ablations (select_config runs them on the 128- and 192-key kernels).  LEAN3 (three warpgroups at head dim 128)
// runs it at 128 keys.
template <class T>
constexpr bool kLeanLoop = T::FP8 && (T::BN == 256 || T::LEAN3);

template <class T, int NC, class NextTakesTurns>
__device__ __forceinline__ void consumer_loop256(ConsumerState<T>& st, uint8_t* smem, uint32_t bars, int cw, int lim0,
                                                 int ntiles, Ring<T::NKB>& kr, Ring<T::NVB>& vr, uint64_t qd,
                                                 uint64_t kd0, uint64_t vd0, uint64_t od, bool pass_first,
                                                 NextTakesTurns next_takes_turns, const float (&sc)[2]) {
    static_assert(kLeanLoop<T> && !T::SPLIT && T::ABL == kAblNone && T::Q_SMEM, "256-key tiles: unsplit, no ablation");
    (void)smem;
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    auto kdesc = [&] { return kd0 + (uint64_t)(kr.i * (T::K_TILE >> 4)); };
    auto vdesc = [&] { return vd0 + (uint64_t)(vr.i * (T::VB_BYTES >> 4)); };
    constexpr bool kPingPong = T::PINGPONG && NC > 1;
    auto wait_turn = [&] {
        if constexpr (kPingPong) pingpong_wait_turn<NC>(cw);
    };
    auto pass_turn = [&] {
        if constexpr (kPingPong) pingpong_pass_turn<NC>(cw);
    };
    float s[T::BN / 2];
    uint32_t p[T::P_KSTEPS][4];
    float rs[4] = {0.f, 0.f, 0.f, 0.f};
    float alpha[2];
    auto take_rowsum = [&](const float* a) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float l = st.sm.l[r] + (rs[2 * r] + rs[2 * r + 1]);
            st.sm.l[r] = a ? l * a[r] : l;
        }
    };
    auto mask = [&](int n0) {
        if constexpr (T::CAUSAL) OnlineSoftmax<T::BN>::mask_keys(s, n0, lim0, ctid);
        else OnlineSoftmax<T::BN>::mask_tail(s, n0, lim0, lane);
    };
    auto softmax_step = [&] {
        st.sm.template step_rows<true, SDPA_SM90_EXP2_POLY_D128, !T::ROWSUM>(s, sc, kPExp2Bias, alpha);
    };
    if (cw == NC - 1 && pass_first) pass_turn();

    // ---- first tile: S, softmax, P
    wait_turn();
    mbar_wait(bar(T::BAR_KFULL + kr.i), kr.phase);
    wgmma_fence();
    issue_qk256<T>(s, qd, kdesc());
    wgmma_commit();
    pass_turn();
    wgmma_wait<0>();
    fence_regs(s);
    if (lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + kr.i));
    kr.advance(1);
    if (T::BN > lim0) mask(0);
    softmax_step();
    pack_p_e4m3<T::BN>(s, p);

    // ---- later tiles
    for (int t = 1; t < ntiles; ++t) {
        fence_regs(st.o);
        if constexpr (T::ROWSUM) fence_regs(rs);
        fence_regs(p);
        wait_turn();
        mbar_wait(bar(T::BAR_VFULL + vr.i), vr.phase);
        wgmma_fence();
        issue_pv_fp8<T>(st.o, rs, p, vdesc(), od);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(st.o);
        if constexpr (T::ROWSUM) fence_regs(rs);
        fence_regs(p);
        if (lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + vr.i));
        vr.advance(1);
        mbar_wait(bar(T::BAR_KFULL + kr.i), kr.phase);
        wgmma_fence();
        issue_qk256<T>(s, qd, kdesc());
        wgmma_commit();
        pass_turn();
        wgmma_wait<0>();
        fence_regs(s);
        if (lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + kr.i));
        kr.advance(1);
        const int n0 = t * T::BN;
        if (n0 + T::BN > lim0) mask(n0);
        softmax_step();
        if constexpr (T::ROWSUM) take_rowsum(alpha);
        rescale_o<T::D>(st.o, alpha);
        pack_p_e4m3<T::BN>(s, p);
    }

    // ---- last P V
    fence_regs(st.o);
    if constexpr (T::ROWSUM) fence_regs(rs);
    fence_regs(p);
    wait_turn();
    mbar_wait(bar(T::BAR_VFULL + vr.i), vr.phase);
    wgmma_fence();
    issue_pv_fp8<T>(st.o, rs, p, vdesc(), od);
    wgmma_commit();
    if (cw != NC - 1 || next_takes_turns()) pass_turn();
    wgmma_wait<0>();
    fence_regs(st.o);
    if constexpr (T::ROWSUM) fence_regs(rs);
    if (lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + vr.i));
    if constexpr (T::ROWSUM) take_rowsum(nullptr);
    if constexpr (!kPingPong) consumer_wg_barrier<T::NCWG>(cw);
}

// SDPA_SM90_BN256_LOOP=1: the 256-key loop with P V issued by this warpgroup right after its softmax, in two halves
// of 128 keys, so that the first half runs on the tensor core while the exponentials of the second are taken:
// per tile t, in the turn: issue S_t = Q K_t^T; pass the turn; wait for it, release K_t; mask; row maxima; l and O
// rescaled (P V of t - 1 is done); exponentials of keys 0..127, pack, issue their P V; exponentials of keys
// 128..255, pack, issue their P V; wait for both (P is dead before the next S), release V_t.  The same arithmetic
// as consumer_loop256 (OnlineSoftmax::max_rows and exp_chunks are step_rows in two parts).
template <class T, int NC, class NextTakesTurns>
__device__ __forceinline__ void consumer_loop256_split(ConsumerState<T>& st, uint32_t bars, int cw, int lim0, int ntiles,
                                                       Ring<T::NKB>& kr, Ring<T::NVB>& vr, uint64_t qd, uint64_t kd0,
                                                       uint64_t vd0, uint64_t od, bool pass_first,
                                                       NextTakesTurns next_takes_turns, const float (&sc)[2]) {
    static_assert(kLeanLoop<T> && !T::SPLIT && T::ABL == kAblNone && T::Q_SMEM && T::ROWSUM && T::ONES_SEP,
                  "256-key tiles: unsplit, no ablation, row sums from the ones block");
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    auto kdesc = [&] { return kd0 + (uint64_t)(kr.i * (T::K_TILE >> 4)); };
    auto vdesc = [&] { return vd0 + (uint64_t)(vr.i * (T::VB_BYTES >> 4)); };
    constexpr bool kPingPong = T::PINGPONG && NC > 1;
    auto wait_turn = [&] {
        if constexpr (kPingPong) pingpong_wait_turn<NC>(cw);
    };
    auto pass_turn = [&] {
        if constexpr (kPingPong) pingpong_pass_turn<NC>(cw);
    };
    constexpr int kPoly = SDPA_SM90_EXP2_POLY_D128;
    float s[T::BN / 2];
    uint32_t p[T::P_KSTEPS][4];
    float rs[4] = {0.f, 0.f, 0.f, 0.f};
    float alpha[2], off[2];
    if (cw == NC - 1 && pass_first) pass_turn();
    for (int t = 0; t < ntiles; ++t) {
        fence_regs(st.o);
        fence_regs(rs);
        wait_turn();
        mbar_wait(bar(T::BAR_KFULL + kr.i), kr.phase);
        wgmma_fence();
        issue_qk256<T>(s, qd, kdesc());
        wgmma_commit();
        // The last tile's turn goes on to the next unit only if it takes turns (every turn passed is taken).
        if (t + 1 < ntiles || cw != NC - 1 || next_takes_turns()) pass_turn();
        wgmma_wait<0>();
        fence_regs(s);
        if (lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + kr.i));
        kr.advance(1);
        const int n0 = t * T::BN;
        if (n0 + T::BN > lim0) {
            if constexpr (T::CAUSAL) OnlineSoftmax<T::BN>::mask_keys(s, n0, lim0, ctid);
            else OnlineSoftmax<T::BN>::mask_tail(s, n0, lim0, lane);
        }
        st.sm.max_rows(s, sc, kPExp2Bias, alpha, off);
        if (t > 0) {
#pragma unroll
            for (int r = 0; r < 2; ++r) st.sm.l[r] = (st.sm.l[r] + (rs[2 * r] + rs[2 * r + 1])) * alpha[r];
            rescale_o<T::D>(st.o, alpha);
        }
        OnlineSoftmax<T::BN>::template exp_chunks<0, 16, kPoly>(s, sc, off);
        pack_p_e4m3_steps<T::BN, 0, 4>(s, p);
        mbar_wait(bar(T::BAR_VFULL + vr.i), vr.phase);
        wgmma_fence();
        issue_pv256_half<T, 0>(st.o, rs, p, vdesc(), od);
        wgmma_commit();
        OnlineSoftmax<T::BN>::template exp_chunks<16, 32, kPoly>(s, sc, off);
        pack_p_e4m3_steps<T::BN, 4, 8>(s, p);
        wgmma_fence();
        issue_pv256_half<T, 1>(st.o, rs, p, vdesc(), od);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(st.o);
        fence_regs(rs);
        fence_regs(p);
        if (lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + vr.i));
        vr.advance(1);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) st.sm.l[r] += rs[2 * r] + rs[2 * r + 1];
    if constexpr (!kPingPong) consumer_wg_barrier<T::NCWG>(cw);
}

// One work unit of a consumer warpgroup.  NC: the consumer warpgroups that run in this unit (T::NCWG, or
// fewer for a tile with fewer rows: block_tile), a compile-time count so that the full units' loop is
// the one without the choice (a run-time turn count cost 4-6%: experiments/2026-11-23-sdpa-tile-plan).
// q: the unit's Q buffer; lim0: the key limit of the warpgroup's first row (keys j < lim0 are seen; without
// the causal mask Skv for every row, with it m0 + 1 + Skv - Sq for row m0, one more per row: mask_keys);
// ntiles: the unit's K/V tiles; g0: the block's count of K/V tiles before this unit (without the mask i * ntiles
// for unit i, with it a running count of the units' tiles, the producer's too: the rings run on across units);
// pass_first: the last warpgroup passes a turn before the first tile (the previous unit did not
// leave one for warpgroup 0); next_takes_turns(): whether the next unit takes turns, so that the last
// warpgroup passes its turn after its last P V (asked there, so that nothing is live across the loop).
template <class T, int NC, class NextTakesTurns>
__device__ __forceinline__ void consumer_mainloop(ConsumerState<T>& st, uint8_t* smem, uint8_t* q, uint32_t bars, int cw,
                                                  int lim0, int ntiles, int g0, bool pass_first,
                                                  NextTakesTurns next_takes_turns, float scale_log2, int rperiod = 0) {
    static_assert(NC >= 1 && NC <= T::NCWG && (NC == T::NCWG || !T::SPLIT), "consumer warpgroups that run");
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    const uint32_t scratch = smem_u32(smem + T::OFF_SCRATCH) + 4u * (uint32_t)(cw * 128 + ctid);
    constexpr bool kNoLoads = T::ABL == kAblNoLoads;
    constexpr int step = T::SPLIT ? 2 : 1;
    const int first = T::SPLIT ? cw : 0;
    // Descriptors of stage / buffer 0; stage i is + i * bytes / 16 in the address field (no carry:
    // shared addresses < 256 KiB).
    const uint64_t kd0 = smem_desc(smem_u32(smem + T::OFF_K), 16, T::K_SBO, T::K_SWIZZLE);
    const uint64_t vd0 = smem_desc(smem_u32(smem + T::OFF_VB), T::VB_LBO, 1024);
    [[maybe_unused]] uint64_t od = 0;  // the fp16 tier's ones tile (ROWSUM)
    if constexpr (!T::FP8 && T::ROWSUM) od = smem_desc(smem_u32(smem + T::OFF_ONES), 128, 128, kSwizzleNone);
    if constexpr (kLeanLoop<T>) {
        if constexpr (T::ONES_SEP) od = smem_desc(smem_u32(smem + T::OFF_ONES), 16, 1024);  // the fp8 tier's ones block
    }
    // kNoLoads (diagnostic): every tile reads the first tile's buffers, waited for once.
    static_assert(T::NKB >= 2 && T::NVB >= 2, "first (0 or 1) is its own stage and buffer");
    auto kdesc = [&](const Ring<T::NKB>& k) { return kd0 + (uint64_t)((kNoLoads ? first : k.i) * (T::K_TILE >> 4)); };
    auto vdesc = [&](const Ring<T::NVB>& v) { return vd0 + (uint64_t)((kNoLoads ? first : v.i) * (T::VB_BYTES >> 4)); };
    auto wait_k = [&](const Ring<T::NKB>& k, int t) {
        if (!kNoLoads || t == first) mbar_wait(bar(T::BAR_KFULL + k.i), k.phase);
    };
    auto wait_v = [&](const Ring<T::NVB>& v, int t) {
        if (!kNoLoads || t == first) mbar_wait(bar(T::BAR_VFULL + v.i), v.phase);
    };
    auto release_k = [&](const Ring<T::NKB>& k) {
        if (!kNoLoads && lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + k.i));
    };
    auto release_v = [&](const Ring<T::NVB>& v) {
        if constexpr (!T::VDEC)
            if (!kNoLoads && lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + v.i));
    };
    // VDEC (tile_plan.cuh CaseTraits): this warpgroup decodes V of tile t from the copy engine's stage (the block's tile
    // g0 + t: stage (g0 + t) % NS, which only this warpgroup uses) into its own V buffer, then hands the stage back to
    // the producer (dec_v, before its next Q K^T, while S is not live: fewer registers); else get_v waits for the
    // producer's decode.
    auto dec_v = [&](const Ring<T::NVB>& v, int t) {
        if constexpr (T::VDEC) {
            const int g = g0 + t, st8 = g % T::NS;
            mbar_wait(bar(T::BAR_VRAW + st8), (uint32_t)(g / T::NS) & 1u);
            decode_tile_smem<T, T::VDEC_BATCH>(smem + T::OFF_VRAW + st8 * T::U8_TILE, smem + T::OFF_VB + v.i * T::VB_BYTES,
                                               ctid);
            fence_proxy_async();
            consumer_wg_barrier<T::NCWG>(cw);
            if (lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + st8));
        }
    };
    auto get_v = [&](const Ring<T::NVB>& v, int t) {
        if constexpr (!T::VDEC) wait_v(v, t);
    };

    // Split: this warpgroup's rows are rows 0..63 of the (64-row) Q tile.
    // (The fp16 tier: every row the same score scale; Q K^T takes Q from registers, Q_REGS, or with
    // SDPA_SM90_FP16_Q_REGS=0 from shared memory, qa unused.)
    uint8_t* const q_rows = q + (T::SPLIT ? 0 : cw) * 64 * 128;  // this warpgroup's first row in panel 0
    uint32_t qa[qa_k<T>()][4];
    float qinv[2];
    if constexpr (T::FP8) {
        load_q_e4m3<T>(q_rows, qa, qinv, ctid);
    } else {
        qinv[0] = qinv[1] = 1.f;
        if constexpr (T::Q_REGS) load_q_f16<T>(q_rows, qa, ctid);
    }
    const float sc[2] = {scale_log2 * qinv[0], scale_log2 * qinv[1]};
    // Q_SMEM: this warpgroup's 8 KiB of the fp16 tile (unsplit: its rows of panel 0; split: panel cw)
    // take its E4M3 rows once every thread that reads them has (split: both warpgroups read all).
    uint64_t qd = 0;
    if constexpr (T::Q_SMEM) {
        uint8_t* q8 = q + cw * 64 * 128;
        if constexpr (T::SPLIT) consumers_barrier();
        else consumer_wg_barrier<T::NCWG>(cw);
        store_q_e4m3<T>(q8, qa, ctid);
        fence_proxy_async();
        consumer_wg_barrier<T::NCWG>(cw);
        qd = smem_desc(smem_u32(q8), 16, 1024);
    }
    if constexpr (!T::FP8) {
        if constexpr (!T::Q_REGS) qd = smem_desc(smem_u32(q_rows), 16, 1024);
    }

#pragma unroll
    for (int i = 0; i < T::D / 2; ++i) st.o[i] = 0.f;
    if (first >= ntiles) return;

    Ring<T::NKB> kr(g0 + first);    // K stage of tile t
    Ring<T::NVB> vr(g0 + first);   // V^T buffer of tile tp (the tile whose P is in p)

    if constexpr (T::ABL == kAblNoCompute) {
        float s[T::BN / 2];
        for (int t = first; t < ntiles; t += step) {
            wait_k(kr, t);
            if (t == first) {
                wgmma_fence();
                issue_qk<T>(s, qa, qd, kdesc(kr));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
#pragma unroll
                for (int i = 0; i < T::D / 2; ++i) st.o[i] = s[i];
            }
            release_k(kr);
            wait_v(vr, t);
            release_v(vr);
            kr.advance(step);
            vr.advance(step);
        }
        st.sm.m[0] = st.sm.m[1] = 0.f;
        st.sm.l[0] = st.sm.l[1] = 1.f;
        return;
    }

    if constexpr (kLeanLoop<T>) {
        if constexpr (SDPA_SM90_BN256_LOOP == 1)
            consumer_loop256_split<T, NC>(st, bars, cw, lim0, ntiles, kr, vr, qd, kd0, vd0, od, pass_first,
                                          next_takes_turns, sc);
        else
            consumer_loop256<T, NC>(st, smem, bars, cw, lim0, ntiles, kr, vr, qd, kd0, vd0, od, pass_first,
                                    next_takes_turns, sc);
    } else {
        float s[T::BN / 2];
        uint32_t p[T::P_KSTEPS][4];
        // ROWSUM: one tile's row sums from the tensor core (column 0 of m64n8: lanes with lane % 4 == 0;
        // the epilogue adds the quad's parts of l); l += them, then * alpha (nullptr: the last tile).
        float rs[4] = {0.f, 0.f, 0.f, 0.f};
        auto take_rowsum = [&](const float* a) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float l = st.sm.l[r] + (rs[2 * r] + rs[2 * r + 1]);
                st.sm.l[r] = a ? l * a[r] : l;
            }
        };
        float alpha[2];
        // The softmax step on S and the packing of P; fp8 tier: P with the 2^8 bias, SDPA_SM90_EXP2_POLY (head
        // dim 64) and SDPA_SM90_EXP2_POLY_D128 move part of the exponentials off MUFU; fp16 tier: neither.
        constexpr int kPoly = !T::FP8 ? 0 : T::D == 64 ? SDPA_SM90_EXP2_POLY : SDPA_SM90_EXP2_POLY_D128;
        constexpr float kBias = T::FP8 ? kPExp2Bias : 0.f;
        auto softmax_step = [&] { st.sm.template step_rows<T::FP8, kPoly, !T::ROWSUM>(s, sc, kBias, alpha); };
        auto pack = [&] { pack_p_tier<T>(s, p); };
        // Ping-pong among the NC warpgroups that run (the last one passes to warpgroup 0 with two or three):
        // unless the previous unit left a turn for warpgroup 0, the last one starts by passing one; unless
        // the next unit takes it, it skips its last pass (every turn passed is taken).  One takes no turns.
        constexpr bool kPingPong = T::PINGPONG && NC > 1;
        auto wait_turn = [&] {
            if constexpr (kPingPong) pingpong_wait_turn<NC>(cw);
        };
        auto pass_turn = [&] {
            if constexpr (kPingPong) pingpong_pass_turn<NC>(cw);
        };
        if (cw == NC - 1 && pass_first) pass_turn();

        // ---- first tile: S, softmax, P ---------------------------------------------------------
        wait_turn();
        wait_k(kr, first);
        wgmma_fence();
        issue_qk<T>(s, qa, qd, kdesc(kr));
        wgmma_commit();
        pass_turn();
        wgmma_wait<0>();
        fence_regs(s);
        release_k(kr);
        kr.advance(step);
        // Tiles that reach past the first row's limit (the tail of Skv; the causal diagonal) mask what the rows
        // do not see.
        auto mask = [&](int n0) {
            if constexpr (T::ROWMASK) OnlineSoftmax<T::BN>::mask_rows(s, n0, lim0, rperiod, ctid);
            else if constexpr (T::CAUSAL) OnlineSoftmax<T::BN>::mask_keys(s, n0, lim0, ctid);
            else OnlineSoftmax<T::BN>::mask_tail(s, n0, lim0, lane);
        };
        if (first * T::BN + T::BN > lim0) mask(first * T::BN);
        softmax_step();
        pack();

        // ---- later tiles: S_t and P_{t-1} V_{t-1} in flight together ------------------------------
        int tp = first;
        for (int t = first + step; t < ntiles; t += step) {
            fence_regs(s);
            fence_regs(st.o);
            if constexpr (T::ROWSUM) fence_regs(rs);
            fence_regs(p);
            // (Waiting for K and V^T before taking the turn was 2-4% slower with three warpgroups:
            // experiments/2026-11-23-sdpa-fp8-profile.)
            wait_turn();
            dec_v(vr, tp);
            wait_k(kr, t);
            wgmma_fence();
            issue_qk<T>(s, qa, qd, kdesc(kr));
            wgmma_commit();
            get_v(vr, tp);
            issue_pv<T>(st.o, rs, p, vdesc(vr), od);
            wgmma_commit();
            pass_turn();
            wgmma_wait<1>();
            fence_regs(s);
            release_k(kr);
            kr.advance(step);
            const int n0 = t * T::BN;
            if (n0 + T::BN > lim0) mask(n0);
            softmax_step();
            keep_above_wait(scratch, T::ROWSUM ? alpha[0] + alpha[1] : st.sm.l[0] + st.sm.l[1]);
            wgmma_wait<0>();
            fence_regs(st.o);
            if constexpr (T::ROWSUM) fence_regs(rs);
            fence_regs(p);
            release_v(vr);
            vr.advance(step);
            if constexpr (T::ROWSUM) take_rowsum(alpha);
            rescale_o<T::D>(st.o, alpha);
            pack();
            tp = t;
        }

        // ---- last P V ------------------------------------------------------------------------------
        fence_regs(st.o);
        if constexpr (T::ROWSUM) fence_regs(rs);
        fence_regs(p);
        wait_turn();
        dec_v(vr, tp);
        get_v(vr, tp);
        wgmma_fence();
        issue_pv<T>(st.o, rs, p, vdesc(vr), od);
        wgmma_commit();
        if (cw != NC - 1 || next_takes_turns()) pass_turn();
        wgmma_wait<0>();
        fence_regs(st.o);
        if constexpr (T::ROWSUM) fence_regs(rs);
        release_v(vr);
        if constexpr (T::ROWSUM) take_rowsum(nullptr);
        // The epilogue writes O over this warpgroup's Q rows. With turns, the turn barriers order every
        // thread's reads of them (load_q_e4m3) before; without (one warpgroup running), this does
        // (racecheck found the hazard in the one-warpgroup tiles of the three-warpgroup kernel).
        if constexpr (!kPingPong && !T::SPLIT) consumer_wg_barrier<T::NCWG>(cw);
    }
}

// KVCHUNK with more than one chunk: warpgroup 0 (the split configuration's merged state of the block's 64 rows) writes
// the chunk's partial state to the workspace: O unnormalized and (m, l) per row, rows past S (packing pads G * Sq up
// to 64) left out; then counts the block on its head's counter, and the last block of the head to arrive merges the
// chunks in chunk order (every launch the same bits): m = max_c m_c, w_c = 2^(m_c - m), O = sum_c w_c O_c /
// sum_c w_c l_c * out_scale, fp16.  A row a chunk showed no key has m_c = kRowMaxInit and l_c = 0: weight 0.  The
// merge's per-chunk weights live in the block's Q buffer (q: its rows were last read by the loop's wgmma;
// kv.chunks * 64 * 8 bytes <= Q_BYTES, select_config_tier), as the epilogue's staging does.
template <class T>
__device__ __forceinline__ void kv_chunk_epilogue(const ConsumerState<T>& st, uint8_t* q, const KvChunks& kv,
                                                  __half* __restrict__ O, int S, float out_scale) {
    constexpr int D = T::D;
    const int ctid = threadIdx.x % 128, lane = ctid & 31, warp = ctid >> 5;
    const int blk = (int)blockIdx.x, head = blk / kv.chunks;
    const int rows = S < 64 ? S : 64;  // packed rows of the head (m0 = 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + (lane >> 2) + 8 * r;
        float l = st.sm.l[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (row < rows) {
            float* po = kv.part_o + ((size_t)blk * 64 + row) * D + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<float2*>(po + 8 * j) = make_float2(st.o[4 * j + 2 * r], st.o[4 * j + 2 * r + 1]);
            if ((lane & 3) == 0)
                *reinterpret_cast<float2*>(kv.part_ml + ((size_t)blk * 64 + row) * 2) = make_float2(st.sm.m[r], l);
        }
    }
    __threadfence();  // this thread's partial is visible device-wide before the block is counted
    int* flag = reinterpret_cast<int*>(q);
    fence_proxy_async();  // q's rows were last read by wgmma (async proxy)
    consumer_wg_barrier<T::NCWG>(0);
    if (ctid == 0) *flag = atomicAdd(kv.counters + head, 1) == kv.chunks - 1;
    consumer_wg_barrier<T::NCWG>(0);
    const bool last = *flag != 0;
    consumer_wg_barrier<T::NCWG>(0);  // every thread has read the flag before the weights overwrite it
    if (!last) return;
    __threadfence();
    const int nc = kv.chunks;
    float* fm = reinterpret_cast<float*>(q);  // [nc][64]: m, then the chunk's weight
    float* fl = fm + nc * 64;                 // [nc][64]: l
    const size_t pbase = (size_t)head * nc * 64;
    for (int i = ctid; i < nc * rows; i += 128) {
        const int c = i / rows, row = i - c * rows;
        const float2 v = __ldcg(reinterpret_cast<const float2*>(kv.part_ml + (pbase + (size_t)c * 64 + row) * 2));
        fm[c * 64 + row] = v.x;
        fl[c * 64 + row] = v.y;
    }
    consumer_wg_barrier<T::NCWG>(0);
    for (int row = ctid; row < rows; row += 128) {
        float mx = fm[row];
        for (int c = 1; c < nc; ++c) mx = fmaxf(mx, fm[c * 64 + row]);
        float l = 0.f;
        for (int c = 0; c < nc; ++c) l += fast_exp2(fm[c * 64 + row] - mx) * fl[c * 64 + row];
        const float f = out_scale / l;
        for (int c = 0; c < nc; ++c) fm[c * 64 + row] = fast_exp2(fm[c * 64 + row] - mx) * f;
    }
    consumer_wg_barrier<T::NCWG>(0);
    __half* out = O + (size_t)head * S * D;
    for (int item = ctid; item < rows * (D / 4); item += 128) {
        const int row = item / (D / 4), d0 = (item % (D / 4)) * 4;
        float o[4] = {0.f, 0.f, 0.f, 0.f};
        for (int c = 0; c < nc; ++c) {
            const float w = fm[c * 64 + row];
            const float4 x = __ldcg(reinterpret_cast<const float4*>(kv.part_o + (pbase + (size_t)c * 64 + row) * D + d0));
            o[0] += w * x.x;
            o[1] += w * x.y;
            o[2] += w * x.z;
            o[3] += w * x.w;
        }
        *reinterpret_cast<uint2*>(out + (size_t)row * D + d0) = make_uint2(pack_half2(o[0], o[1]), pack_half2(o[2], o[3]));
    }
    if (ctid == 0) kv.counters[head] = 0;  // for the next launch on this workspace
}

// A consumer warpgroup's whole job: the block's work units in turn (block_units), each a main loop and
// an epilogue into that unit's Q buffer.  A warpgroup without rows in a unit (a short tile, the end of
// S) takes each of the unit's K and V^T tiles and hands it straight back, so that every barrier counts
// all consumer warps and the rings stay in step.  cpasync: every warpgroup waits for the unit's Q and,
// once done with the buffer (its epilogue's reads of O), releases it for the unit after next.
// KVCHUNK kernels (tile_plan.cuh): the block's one unit is a key chunk of a packed head (kv), whose state goes to
// kv_chunk_epilogue.
template <class T>
__device__ __forceinline__ void consumer(uint8_t* smem, uint32_t bars, const TilePlan& plan,
                                         const __half* __restrict__ Q, __half* __restrict__ O, float scale_log2,
                                         float out_scale, const KvChunks& kv) {
    // The warpgroup index, warp-uniform as far as the compiler can tell (a shuffle from lane 0, as
    // CUTLASS does): branches on it are then not divergent, and ptxas keeps the wgmma pipeline (a
    // branch it took for divergent serialized every wgmma: C7520, 15-30% slower).
    const int cw = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0) - 1;
    const int ctid = threadIdx.x % 128, lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    const int S = plan.sq;  // query rows per head
    // K/V tiles per unit without the mask (every unit the same).
    [[maybe_unused]] const int ntiles_all = T::KVCHUNK ? unit_tile_kv<T>(0, plan, kv).nt : (plan.skv + T::BN - 1) / T::BN;
    // (The unit count is not kept across the loop: the consumers have no register to spare.)  With the mask,
    // g_run: the K/V tiles of the block's units before unit i (the producer counts them the same way).
    [[maybe_unused]] int g_run = 0;
    for (int i = 0; has_unit<T>(i, plan); ++i) {
        const BlockTile u = unit_tile_kv<T>(i, plan, kv);
        const int ntiles = T::CAUSAL ? u.nt : ntiles_all;
        const int g0 = T::CAUSAL ? g_run : i * ntiles;
        // The turn passes from unit to unit when both take turns (two or more warpgroups).
        const bool pass_first = !(i > 0 && u.nc >= 2 && unit_tile<T>(i - 1, plan).nc >= 2);
        auto next_takes_turns = [&] { return has_unit<T>(i + 1, plan) && unit_tile<T>(i + 1, plan).nc >= 2; };
        const int qb = i % T::NQ;
        uint8_t* q = smem + T::OFF_Q + qb * T::Q_BYTES;
        if constexpr (T::ASYNC) mbar_wait(bar(T::BAR_Q + qb), (uint32_t)(i / T::NQ) & 1u);
        if (cw >= u.nc) {
            // No rows here: take and release every tile (no_loads: the producer waits for no release).
            Ring<T::NKB> kr(g0);
            Ring<T::NVB> vr(g0);
            for (int t = 0; t < (T::ABL == kAblNoLoads ? 0 : ntiles); ++t) {
                mbar_wait(bar(T::BAR_KFULL + kr.i), kr.phase);
                if (lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + kr.i));
                mbar_wait(bar(T::BAR_VFULL + vr.i), vr.phase);
                if (lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + vr.i));
                kr.advance(1);
                vr.advance(1);
            }
        } else {
            if constexpr (!T::ASYNC) {
                const size_t head = (size_t)u.bh * S * T::D;
                // baseline: the consumers load Q.  A warpgroup that skipped the last unit had no barrier
                // since its epilogue read these rows (unit i - 2).
                if constexpr (T::SPLIT) {
                    load_q_rows_global<T>(Q + head, S, u.m0, q, 0, threadIdx.x - 128, 256);
                    consumers_barrier();
                } else {
                    if (i > 0) consumer_wg_barrier<T::NCWG>(cw);
                    load_q_rows_global<T>(Q + head, S, u.m0, q, cw * 64, ctid, 128);
                    consumer_wg_barrier<T::NCWG>(cw);
                }
            }
            ConsumerState<T> st;
            // The key limit of this warpgroup's first row (split: both warpgroups own the unit's rows).
            // KVCHUNK: relative to the chunk's first key; ROWMASK: query 0's limit (the packed rows' period is kv.sq).
            int lim0 = T::CAUSAL ? u.m0 + (T::SPLIT ? 0 : 64 * cw) + 1 + plan.skv - plan.sq : plan.skv;
            if constexpr (T::KVCHUNK) lim0 = (T::ROWMASK ? 1 + plan.skv - kv.sq : plan.skv) - u.t0 * T::BN;
            if constexpr (kShortTiles<T>) {
                // Full units run the loop of all three warpgroups; a tile with fewer rows the loop of as
                // many as it has.
                if (u.nc == 3)
                    consumer_mainloop<T, 3>(st, smem, q, bars, cw, lim0, ntiles, g0, pass_first, next_takes_turns, scale_log2);
                else if (u.nc == 2)
                    consumer_mainloop<T, 2>(st, smem, q, bars, cw, lim0, ntiles, g0, pass_first, next_takes_turns, scale_log2);
                else
                    consumer_mainloop<T, 1>(st, smem, q, bars, cw, lim0, ntiles, g0, pass_first, next_takes_turns, scale_log2);
            } else {
                consumer_mainloop<T, T::NCWG>(st, smem, q, bars, cw, lim0, ntiles, g0, pass_first, next_takes_turns,
                                                  scale_log2, kv.sq);
            }
            if constexpr (T::SPLIT) {
                // split_merge writes warpgroup 1's state over the K buffers.  With an odd tile count the last K
                // tile is warpgroup 0's: warpgroup 1 waits for its decode too, so that the producer's last writes
                // there are ordered before its own by a barrier it waits on itself.  (They already were, through
                // warpgroup 0's wait and the consumers' barrier, but compute-sanitizer racecheck does not follow
                // that chain: 32 hazards at (1,4,300,128), none with an even count; experiments/
                // 2026-11-26-sdpa-fp16-rowsum-mma.)
                if (T::ABL != kAblNoLoads && cw == 1 && ntiles % 2 == 1) {  // (no_loads: no later tiles)
                    const Ring<T::NKB> last(g0 + ntiles - 1);
                    mbar_wait(bar(T::BAR_KFULL + last.i), last.phase);
                }
            }
            if (split_merge<T>(st, smem, cw)) {
                if constexpr (T::KVCHUNK) {
                    if (kv.chunks > 1) {
                        kv_chunk_epilogue<T>(st, smem + T::OFF_Q, kv, O, S, out_scale);
                        continue;
                    }
                }
                // The unit and its Q buffer again, rather than held across the loop.
                const BlockTile ue = unit_tile_kv<T>(i, plan, kv);
                epilogue<T>(st.o, st.sm, smem + T::OFF_Q + (i % T::NQ) * T::Q_BYTES, cw, O + (size_t)ue.bh * S * T::D,
                            S, ue.m0 + cw * 64, out_scale);
            }
        }
        if constexpr (T::ASYNC && T::PERSIST) {
            fence_proxy_async();  // this warp's reads of the buffer before the copy engine's next writes
            __syncwarp();
            if (lane == 0) mbar_arrive(bar(T::BAR_QEMPTY + qb));
        }
        if constexpr (T::CAUSAL) g_run += unit_tile<T>(i, plan).nt;
    }
}

}  // namespace sdpa_sm90
