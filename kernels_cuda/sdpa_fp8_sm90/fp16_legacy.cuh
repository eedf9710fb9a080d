// The fp16 tier's kernel as it was until 2026-11-26 (SDPA_SM90_FP16_LEGACY=1, config.cuh): one block per
// work unit, two consumer warpgroups, 128-key tiles, no L2 prefetch, its own producer and main loop.  Kept for
// one A/B against the shared skeleton (producer.cuh, mainloop.cuh) that serves both tiers since; the code is
// the former traits.cuh / tile_load.cuh / mainloop.cuh / kernel.cuh, unchanged but for names.
//
// Per consumer warpgroup (64 query rows), per K/V tile t (BN keys):
//   issue S_t = Q K^T        (SS wgmma: Q and fp16 K from shared memory, both K-major)
//   issue O += P_{t-1} V_{t-1} (RS wgmma: P in registers, fp16 V from shared memory, MN-major)
//   wait for S_t only, release K_t; softmax of S_t (runs while P V is on the tensor cores)
//   wait for P V, release V_{t-1}; rescale O; pack P_t to fp16
// and a last P V after the loop.  The producer brings uint8 tiles in (cpasync: NU8 stages by the copy
// engine; baseline: synchronous loads) and decodes them into two fp16 K/V buffers.
#pragma once

#include "epilogue.cuh"
#include "mainloop.cuh"  // ConsumerState, ping-pong barriers, split_merge
#include "ptx.cuh"
#include "softmax.cuh"
#include "tier_ops.cuh"  // SSOp, RSOp
#include "tile_load.cuh"
#include "tile_plan.cuh"
#include "traits.cuh"
#include "wgmma_ops.cuh"

namespace sdpa_sm90 {

template <int D_, bool ASYNC_, int ABL_, bool SPLIT_>
struct Traits {
    static constexpr bool FP8 = false;  // fp16 operands (wgmma_sm90)
    static constexpr bool LEGACY = true;  // this file's kernel, not the shared skeleton's
    static constexpr int D = D_;
    static constexpr bool ASYNC = ASYNC_;   // TMA pipeline (cpasync) or synchronous loads (baseline)
    static constexpr int ABL = ABL_;
    // SPLIT (for grids of less than half a wave): both consumer warpgroups own the same 64 query
    // rows and take alternate K/V tiles (even / odd); their softmax states are merged at the end.
    static constexpr bool SPLIT = SPLIT_;
    static constexpr bool PINGPONG = !SPLIT && SDPA_SM90_PINGPONG != 0;
    static constexpr int BN = 128;          // keys per K/V tile (SDPA_SM90_BN64, removed 2026-11-26, was 128)
    static constexpr int NCWG = 2;          // consumer warpgroups, 64 query rows each
    static constexpr int BM = SPLIT ? 64 : 64 * NCWG;  // query rows per block
    static constexpr int THREADS = 128 * (1 + NCWG);  // warpgroup 0 = producer
    static constexpr int PANELS = D / 64;   // 64-column (128-byte) swizzle panels per row
    // Register split after setmaxnreg: 168 per thread at launch (65536 / 384, rounded down to 8);
    // the producer gives back, the consumers (S, P and O accumulators) take.
    static constexpr int PRODUCER_REGS = 64;
    static constexpr int CONSUMER_REGS = 216;
    static_assert(128 * PRODUCER_REGS + 128 * NCWG * CONSUMER_REGS <= 65536, "register budget");

    static constexpr int NF16 = 2;                      // decoded fp16 K/V buffers
    static constexpr int NU8 = ASYNC ? (D == 64 ? 4 : 2) : 0;  // uint8 K/V stages the copy engine fills

    static constexpr int Q_BYTES = BM * D * 2;          // [PANELS][BM][64] fp16
    static constexpr int T16_BYTES = BN * D * 2;        // one fp16 K or V tile, [PANELS][BN][64]
    static constexpr int U8_TILE = BN * D;              // one uint8 K or V tile, [BN][D]

    static constexpr int OFF_Q = 0;
    static constexpr int OFF_F16 = OFF_Q + Q_BYTES;                     // [NF16][K, V]
    static constexpr int OFF_U8 = OFF_F16 + NF16 * 2 * T16_BYTES;       // [NU8][K, V]
    static constexpr int OFF_SCRATCH = OFF_U8 + NU8 * 2 * U8_TILE;   // one word per consumer thread (ptx.cuh keep_above_wait)
    static constexpr int OFF_BAR = OFF_SCRATCH + 128 * NCWG * 4;
    static constexpr int OFF_MERGE = OFF_F16;  // split merge space (the fp16 K/V buffers, free at the end)
    // mbarriers (8 bytes each)
    static constexpr int BAR_Q = 0;                    // Q landed (copy engine)
    static constexpr int BAR_U8 = 1;                   // [NU8] uint8 stage landed (copy engine)
    static constexpr int BAR_KFULL = BAR_U8 + (NU8 > 0 ? NU8 : 1);  // [NF16] fp16 K decoded (128 producer threads)
    static constexpr int BAR_VFULL = BAR_KFULL + NF16;
    static constexpr int BAR_KEMPTY = BAR_VFULL + NF16;   // [NF16] consumers done with fp16 K (one arrival per consumer warp)
    static constexpr int BAR_VEMPTY = BAR_KEMPTY + NF16;
    static constexpr int NBARS = BAR_VEMPTY + NF16;
    static constexpr int SMEM_USED = OFF_BAR + NBARS * 8;
    static constexpr int SMEM = SMEM_USED + 1024;      // + slack to align the base to 1024
    // Consumer warps that read each fp16 buffer (one arrival each on its "empty" barrier): split,
    // a buffer belongs to one warpgroup (tile t lives in buffer t % 2 and goes to warpgroup t % 2).
    static constexpr int CONSUMER_WARPS = SPLIT ? 4 : 4 * NCWG;
    static_assert(!SPLIT || NF16 == NCWG, "split: one fp16 buffer per consumer warpgroup");

    static_assert(D == 64 || D == 128, "head dim");
    static_assert(OFF_F16 % 1024 == 0 && T16_BYTES % 1024 == 0 && OFF_U8 % 1024 == 0, "swizzle atoms");
    static_assert(SMEM <= 227 * 1024, "sm_90 shared memory per block");
    static constexpr int CHUNKS = BN * D / 16;          // 16-byte uint8 chunks per K or V tile
    static constexpr int CHUNKS_PER_THREAD = CHUNKS / 128;
    static constexpr int DECODE_BATCH = CHUNKS_PER_THREAD % 4 == 0 ? 4 : 2;  // 16-byte chunks in flight per thread
    static_assert(CHUNKS % 128 == 0, "decode work divides over the producer warpgroup");
    static_assert(BN % 64 == 0 && BN <= 256, "a multiple of 64 keys (4 partial softmax reductions), one TMA box");
};

// The producer warpgroup's whole job for one block.
template <class T>
__device__ __forceinline__ void producer_legacy(uint8_t* smem, uint32_t bars, const TileMaps* maps, const uint8_t* __restrict__ Kg /* this head's */,
                                         const uint8_t* __restrict__ Vg, int S, int m0, int bh, int ntiles) {
    const int ptid = threadIdx.x;  // 0..127
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    uint8_t* f16 = smem + T::OFF_F16;
    // no_loads: the first tile of each consumer warpgroup only (tile 0; split: tiles 0 and 1), which
    // the consumers then reuse for every tile.
    const int nload = T::ABL == kAblNoLoads ? (ntiles < (T::SPLIT ? 2 : 1) ? ntiles : (T::SPLIT ? 2 : 1)) : ntiles;

    [[maybe_unused]] uint8_t* u8 = smem + T::OFF_U8;
    if constexpr (T::ASYNC) {
        auto issue = [&](int t) {
            const int s = t % T::NU8;
            mbar_arrive_expect_tx(bar(T::BAR_U8 + s), 2 * T::U8_TILE);
            tma_load_3d(smem_u32(u8 + s * 2 * T::U8_TILE), &maps->k, bar(T::BAR_U8 + s), 0, t * T::BN, bh);
            tma_load_3d(smem_u32(u8 + s * 2 * T::U8_TILE + T::U8_TILE), &maps->v, bar(T::BAR_U8 + s), 0, t * T::BN, bh);
        };
        if (ptid == 0) {
            mbar_arrive_expect_tx(bar(T::BAR_Q), T::Q_BYTES);
#pragma unroll
            for (int p = 0; p < T::PANELS; ++p)
                tma_load_3d(smem_u32(smem + T::OFF_Q + p * T::BM * 128), &maps->q, bar(T::BAR_Q), 64 * p, m0, bh);
            for (int t = 0; t < nload && t < T::NU8; ++t) issue(t);
        }
        for (int t = 0; t < nload; ++t) {
            const int s = t % T::NU8, b = t % T::NF16;
            const uint8_t* stage = u8 + s * 2 * T::U8_TILE;
            uint8_t* k16 = f16 + b * 2 * T::T16_BYTES;
            mbar_wait(bar(T::BAR_U8 + s), (uint32_t)(t / T::NU8) & 1u);
            if (t >= T::NF16) mbar_wait(bar(T::BAR_KEMPTY + b), (uint32_t)(t / T::NF16 - 1) & 1u);
            decode_tile_smem<T>(stage, k16, ptid);
            fence_proxy_async();
            mbar_arrive(bar(T::BAR_KFULL + b));
            if (t >= T::NF16) mbar_wait(bar(T::BAR_VEMPTY + b), (uint32_t)(t / T::NF16 - 1) & 1u);
            decode_tile_smem<T>(stage + T::U8_TILE, k16 + T::T16_BYTES, ptid);
            fence_proxy_async();
            mbar_arrive(bar(T::BAR_VFULL + b));
            if (t + T::NU8 < nload) {
                named_barrier<kBarProducer, 128>();  // every producer thread has read stage s
                if (ptid == 0) issue(t + T::NU8);
            }
        }
    } else {
        (void)maps;
        (void)m0;
        for (int t = 0; t < nload; ++t) {
            const int b = t % T::NF16;
            uint8_t* k16 = f16 + b * 2 * T::T16_BYTES;
            if (t >= T::NF16) mbar_wait(bar(T::BAR_KEMPTY + b), (uint32_t)(t / T::NF16 - 1) & 1u);
            load_decode_tile_global<T>(Kg, t * T::BN, S, k16, ptid);
            fence_proxy_async();
            mbar_arrive(bar(T::BAR_KFULL + b));
            if (t >= T::NF16) mbar_wait(bar(T::BAR_VEMPTY + b), (uint32_t)(t / T::NF16 - 1) & 1u);
            load_decode_tile_global<T>(Vg, t * T::BN, S, k16 + T::T16_BYTES, ptid);
            fence_proxy_async();
            mbar_arrive(bar(T::BAR_VFULL + b));
        }
    }
}

// S = Q K^T for one warpgroup: D/16 k-steps of m64nBNk16.
//   q_rows: shared address of this warpgroup's first Q row in panel 0 ([PANELS][BM][64] fp16)
//   k16:    shared address of the fp16 K tile ([PANELS][BN][64])
template <class T>
__device__ __forceinline__ void issue_qk_legacy(float (&s)[T::BN / 2], uint32_t q_rows, uint32_t k16) {
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
__device__ __forceinline__ void issue_pv_legacy(float (&o)[T::D / 2], const uint32_t (&p)[T::BN / 16][4], uint32_t v16) {
#pragma unroll
    for (int kk = 0; kk < T::BN / 16; ++kk) {
        const uint64_t db = smem_desc(v16 + kk * 16 * 128, T::BN * 128, 1024);
        RSOp<T::D>::run(o, p[kk], db, 1);
    }
}

template <class T>
__device__ __forceinline__ void consumer_mainloop_legacy(ConsumerState<T>& st, uint8_t* smem, uint32_t bars, int cw,
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
                issue_qk_legacy<T>(s, q_rows, kbuf(t));
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
    issue_qk_legacy<T>(s, q_rows, kbuf(first));
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
        issue_qk_legacy<T>(s, q_rows, kbuf(t));
        wgmma_commit();
        wait_full(T::BAR_VFULL, tp);
        issue_pv_legacy<T>(st.o, p, kbuf(tp) + T::T16_BYTES);
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
    issue_pv_legacy<T>(st.o, p, kbuf(tp) + T::T16_BYTES);
    wgmma_commit();
    // Every turn passed is taken: warpgroup 1 started by passing one, so it skips its last.
    if (T::PINGPONG && cw == 0) pingpong_pass_turn(cw);
    wgmma_wait<0>();
    fence_regs(st.o);
    release(T::BAR_VEMPTY, tp);
}

// The legacy kernel's barriers (thread 0, before the block's __syncthreads) and its block body.
template <class T>
__device__ __forceinline__ void init_barriers_legacy(uint32_t bars) {
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    mbar_init(bar(T::BAR_Q), 1);
    for (int s = 0; s < T::NU8; ++s) mbar_init(bar(T::BAR_U8 + s), 1);
    for (int b = 0; b < T::NF16; ++b) {
        mbar_init(bar(T::BAR_KFULL + b), 128);
        mbar_init(bar(T::BAR_VFULL + b), 128);
        mbar_init(bar(T::BAR_KEMPTY + b), T::CONSUMER_WARPS);
        mbar_init(bar(T::BAR_VEMPTY + b), T::CONSUMER_WARPS);
    }
}

template <class T>
__device__ __forceinline__ void block_legacy(uint8_t* smem, uint32_t bars, const TileMaps* maps, const TilePlan& plan,
                                             const __half* __restrict__ Q, const uint8_t* __restrict__ K,
                                             const uint8_t* __restrict__ V, __half* __restrict__ O, int S,
                                             float scale_log2, float out_scale) {
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    auto coords = [&](BlockTile& tile, int& ntiles, size_t& head) {
        tile = block_tile<T>(blockIdx.x, plan, S);
        ntiles = (S + T::BN - 1) / T::BN;
        head = (size_t)tile.bh * S * T::D;
    };
    BlockTile tile;
    int ntiles;
    size_t head;
    // One unit per block, every warpgroup with rows.
    if (threadIdx.x < 128) {
        regs_dealloc<T::PRODUCER_REGS>();
        coords(tile, ntiles, head);
        producer_legacy<T>(smem, bars, maps, K + head, V + head, S, tile.m0, tile.bh, ntiles);
    } else {
        regs_alloc<T::CONSUMER_REGS>();
        coords(tile, ntiles, head);
        const int cw = threadIdx.x / 128 - 1;
        const int m0 = tile.m0;
        uint8_t* q = smem + T::OFF_Q;
        if constexpr (T::ASYNC) {
            mbar_wait(bar(T::BAR_Q), 0);
        } else if constexpr (T::SPLIT) {
            load_q_rows_global<T>(Q + head, S, m0, q, 0, threadIdx.x - 128, 256);
            consumers_barrier();
        } else {
            load_q_rows_global<T>(Q + head, S, m0, q, cw * 64, threadIdx.x % 128, 128);
            consumer_wg_barrier<T::NCWG>(cw);
        }
        ConsumerState<T> st;
        consumer_mainloop_legacy<T>(st, smem, bars, cw, S, ntiles, scale_log2);
        if (split_merge<T>(st, smem, cw)) epilogue<T>(st.o, st.sm, q, cw, O + head, S, m0 + cw * 64, out_scale);
    }
}

}  // namespace sdpa_sm90
