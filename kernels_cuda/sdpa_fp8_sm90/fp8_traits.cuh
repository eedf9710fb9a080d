// Compile-time shape of the FP8-operand Hopper SDPA kernel (wgmma_fp8_sm90): Q K^T and P V on
// E4M3 wgmma (m64nNk32), K straight from the copy engine, V transposed by the producer.
#pragma once

#include <cstdint>

#include "ptx.cuh"
#include "traits.cuh"  // Ablate, and config.cuh: USE_CP_ASYNC, every SDPA_SM90_* switch

namespace sdpa_sm90 {

// Scale of the probabilities before they are rounded to E4M3: P in [0, 1] becomes 2^8 P in
// [0, 256] (within E4M3's 448), so probabilities down to 2^-14 stay normal numbers.  The row sums
// l are taken in fp32 over the same scaled values, so the factor cancels in O / l.
constexpr float kPExp2Bias = 8.f;
// Largest finite E4M3 value: each Q row is scaled so that its largest |q| lands there.
constexpr float kE4M3Max = 448.f;

// The run-time rule (policy 0): 192-key tiles when S padded to them is less than 1.02x S padded to
// 128-key tiles, i.e. a key in a 192-key tile costs 0.98 of one in a 128-key tile.  1x H100
// (experiments/2026-11-23-sdpa-d128-pipes, run 2, one call, no polynomial exponentials; cold / hot
// p50) 128 / 192: (1,16,8192,128) 613.9 / 605.5 and 633.0 / 591.4 us (per padded key: 0.98 / 0.93),
// (2,16,2048,128) 92.1 / 94.5 and 88.3 / 89.9 (192 pads 3% more keys).
__host__ __device__ constexpr int bn_d128(int S, int policy) {
    return policy != 0 ? policy
                       : ((long long)(S + 191) / 192 * 192) * 49 < ((long long)(S + 127) / 128 * 128) * 50 ? 192 : 128;
}
// Policy 0, then: the 256-key kernel instead of that width where it pads no more keys, the launch is unsplit and takes
// Q in one term (select_config keeps the two terms of short launches and the split grid on their kernels) and, with
// the causal mask, Skv is at least kBn256CausalMinKeys.  1x H200, cold p50 against the 128/192-key rule
// (experiments/2026-11-29-sdpa-fp8-producer24; producer 24 / consumers 240, ldmatrix V transpose): 4.7% faster at
// (1,16,8192,128), 12-14% at (1,16,16384,128), 4% at (2,32,4096,128) and (4,16,4096,128), 1.7% at
// (2,16,2048,128), a tie at (1,32,1024,128); causal 3.5% faster at (1,16,8192,128) but 4.9% slower at
// (2,16,2048,128) (the diagonal tile masks half of 256 keys), so the mask takes it from 8192 keys, measured there.
constexpr int kBn256CausalMinKeys = 8192;
__host__ __device__ constexpr bool prefers_bn256(int Skv, bool causal, int bn) {
    return (long long)(Skv + 255) / 256 * 256 <= (long long)(Skv + bn - 1) / bn * bn && (!causal || Skv >= kBn256CausalMinKeys);
}

// SDPA_SM90_FP8_Q2's policy 1: a launch is short when its work units are less than one wave (units < SMs: every
// block takes one) and the second term's extra Q K^T work per consumer warpgroup is at most that of 8 K/V tiles
// at head dim 64 (tiles x D/64 <= kQ2MaxTileWork: 8 tiles at head dim 64, 4 at 128, whose Q K^T has twice the
// k-steps).  There the launch waits mostly on latency: the second term costs 2-6% at head dim 64
// (experiments/2026-11-26-sdpa-fp8-q-two-terms, calls 1 and 2); at head dim 128 with 8 tiles it cost 7-10% and
// left the tier 0.95x cuDNN FP8 at (1,16,1024,128) (call 3), hence the bound in work, not tiles.  With more work
// per SM it costs what it adds to the tensor core's: 6-11% in one wave of 16-128 tiles, 11-37% at the large
// default shapes.
constexpr int kQ2MaxTileWork = 8;
__host__ __device__ constexpr bool fp8_q2_short(long long units, int tiles_per_warpgroup, int head_dim, int num_sms) {
    return units < num_sms && tiles_per_warpgroup * (head_dim / 64) <= kQ2MaxTileWork;
}

// NCWG_: consumer warpgroups, 64 query rows each; 3 only unsplit at head dim 64.  BN_: keys per K/V
// tile, 192 only at head dim 128.  The kernels are instantiated on the two thin names below.
template <int D_, bool ASYNC_, int ABL_, bool SPLIT_, int NCWG_, int BN_, bool Q2_ = false>
struct Fp8TraitsN {
    static_assert(NCWG_ == 2 || (NCWG_ == 3 && (D_ == 64 || (D_ == 128 && BN_ == 128)) && !SPLIT_),
                  "three consumer warpgroups: unsplit, head dim 64 (or 128 with 128-key tiles: SDPA_SM90_NCWG3_D128)");
    static_assert(BN_ == 128 || (BN_ == 192 && D_ == 128 && NCWG_ == 2) || (BN_ == 256 && D_ == 128 && NCWG_ == 2 && !SPLIT_ && ABL_ == kAblNone),
                  "keys per tile: 128, or 192 at head dim 128, or 256 at head dim 128 unsplit without ablation");
    static constexpr bool FP8 = true;   // E4M3 operands (wgmma_fp8_sm90)
    // Q K^T with Q as two E4M3 terms, hi + lo (SDPA_SM90_FP8_Q2, config.cuh; tier_ops.cuh load_q_e4m3):
    // Q's fragments in registers twice over, so two consumer warpgroups, 128-key tiles (Q in registers), and
    // no ablation (select_config picks it only for short launches).
    static constexpr bool Q2 = Q2_;
    static_assert(!Q2_ || (NCWG_ == 2 && BN_ == 128 && ABL_ == kAblNone), "two Q terms: two consumer warpgroups, 128-key tiles");
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
    // 256-key tiles (SDPA_SM90_BN_D128=256): the consumer loop of mainloop.cuh that never holds P of one tile and S
    // of the next at once; one Q buffer, the row sums' ones rows once per block (ONES_SEP), no scratch (shared memory).
    static constexpr bool LEAN = BN_ == 256;
    // Three consumer warpgroups at head dim 128 (SDPA_SM90_NCWG3_D128): the 256-key kernel's loop at 128 keys.
    static constexpr bool LEAN3 = NCWG_ == 3 && D_ == 128;
    static constexpr int NQ = PERSIST && !LEAN && !LEAN3 ? 2 : 1;  // Q buffers
    // setmaxnreg moves registers within what the block got at launch: 65536 / THREADS per thread,
    // rounded down to 8 (168 with 384 threads, 128 with 512).  BN 192: the cpasync producer keeps 72
    // (its transpose of three items), the consumers 216; the baseline producer (K in batches of four
    // chunks, V transposed from global memory) fits in 56, and its consumers take 224: with 216 the
    // persistent loop's unit counter spilled (they also load Q).
    static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
    // BN 256: the producer at SDPA_SM90_BN256_PRODUCER_REGS (24: its ldmatrix transpose one 16-key unit at a time, its
    // unit cursor in shared memory), the consumers at the rest (240: S 128 + O 64 at the softmax; P 32 + O 64 while
    // P V runs).
    // (the baseline variant's producer loads K and V^T from global memory itself: at 24 it spilled 140 bytes; 56 as
    // before.  Its consumers then take 224: the same arithmetic, so the same outputs bit for bit.)
    // P24: the 256-key kernel and, in cpasync builds, the three-warpgroup head-dim-128 one (LEAN3) have the
    // 24-register producer.
    static constexpr bool P24 = LEAN || (LEAN3 && ASYNC);
    static constexpr int PRODUCER_REGS = LEAN ? (ASYNC ? SDPA_SM90_BN256_PRODUCER_REGS : 56) : P24 ? 24
                                         : LEAN3 ? 64 : NCWG == 3 || (BN == 192 && !ASYNC) ? 56 : BN == 192 ? 72 : 64;
    static constexpr int CONSUMER_REGS = LEAN || P24 ? (LAUNCH_REGS * (1 + NCWG) - PRODUCER_REGS) / NCWG / 8 * 8
                                         : LEAN3 ? 144 : NCWG == 3 ? 152 : BN == 192 && !ASYNC ? 224 : 216;
    static_assert(PRODUCER_REGS + NCWG * CONSUMER_REGS <= LAUNCH_REGS * (1 + NCWG), "register budget");

    // K/V stages (E4M3 as in global memory; cpasync: the copy engine fills K and V, baseline: the
    // producer fills K); K is read by the consumers' wgmma in place, V by the producer's transpose.
    // The split configuration needs an even count: its warpgroups take alternate tiles, so with an odd count a stage
    // is filled for one warpgroup, then the other, and warpgroup 1 can wait for a stage's second fill (mbarrier
    // parity 1) before its first has landed (parity 0), whose wait then returns at once (2026-11-29: 3 stages at head
    // dim 128 gave mismatches, hangs and launch failures in 4-stream soaks on grids of many short blocks;
    // experiments/2026-11-29-sdpa-decode-wgmma).  An even count keeps each stage to one warpgroup, which waits for its
    // fills in order.
    static constexpr int NS = D == 64 ? 4 : BN == 128 ? (SPLIT_ ? 4 : 3) : 2;
    static_assert(!SPLIT_ || NS % 2 == 0, "split: an even count of K stages (one warpgroup per stage)");
    // BN 192: Q K^T takes Q's E4M3 codes from shared memory (each consumer warpgroup writes its 64
    // rows over its own 8 KiB of the fp16 Q tile once it has read them), not from 16 registers.
    static constexpr bool Q_SMEM = BN == 192 || LEAN || LEAN3;
    static_assert(!Q_SMEM || (D == 128 && (NCWG == 2 || LEAN3)), "Q in shared memory as E4M3: head dim 128");
    static constexpr int NVT = 2;             // transposed V buffers [D][BN]
    // The names the shared main loop reads (traits.cuh has the fp16 tier's): the consumers' K ring is the
    // stages themselves, their V ring the V^T buffers; P is one E4M3 fragment per 32 keys.
    static constexpr int NKB = NS;
    static constexpr int NVB = NVT;
    static constexpr int P_KSTEPS = BN / 32;

    static constexpr int Q_BYTES = BM * D * 2;          // fp16 [PANELS][BM][64], 128-byte swizzle
    static constexpr int K_TILE = BN * D;               // [BN][D], 64-byte (D 64) / 128-byte (D 128) swizzle
    static constexpr int V_TILE = BN * D;               // [BN][D], unswizzled (cpasync only)
    static constexpr bool ROWSUM = SDPA_SM90_ROWSUM_MMA != 0;
    // V^T [D (+ 8)][BN], keys permuted: panel 0 = keys 0..127 in rows of 128 bytes (128-byte swizzle);
    // BN 192: panel 1 = keys 128..191 in rows of 64 bytes (64-byte swizzle), after panel 0.
    // BN 256: panel 1 = keys 128..255 in rows of 128 bytes (128-byte swizzle); the ones rows are not in V^T but in
    // one 1 KiB block of their own (OFF_ONES: row 0 E4M3 1.0, rows 1..7 zero, read by every k-step).
    static constexpr bool ONES_SEP = ROWSUM && LEAN;
    static constexpr int VT_ROWS = D + (ROWSUM && !ONES_SEP ? 8 : 0);
    static constexpr int VT_P1_KEYS = BN - 128;        // 0, 64 or 128
    static constexpr int VT_P1_OFF = VT_ROWS * 128;    // panel 1's offset in a buffer
    static constexpr int VT_BYTES = (VT_ROWS * BN + 1023) / 1024 * 1024;  // a buffer, padded to the 1024-byte atom
    static constexpr uint32_t K_SWIZZLE = D == 64 ? kSwizzle64B : kSwizzle128B;
    static constexpr uint32_t K_SBO = 8 * D;            // bytes per 8 key rows
    static constexpr uint32_t VB_LBO = 16;             // V^T is K-major: LBO unused

    static constexpr int OFF_Q = 0;                     // [NQ] Q buffers (unit i: buffer i % NQ)
    static constexpr int OFF_K = OFF_Q + NQ * Q_BYTES;
    static constexpr int OFF_V = OFF_K + NS * K_TILE;
    // Raw V stages: cpasync (the copy engine's), and the baseline with three consumer warpgroups,
    // whose producer (56 registers) stages V through shared memory rather than transposing it
    // straight from global memory (16 words in flight per item: spills at 56).
    static constexpr bool V_STAGED = ASYNC || NCWG == 3;
    static constexpr int OFF_VT = OFF_V + (V_STAGED ? NS * V_TILE : 0);
    static constexpr int OFF_VB = OFF_VT, VB_BYTES = VT_BYTES;  // (the shared main loop's names)
    // (the shared producer's: the copy engine's K and V stages, as stored)
    static constexpr int OFF_KRAW = OFF_K, OFF_VRAW = OFF_V, U8_TILE = K_TILE;
    static_assert(K_TILE == V_TILE, "one stage size");
    static constexpr int OFF_SCRATCH = OFF_VT + NVT * VT_BYTES;
    // (keep_above_wait's stores; the 256-key loop waits for nothing during its softmax and has none)
    static constexpr int SCRATCH_BYTES = LEAN ? 0 : 128 * NCWG * 4;
    static constexpr int OFF_ONES = OFF_SCRATCH + SCRATCH_BYTES, ONES_BYTES = ONES_SEP ? 1024 : 0;
    static constexpr int OFF_BAR = OFF_ONES + ONES_BYTES;
    // The split configuration's merge goes through the K stages (free once both warpgroups are done).
    static constexpr int OFF_MERGE = OFF_K;
    static_assert((D / 2 + 4) * 128 * 4 <= NS * K_TILE, "merge space");

    static constexpr int BAR_Q = 0;                     // [NQ] Q landed (copy engine; cpasync only)
    static constexpr int BAR_QEMPTY = BAR_Q + NQ;       // [NQ] consumers done with a Q buffer (cpasync, persistent)
    static constexpr int BAR_KFULL = BAR_QEMPTY + NQ;   // [NS] K landed (copy engine / 128 producer threads)
    static constexpr int BAR_VRAW = BAR_KFULL + NS;     // [NS] V landed (copy engine; cpasync only)
    static constexpr int BAR_KRAW = BAR_KFULL;          // (the shared producer's name: K lands where it is read)
    static constexpr int BAR_KEMPTY = BAR_VRAW + NS;    // [NS] consumers done with K (one arrival per consumer warp)
    static constexpr int BAR_VFULL = BAR_KEMPTY + NS;   // [NVT] V^T written (128 producer threads)
    static constexpr int BAR_VEMPTY = BAR_VFULL + NVT;  // [NVT] consumers done with V^T
    static constexpr int NBARS = BAR_VEMPTY + NVT;
    // P24: the producer's unit cursor (producer.cuh: i, t, kv_cur, kv_next, nt_cur), kept by its issuing thread in
    // shared memory so that the other 127 carry nothing but the tile index (SDPA_SM90_BN256_PRODUCER_REGS down to 24).
    static constexpr int OFF_CURSOR = OFF_BAR + NBARS * 8, CURSOR_BYTES = P24 ? 24 : 0;
    // The causal kernels' 8 more bytes (tile_plan.cuh CaseTraits: the producer's issuing thread notes the next work
    // unit's K/V head and tile count there, producer.cuh) start here; the kernels without the mask end here.
    static constexpr int OFF_NEXT = OFF_CURSOR + CURSOR_BYTES;
    static constexpr int SMEM_USED = OFF_NEXT;
    static constexpr int SMEM = SMEM_USED + 1024;
    static constexpr int CONSUMER_WARPS = SPLIT ? 4 : 4 * NCWG;
    static_assert(!SPLIT || NVT == NCWG, "split: one V^T buffer per consumer warpgroup");

    static_assert(D == 64 || D == 128, "head dim");
    static_assert(OFF_K % 1024 == 0 && K_TILE % 1024 == 0 && OFF_VT % 1024 == 0 && VT_BYTES % 1024 == 0,
                  "swizzle atoms");
    static_assert(VT_P1_KEYS == 0 || (VT_P1_KEYS == 64 && VT_P1_OFF % 512 == 0 && (VT_P1_OFF + D * 64) % 512 == 0) ||
                      (VT_P1_KEYS == 128 && VT_P1_OFF % 1024 == 0),
                  "V^T panel 1: 64 keys, 512-byte atoms, or 128 keys, 1024-byte atoms");
    static_assert(!ONES_SEP || OFF_ONES % 1024 == 0, "the ones block: one 1024-byte swizzle atom");
    static_assert(BN % 32 == 0 && BN <= 256, "k-steps of 32 keys, one TMA box");
    static_assert(SMEM <= 227 * 1024, "sm_90 shared memory per block");
    // V transpose: items of 16 keys x 4 dims, (BN / 16) * (D / 4) per tile over 128 threads.
    static constexpr int VT_ITEMS = (BN / 16) * (D / 4) / 128;
    static_assert((BN / 16) * (D / 4) % 128 == 0, "transpose work divides over the producer warpgroup");
    static constexpr int K_CHUNKS_PER_THREAD = K_TILE / 16 / 128;
};

// Two consumer warpgroups (every head dim, unsplit and split; 128- or 192-key tiles at head dim 128).
template <int D_, bool ASYNC_, int ABL_, bool SPLIT_, int BN_ = 128, bool Q2_ = false>
struct Fp8Traits : Fp8TraitsN<D_, ASYNC_, ABL_, SPLIT_, 2, BN_, Q2_> {};
// Three consumer warpgroups (head dim 64, unsplit).
template <int D_, bool ASYNC_, int ABL_>
struct Fp8Traits3 : Fp8TraitsN<D_, ASYNC_, ABL_, false, 3, 128> {};

}  // namespace sdpa_sm90
