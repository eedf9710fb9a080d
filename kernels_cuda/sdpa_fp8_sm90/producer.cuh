// The producer warpgroup of both tiers' kernels (the tiers' per-tile work: fp8_load.cuh, tile_load.cuh).
#pragma once

#include "fp8_load.cuh"
#include "fp8_traits.cuh"
#include "ptx.cuh"
#include "tile_load.cuh"
#include "tile_plan.cuh"
#include "traits.cuh"

namespace sdpa_sm90 {

// The producer warpgroup's whole job, both tiers: the K/V tiles of the block's work units as one sequence
// g = 0 .. nload - 1 (without the causal mask every unit has all ntiles = ceil(Skv / BN) tiles, unit g / ntiles,
// tile g % ntiles; with it unit i's BlockTile::nt tiles, those up to its diagonal, after those of units
// 0 .. i - 1), so that the stages fill with the next unit's first tiles while the consumers finish the current one.  A unit's tiles are
// those of its K/V head (BlockTile::kvh); its Q those of its query head (bh).  cpasync: the copy engine
// brings K and V in as stored (uint8 E4M3 codes) into NS stages; Q of unit 0 at the start, Q of unit i + 1
// after tile tq of unit i is done (two Q buffers: its buffer is then released or about to be, unit i - 1's
// tiles being all done, so waiting for it cannot stall the consumers; one Q buffer, the fp16 tier at head
// dim 128: after tile min(ntiles, NKB) - 1 of unit i + 1, once every tile of unit i is done and the K ring
// holds the next unit's first tiles); SDPA_SM90_L2_PREFETCH_NEXT, the next unit's first tiles into L2.
// The per-tile work is the tier's:
//   fp8 tier: K is read by the consumers where it landed (its stage is refilled once they release it), V
//     is transposed into V^T (fp8_load.cuh);
//   fp16 tier: K and V are decoded into fp16 buffers (tile_load.cuh), and the stage refilled at once.
// baseline: the producer loads each tile with ordinary global loads (fp8: K into its stage, V transposed
// from global memory; fp16: decoded from global memory).  K, V: the whole tensors.  KVCHUNK kernels (tile_plan.cuh):
// one unit per block, its chunk's tiles t0 .. t0 + nt - 1 (kv); the others ignore kv.
template <class T>
__device__ __forceinline__ void producer(uint8_t* smem, uint32_t bars, const TileMaps* maps, const TilePlan& plan,
                                         const uint8_t* __restrict__ K, const uint8_t* __restrict__ V,
                                         const KvChunks& kv) {
    const int ptid = threadIdx.x;  // 0..127
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };
    uint8_t* kst = smem + T::OFF_K;
    uint8_t* vt = smem + T::OFF_VB;  // fp8: V^T buffers; fp16: fp16 V buffers
    // Every tile of the block's units (one unit with the ablations); no_loads: the first tile of each consumer
    // warpgroup only.  Without the mask: nunits units of ntiles tiles.  With it the unit count is not kept
    // (has_unit(i) where it is asked; the producer has 56-72 registers) and nload sums the units' tiles.
    // (KVCHUNK: the chunk's tiles, from its first, kv_t0.)
    [[maybe_unused]] const int ntiles =
        T::KVCHUNK ? unit_tile_kv<T>(0, plan, kv).nt : (plan.skv + T::BN - 1) / T::BN;
    [[maybe_unused]] const int kv_t0 = T::KVCHUNK ? unit_tile_kv<T>(0, plan, kv).t0 : 0;
    [[maybe_unused]] const int nunits = T::CAUSAL ? 0 : block_units<T>(plan);  // 1 with the ablations
    auto more_units = [&](int ii) {  // whether the block has a unit ii
        if constexpr (T::CAUSAL) return has_unit<T>(ii, plan);
        else return ii < nunits;
    };
    int nload = 0;
    if constexpr (T::ABL == kAblNoLoads) {
        nload = ntiles < (T::SPLIT ? 2 : 1) ? ntiles : (T::SPLIT ? 2 : 1);
    } else if constexpr (T::CAUSAL) {
        for (int k = 0; has_unit<T>(k, plan); ++k) nload += unit_tile<T>(k, plan).nt;
    } else {
        nload = nunits * ntiles;
    }
    if constexpr (T::FP8 && T::ROWSUM) {
        // V^T rows D .. D+7 of every buffer: E4M3 1.0 (0x38) in row D, 0 below; constant rows, so the
        // swizzle does not matter.  Fenced for the async proxy with the first transpose of each buffer.
        static_assert(T::NVT == 2, "one panel-0 chunk per producer thread");
        if constexpr (T::ONES_SEP) {
            ones_block<T>(smem + T::OFF_ONES, ptid);  // BN 256: one block, fenced with the first transpose
        } else {
            vt_ones_rows<T, 128>(vt, 0, ptid);
            if constexpr (T::VT_P1_KEYS != 0) vt_ones_rows<T, 64>(vt, T::VT_P1_OFF, ptid);
        }
    }

    if constexpr (T::ASYNC) {
        uint8_t* kraw = smem + T::OFF_KRAW;  // fp8: the K stages the consumers read (kst)
        uint8_t* vraw = smem + T::OFF_VRAW;
        // SDPA_SM90_VT_LDSM: every head-dim-128 fp8 kernel's V stages are 128-byte swizzled (make_maps), so all
        // of them transpose by ldmatrix / stmatrix; the 24-register producer's (T::P24) always are.
        constexpr bool kVtLdsm = T::FP8 && T::D == 128 && (SDPA_SM90_VT_LDSM != 0 || T::P24);
        constexpr bool kVtFast = T::FP8 && T::D == 128 && SDPA_SM90_VT_FAST != 0 && !kVtLdsm;
        VtFastAddr vfa{};
        if constexpr (kVtFast) vfa = vt_fast_addr<T>(ptid);
        [[maybe_unused]] VtLdsmAddr vla{};
        if constexpr (kVtLdsm && !T::P24) vla = vt_ldsm_addr<T>(smem_u32(vraw), ptid);
        // Where tile g + d lies (d >= 0) when g is tile t of unit i, so that an issue divides by nothing unless a
        // unit has fewer tiles than the ring is deep (the issuing thread is on the ring's critical path: two
        // divisions per issue made the head-dim-128 kernel 3-6% slower).  Without the mask every thread keeps
        // the K/V heads of units i and i + 1 in registers (kv_cur, kv_next), units of ntiles tiles.  With it the
        // issuing thread (ptid 0: it alone tracks the units) keeps the K/V head and tile count of unit i in
        // registers and those of unit i + 1 in shared memory (OFF_NEXT: in registers they spilled the producer,
        // 56 registers at head dim 128 in the fp16 tier; taking unit i + 1 by its divisions in the last NS issues
        // of each unit made (8,8,1024,64) 9% slower, 1x H200, experiments/2026-11-28-sdpa-sm90-inference-cases).
        // T::P24 (the 256-key and three-warpgroup head-dim-128 kernels): the cursor lives in shared memory and only
        // ptid 0 keeps it, so that the other threads carry the tile index alone through the transpose (the producer at
        // 24 registers: in registers the cursor spilled).
        constexpr bool kCurSmem = T::P24;
        const bool keeper = !kCurSmem || ptid == 0;  // the threads that keep the cursor
        int i_r = 0, t_r = 0;  // the cursor in registers (every kernel but P24's)
        int kv_cur_r, nt_cur_r;
        int kv_next_r = 0;
        int* const cur = reinterpret_cast<int*>(smem + T::OFF_CURSOR);  // BN 256: {i, t, kv_cur, kv_next, nt_cur}
        int& i = kCurSmem ? cur[0] : i_r;   // unit and tile of g (with the mask or BN 256: ptid 0's)
        int& t = kCurSmem ? cur[1] : t_r;
        int& kv_cur = kCurSmem ? cur[2] : kv_cur_r;
        int& kv_next = kCurSmem ? cur[3] : kv_next_r;
        int& nt_cur = kCurSmem ? cur[4] : nt_cur_r;
        [[maybe_unused]] int* const next = reinterpret_cast<int*>(smem + T::OFF_NEXT);  // with the mask: unit i + 1's {kvh, nt}; nt 0 if none
        auto note_next = [&](int ii) {
            int kv = 0, nt = 0;
            if (has_unit<T>(ii, plan)) {
                const BlockTile u = unit_tile<T>(ii, plan);
                kv = u.kvh;
                nt = u.nt;
            }
            next[0] = kv;
            next[1] = nt;
        };
        if constexpr (kCurSmem) {
            if (keeper) {
                i = 0;
                t = 0;
                kv_next = 0;
            }
        }
        if (keeper) {
            if constexpr (T::CAUSAL) {
                const BlockTile u0 = unit_tile<T>(0, plan);
                kv_cur = u0.kvh;
                nt_cur = u0.nt;
            } else {
                kv_cur = unit_tile_kv<T>(0, plan, kv).kvh;
                kv_next = nunits > 1 ? unit_tile<T>(1, plan).kvh : 0;
                nt_cur = ntiles;
            }
        }
        auto locate = [&](int d, int& tt) {
            tt = t + d;
            if constexpr (!T::CAUSAL) {
                if (tt < ntiles) return kv_cur;
                tt -= ntiles;
                if (tt < ntiles) return kv_next;
                const int ii = i + 1 + tt / ntiles;
                tt %= ntiles;
                return unit_tile<T>(ii, plan).kvh;
            } else {
                if (!T::PERSIST || tt < nt_cur) return kv_cur;  // one unit per block: every tile is unit 0's
                tt -= nt_cur;
                const int nt1 = next[1];
                if (tt < nt1) return next[0];
                tt -= nt1;
                for (int ii = i + 2;; ++ii) {  // (g + d < nload: a later unit of this block holds it)
                    const BlockTile u = unit_tile<T>(ii, plan);
                    if (tt < u.nt) return u.kvh;
                    tt -= u.nt;
                }
            }
        };
        auto issue_k = [&](int g, int d) {
            int tt;
            const int bh = locate(d, tt), s = (g + d) % T::NS;
            mbar_arrive_expect_tx(bar(T::BAR_KRAW + s), T::U8_TILE);
            tma_load_3d(smem_u32(kraw + s * T::U8_TILE), &maps->k, bar(T::BAR_KRAW + s), 0, (kv_t0 + tt) * T::BN, bh);
        };
        auto issue_v = [&](int g, int d) {
            int tt;
            const int bh = locate(d, tt), s = (g + d) % T::NS;
            mbar_arrive_expect_tx(bar(T::BAR_VRAW + s), T::U8_TILE);
            tma_load_3d(smem_u32(vraw + s * T::U8_TILE), &maps->v, bar(T::BAR_VRAW + s), 0, (kv_t0 + tt) * T::BN, bh);
        };
        auto issue = [&](int g, int d) {
            issue_k(g, d);
            issue_v(g, d);
        };
        // Q of unit i into buffer i % NQ, once the consumers released it (unit i - NQ).
        auto issue_q = [&](int i) {
            const int b = i % T::NQ;
            if (i >= T::NQ) mbar_wait(bar(T::BAR_QEMPTY + b), (uint32_t)(i / T::NQ - 1) & 1u);
            const BlockTile u = unit_tile_kv<T>(i, plan, kv);
            mbar_arrive_expect_tx(bar(T::BAR_Q + b), T::Q_BYTES);
#pragma unroll
            for (int p = 0; p < T::PANELS; ++p)
                tma_load_3d(smem_u32(smem + T::OFF_Q + b * T::Q_BYTES + p * T::BM * 128), &maps->q, bar(T::BAR_Q + b),
                            64 * p, u.m0, u.bh);
        };
        // SDPA_SM90_L2_PREFETCH_NEXT: the first K/V tiles (and Q) of a unit another wave or unit away
        // into L2, for cold-L2 runs.
        constexpr bool kPrefetch = SDPA_SM90_L2_PREFETCH_NEXT != 0 && T::ABL == kAblNone;
        auto prefetch_l2 = [&](const BlockTile& u, bool with_q) {
            if (with_q) {
#pragma unroll
                for (int p = 0; p < T::PANELS; ++p) tma_prefetch_l2_3d(&maps->q, 64 * p, u.m0, u.bh);
            }
            for (int t = 0; t < (T::CAUSAL || T::KVCHUNK ? u.nt : ntiles) && t < T::NS; ++t) {
                const int key0 = T::KVCHUNK ? (u.t0 + t) * T::BN : t * T::BN;
                tma_prefetch_l2_3d(&maps->k, 0, key0, u.kvh);
                tma_prefetch_l2_3d(&maps->v, 0, key0, u.kvh);
            }
        };
        // Two stages (BN 192): a V stage is refilled as soon as the producer has transposed it (tile
        // t + NS after tile t), not with its K stage once the consumers release that (tile t - 1 + NS).
        constexpr bool kEarlyV = T::NS == 2;
        if (ptid == 0) {
            if constexpr (T::PERSIST && T::CAUSAL) note_next(1);
            issue_q(0);
            for (int g = 0; g < nload && g < T::NS; ++g) issue(0, g);
            if constexpr (kPrefetch && !T::PERSIST) {
                // One unit per block: the block that takes this SM in the next wave.
                const int nb = (int)blockIdx.x + maps->next_stride;
                if (maps->next_stride > 0 && nb < (int)gridDim.x)
                    prefetch_l2(T::KVCHUNK ? kv_block_tile<T>(nb, plan, kv) : block_tile<T>(nb, plan), true);
            }
        }
        for (int g = 0; g < nload; ++g) {
            if constexpr (T::FP8) {
                const int s = g % T::NS, b = g % T::NVT;
                mbar_wait(bar(T::BAR_VRAW + s), (uint32_t)(g / T::NS) & 1u);
                if (g >= T::NVT) mbar_wait(bar(T::BAR_VEMPTY + b), (uint32_t)(g / T::NVT - 1) & 1u);
                if constexpr (kVtLdsm && T::P24)  // the addresses made again per tile (24 registers: none to keep them)
                    transpose_v_tile_ldsm<T>((uint32_t)(s * T::V_TILE), smem_u32(vt + b * T::VT_BYTES),
                                             vt_ldsm_addr<T>(smem_u32(vraw), tid_x_here()));
                else if constexpr (kVtLdsm)
                    transpose_v_tile_ldsm<T>((uint32_t)(s * T::V_TILE), smem_u32(vt + b * T::VT_BYTES), vla);
                else if constexpr (kVtFast) transpose_v_tile_fast<T>(vraw + s * T::V_TILE, vt + b * T::VT_BYTES, vfa);
                else transpose_v_tile<T, false>(vraw + s * T::V_TILE, T::BN, vt + b * T::VT_BYTES, ptid);
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_VFULL + b));
                // Refill the stage of the previous tile (its K is usually released by now): every
                // producer thread has read its V (named barrier), the consumers its K (KEMPTY).
                // kEarlyV: V of tile g + NS into this tile's stage, K of tile g - 1 + NS.
                const int r = g - 1;
                const bool refill_k = r >= 0 && r + T::NS < nload, refill_v = kEarlyV && g + T::NS < nload;
                if (refill_k || refill_v) {
                    named_barrier<kBarProducer, 128>();
                    if (ptid == 0) {
                        if (refill_v) issue_v(g, T::NS);
                        if (refill_k) {
                            mbar_wait(bar(T::BAR_KEMPTY + r % T::NS), (uint32_t)(r / T::NS) & 1u);
                            if constexpr (kEarlyV) issue_k(g, T::NS - 1);
                            else issue(g, T::NS - 1);
                        }
                    }
                }
            } else {
                const int s = g % T::NS, kb = g % T::NKB, vb = g % T::NVB;
                mbar_wait(bar(T::BAR_KRAW + s), (uint32_t)(g / T::NS) & 1u);
                if (g >= T::NKB) mbar_wait(bar(T::BAR_KEMPTY + kb), (uint32_t)(g / T::NKB - 1) & 1u);
                decode_tile_smem<T>(kraw + s * T::U8_TILE, kst + kb * T::K_TILE, ptid);
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_KFULL + kb));
                if constexpr (T::VDEC) {
                    // The consumers decode V (mainloop.cuh get_v): K's stage is refilled once every producer thread
                    // has read it; V of tile g goes into the stage of tile g - NS once its warpgroup has decoded that
                    // (it does so after Q K^T of tile g, whose K was just decoded: no wait on anything later).
                    if (g + T::NS < nload) {
                        named_barrier<kBarProducer, 128>();
                        if (ptid == 0) issue_k(g, T::NS);
                    }
                    if (ptid == 0 && g >= T::NS) {
                        mbar_wait(bar(T::BAR_VEMPTY + s), (uint32_t)((g - T::NS) / T::NS) & 1u);
                        issue_v(g, 0);
                    }
                } else {
                    mbar_wait(bar(T::BAR_VRAW + s), (uint32_t)(g / T::NS) & 1u);
                    if (g >= T::NVB) mbar_wait(bar(T::BAR_VEMPTY + vb), (uint32_t)(g / T::NVB - 1) & 1u);
                    decode_tile_smem<T>(vraw + s * T::U8_TILE, vt + vb * T::VB_BYTES, ptid);
                    fence_proxy_async();
                    mbar_arrive(bar(T::BAR_VFULL + vb));
                    // Stage s is free once every producer thread has read it (named barrier): tile g + NS.
                    if (g + T::NS < nload) {
                        named_barrier<kBarProducer, 128>();
                        if (ptid == 0) issue(g, T::NS);
                    }
                }
            }
            // The tiles of unit i after which the next Q is issued (two Q buffers) or its L2 prefetch (one);
            // with one Q buffer this unit's Q after tile tq1 (without the mask the same for every unit).
            const int nt_i = T::CAUSAL ? nt_cur : ntiles;
            const int tq = nt_i - 1 < T::NS ? nt_i - 1 : T::NS;
            // (fp8 tier, one Q buffer: BN 256.  Its refill of K at tile 1 waits for the consumers to release the unit's
            // tile 0, which they cannot reach without its Q: so Q at tile 0, once the refill has waited on the last
            // unit's tiles only.)
            [[maybe_unused]] const int tq1 = T::FP8 ? 0 : (nt_i < T::NKB ? nt_i : T::NKB) - 1;
            if constexpr (T::PERSIST && T::NQ == 2) {
                if (ptid == 0 && t == tq && more_units(i + 1)) {
                    issue_q(i + 1);
                    if constexpr (kPrefetch) {
                        if (maps->next_stride > 0) prefetch_l2(unit_tile<T>(i + 1, plan), false);
                    }
                }
            } else if constexpr (T::PERSIST) {
                // One Q buffer: the next unit's Q (and first tiles) into L2 at tile tq; this unit's Q once the
                // consumers are done with the last one's (its epilogue), which needs no more tiles from here.
                if (ptid == 0) {
                    if constexpr (kPrefetch) {
                        if (t == tq && more_units(i + 1) && maps->next_stride > 0) prefetch_l2(unit_tile<T>(i + 1, plan), true);
                    }
                    if (i > 0 && t == tq1) issue_q(i);
                }
            }
            if constexpr (!T::CAUSAL) {
                if (keeper && ++t == ntiles) {
                    t = 0;
                    ++i;
                    kv_cur = kv_next;
                    if (i + 1 < nunits) kv_next = unit_tile<T>(i + 1, plan).kvh;
                }
            } else if (ptid == 0 && ++t == nt_cur && T::PERSIST) {  // the next unit: its head and tiles as noted, then the one after
                t = 0;
                ++i;
                kv_cur = next[0];
                nt_cur = next[1];
                note_next(i + 1);
            }
        }
    } else {
        (void)maps;
        // Tile g's K and V (64-bit offsets: K and V may hold more than 2^31 elements) and its keys left (Skv -
        // tile * BN), unit by unit, the unit's last tile the one after which `left` is `stop` (Skv - nt * BN; few
        // registers: the producer has 56-72).
        // Without the mask a unit ends where left reaches 0 or below (stop unused).
        const int S = plan.skv;
        int i = 0, left = S;
        [[maybe_unused]] int stop = 0;
        size_t off;
        if constexpr (T::CAUSAL) {
            const BlockTile u0 = unit_tile<T>(0, plan);
            off = (size_t)u0.kvh * (size_t)S * T::D;
            stop = S - u0.nt * T::BN;
        } else if constexpr (T::KVCHUNK) {  // the chunk's first tile
            const BlockTile u0 = unit_tile_kv<T>(0, plan, kv);
            off = ((size_t)u0.kvh * S + (size_t)u0.t0 * T::BN) * T::D;
            left = S - u0.t0 * T::BN;
        } else {
            off = (size_t)unit_tile<T>(0, plan).kvh * S * T::D;
        }
        for (int g = 0; g < nload; ++g) {
            if constexpr (T::FP8) {
                const int s = g % T::NS, b = g % T::NVT;
                if (g >= T::NS) mbar_wait(bar(T::BAR_KEMPTY + s), (uint32_t)(g / T::NS - 1) & 1u);
                load_k_tile_global<T>(K + off, left, kst + s * T::K_TILE, ptid);
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_KFULL + s));
                if (g >= T::NVT) mbar_wait(bar(T::BAR_VEMPTY + b), (uint32_t)(g / T::NVT - 1) & 1u);
                if constexpr (T::V_STAGED) {
                    // Stage s was last read two tiles ago; every producer thread passed the barrier
                    // below for the tile since, after its transpose of that one.
                    uint8_t* vst = smem + T::OFF_V + s * T::V_TILE;
                    load_v_tile_global<T>(V + off, left, vst, ptid);
                    named_barrier<kBarProducer, 128>();
                    transpose_v_tile<T, false>(vst, T::BN, vt + b * T::VT_BYTES, ptid);
                } else {
                    transpose_v_tile<T, true>(V + off, left, vt + b * T::VT_BYTES, ptid);
                }
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_VFULL + b));
            } else {
                const int kb = g % T::NKB, vb = g % T::NVB;
                if (g >= T::NKB) mbar_wait(bar(T::BAR_KEMPTY + kb), (uint32_t)(g / T::NKB - 1) & 1u);
                load_decode_tile_global<T>(K + off, 0, left, kst + kb * T::K_TILE, ptid);
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_KFULL + kb));
                if (g >= T::NVB) mbar_wait(bar(T::BAR_VEMPTY + vb), (uint32_t)(g / T::NVB - 1) & 1u);
                load_decode_tile_global<T>(V + off, 0, left, vt + vb * T::VB_BYTES, ptid);
                fence_proxy_async();
                mbar_arrive(bar(T::BAR_VFULL + vb));
            }
            off += (size_t)T::BN * T::D;
            left -= T::BN;
            if constexpr (!T::CAUSAL) {
                if (left <= 0 && ++i < nunits) {
                    off = (size_t)unit_tile<T>(i, plan).kvh * S * T::D;
                    left = S;
                }
            } else if (left == stop && has_unit<T>(++i, plan)) {
                const BlockTile u = unit_tile<T>(i, plan);
                off = (size_t)u.kvh * (size_t)S * T::D;
                left = S;
                stop = S - u.nt * T::BN;
            }
        }
    }
}

}  // namespace sdpa_sm90
