// Compile-time shape of the fp16 tier's Hopper SDPA kernel (wgmma_sm90): tile sizes per head dim, warp roles,
// register split and the shared-memory layout (every operand tile 1024-byte aligned for the 128-byte
// swizzle); and what both tiers share (kAsync, the ablation modes).  The fp8 tier's are in fp8_traits.cuh;
// both run the same producer (producer.cuh) and consumer main loop (mainloop.cuh), which read these names.
#pragma once

#include <cstdint>

#include "config.cuh"  // every SDPA_SM90_* switch and USE_CP_ASYNC
#include "ptx.cuh"     // kSwizzle128B

namespace sdpa_sm90 {

constexpr bool kAsync = (USE_CP_ASYNC != 0);

// Diagnostic modes (outputs are NOT results): no_compute runs the load/decode path for every
// tile but no softmax or P V; no_loads loads and decodes the first K/V tile only and runs the
// math for every tile on it.  Same values as the mma.sync kernel's.
enum Ablate : int { kAblNone = 0, kAblNoCompute = 1, kAblNoLoads = 2 };

// The fp16 tier on the shared skeleton (2026-11-26): fp16 operands, K and V decoded from E4M3 by the
// producer into fp16 tiles in shared memory, fp16 wgmma (k16) with fp32 accumulators; persistent blocks,
// the next unit's L2 prefetch and the split configuration as in the fp8 tier; two consumer warpgroups.
//
// Tile sizes, from registers and shared memory (per consumer thread: the m64nN f32 accumulator of a
// warpgroup is N/2 registers; the fp16 A fragment of P is BN/16 x 4 registers; K is read from shared
// memory by the tensor core; Q's A fragments are D/16 x 4 registers (Q_REGS, since 2026-11-26)):
//   head dim 128: BN 128: S 64 + O 64 + P 32 + Q 32 (Q_REGS, since 2026-11-26) = 192 live across the loop,
//     within the 224 a consumer gets beside a 56-register producer (56 + 2 x 224 <= 3 x 168, the registers
//     384 threads get at launch); with Q from shared memory 160 within 216 beside 64.
//     BN 192 would be S 96 + O 64 + P 48 = 208 before addresses and the softmax state: no.  Shared
//     memory: decoded K and V two buffers deep (4 x 32 KiB) + the copy engine's uint8 stages two deep
//     (2 x 32 KiB) = 192 KiB, so one Q buffer (32 KiB; 227 KiB per block): the next unit's Q is loaded
//     once the consumers' epilogue released the buffer (its L2 prefetch earlier hides most of the wait).
//   head dim 64, two consumer warpgroups: BN 128 (192 was measured 1-10% slower at every listed shape
//     but (4,32,4096,64) on the fp16 tier's kernel before 2026-11-26: experiments/2026-11-23-sdpa-hopper run 3): S 64 + O 32 +
//     P 32 (+ Q 16) = 144 of 216; shared memory 2 Q (2 x 16 KiB) + decoded K/V three deep (6 x 16 KiB; two
//     deep until 2026-11-26, and in the baseline) + 4 uint8 stages (4 x 16 KiB) = 192 KiB.
//   head dim 64, three consumer warpgroups (unsplit, 192 rows, 512 threads: 128 registers each at launch,
//     56 + 3 x 152 or 32 + 3 x 160 after setmaxnreg) does not fit: S 64 + O 32 + P 32 = 128 (P is 32 fp16
//     registers where the fp8 tier's is 16) and the loop's addresses and state leave ptxas short at 152
//     (48 bytes of spills and its wgmma serialized, C7512); at 160 the consumers fit but the 32-register
//     producer (the decode and the persistent loop's bookkeeping) spilled 16-120 bytes whatever the decode's
//     batch (nvcc 13.0, 2026-11-26).  Shared memory would have fit (2 Q of 24 KiB + 64 + 64 KiB = 176 KiB).
//     So the fp16 tier has no three-warpgroup kernel (KernelTraits maps the request to two).
// The baseline (USE_CP_ASYNC=0) has no uint8 stages: its producer decodes straight from global memory.
template <int D_, bool ASYNC_, int ABL_, bool SPLIT_>
struct Fp16Traits {
    static constexpr bool FP8 = false;     // fp16 operands (wgmma_sm90)
    static constexpr bool Q2 = false;      // (the fp8 tier's Q as two E4M3 terms: fp8_traits.cuh)
    static constexpr int D = D_;
    static constexpr bool ASYNC = ASYNC_;  // TMA pipeline (cpasync) or synchronous loads (baseline)
    static constexpr int ABL = ABL_;
    // SPLIT (for grids of less than half a wave): both consumer warpgroups own the same 64 query
    // rows and take alternate K/V tiles (even / odd); their softmax states are merged at the end.
    static constexpr bool SPLIT = SPLIT_;
    static constexpr bool PINGPONG = !SPLIT && SDPA_SM90_PINGPONG != 0;
    static constexpr int BN = 128;          // keys per K/V tile (above)
    static constexpr int NCWG = 2;          // consumer warpgroups, 64 query rows each (above)
    static constexpr int BM = SPLIT ? 64 : 64 * NCWG;  // query rows per block
    static constexpr int THREADS = 128 * (1 + NCWG);   // warpgroup 0 = producer
    static constexpr int PANELS = D / 64;   // 64-column (128-byte) swizzle panels per row
    // Several work units per block (SDPA_SM90_PERSISTENT): unsplit, no ablation.
    static constexpr bool PERSIST = SDPA_SM90_PERSISTENT != 0 && !SPLIT && ABL_ == kAblNone;
    static constexpr int NQ = PERSIST && D == 64 ? 2 : 1;  // Q buffers (head dim 128: shared memory, above)
    static constexpr bool LEAN = false;  // (the fp8 tier's 256-key kernel: fp8_traits.cuh)
    static constexpr bool LEAN3 = false;
    static constexpr bool P24 = false;   // (the fp8 tier's 24-register producer: fp8_traits.cuh)
    static constexpr int OFF_CURSOR = 0;  // (unused: the producer's cursor in shared memory is LEAN's)
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
    // Q K^T with A = Q's fp16 fragments from registers (config.cuh SDPA_SM90_FP16_Q_REGS).  Head dim 128: its
    // 32 more registers per consumer thread fit at consumers 224; the producer takes the 56 left (56 + 2 x 224
    // = 504 = 3 x 168), enough for a decode batch of 4 without spills (at 48 it needed 2).  Head dim 64: 16
    // more, within the 216 beside a 64-register producer.
    static constexpr bool Q_REGS = SDPA_SM90_FP16_Q_REGS != 0;
    static constexpr int PRODUCER_REGS = Q_REGS && D == 128 ? 56 : 64;
    static constexpr int CONSUMER_REGS = Q_REGS && D == 128 ? 224 : 216;
    static_assert(PRODUCER_REGS + NCWG * CONSUMER_REGS <= LAUNCH_REGS * (1 + NCWG), "register budget");

    static constexpr bool Q_SMEM = false;   // (fp8 tier, 192-key tiles: Q's E4M3 codes in shared memory)
    // Row sums from the tensor core (config.cuh SDPA_SM90_FP16_ROWSUM_MMA), else l summed in fp32 by FADD.  Not in
    // the no_loads ablation at head dim 128: its 4 more registers made ptxas spill 16 bytes there (nvcc 13.0).
    static constexpr bool ROWSUM = SDPA_SM90_FP16_ROWSUM_MMA != 0 && !(ABL_ == kAblNoLoads && D_ == 128);
    static constexpr int P_KSTEPS = BN / 16;  // fp16 A fragments of P per tile (k16 steps of P V)

    static constexpr int NS = ASYNC ? (D == 64 ? 4 : 2) : 0;  // uint8 K/V stages the copy engine fills
    // Decoded fp16 K and V buffers (the consumers' rings): three at head dim 64 unsplit in the cpasync variant,
    // where shared memory has room (1x H100, experiments/2026-11-26-sdpa-fp16-q-regs, three calls against two,
    // bit-identical: 1.00-1.02x cold and 1.00-1.04x hot at the large head-dim-64 shapes); two at head dim 128
    // (full), in the split configuration (one per consumer warpgroup, for the merge) and in the baseline,
    // whose synchronous producer was 5.5% slower with three at (4,32,4096,64) in the bench
    // (bench_results/20261126T173142Z-2b62dd49-1xH100: 1321.0 us against 1251.7 at c96bd1d).
    static constexpr int NKB = D == 64 && !SPLIT && ASYNC ? 3 : 2;
    static constexpr int NVB = NKB;

    static constexpr int Q_BYTES = BM * D * 2;  // [PANELS][BM][64] fp16
    static constexpr int K_TILE = BN * D * 2;   // one fp16 K tile, [PANELS][BN][64], K-major for Q K^T
    static constexpr int VB_BYTES = BN * D * 2; // one fp16 V tile, [PANELS][BN][64], MN-major for P V
    static constexpr int U8_TILE = BN * D;      // one uint8 K or V tile as in global memory, [BN][D]
    // Descriptors: K K-major (SBO: 8 rows of 128 bytes), V MN-major (LBO: the panel stride).
    static constexpr uint32_t K_SWIZZLE = kSwizzle128B;
    static constexpr uint32_t K_SBO = 1024;
    static constexpr uint32_t VB_LBO = BN * 128;

    static constexpr int OFF_Q = 0;                       // [NQ] Q buffers (unit i: buffer i % NQ)
    static constexpr int OFF_K = OFF_Q + NQ * Q_BYTES;    // [NKB] fp16 K
    static constexpr int OFF_VB = OFF_K + NKB * K_TILE;   // [NVB] fp16 V
    static constexpr int OFF_KRAW = OFF_VB + NVB * VB_BYTES;  // [NS] uint8 K stages (cpasync)
    static constexpr int OFF_VRAW = OFF_KRAW + NS * U8_TILE;  // [NS] uint8 V stages (cpasync)
    static constexpr int OFF_SCRATCH = OFF_VRAW + NS * U8_TILE;  // one word per consumer thread (ptx.cuh keep_above_wait)
    // ROWSUM: P V's B for the row sums, 16 rows of 16 bytes (two 8 x 8 core matrices, MN-major), each {1.0, 0 x 7}.
    static constexpr int OFF_ONES = OFF_SCRATCH + 128 * NCWG * 4;
    static constexpr int OFF_BAR = OFF_ONES + (ROWSUM ? 256 : 0);
    // The split configuration's merge goes through the fp16 K buffers (free once both warpgroups are done).
    static constexpr int OFF_MERGE = OFF_K;
    static_assert((D / 2 + 4) * 128 * 4 <= NKB * K_TILE, "merge space");

    static constexpr int BAR_Q = 0;                     // [NQ] Q landed (copy engine; cpasync only)
    static constexpr int BAR_QEMPTY = BAR_Q + NQ;       // [NQ] consumers done with a Q buffer (cpasync, persistent)
    static constexpr int BAR_KRAW = BAR_QEMPTY + NQ;    // [NS] uint8 K landed (copy engine)
    static constexpr int BAR_VRAW = BAR_KRAW + NS;      // [NS] uint8 V landed (copy engine)
    static constexpr int BAR_KFULL = BAR_VRAW + NS;     // [NKB] fp16 K decoded (128 producer threads)
    static constexpr int BAR_KEMPTY = BAR_KFULL + NKB;  // [NKB] consumers done with fp16 K (one arrival per consumer warp)
    static constexpr int BAR_VFULL = BAR_KEMPTY + NKB;  // [NVB] fp16 V decoded
    static constexpr int BAR_VEMPTY = BAR_VFULL + NVB;  // [NVB] consumers done with fp16 V
    static constexpr int NBARS = BAR_VEMPTY + NVB;
    // The causal kernels' 8 more bytes (tile_plan.cuh CaseTraits: the producer's issuing thread notes the next work
    // unit's K/V head and tile count there, producer.cuh) start here; the kernels without the mask end here.
    static constexpr int OFF_NEXT = OFF_BAR + NBARS * 8;
    static constexpr int SMEM_USED = OFF_NEXT;
    static constexpr int SMEM = SMEM_USED + 1024;       // + slack to align the base to 1024
    static constexpr int CONSUMER_WARPS = SPLIT ? 4 : 4 * NCWG;
    static_assert(!SPLIT || (NKB == NCWG && NVB == NCWG), "split: one K/V buffer per consumer warpgroup");

    static_assert(D == 64 || D == 128, "head dim");
    static_assert(OFF_K % 1024 == 0 && K_TILE % 1024 == 0 && OFF_VB % 1024 == 0 && OFF_KRAW % 1024 == 0,
                  "swizzle atoms");
    static_assert(SMEM <= 227 * 1024, "sm_90 shared memory per block");
    static constexpr int CHUNKS = BN * D / 16;  // 16-byte uint8 chunks per K or V tile
    static constexpr int CHUNKS_PER_THREAD = CHUNKS / 128;
    static constexpr int DECODE_BATCH = CHUNKS_PER_THREAD % 4 == 0 ? 4 : 2;  // 16-byte chunks in flight per thread
    static_assert(CHUNKS % 128 == 0, "decode work divides over the producer warpgroup");
};

}  // namespace sdpa_sm90
