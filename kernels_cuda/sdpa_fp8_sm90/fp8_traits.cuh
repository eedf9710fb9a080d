// Compile-time shape of the FP8-operand Hopper SDPA kernel (wgmma_fp8_sm90): Q K^T and P V on
// E4M3 wgmma (m64nNk32), K straight from the copy engine, V transposed by the producer.
#pragma once

#include <cstdint>

#include "ptx.cuh"
#include "traits.cuh"  // USE_CP_ASYNC, Ablate, SDPA_SM90_PINGPONG

namespace sdpa_sm90 {

// Scale of the probabilities before they are rounded to E4M3: P in [0, 1] becomes 2^8 P in
// [0, 256] (within E4M3's 448), so probabilities down to 2^-14 stay normal numbers.  The row sums
// l are taken in fp32 over the same scaled values, so the factor cancels in O / l.
constexpr float kPExp2Bias = 8.f;
// Largest finite E4M3 value: each Q row is scaled so that its largest |q| lands there.
constexpr float kE4M3Max = 448.f;

// Consumer warpgroups in the unsplit configuration at head dim 64: both kernels are compiled in
// (two: 128 query rows per block, 384 threads, setmaxnreg 64 / 216; three: 192 rows, 512 threads,
// setmaxnreg 56 / 152) and select_config (kernel.cuh) picks one at run time by this policy:
//   0 = always two (as at head dim 128);
//   1 (default) = three when the three-warpgroup unsplit grid fills at least one wave (blocks >=
//       SMs), else two, with the split rule taken on the two-warpgroup grid;
//   2 = always three in the unsplit configuration (the split rule on the three-warpgroup grid).
// On 1x H100 (2026-11-23, experiments/2026-11-23-sdpa-fp8-d64 run 2, cold p50, one call) rule /
// two / three: (3,5,777,64) 15.84 / 15.79 / 18.13 us (75 blocks of 192 rows on 132 SMs: the rule
// takes two), (8,8,1024,64) 50.06 / 53.60 / 50.08, (2,16,2048,64) 82.24 / 88.82 / 81.50,
// (4,32,4096,64) 1005.9 / 1217.7 / 1005.3.
#ifndef SDPA_SM90_NCWG3_D64
#define SDPA_SM90_NCWG3_D64 1
#endif

// SDPA_SM90_VT_FAST (default 1): head dim 128, the cpasync producer's V transpose with its
// addressing hoisted out of the tile loop (fp8_load.cuh transpose_v_tile_fast): a warp's 32 lanes
// share one 16-key group, so no pair swap is needed for the loads (keys at compile-time offsets from
// one base), and the four store offsets and byte selectors of a thread are the same for every tile.
// Same V^T bytes as transpose_v_tile (= 0).  On 1x H100 (2026-11-23,
// experiments/2026-11-23-sdpa-fp8-d128, cold p50, one call) 0 / 1: (2,16,2048,128) 112.43 / 109.18 us,
// (1,16,8192,128) 753.4 / 717.3.
#ifndef SDPA_SM90_VT_FAST
#define SDPA_SM90_VT_FAST 1
#endif

// SDPA_SM90_ROWSUM_MMA = 1 (default; 0 = 64 FADD per thread and tile): the softmax row sums l from the tensor core
// instead of 64 FADD per consumer thread and tile: each V^T buffer has 8 more rows (dims D .. D+7:
// 1.0 in row D, 0 below, written once per block by the producer) and each P V is followed by
// BN/32 wgmma m64n8k32 of P with those rows into a fresh accumulator (one tile's sums, added to l in
// fp32 after the wait).  One tile at a time because the tensor core's FP8 accumulation keeps only
// about 14 bits: summing all S keys in O's accumulator (P [V | 1] as m64n(D+8)) gave rel_l2 0.15 at
// S 8192, and zeroing those columns after each tile made the loop 3-10% slower
// (experiments/2026-11-23-sdpa-fp8-profile, A/B 3 and 4).  This form, A/B 5 (1x H100, cold p50,
// against 0): 1.9-3.8% at head dim 64, 4.4% / 5.7% at (2,16,2048,128) / (1,16,8192,128), rel_l2
// unchanged (3.58e-2 / 3.69e-2).
#ifndef SDPA_SM90_ROWSUM_MMA
#define SDPA_SM90_ROWSUM_MMA 1
#endif

// SDPA_SM90_BN_D128 = 0 (default), 128 or 192: keys per K/V tile at head dim 128.  Both kernels are in
// every FP8 build; 0 = select_config (kernel.cuh) picks one per S at run time (bn_d128 below), 128 or
// 192 = always that one.  192 (FlashAttention-3 takes 224 for FP8 at head dim 128) spreads each
// tile's fixed costs (row-max shuffles, the O rescale, the turn and the waits) over 1.5x the keys;
// S takes 96 accumulator registers instead of 64 (Q K^T then reads Q from shared memory: Q_SMEM),
// and the K/V ring is two stages deep instead of three (shared memory).  V^T is then two panels:
// keys 0..127 with the 128-byte swizzle, keys 128..191 with the 64-byte swizzle.  But S is padded to
// a multiple of the tile: 2048 keys are 11 tiles of 192 (2112 keys), 16 of 128.
#ifndef SDPA_SM90_BN_D128
#define SDPA_SM90_BN_D128 0
#endif
static_assert(SDPA_SM90_BN_D128 == 0 || SDPA_SM90_BN_D128 == 128 || SDPA_SM90_BN_D128 == 192,
              "SDPA_SM90_BN_D128: 0 (by S), 128 or 192");

// The run-time rule (policy 0): 192-key tiles when S padded to them is less than 1.02x S padded to
// 128-key tiles, i.e. a key in a 192-key tile costs 0.98 of one in a 128-key tile.  1x H100
// (experiments/2026-11-23-sdpa-d128-pipes, run 2, one call, no polynomial exponentials; cold / hot
// p50) 128 / 192: (1,16,8192,128) 613.9 / 605.5 and 633.0 / 591.4 us (per padded key: 0.98 / 0.93),
// (2,16,2048,128) 92.1 / 94.5 and 88.3 / 89.9 (192 pads 3% more keys).
__host__ __device__ constexpr int bn_d128(int S, int policy) {
    return policy != 0 ? policy
                       : ((long long)(S + 191) / 192 * 192) * 49 < ((long long)(S + 127) / 128 * 128) * 50 ? 192 : 128;
}

// SDPA_SM90_PERSISTENT = 1 (default) or 0: the unsplit kernels run one block per SM (at most), each
// taking the work units (the tiles of tile_plan.cuh) blockIdx.x, blockIdx.x + gridDim.x, ... in
// turn.  The K/V ring runs on across units, so the producer brings the next unit's first tiles in
// while the consumers finish the current one; Q is two buffers deep, the next unit's loaded during
// the current one (Q empty: the epilogue, which stages O in the Q rows, is done with a buffer).  The
// ping-pong turn passes straight from a unit's last P V to the next unit's first Q K^T.  0 = one
// unit per block (the grid of every build before); the split configuration and the ablations are
// always one unit per block.
#ifndef SDPA_SM90_PERSISTENT
#define SDPA_SM90_PERSISTENT 1
#endif

// NCWG_: consumer warpgroups, 64 query rows each; 3 only unsplit at head dim 64.  BN_: keys per K/V
// tile, 192 only at head dim 128.  The kernels are instantiated on the two thin names below.
template <int D_, bool ASYNC_, int ABL_, bool SPLIT_, int NCWG_, int BN_>
struct Fp8TraitsN {
    static_assert(NCWG_ == 2 || (NCWG_ == 3 && D_ == 64 && !SPLIT_), "three consumer warpgroups: unsplit, head dim 64");
    static_assert(BN_ == 128 || (BN_ == 192 && D_ == 128 && NCWG_ == 2), "keys per tile: 128, or 192 at head dim 128");
    static constexpr bool FP8 = true;   // E4M3 operands (wgmma_fp8_sm90)
    static constexpr int D = D_;
    static constexpr bool ASYNC = ASYNC_;
    static constexpr int ABL = ABL_;
    static constexpr bool SPLIT = SPLIT_;
    static constexpr bool PINGPONG = !SPLIT && SDPA_SM90_PINGPONG != 0;
    static constexpr int BN = BN_;          // keys per K/V tile (V^T panels below)
    static constexpr int NCWG = NCWG_;      // consumer warpgroups, 64 rows each
    static constexpr int BM = SPLIT ? 64 : 64 * NCWG;
    static constexpr int THREADS = 128 * (1 + NCWG);
    static constexpr int PANELS = D / 64;   // Q (fp16) 64-column panels
    // Several work units per block (SDPA_SM90_PERSISTENT): unsplit, no ablation.
    static constexpr bool PERSIST = SDPA_SM90_PERSISTENT != 0 && !SPLIT && ABL_ == kAblNone;
    static constexpr int NQ = PERSIST ? 2 : 1;  // Q buffers
    // setmaxnreg moves registers within what the block got at launch: 65536 / THREADS per thread,
    // rounded down to 8 (168 with 384 threads, 128 with 512).  BN 192: the cpasync producer keeps 72
    // (its transpose of three items), the consumers 216; the baseline producer (K in batches of four
    // chunks, V transposed from global memory) fits in 56, and its consumers take 224: with 216 the
    // persistent loop's unit counter spilled (they also load Q).
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
    static constexpr int PRODUCER_REGS = NCWG == 3 || (BN == 192 && !ASYNC) ? 56 : BN == 192 ? 72 : 64;
    static constexpr int CONSUMER_REGS = NCWG == 3 ? 152 : BN == 192 && !ASYNC ? 224 : 216;
    static_assert(PRODUCER_REGS + NCWG * CONSUMER_REGS <= LAUNCH_REGS * (1 + NCWG), "register budget");

    // K/V stages (E4M3 as in global memory; cpasync: the copy engine fills K and V, baseline: the
    // producer fills K); K is read by the consumers' wgmma in place, V by the producer's transpose.
    static constexpr int NS = D == 64 ? 4 : BN == 128 ? 3 : 2;
    // BN 192: Q K^T takes Q's E4M3 codes from shared memory (each consumer warpgroup writes its 64
    // rows over its own 8 KiB of the fp16 Q tile once it has read them), not from 16 registers.
    static constexpr bool Q_SMEM = BN == 192;
    static_assert(!Q_SMEM || (D == 128 && NCWG == 2), "Q in shared memory as E4M3: head dim 128, two consumer warpgroups");
    static constexpr int NVT = 2;             // transposed V buffers [D][BN]

    static constexpr int Q_BYTES = BM * D * 2;          // fp16 [PANELS][BM][64], 128-byte swizzle
    static constexpr int K_TILE = BN * D;               // [BN][D], 64-byte (D 64) / 128-byte (D 128) swizzle
    static constexpr int V_TILE = BN * D;               // [BN][D], unswizzled (cpasync only)
    static constexpr bool ROWSUM = SDPA_SM90_ROWSUM_MMA != 0;
    // V^T [D (+ 8)][BN], keys permuted: panel 0 = keys 0..127 in rows of 128 bytes (128-byte swizzle);
    // BN 192: panel 1 = keys 128..191 in rows of 64 bytes (64-byte swizzle), after panel 0.
    static constexpr int VT_ROWS = D + (ROWSUM ? 8 : 0);
    static constexpr int VT_P1_KEYS = BN - 128;        // 0 or 64
    static constexpr int VT_P1_OFF = VT_ROWS * 128;    // panel 1's offset in a buffer
    static constexpr int VT_BYTES = (VT_ROWS * BN + 1023) / 1024 * 1024;  // a buffer, padded to the 1024-byte atom
    static constexpr uint32_t K_SWIZZLE = D == 64 ? kSwizzle64B : kSwizzle128B;
    static constexpr uint32_t K_SBO = 8 * D;            // bytes per 8 key rows

    static constexpr int OFF_Q = 0;                     // [NQ] Q buffers (unit i: buffer i % NQ)
    static constexpr int OFF_K = OFF_Q + NQ * Q_BYTES;
    static constexpr int OFF_V = OFF_K + NS * K_TILE;
    // Raw V stages: cpasync (the copy engine's), and the baseline with three consumer warpgroups,
    // whose producer (56 registers) stages V through shared memory rather than transposing it
    // straight from global memory (16 words in flight per item: spills at 56).
    static constexpr bool V_STAGED = ASYNC || NCWG == 3;
    static constexpr int OFF_VT = OFF_V + (V_STAGED ? NS * V_TILE : 0);
    static constexpr int OFF_SCRATCH = OFF_VT + NVT * VT_BYTES;
    static constexpr int OFF_BAR = OFF_SCRATCH + 128 * NCWG * 4;
    // The split configuration's merge goes through the K stages (free once both warpgroups are done).
    static constexpr int OFF_MERGE = OFF_K;
    static_assert((D / 2 + 4) * 128 * 4 <= NS * K_TILE, "merge space");

    static constexpr int BAR_Q = 0;                     // [NQ] Q landed (copy engine; cpasync only)
    static constexpr int BAR_QEMPTY = BAR_Q + NQ;       // [NQ] consumers done with a Q buffer (cpasync, persistent)
    static constexpr int BAR_KFULL = BAR_QEMPTY + NQ;   // [NS] K landed (copy engine / 128 producer threads)
    static constexpr int BAR_VRAW = BAR_KFULL + NS;     // [NS] V landed (copy engine; cpasync only)
    static constexpr int BAR_KEMPTY = BAR_VRAW + NS;    // [NS] consumers done with K (one arrival per consumer warp)
    static constexpr int BAR_VFULL = BAR_KEMPTY + NS;   // [NVT] V^T written (128 producer threads)
    static constexpr int BAR_VEMPTY = BAR_VFULL + NVT;  // [NVT] consumers done with V^T
    static constexpr int NBARS = BAR_VEMPTY + NVT;
    static constexpr int SMEM_USED = OFF_BAR + NBARS * 8;
    static constexpr int SMEM = SMEM_USED + 1024;
    static constexpr int CONSUMER_WARPS = SPLIT ? 4 : 4 * NCWG;
    static_assert(!SPLIT || NVT == NCWG, "split: one V^T buffer per consumer warpgroup");

    static_assert(D == 64 || D == 128, "head dim");
    static_assert(OFF_K % 1024 == 0 && K_TILE % 1024 == 0 && OFF_VT % 1024 == 0 && VT_BYTES % 1024 == 0,
                  "swizzle atoms");
    static_assert(VT_P1_KEYS == 0 || (VT_P1_KEYS == 64 && VT_P1_OFF % 512 == 0 && (VT_P1_OFF + D * 64) % 512 == 0),
                  "V^T panel 1: 64 keys, 512-byte atoms");
    static_assert(BN % 32 == 0 && BN <= 256, "k-steps of 32 keys, one TMA box");
    static_assert(SMEM <= 227 * 1024, "sm_90 shared memory per block");
    // V transpose: items of 16 keys x 4 dims, (BN / 16) * (D / 4) per tile over 128 threads.
    static constexpr int VT_ITEMS = (BN / 16) * (D / 4) / 128;
    static_assert((BN / 16) * (D / 4) % 128 == 0, "transpose work divides over the producer warpgroup");
    static constexpr int K_CHUNKS_PER_THREAD = K_TILE / 16 / 128;
};

// Two consumer warpgroups (every head dim, unsplit and split; 128- or 192-key tiles at head dim 128).
template <int D_, bool ASYNC_, int ABL_, bool SPLIT_, int BN_ = 128>
struct Fp8Traits : Fp8TraitsN<D_, ASYNC_, ABL_, SPLIT_, 2, BN_> {};
// Three consumer warpgroups (head dim 64, unsplit).
template <int D_, bool ASYNC_, int ABL_>
struct Fp8Traits3 : Fp8TraitsN<D_, ASYNC_, ABL_, false, 3, 128> {};

}  // namespace sdpa_sm90
