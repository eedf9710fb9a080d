// Compile-time shape of the Hopper SDPA kernel: tile sizes per head dim, warp roles, and the
// shared-memory layout (every operand tile 1024-byte aligned for the 128-byte swizzle).
#pragma once

#include <cstdint>

#include "config.cuh"  // every SDPA_SM90_* switch and USE_CP_ASYNC

namespace sdpa_sm90 {

constexpr bool kAsync = (USE_CP_ASYNC != 0);

// Diagnostic modes (outputs are NOT results): no_compute runs the load/decode path for every
// tile but no softmax or P V; no_loads loads and decodes the first K/V tile only and runs the
// math for every tile on it.  Same values as the mma.sync kernel's.
enum Ablate : int { kAblNone = 0, kAblNoCompute = 1, kAblNoLoads = 2 };

template <int D_, bool ASYNC_, int ABL_, bool SPLIT_>
struct Traits {
    static constexpr bool FP8 = false;  // fp16 operands (wgmma_sm90)
    static constexpr int D = D_;
    static constexpr bool ASYNC = ASYNC_;   // TMA pipeline (cpasync) or synchronous loads (baseline)
    static constexpr int ABL = ABL_;
    // SPLIT (for grids of less than half a wave): both consumer warpgroups own the same 64 query
    // rows and take alternate K/V tiles (even / odd); their softmax states are merged at the end.
    static constexpr bool SPLIT = SPLIT_;
    static constexpr bool PINGPONG = !SPLIT && SDPA_SM90_PINGPONG != 0;
    static constexpr int BN = D == 64 ? SDPA_SM90_BN64 : 128;  // keys per K/V tile
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
    static_assert(CHUNKS % 128 == 0, "decode work divides over the producer warpgroup");
    static_assert(BN % 64 == 0 && BN <= 256, "a multiple of 64 keys (4 partial softmax reductions), one TMA box");
};

}  // namespace sdpa_sm90
