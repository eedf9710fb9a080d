// Which query rows each work unit of the Hopper SDPA kernel takes (the tile plan), in which order, with
// which K/V tiles, and how the host chooses the plan.  A unit is one block's rows of one query head; a
// persistent block (SDPA_SM90_PERSISTENT, config.cuh) takes units blockIdx.x, blockIdx.x + gridDim.x, ...
// in turn (with the causal mask: every other round in reverse, below), any other block the unit of its
// own index.
//
// The attention case (../sdpa_fp8/attn_shape.h) as the units see it: a unit is (query head bh = b Hq + h,
// a tile of its Sq rows); it reads K/V head bh / G = b Hkv + h / G (G = Hq / Hkv) through Skv keys,
// ceil(Skv / BN) K/V tiles, or with the causal mask (bottom-right: row i sees keys j <= i + Skv - Sq) only
// the tiles up to the diagonal of its last row (BlockTile::nt): the tiles past it are masked for every row
// of the unit and are neither loaded nor computed.
//
// Order of the units:
//   not causal: per query head all its row tiles, heads in order (query heads h of one K/V head are
//     adjacent, so its K/V tiles stay in L2 for the G heads that read them); every unit has all K/V tiles.
//   causal: heaviest first: the last row tile of every head (it sees the most keys), then the one before
//     it, ...; heads inner, so again the G heads of one K/V head are adjacent.  Persistent blocks take the
//     units in rounds of gridDim.x, odd rounds in reverse (block b takes unit i * grid + b in even rounds,
//     i * grid + grid - 1 - b in odd ones: a "snake"), so that a block that took one of the heaviest units
//     of a round takes one of the lightest of the next: with units of decreasing weight the pairs of
//     rounds weigh about the same for every block.  The three-warpgroup kernel keeps full tiles (nshort
//     0) with the mask: its makespan model (below) assumes units of one weight.
//
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "../sdpa_fp8/attn_shape.h"
#include "config.cuh"  // SDPA_SM90_TILE_PLAN

namespace sdpa_sm90 {

// n / d for 0 <= n < 2^31 and a divisor d >= 1 known at launch, by a multiply-high, an add and a shift instead of
// the ~19 instructions of a division by a run-time value (Granlund & Montgomery 1994, the round-up method):
// l = ceil(log2 d), mul = floor(2^32 (2^l - d) / d) + 1 (< 2^32), n / d = (umulhi(mul, n) + n) >> l, exact for every
// n < 2^32 where the sum does not overflow, which n < 2^31 ensures (umulhi(mul, n) <= n).  d = 1: mul 1, l 0.
struct FastDiv {
    uint32_t mul;
    uint32_t shift;
};
inline FastDiv make_fast_div(uint32_t d) {
    uint32_t l = 0;
    while ((1ull << l) < d) ++l;
    return FastDiv{(uint32_t)((((1ull << 32) * ((1ull << l) - d)) / d) + 1), l};
}
__host__ __device__ __forceinline__ int fast_div(int n, const FastDiv& f) {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(f.mul, (uint32_t)n);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)f.mul * (uint32_t)n) >> 32);
#endif
    return (int)((hi + (uint32_t)n) >> f.shift);
}

struct TilePlan {
    int full;         // full tiles per (b, h)
    int nshort;       // short tiles per (b, h), after the full ones
    int full_blocks;  // full * BH: the first short-tile unit
    int units;        // (full + nshort) * BH: every unit
    // The attention case (with_case): query heads B * Hq, query heads per K/V head, query rows, keys, mask.
    int bh;
    int group;
    int sq;
    int skv;
    int causal;       // 1: bottom-right causal mask (heaviest units first, snake rounds); 0: none
    FastDiv group_div;  // / group: the K/V head of a query head
    FastDiv bh_div;     // / bh: the causal order's round of row tiles
};

// Which kernels have short tiles and warpgroups without rows: every unsplit three-warpgroup kernel
// (today the fp8 tier's, head dim 64), because the host's plan (choose_tile_plan) gives short tiles to any
// ncwg 3 configuration; a tier-specific test here let a probe's fp16 three-warpgroup kernel run the
// host's short tiles as full ones and write past O (experiments/2026-11-26-sdpa-fp16-three-warpgroups).
// In the two-warpgroup kernels a second copy of the loop for one
// warpgroup made (2,16,2048,128) 7% slower with full tiles only (experiments/2026-11-23-sdpa-tile-plan
// run 2), and the model found no plan with 64-row tiles that pays at the listed shapes; they keep full
// tiles and every warpgroup, as the split configuration and the fp16-operand build do.
template <class T>
constexpr bool kShortTiles = !T::SPLIT && T::NCWG == 3;

// The kernel's traits with the mask as a compile-time choice (kernel.cuh instantiates each configuration without
// it and, but for the ablations, with it; select_config picks by AttnShape::causal).  Without the mask every unit
// runs ceil(Skv / BN) K/V tiles, unit i of a block starting at the block's tile i * ntiles, in the order of
// every build before the attention cases: the kernels of 90347d1 but for the K/V head (bh / G) and Skv apart from
// Sq.  With it a unit's tiles are counted per unit (BlockTile::nt), the block's as a running sum, the units come
// heaviest first in snake rounds, and the tiles that reach past a warpgroup's first row mask per row; the producer
// keeps the next unit's K/V head and tile count in 8 more bytes of shared memory (OFF_NEXT).  What that bookkeeping
// cost the square non-causal case while every kernel carried it: 2-7% at 1-2 units per block
// (experiments/2026-11-28-sdpa-sm90-inference-cases).
//
// KV (decode-shaped cases, kernel.cuh select_config_tier: G * Sq <= 64 query rows per K/V head): the split
// configuration on the packed case, its keys cut into chunks across blocks (KvChunks, below).  The G query heads of
// one K/V head are one contiguous slab of G * Sq rows of Q and O, so the host runs the case as B * Hkv heads of
// G * Sq rows with one K/V head each (group 1), one block per (head, key chunk); the chunks' partial states are
// merged by the last block of each head (mainloop.cuh kv_chunk_epilogue).  ROWMASK: the bottom-right causal mask on
// packed rows: row r is query r % Sq, which sees keys j <= r % Sq + Skv - Sq (OnlineSoftmax::mask_rows); the tile
// logic is the one without the mask (with Sq <= 64 rows only the last tiles hold masked keys), the rows' running
// max starting finite as with the mask (a tile or chunk may show a row none of its keys).
template <class T, bool C, bool KV = false, bool ROWMASK_ = false>
struct CaseTraits : T {
    static_assert(!KV || (T::SPLIT && !C && T::ABL == 0 && T::BN == 128), "key chunks: the split configuration, 128-key tiles");
    static_assert(KV || !ROWMASK_, "the packed rows' mask: key chunks only");
    static constexpr bool CAUSAL = C;
    static constexpr bool KVCHUNK = KV;
    static constexpr bool ROWMASK = ROWMASK_;
    // SDPA_SM90_KV_VDEC (config.cuh): the consumers decode V (fp16 tier, cpasync); the producer's V barriers serve as
    // the V stages' "decoded" barriers (BAR_VEMPTY[s]: one arrival per warp of the decoding warpgroup).
    // (Head dim 128: two stages, two V buffers, one of each per consumer warpgroup; head dim 64's four stages would
    // need four such barriers.)
    static constexpr bool VDEC = KV && !T::FP8 && T::ASYNC && T::NS == 2 && T::NVB == 2 && SDPA_SM90_KV_VDEC != 0;
    // Its registers (config.cuh SDPA_SM90_KV_VDEC_PRODUCER_REGS, _BATCH): the consumers decode V before their next Q K^T
    // (O, P and Q live: 128), in batches of 4 chunks, at 224 beside a 56-register producer, without spills (nvcc 13.0;
    // decoding while Q K^T was in flight, S live too, spilled 8-64 bytes; a 40-register producer spilled 40-52).
    static constexpr int PRODUCER_REGS = VDEC ? SDPA_SM90_KV_VDEC_PRODUCER_REGS : T::PRODUCER_REGS;
    static constexpr int CONSUMER_REGS = VDEC ? (T::LAUNCH_REGS * 3 - PRODUCER_REGS) / 2 / 8 * 8 : T::CONSUMER_REGS;
    static constexpr int VDEC_BATCH = SDPA_SM90_KV_VDEC_BATCH;
    static constexpr int SMEM_USED = T::OFF_NEXT + (C ? 8 : 0);
    static constexpr int SMEM = SMEM_USED + 1024;  // + slack to align the base to 1024
    static_assert(SMEM <= 227 * 1024, "sm_90 shared memory per block");
    static_assert(!C || T::ABL == 0, "the ablations (diagnostics) are built without the mask only");
};

struct BlockTile {
    int m0;   // first query row
    int bh;   // b * Hq + h: the query head (Q, O)
    int kvh;  // b * Hkv + h / G: the K/V head it reads
    int nc;   // consumer warpgroups with rows (the split configuration: every one)
    int nt;   // K/V tiles the unit runs: ceil(Skv / BN), or with the causal mask those up to its last row's diagonal
    int t0;   // KVCHUNK: the chunk's first K/V tile (the unit's tiles are t0 .. t0 + nt - 1); else unset
};

// The key chunks of a KVCHUNK launch (a kernel argument of those kernels only): chunks per packed head, K/V tiles
// per chunk (the last may have fewer), the case's Sq (the packed rows' period: ROWMASK), and the workspace of the
// chunks' partial states: part_o [blocks][64][D] (O unnormalized), part_ml [blocks][64][2] (m, l) in fp32, and one
// counter per packed head, zero between launches (the last block of a head resets it).
struct KvChunks {
    int chunks;
    int chunk_tiles;
    int sq;
    float* part_o;
    float* part_ml;
    int* counters;
};

// Block b of a KVCHUNK launch: packed head b / chunks (its own K/V head: group 1), chunk b % chunks, rows 0..63.
template <class T>
__host__ __device__ __forceinline__ BlockTile kv_block_tile(int b, const TilePlan& plan, const KvChunks& kv) {
    BlockTile t;
    t.bh = b / kv.chunks;
    const int c = b - t.bh * kv.chunks;
    t.m0 = 0;
    t.kvh = t.bh;
    t.nc = T::NCWG;
    t.t0 = c * kv.chunk_tiles;
    const int all = (plan.skv + T::BN - 1) / T::BN - t.t0;
    t.nt = all < kv.chunk_tiles ? all : kv.chunk_tiles;
    return t;
}

// K/V tiles of BN keys that rows [m0, m0 + rows) need: every tile, or with the causal mask the tiles up to
// key m0 + rows - 1 + Skv - Sq (the last row's last key; >= 1 key since Sq <= Skv).
template <bool CAUSAL>
__host__ __device__ __forceinline__ int unit_kv_tiles(const TilePlan& plan, int m0, int rows, int bn) {
    const int keys = CAUSAL ? m0 + rows + plan.skv - plan.sq : plan.skv;
    return (keys + bn - 1) / bn;
}

// Unit b of the plan.  T: CaseTraits (T::CAUSAL picks the order).
template <class T>
__host__ __device__ __forceinline__ BlockTile block_tile(int b, const TilePlan& plan) {
    BlockTile t;
    int rows = T::BM;
    if constexpr (T::CAUSAL) {  // heaviest first: row tile full - 1 of every head, then full - 2, ... (full tiles only)
        const int k = fast_div(b, plan.bh_div);
        t.bh = b - k * plan.bh;
        t.m0 = (plan.full - 1 - k) * T::BM;
    } else if constexpr (!kShortTiles<T>) {  // full tiles, every warpgroup (as before the attention cases)
        t.m0 = (int)((unsigned)b % (unsigned)plan.full) * T::BM;
        t.bh = (int)((unsigned)b / (unsigned)plan.full);
        t.nc = T::NCWG;
        t.kvh = fast_div(t.bh, plan.group_div);
        t.nt = unit_kv_tiles<false>(plan, t.m0, rows, T::BN);
        return t;
    } else if (b < plan.full_blocks) {
        t.bh = b / plan.full;
        t.m0 = (b - t.bh * plan.full) * T::BM;
    } else {
        const int j = b - plan.full_blocks;
        t.bh = j / plan.nshort;
        t.m0 = plan.full * T::BM + (j - t.bh * plan.nshort) * (T::BM - 64);
        rows = T::BM - 64;
    }
    rows = rows < plan.sq - t.m0 ? rows : plan.sq - t.m0;
    t.nc = kShortTiles<T> ? (rows + 63) / 64 : T::NCWG;  // the other kernels keep every warpgroup
    t.kvh = fast_div(t.bh, plan.group_div);
    t.nt = unit_kv_tiles<T::CAUSAL>(plan, t.m0, rows, T::BN);
    return t;
}

// Unit index of the i-th unit of block `block` of `grid` persistent blocks: rounds of grid units, odd
// rounds in reverse with the causal mask (the snake above).
__host__ __device__ __forceinline__ int unit_index(int block, int grid, int i, int causal) {
    return i * grid + ((causal & i) ? grid - 1 - block : block);
}
// How many units block `block` of `grid` persistent blocks takes (unit_index below plan.units).
__host__ __device__ __forceinline__ int units_of_block(int block, int grid, const TilePlan& plan) {
    const int rounds = plan.units / grid, rem = plan.units - rounds * grid;
    const int pos = (plan.causal & rounds) ? grid - 1 - block : block;  // position in the last, partial round
    return rounds + (pos < rem ? 1 : 0);
}

// The work units of this block without the mask: blockIdx.x, blockIdx.x + gridDim.x, ... below plan.units
// (T::PERSIST), or the one of its own index.
template <class T>
__device__ __forceinline__ int block_units(const TilePlan& plan) {
    if constexpr (!T::PERSIST) return 1;
    else return (plan.units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
}
// Whether this block has an i-th unit (T::PERSIST: below plan.units in its sequence; else the one of its own
// index), asked where needed rather than counted once: neither the producer nor the consumers have a register to
// spare.  Without the mask the consumers' test of every build before (blocks start at units below plan.units).
template <class T>
__device__ __forceinline__ bool has_unit(int i, const TilePlan& plan) {
    if constexpr (T::CAUSAL) {
        if constexpr (!T::PERSIST) return i == 0;
        else return unit_index((int)blockIdx.x, (int)gridDim.x, i, 1) < plan.units;
    } else {
        return i < (T::PERSIST ? plan.units : 1) && (int)blockIdx.x + i * (int)gridDim.x < plan.units;
    }
}
template <class T>
__device__ __forceinline__ BlockTile unit_tile(int i, const TilePlan& plan) {
    if constexpr (T::CAUSAL) return block_tile<T>(unit_index((int)blockIdx.x, (int)gridDim.x, i, 1), plan);
    else return block_tile<T>((int)blockIdx.x + i * (int)gridDim.x, plan);
}

// The i-th unit of this block: KVCHUNK kernels (one unit per block) by their chunk, the others by the plan.
template <class T>
__device__ __forceinline__ BlockTile unit_tile_kv(int i, const TilePlan& plan, const KvChunks& kv) {
    if constexpr (T::KVCHUNK) return kv_block_tile<T>((int)blockIdx.x, plan, kv);
    else return unit_tile<T>(i, plan);
}

// Time of a three-warpgroup block with nc consumer warpgroups running, relative to a full one
// (kBlockCost[nc]).  The consumers are latency-bound, so a block with fewer warpgroups is not
// proportionally shorter.  From plan 2 against plan 0 on 1x H100 (cold p50 per wave,
// experiments/2026-11-23-sdpa-tile-plan run 1): two warpgroups 0.82 at (2,16,2048,64) and 0.83 at
// (4,32,4096,64); one not measured in this kernel, taken as 0.82 x 0.71 (one of two warpgroups in the
// two-warpgroup kernel: 0.70 at (2,16,2048,128), 0.72 at (1,16,8192,128)).
constexpr double kBlockCost[4] = {0, 0.58, 0.82, 1};

// Makespan of a causal grid (select_config: two or three consumer warpgroups for the fp8 tier's causal cases at head
// dim 64), in the time of one K/V tile of a full two-warpgroup block: the units of `plan` (full tiles), on
// min(units, num_sms) persistent blocks in the kernel's own order (unit_index: heaviest first, snake rounds) with the
// kernel's own K/V tiles (block_tile: up to the unit's last row's diagonal); a unit costs its tiles times
// kCausalTileCost[T::NCWG], a partial unit the share of its warpgroups (kBlockCost[nc] / kBlockCost[T::NCWG]).
// T: CaseTraits with the mask.  kCausalTileCost[3]: a full three-warpgroup tile took 1.27x a two-warpgroup one
// without the mask at (4,32,4096,64) (893.9 us for 128 x 21.58 x 32 tiles against 1046.2 for 128 x 32 x 32, cold,
// 1x H200, experiments/2026-11-29-sdpa-fp8-causal-d64-warpgroups call 2).  With no other parameter the model orders
// the two kernels as measured at all 11 causal cases of that experiment (calls 2-3: two 6-17% faster at S 512 and
// 1024, three 4-21% faster at 768, 1280, 1536, 2048, 3072, 4096).  (prefers_ncwg3_d128 below divides its head-dim-128
// kernels' kCausalTileCost back out and weighs their tiles itself.)
constexpr double kCausalTileCost[4] = {0, 0, 1.0, 1.27};
template <class T>
inline double causal_makespan(const TilePlan& plan, int num_sms) {
    static_assert(T::CAUSAL, "the causal order");
    const int grid = std::max(1, std::min(plan.units, num_sms));
    double worst = 0.0;
    for (int blk = 0; blk < grid; ++blk) {
        double busy = 0.0;
        for (int i = 0, u; (u = unit_index(blk, grid, i, 1)) < plan.units; ++i) {
            const BlockTile t = block_tile<T>(u, plan);
            const int rows = std::min(T::BM, plan.sq - t.m0);
            busy += (double)t.nt * kCausalTileCost[T::NCWG] * kBlockCost[(rows + 63) / 64] / kBlockCost[T::NCWG];
        }
        worst = std::max(worst, busy);
    }
    return worst;
}

// Makespan of `plan` (units of bm rows, bm - 64 in short tiles) in units of a full block.  persistent:
// min(units, num_sms) blocks, unit j on block j % blocks; else one block per unit, blocks taken in
// index order by the first free SM (one block per SM at a time: the kernel fills an SM's registers).
inline double simulate_tile_plan(const TilePlan& plan, int BH, int S, int bm, int num_sms, bool persistent) {
    std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
    const int nblocks = std::max(1, std::min(plan.units, num_sms));
    std::vector<double> busy(nblocks, 0.0);
    if (!persistent)
        for (int i = 0; i < num_sms; ++i) free_at.push(0.0);
    double end = 0.0;
    int j = 0;
    auto run = [&](int rows) {
        const int nc = std::max(1, std::min(3, (rows + 63) / 64));
        double t;
        if (persistent) {
            t = busy[j++ % nblocks] += kBlockCost[nc];
        } else {
            t = free_at.top() + kBlockCost[nc];
            free_at.pop();
            free_at.push(t);
        }
        end = std::max(end, t);
    };
    for (int h = 0; h < BH; ++h)
        for (int i = 0; i < plan.full; ++i) run(std::min(bm, S - i * bm));
    for (int h = 0; h < BH; ++h)
        for (int i = 0; i < plan.nshort; ++i) run(std::min(bm - 64, S - plan.full * bm - i * (bm - 64)));
    return end;
}

inline TilePlan make_tile_plan(int full, int nshort, int BH) {
    return TilePlan{full, nshort, full * BH, (full + nshort) * BH, BH, 1, 0, 0, 0, make_fast_div(1), make_fast_div(BH)};
}
// The plan with the attention case: B * Hq query heads (plan.units counts them), G = Hq / Hkv, Sq, Skv, mask.
inline TilePlan with_case(TilePlan p, const AttnShape& a) {
    p.bh = (int)(a.B * a.Hq);
    p.group = (int)a.group();
    p.sq = (int)a.Sq;
    p.skv = (int)a.Skv;
    p.causal = a.causal ? 1 : 0;
    p.group_div = make_fast_div((uint32_t)p.group);
    p.bh_div = make_fast_div((uint32_t)p.bh);
    return p;
}

// The plan for an unsplit grid of BH heads x S rows, blocks of bm rows and ncwg consumer warpgroups, on
// num_sms SMs.  policy 1: of every split of S into `full` tiles of bm rows and the rest in tiles of
// bm - 64, the one of least simulated makespan (ties: the fewest blocks); grids of more than
// kMaxPlanWaves waves of full tiles (whose last wave costs little) and the other kernels keep full
// tiles, and so do causal grids (units of many weights, heaviest first: the model's units weigh one).
constexpr int kMaxPlanWaves = 24;
inline TilePlan choose_tile_plan(int BH, int S, int bm, int ncwg, int num_sms, bool persistent,
                                 int policy = SDPA_SM90_TILE_PLAN, bool causal = false) {
    const int amax = (S + bm - 1) / bm;
    const int bs = bm - 64;
    auto with_full = [&](int a) {
        const int rest = S - a * bm;
        return make_tile_plan(a, rest > 0 ? (rest + bs - 1) / bs : 0, BH);
    };
    if (ncwg != 3 || policy == 0 || num_sms < 1 || causal) return with_full(amax);
    if (policy == 2) return with_full(0);
    if ((long long)amax * BH > (long long)kMaxPlanWaves * num_sms) return with_full(amax);
    TilePlan best = with_full(amax);
    double best_t = simulate_tile_plan(best, BH, S, bm, num_sms, persistent);
    for (int a = amax - 1; a >= 0; --a) {
        const TilePlan p = with_full(a);
        if ((long long)(p.full + p.nshort) * BH > 2LL * kMaxPlanWaves * num_sms) break;
        const double t = simulate_tile_plan(p, BH, S, bm, num_sms, persistent);
        if (t < best_t - 1e-9) {
            best = p;
            best_t = t;
        }
    }
    return best;
}

// Head dim 128, fp8 tier (select_config, SDPA_SM90_NCWG3_D128 = 1): the three-warpgroup kernel (192 rows, 128-key
// tiles) in place of the two-warpgroup 256-key kernel where its makespan is the shorter, both in the time of one
// 128-row unit of the 256-key kernel.  kNcwg3D128Unit: a full 192-row unit of it takes 1.435x such a unit over the same
// keys, a short one (two warpgroups) kBlockCost[2] of that; 1.431-1.448 at (1,16,8192), (1,16,16384), (2,32,4096),
// (4,16,4096) and (2,16,2048,128) (cold p50 over each launch's simulated makespan, 1x H200,
// experiments/2026-11-29-sdpa-fp8-d128-three-warpgroups call 1), so 4.3% less time per row where both fill their last
// wave alike.  Without the mask: the persistent blocks' makespans (simulate_tile_plan; the three-warpgroup plan by
// choose_tile_plan).  With it: causal_makespan's, a 192-row, 128-key tile costing kNcwg3D128Unit / 2 of a 128-row,
// 256-key one.
constexpr double kNcwg3D128Unit = 1.435;
// C3, C2: the three-warpgroup and the 256-key kernels' traits with the mask (CaseTraits), whose own schedules
// causal_makespan walks.
template <class C3, class C2>
inline bool prefers_ncwg3_d128(const AttnShape& a, int num_sms, bool persistent, int plan_policy) {
    static_assert(C3::NCWG == 3 && C3::BN == 128 && C2::NCWG == 2 && C2::BN == 256, "the two head-dim-128 kernels");
    const int BH = (int)(a.B * a.Hq), Sq = (int)a.Sq;
    if (num_sms < 1) return false;
    if (a.causal)
        return causal_makespan<C3>(with_case(make_tile_plan((Sq + C3::BM - 1) / C3::BM, 0, BH), a), num_sms) /
                   kCausalTileCost[3] * (kNcwg3D128Unit / 2) <
               causal_makespan<C2>(with_case(make_tile_plan((Sq + C2::BM - 1) / C2::BM, 0, BH), a), num_sms) /
                   kCausalTileCost[2];
    const TilePlan p3 = choose_tile_plan(BH, Sq, C3::BM, 3, num_sms, persistent, plan_policy, false);
    const TilePlan p2 = choose_tile_plan(BH, Sq, C2::BM, 2, num_sms, persistent, plan_policy, false);
    return simulate_tile_plan(p3, BH, Sq, C3::BM, num_sms, persistent) * kNcwg3D128Unit <
           simulate_tile_plan(p2, BH, Sq, C2::BM, num_sms, persistent) / kBlockCost[2];
}

}  // namespace sdpa_sm90
