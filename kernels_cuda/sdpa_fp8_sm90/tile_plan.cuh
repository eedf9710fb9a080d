// Which query rows each work unit of the Hopper SDPA kernel takes (the tile plan), and how the host
// chooses the plan.  A unit is one block's rows; a persistent block (SDPA_SM90_PERSISTENT,
// config.cuh) takes units blockIdx.x, blockIdx.x + gridDim.x, ... in turn, any other block the
// unit of its own index.
//
// A block of the three-consumer-warpgroup kernel (FP8 build, head dim 64, unsplit) has BM = 192 query
// rows (a full tile) or 128 (a short tile: one consumer warpgroup fewer).  Per (b, h): `full` full
// tiles from row 0, then `nshort` short tiles; units [0, full_blocks = full * BH) are the full tiles
// of every head, the short tiles come after them (blocks start, and persistent blocks take, units in
// index order, so short tiles fill the last wave).  A warpgroup whose 64 rows all lie past the tile's
// end or past S runs no loop in that unit (it only takes and hands back the unit's K/V tiles) and the
// others take turns among themselves, so such a unit is shorter than a full one.
// Every other kernel takes full tiles only (nshort = 0) and keeps every warpgroup (kShortTiles).
//
// SDPA_SM90_TILE_PLAN (the three-warpgroup kernel):
//   0 = full tiles only (ceil(S / BM) per head: the grid of every build before the plan);
//   1 (default) = the plan of least simulated makespan (choose_tile_plan below);
//   2 = short tiles only (diagnostic: the cost of a short block, for kBlockCost).
#pragma once

#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "config.cuh"  // SDPA_SM90_TILE_PLAN

namespace sdpa_sm90 {

struct TilePlan {
    int full;         // full tiles per (b, h)
    int nshort;       // short tiles per (b, h), after the full ones
    int full_blocks;  // full * BH: the first short-tile unit
    int units;        // (full + nshort) * BH: every unit
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

struct BlockTile {
    int m0;  // first query row
    int bh;  // b * H + h
    int nc;  // consumer warpgroups with rows (the split configuration: every one)
};

template <class T>
__host__ __device__ __forceinline__ BlockTile block_tile(int b, const TilePlan& plan, int S) {
    BlockTile t;
    if constexpr (!kShortTiles<T>) {  // full tiles, every warpgroup
        t.m0 = (int)((unsigned)b % (unsigned)plan.full) * T::BM;
        t.bh = (int)((unsigned)b / (unsigned)plan.full);
        t.nc = T::NCWG;
        return t;
    }
    int rows;
    if (b < plan.full_blocks) {
        t.bh = b / plan.full;
        t.m0 = (b - t.bh * plan.full) * T::BM;
        rows = T::BM;
    } else {
        const int j = b - plan.full_blocks;
        t.bh = j / plan.nshort;
        t.m0 = plan.full * T::BM + (j - t.bh * plan.nshort) * (T::BM - 64);
        rows = T::BM - 64;
    }
    rows = rows < S - t.m0 ? rows : S - t.m0;
    t.nc = (rows + 63) / 64;
    return t;
}

// The work units of this block: blockIdx.x, blockIdx.x + gridDim.x, ... below plan.units (T::PERSIST),
// or the one of its own index.
template <class T>
__device__ __forceinline__ int block_units(const TilePlan& plan) {
    if constexpr (!T::PERSIST) return 1;
    else return (plan.units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
}
template <class T>
__device__ __forceinline__ BlockTile unit_tile(int i, const TilePlan& plan, int S) {
    return block_tile<T>((int)blockIdx.x + i * (int)gridDim.x, plan, S);
}

// Time of a three-warpgroup block with nc consumer warpgroups running, relative to a full one
// (kBlockCost[nc]).  The consumers are latency-bound, so a block with fewer warpgroups is not
// proportionally shorter.  From plan 2 against plan 0 on 1x H100 (cold p50 per wave,
// experiments/2026-11-23-sdpa-tile-plan run 1): two warpgroups 0.82 at (2,16,2048,64) and 0.83 at
// (4,32,4096,64); one not measured in this kernel, taken as 0.82 x 0.71 (one of two warpgroups in the
// two-warpgroup kernel: 0.70 at (2,16,2048,128), 0.72 at (1,16,8192,128)).
constexpr double kBlockCost[4] = {0, 0.58, 0.82, 1};

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
    return TilePlan{full, nshort, full * BH, (full + nshort) * BH};
}

// The plan for an unsplit grid of BH heads x S rows, blocks of bm rows and ncwg consumer warpgroups, on
// num_sms SMs.  policy 1: of every split of S into `full` tiles of bm rows and the rest in tiles of
// bm - 64, the one of least simulated makespan (ties: the fewest blocks); grids of more than
// kMaxPlanWaves waves of full tiles (whose last wave costs little) and the other kernels keep full
// tiles.
constexpr int kMaxPlanWaves = 24;
inline TilePlan choose_tile_plan(int BH, int S, int bm, int ncwg, int num_sms, bool persistent,
                                 int policy = SDPA_SM90_TILE_PLAN) {
    const int amax = (S + bm - 1) / bm;
    const int bs = bm - 64;
    auto with_full = [&](int a) {
        const int rest = S - a * bm;
        return make_tile_plan(a, rest > 0 ? (rest + bs - 1) / bs : 0, BH);
    };
    if (ncwg != 3 || policy == 0 || num_sms < 1) return with_full(amax);
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

}  // namespace sdpa_sm90
