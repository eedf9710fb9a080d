// The consumer warpgroups' main loop of the FP8-operand kernel (wgmma_fp8_sm90): S = Q K^T and
// O += P V on E4M3 wgmma (m64nNk32, fp32 accumulators), the online softmax of tile t overlapped
// with P V of tile t-1, as in mainloop.cuh.
//
//   Q: fp16 in shared memory (copy engine or consumer loads), turned once per block into E4M3 A
//      fragments in registers, each row scaled so that its largest |q| becomes 448; 1/scale of
//      the row goes into the softmax's exponent scale.
//   K: the E4M3 tile as the copy engine wrote it (B operand, K-major).
//   P: 2^8 * 2^(s * scale - m) in [0, 256], rounded to E4M3 (A fragments in registers, in the
//      key order fp8_load.cuh describes); l sums the same values in fp32 before rounding.
//   V: the producer's V^T (B operand, K-major).
#pragma once

#include "epilogue.cuh"  // consumer_wg_barrier
#include "fp8_load.cuh"
#include "fp8_traits.cuh"
#include "mainloop.cuh"  // ConsumerState, ping-pong barriers, split_merge
#include "ptx.cuh"
#include "softmax.cuh"
#include "wgmma_ops.cuh"

namespace sdpa_sm90 {

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
template <class T>
__device__ __forceinline__ void load_q_e4m3(const uint8_t* q, uint32_t (&qa)[T::D / 32][4], float (&qinv)[2],
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
            qa[kk][e] = pack_e4m3x4(a.x * s, a.y * s, b.x * s, b.y * s);
        }
}

// Q_SMEM: the warpgroup's E4M3 A fragments written to shared memory at q8 (64 rows of D = 128 bytes,
// K-major, 128-byte swizzle: the layout the copy engine gives K), for Q K^T from shared memory.
template <class T>
__device__ __forceinline__ void store_q_e4m3(uint8_t* q8, const uint32_t (&qa)[T::D / 32][4], int ctid) {
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
// descriptor's address field).  kd: the K stage's descriptor (smem_desc(stage, 16, K_SBO, K_SWIZZLE)).
// Q_SMEM: A from shared memory (qd: smem_desc(q8, 16, 1024)), qa unused.
template <class T>
__device__ __forceinline__ void issue_qk_fp8(float (&s)[T::BN / 2], const uint32_t (&qa)[T::D / 32][4], uint64_t qd,
                                             uint64_t kd) {
#pragma unroll
    for (int kk = 0; kk < T::D / 32; ++kk) {
        if constexpr (T::Q_SMEM) wgmma::ss_e4m3_m64n192k32(s, qd + 2u * kk, kd + 2u * kk, kk > 0);
        else RsE4m3<T::BN>::run(s, qa[kk], kd + 2u * kk, kk > 0);
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
    return kk < 4 ? vd + (uint64_t)(row * 128 / 16 + 2 * kk) : vd + kP1 + (uint64_t)(row * 64 / 16 + 2 * (kk - 4));
}

// O += P V for one warpgroup: BN/32 k-steps of m64nDk32, B = V^T [D][BN] (rows of keys).
// ROWSUM: then rs = P 1 (this tile's row sums: column 0 of the ones rows below V^T), a fresh
// accumulator.
template <class T>
__device__ __forceinline__ void issue_pv_fp8(float (&o)[T::D / 2], float (&rs)[4], const uint32_t (&p)[T::BN / 32][4],
                                             uint64_t vd) {
#pragma unroll
    for (int kk = 0; kk < T::BN / 32; ++kk) RsE4m3<T::D>::run(o, p[kk], vt_step<T>(vd, kk, 0), 1);
    if constexpr (T::ROWSUM) {
#pragma unroll
        for (int kk = 0; kk < T::BN / 32; ++kk) wgmma::rs_e4m3_m64n8k32(rs, p[kk], vt_step<T>(vd, kk, T::D), kk > 0);
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

// One work unit of a consumer warpgroup.  NC: the consumer warpgroups that run in this unit (T::NCWG, or
// fewer for a tile with fewer rows: block_tile), a compile-time count so that the full units' loop is
// the one without the choice (a run-time turn count cost 4-6%: experiments/2026-11-23-sdpa-tile-plan).
// q: the unit's Q buffer; g0: the block's count of K/V tiles before this unit (the rings run on across
// units); pass_first: the last warpgroup passes a turn before the first tile (the previous unit did not
// leave one for warpgroup 0); next_takes_turns(): whether the next unit takes turns, so that the last
// warpgroup passes its turn after its last P V (asked there, so that nothing is live across the loop).
template <class T, int NC, class NextTakesTurns>
__device__ __forceinline__ void consumer_mainloop_fp8(ConsumerState<T>& st, uint8_t* smem, uint8_t* q, uint32_t bars,
                                                      int cw, int S, int ntiles, int g0, bool pass_first,
                                                      NextTakesTurns next_takes_turns, float scale_log2) {
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
    const uint64_t vd0 = smem_desc(smem_u32(smem + T::OFF_VT), 16, 1024);
    // kNoLoads (diagnostic): every tile reads the first tile's buffers, waited for once.
    static_assert(T::NS >= 2 && T::NVT >= 2, "first (0 or 1) is its own stage and buffer");
    auto kdesc = [&](const Ring<T::NS>& k) { return kd0 + (uint64_t)((kNoLoads ? first : k.i) * (T::K_TILE >> 4)); };
    auto vdesc = [&](const Ring<T::NVT>& v) { return vd0 + (uint64_t)((kNoLoads ? first : v.i) * (T::VT_BYTES >> 4)); };
    auto wait_k = [&](const Ring<T::NS>& k, int t) {
        if (!kNoLoads || t == first) mbar_wait(bar(T::BAR_KFULL + k.i), k.phase);
    };
    auto wait_v = [&](const Ring<T::NVT>& v, int t) {
        if (!kNoLoads || t == first) mbar_wait(bar(T::BAR_VFULL + v.i), v.phase);
    };
    auto release_k = [&](const Ring<T::NS>& k) {
        if (!kNoLoads && lane == 0) mbar_arrive(bar(T::BAR_KEMPTY + k.i));
    };
    auto release_v = [&](const Ring<T::NVT>& v) {
        if (!kNoLoads && lane == 0) mbar_arrive(bar(T::BAR_VEMPTY + v.i));
    };

    // Split: this warpgroup's rows are rows 0..63 of the (64-row) Q tile.
    uint32_t qa[T::D / 32][4];
    float qinv[2];
    load_q_e4m3<T>(q + (T::SPLIT ? 0 : cw) * 64 * 128, qa, qinv, ctid);
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

#pragma unroll
    for (int i = 0; i < T::D / 2; ++i) st.o[i] = 0.f;
    if (first >= ntiles) return;

    Ring<T::NS> kr(g0 + first);    // K stage of tile t
    Ring<T::NVT> vr(g0 + first);   // V^T buffer of tile tp (the tile whose P is in p)

    if constexpr (T::ABL == kAblNoCompute) {
        float s[T::BN / 2];
        for (int t = first; t < ntiles; t += step) {
            wait_k(kr, t);
            if (t == first) {
                wgmma_fence();
                issue_qk_fp8<T>(s, qa, qd, kdesc(kr));
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

    float s[T::BN / 2];
    uint32_t p[T::BN / 32][4];
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
    // The softmax step on S and the packing of P; SDPA_SM90_EXP2_POLY (head dim 64) and
    // SDPA_SM90_EXP2_POLY_D128 move part of the exponentials off MUFU.
    constexpr int kPoly = T::D == 64 ? SDPA_SM90_EXP2_POLY : SDPA_SM90_EXP2_POLY_D128;
    auto softmax_step = [&] { st.sm.template step_rows<true, kPoly, !T::ROWSUM>(s, sc, kPExp2Bias, alpha); };
    auto pack_p = [&] { pack_p_e4m3<T::BN>(s, p); };
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
    issue_qk_fp8<T>(s, qa, qd, kdesc(kr));
    wgmma_commit();
    pass_turn();
    wgmma_wait<0>();
    fence_regs(s);
    release_k(kr);
    kr.advance(step);
    if (first * T::BN + T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, first * T::BN, S, lane);
    softmax_step();
    pack_p();

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
        wait_k(kr, t);
        wgmma_fence();
        issue_qk_fp8<T>(s, qa, qd, kdesc(kr));
        wgmma_commit();
        wait_v(vr, tp);
        issue_pv_fp8<T>(st.o, rs, p, vdesc(vr));
        wgmma_commit();
        pass_turn();
        wgmma_wait<1>();
        fence_regs(s);
        release_k(kr);
        kr.advance(step);
        const int n0 = t * T::BN;
        if (n0 + T::BN > S) OnlineSoftmax<T::BN>::mask_tail(s, n0, S, lane);
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
        pack_p();
        tp = t;
    }

    // ---- last P V ------------------------------------------------------------------------------
    fence_regs(st.o);
    if constexpr (T::ROWSUM) fence_regs(rs);
    fence_regs(p);
    wait_turn();
    wait_v(vr, tp);
    wgmma_fence();
    issue_pv_fp8<T>(st.o, rs, p, vdesc(vr));
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

// A consumer warpgroup's whole job: the block's work units in turn (block_units), each a main loop and
// an epilogue into that unit's Q buffer.  A warpgroup without rows in a unit (a short tile, the end of
// S) takes each of the unit's K and V^T tiles and hands it straight back, so that every barrier counts
// all consumer warps and the rings stay in step.  cpasync: every warpgroup waits for the unit's Q and,
// once done with the buffer (its epilogue's reads of O), releases it for the unit after next.
template <class T>
__device__ __forceinline__ void consumer_fp8(uint8_t* smem, uint32_t bars, const TilePlan& plan,
                                             const __half* __restrict__ Q, __half* __restrict__ O, int S,
                                             float scale_log2, float out_scale) {
    // The warpgroup index, warp-uniform as far as the compiler can tell (a shuffle from lane 0, as
    // CUTLASS does): branches on it are then not divergent, and ptxas keeps the wgmma pipeline (a
    // branch it took for divergent serialized every wgmma: C7520, 15-30% slower).
    const int cw = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0) - 1;
    const int ctid = threadIdx.x % 128, lane = ctid & 31;
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    const int ntiles = (S + T::BN - 1) / T::BN;
    // (The unit count is not kept across the loop: the consumers have no register to spare.)
    auto has_unit = [&](int i) { return i < (T::PERSIST ? plan.units : 1) && (int)blockIdx.x + i * (int)gridDim.x < plan.units; };
    for (int i = 0; has_unit(i); ++i) {
        const BlockTile u = unit_tile<T>(i, plan, S);
        // The turn passes from unit to unit when both take turns (two or more warpgroups).
        const bool pass_first = !(i > 0 && u.nc >= 2 && unit_tile<T>(i - 1, plan, S).nc >= 2);
        auto next_takes_turns = [&] { return has_unit(i + 1) && unit_tile<T>(i + 1, plan, S).nc >= 2; };
        const int qb = i % T::NQ;
        uint8_t* q = smem + T::OFF_Q + qb * T::Q_BYTES;
        const int g0 = i * ntiles;
        if constexpr (T::ASYNC) mbar_wait(bar(T::BAR_Q + qb), (uint32_t)(i / T::NQ) & 1u);
        if (cw >= u.nc) {
            // No rows here: take and release every tile (no_loads: the producer waits for no release).
            Ring<T::NS> kr(g0);
            Ring<T::NVT> vr(g0);
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
            if constexpr (kShortTiles<T>) {
                // Full units run the loop of all three warpgroups; a tile with fewer rows the loop of as
                // many as it has.
                if (u.nc == 3)
                    consumer_mainloop_fp8<T, 3>(st, smem, q, bars, cw, S, ntiles, g0, pass_first, next_takes_turns, scale_log2);
                else if (u.nc == 2)
                    consumer_mainloop_fp8<T, 2>(st, smem, q, bars, cw, S, ntiles, g0, pass_first, next_takes_turns, scale_log2);
                else
                    consumer_mainloop_fp8<T, 1>(st, smem, q, bars, cw, S, ntiles, g0, pass_first, next_takes_turns, scale_log2);
            } else {
                consumer_mainloop_fp8<T, T::NCWG>(st, smem, q, bars, cw, S, ntiles, g0, pass_first, next_takes_turns,
                                                  scale_log2);
            }
            if (split_merge<T>(st, smem, cw)) {
                // The unit and its Q buffer again, rather than held across the loop.
                const BlockTile ue = unit_tile<T>(i, plan, S);
                epilogue<T>(st.o, st.sm, smem + T::OFF_Q + (i % T::NQ) * T::Q_BYTES, cw, O + (size_t)ue.bh * S * T::D,
                            S, ue.m0 + cw * 64, out_scale);
            }
        }
        if constexpr (T::ASYNC && T::PERSIST) {
            fence_proxy_async();  // this warp's reads of the buffer before the copy engine's next writes
            __syncwarp();
            if (lane == 0) mbar_arrive(bar(T::BAR_QEMPTY + qb));
        }
    }
}

}  // namespace sdpa_sm90
