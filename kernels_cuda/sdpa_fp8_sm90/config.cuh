// Every compile-time switch of the Hopper SDPA kernels (kernels_cuda/sdpa_fp8_sm90/), each default defined
// here once, with what it does and what it measured (README.md "Variants" has the table). Included by
// traits.cuh, softmax.cuh and tile_plan.cuh, so every file of the folder sees the same values.
#pragma once

// ---- the variant (both tiers): baseline or cpasync
#ifndef USE_CP_ASYNC
#define USE_CP_ASYNC 0
#endif

// ---- both tiers (tile_load.cuh TileMaps, producer.cuh; the fp16 tier since 2026-11-26)
// SDPA_SM90_L2_PREFETCH_NEXT = 1 (default; 0 = off; cpasync only): after its
// own first loads, the producer prefetches into L2 the Q tile and the first NS K and V tiles of the
// block that will take its SM in the next wave (block index + SM count), so that block's first loads
// hit L2 when the run starts with a cold L2 (cold timing: 49.5 us at (8,8,1024,64) against 42.8 hot,
// 3 waves; torch 47.3 / 44.0).  Costs one thread a few prefetch instructions and the first wave some
// HBM bandwidth.  A/B 5 of experiments/2026-11-23-sdpa-fp8-profile (1x H100, cold p50, against 0):
// (8,8,1024,64) 49.41 -> 47.38 us, (2,16,2048,64) 80.13 -> 77.98, (2,16,2048,128) 105.0 -> 102.1,
// within 1% at the one-wave-heavy shapes.  fp16 tier (experiments/2026-11-27-sdpa-fp16-l2-prefetch, 1x H100,
// against 0, bit-identical): 1.0-1.1% faster cold at (3,5,777,64), (2,16,2048,64), (4,32,4096,64) and
// (2,16,2048,128), within noise elsewhere.
#ifndef SDPA_SM90_L2_PREFETCH_NEXT
#define SDPA_SM90_L2_PREFETCH_NEXT 1
#endif

// ---- both tiers (mainloop.cuh)
// Inter-warpgroup ping-pong (FlashAttention-3): the two consumer warpgroups take turns issuing
// their matrix products, so that one's softmax runs while the other's products do.
#ifndef SDPA_SM90_PINGPONG
#define SDPA_SM90_PINGPONG 1
#endif

// ---- fp16 tier (traits.cuh Fp16Traits, tier_ops.cuh issue_qk_f16 / load_q_f16)
// SDPA_SM90_FP16_Q_REGS = 1 (default; 0 = Q from shared memory): Q K^T takes Q's fp16 A fragments from
// registers (an RS wgmma, loaded once per unit) instead of shared memory, so the tier's Q K^T reads a third
// less from shared memory (the shared-memory pipe was at 63% at head dim 128).  Head dim 128: the 32 more
// registers per consumer thread need consumers at 224 (at 216 ptxas serializes the wgmma), which leaves the
// producer 56 (traits.cuh); head dim 64: 16 more, within the split 64 / 216.
// experiments/2026-11-26-sdpa-fp16-q-regs, 1x H100, cold / hot p50, outputs bit-identical:
//   head dim 128, producer 48, decode batch 2, against 0: (2,16,2048,128) 128.99 / 125.14 -> 126.72 /
//   122.35 us, (1,16,8192,128) 898.5 / 940.8 -> 877.6 / 936.8 (612 -> 626 TF/s); the batch of 2 alone costs
//   2-3%; producer 56, decode batch 4 (now), against producer 48 / batch 2, four calls: (2,16,2048,128)
//   1.004-1.029x cold, 1.015-1.021x hot; (1,16,8192,128) 0.996-1.029x cold.
//   head dim 64 (since the same day), against Q from shared memory, two calls: (2,16,2048,64) 1.008 / 1.014x
//   cold, (4,32,4096,64) 1.039 / 1.036x, (8,8,1024,64) 1.011 / 1.018x, (3,5,777,64) 1.019 / 1.018x,
//   (1,8,512,64) 0.973 / 1.013x.
#ifndef SDPA_SM90_FP16_Q_REGS
#define SDPA_SM90_FP16_Q_REGS 1
#endif

// ---- fp16 tier (traits.cuh, tier_ops.cuh issue_pv_f16, kernel.cuh)
// SDPA_SM90_FP16_ROWSUM_MMA = 1 or 0: the softmax row sums l from the tensor core, as the fp8 tier's
// (SDPA_SM90_ROWSUM_MMA): each P V is followed by BN/16 wgmma m64n8k16 of P with a constant 8-column B whose
// column 0 is 1.0 (256 bytes written once per block) into a fresh accumulator, added to l in fp32 after the
// wait, instead of 64 FADD per consumer thread and tile.  l is then the sum of the fp16-rounded P that O sums.
// experiments/2026-11-26-sdpa-fp16-rowsum-mma (1x H100, cold / hot p50, against 0, same call): (2,16,2048,64)
// 88.51 / 83.35 -> 84.90 / 79.56 us, (4,32,4096,64) 1260.7 / 1256.9 -> 1204.5 / 1209.8, (8,8,1024,64) 50.90 / 45.84
// -> 47.98 / 43.09 (1.04-1.06x), (1,8,512,64) and (3,5,777,64) 1.005-1.017x; head dim 128 1.00-1.02x
// ((1,16,8192,128) 847.8 -> 838.0 cold, 900.2 -> 901.5 hot); rel_l2 against float64 unchanged (2.7e-4).
#ifndef SDPA_SM90_FP16_ROWSUM_MMA
#define SDPA_SM90_FP16_ROWSUM_MMA 1
#endif

// ---- fp8 tier (softmax.cuh, mainloop.cuh)
// Polynomial exponentials in the FP8 kernel's softmax step (compile time; mainloop.cuh picks the
// define by head dim; the fp16 kernel is untouched):
//   SDPA_SM90_EXP2_POLY = n (0..16, head dim 64, default 0): in n of every 16 eight-column chunks
//     of a row, the exponential is a degree-2 polynomial on the FMA/ALU pipes instead of MUFU.EX2
//     (FlashAttention-4's offload of the special-function unit), relative error <= 1.8e-3 (E4M3's
//     rounding: <= 6.25%).
// (An f16x2-exponential variant, SDPA_SM90_EX2_F16X2, was measured 2-4% slower on H100 and removed:
// on sm_90 ex2.approx.f16x2 is two MUFU.EX2.F16; experiments/2026-11-23-sdpa-fp8-d64, code at fbcc1df.)
#ifndef SDPA_SM90_EXP2_POLY
#define SDPA_SM90_EXP2_POLY 0
#endif
static_assert(SDPA_SM90_EXP2_POLY >= 0 && SDPA_SM90_EXP2_POLY <= 16, "SDPA_SM90_EXP2_POLY: chunks of 16");
// SDPA_SM90_EXP2_POLY_D128 = n (default 0): the same at head dim 128 (FP8 kernel).  It paid while
// MUFU was as busy as the tensor core (1x H100, experiments/2026-11-23-sdpa-fp8-profile, A/B 2, cold
// p50, 128-key tiles, row sums by FADD: n = 0 / 4 / 8: (2,16,2048,128) 108.16 / 105.06 / 108.96 us,
// (1,16,8192,128) 714.7 / 682.5 / 721.5); since the row sums come from the tensor core the softmax is
// bound by its instruction count (8 instructions per polynomial exponential), and 0 is faster:
// experiments/2026-11-23-sdpa-d128-pipes run 2 (192-key tiles, cold / hot) n = 4 / 0:
// (2,16,2048,128) 96.99 / 94.48 and 92.05 / 89.90 us, (1,16,8192,128) 610.4 / 605.5 and 621.2 / 591.4.
#ifndef SDPA_SM90_EXP2_POLY_D128
#define SDPA_SM90_EXP2_POLY_D128 0
#endif
static_assert(SDPA_SM90_EXP2_POLY_D128 >= 0 && SDPA_SM90_EXP2_POLY_D128 <= 16, "SDPA_SM90_EXP2_POLY_D128: chunks of 16");

// ---- fp8 tier (kernel.cuh select_config, fp8_traits.cuh fp8_q2_short, tier_ops.cuh load_q_e4m3 / issue_qk_fp8)
// Q K^T with Q as two E4M3 terms: q s = hi + lo, hi = the row-scaled Q rounded to E4M3 (as always), lo = the
// rest (q s - hi, exact in fp32) rounded to E4M3; a second chain of D/32 wgmma takes lo with the same K into
// the same accumulator.  Q's relative rounding error falls from 2^-4 to about 2^-8, which is what limits the
// tier at large logits (P's rounding is unchanged).  Both kernels are in every build (two consumer
// warpgroups, 128-key tiles, Q in registers: the three-warpgroup and 192-key kernels keep one term), and
// select_config picks by this policy:
//   0 = one term always;
//   1 (default) = two in a short launch (fp8_traits.cuh fp8_q2_short: fewer work units than SMs and at most
//       8 K/V tiles per consumer warpgroup at head dim 64, 4 at head dim 128), where the launch waits on
//       latency and the tensor core has time to spare; one elsewhere;
//   2 = two wherever the kernel has them.
// The runner's line says which ran ("q_terms"); its --q-terms auto|1|2 overrides the policy per case (1 = policy
// 0, 2 = policy 2; kernels_cuda/sdpa_fp8/README.md).  experiments/2026-11-26-sdpa-fp8-q-two-terms (1x H100, call
// 1, two terms everywhere against one): rel_l2 against float64 at (1,2,128,64) large_logits_8 0.157-0.193 ->
// 0.005-0.008, large_logits_4 0.080-0.093 -> 0.005-0.006, outlier_channels 0.037-0.045 -> 0.008, normal
// 0.033 -> 0.022 (the same at the other small shapes; cuDNN FP8 0.153-0.181 at large_logits_8 there).  Time,
// cold / hot: short launches at head dim 64 1.7-6.1% / 3.6-6.5% slower ((1,2,128,64) 7.41 -> 7.54 us cold,
// (3,5,777,64) 15.09 -> 15.97), at head dim 128 with 8 tiles per warpgroup 7.7-8.3% / 7.0-9.9% ((1,16,1024,128)
// 19.73 -> 21.38; call 2); the large default shapes 11-37% (two warpgroups at head dim 64: 14-24%;
// (2,16,2048,128) 11%), single waves of 16-128 tiles per warpgroup 6-11%: hence two terms only in short launches.
#ifndef SDPA_SM90_FP8_Q2
#define SDPA_SM90_FP8_Q2 1
#endif
static_assert(SDPA_SM90_FP8_Q2 >= 0 && SDPA_SM90_FP8_Q2 <= 2, "SDPA_SM90_FP8_Q2: 0, 1 or 2");

// ---- fp8 tier (tile_plan.cuh: what each value does)
#ifndef SDPA_SM90_TILE_PLAN
#define SDPA_SM90_TILE_PLAN 1
#endif
static_assert(SDPA_SM90_TILE_PLAN >= 0 && SDPA_SM90_TILE_PLAN <= 2, "SDPA_SM90_TILE_PLAN: 0, 1 or 2");

// ---- fp8 tier (fp8_traits.cuh, kernel.cuh)
// Consumer warpgroups in the unsplit configuration at head dim 64: both kernels are compiled in
// (two: 128 query rows per block, 384 threads, setmaxnreg 64 / 216; three: 192 rows, 512 threads,
// setmaxnreg 56 / 152) and select_config (kernel.cuh) picks one at run time by this policy:
//   0 = always two (as at head dim 128);
//   1 (default) = three when the three-warpgroup unsplit grid fills at least one wave (blocks >=
//       SMs), else two, with the split rule taken on the two-warpgroup grid; with the causal mask,
//       two where their makespan model is the shorter (tile_plan.cuh causal_makespan: at S 512 and
//       1024 two were 6-17% faster, 1x H200, experiments/2026-11-29-sdpa-fp8-causal-d64-warpgroups);
//   2 = always three in the unsplit configuration (the split rule on the three-warpgroup grid).
// On 1x H100 (2026-11-23, experiments/2026-11-23-sdpa-fp8-d64 run 2, cold p50, one call) rule /
// two / three: (3,5,777,64) 15.84 / 15.79 / 18.13 us (75 blocks of 192 rows on 132 SMs: the rule
// takes two), (8,8,1024,64) 50.06 / 53.60 / 50.08, (2,16,2048,64) 82.24 / 88.82 / 81.50,
// (4,32,4096,64) 1005.9 / 1217.7 / 1005.3.
#ifndef SDPA_SM90_NCWG3_D64
#define SDPA_SM90_NCWG3_D64 1
#endif

// ---- fp8 tier (fp8_traits.cuh, kernel.cuh)
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

// ---- fp8 tier (fp8_load.cuh transpose_v_tile_ldsm, producer.cuh, kernel.cuh make_maps)
// SDPA_SM90_VT_LDSM = 0 (default) or 1: head dim 128, cpasync: the copy engine writes V's stages with the 128-byte
// swizzle and the producer transposes them into V^T by ldmatrix.trans (b16, x4), prmt and stmatrix (x4), both
// conflict-free: per tile and producer thread BN/16 LDSM, BN/16 STSM and BN/4 PRMT where the item transposes (VT_FAST)
// take BN/4 LDS, BN/16 STS.128 and 3 BN/4 PRMT, for the same shared-memory wavefronts.  The
// same V^T bytes (tests/test_sdpa_vt_ldsm_emu.py emulates both), so the consumers are unchanged.  Applies to every
// head-dim-128 fp8 kernel of the build (128- and 192-key: one V tensor map per launch), not to the baseline variant;
// the 256-key kernel transposes this way whatever the define (since 2026-11-29, one unit at a time: its producer has
// 24 registers).  experiments/2026-11-29-sdpa-fp8-vt-ldsm (the byte images, registers, SASS; 1x H200, cold: the same
// outputs bit for bit; at 128 keys 3.4-4.0% slower at (2,32,4096,128) and (4,16,4096,128), at 192 keys 0.2-3.8%
// faster at (1,16,8192,128) and (1,16,16384,128), where the 256-key kernel now runs: so off for those two).
// SDPA_SM90_VT_LDSM_BATCH (default 2): units (16 keys x 32 dims) loaded before the first of their stores (128 / 192).
#ifndef SDPA_SM90_VT_LDSM
#define SDPA_SM90_VT_LDSM 0
#endif
static_assert(SDPA_SM90_VT_LDSM == 0 || SDPA_SM90_VT_LDSM == 1, "SDPA_SM90_VT_LDSM: 0 or 1");
#ifndef SDPA_SM90_VT_LDSM_BATCH
#define SDPA_SM90_VT_LDSM_BATCH 2
#endif

// ---- fp8 tier (fp8_traits.cuh, kernel.cuh)
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

// ---- fp8 tier (fp8_traits.cuh, kernel.cuh)
// SDPA_SM90_BN_D128 = 0 (default), 128, 192 or 256: keys per K/V tile at head dim 128.  Every kernel is in
// every FP8 build; 0 = select_config (kernel.cuh) picks one per Skv at run time (fp8_traits.cuh bn_d128, then
// prefers_bn256), 128, 192 or 256 = always that one (256 where it serves).  192 (FlashAttention-3 takes 224 for FP8
// at head dim 128) spreads each
// tile's fixed costs (row-max shuffles, the O rescale, the turn and the waits) over 1.5x the keys;
// S takes 96 accumulator registers instead of 64 (Q K^T then reads Q from shared memory: Q_SMEM),
// and the K/V ring is two stages deep instead of three (shared memory).  V^T is then two panels:
// keys 0..127 with the 128-byte swizzle, keys 128..191 with the 64-byte swizzle.  But S is padded to
// a multiple of the tile: 2048 keys are 11 tiles of 192 (2112 keys), 16 of 128.
// 256: the 256-key kernel (fp8_traits.cuh Fp8TraitsN BN 256, mainloop.cuh consumer_loop256) at every head-dim-128
// shape it serves (unsplit, no ablation; the others take the rule of 0).  Its consumer loop never holds the
// probabilities of one tile and the scores of the next in registers at once (S 128 + O 64 + P 32), so it has no P V
// in flight during its own softmax (the other warpgroup's is).  Since 2026-11-29 the rule of 0 takes it where
// fp8_traits.cuh prefers_bn256 says (its producer at 24 registers and consumers at 240, cuDNN FP8's split: 1.7-14%
// faster than the 128/192-key rule at the large head-dim-128 shapes, experiments/2026-11-29-sdpa-fp8-producer24).
// Before that, with its producer at 56 and consumers at 224, it was 1.4-2.5% slower than the rule at four of five
// shapes (experiments/2026-11-29-sdpa-fp8-bn256), and the consumers' 16 registers are what it lacked: at 40 / 232 it
// is 2.9-3.8% slower than at 24 / 240 (6.8% at (1,16,16384,128)).
#ifndef SDPA_SM90_BN_D128
#define SDPA_SM90_BN_D128 0
#endif
static_assert(SDPA_SM90_BN_D128 == 0 || SDPA_SM90_BN_D128 == 128 || SDPA_SM90_BN_D128 == 192 || SDPA_SM90_BN_D128 == 256,
              "SDPA_SM90_BN_D128: 0 (by S), 128, 192 or 256");
// The 256-key kernel's producer registers (the consumers take (3 * 168 - this) / 2, rounded down to 8; cpasync, the
// baseline variant keeps 56): 24 (default since 2026-11-29; consumers 240).  The history (nvcc 13.0, cpasync, causal /
// non-causal kernel), with the item transpose of then: at 48 / 224 the producer spilled 16 / 0 bytes, at 40 / 232 80 / 60, at 24 / 240 (cuDNN's split) 188 / 180 (its V transpose would need ldmatrix / stmatrix to fit
// there); at 64 / 216 the consumers spilled 1280 and every wgmma was serialized.
// With SDPA_SM90_VT_LDSM (ldmatrix / stmatrix) the producer spilled 0 / 0 bytes at 40, 12 / 0 at 32, 68 / 24 at 24
// (experiments/2026-11-29-sdpa-fp8-vt-ldsm).  Since then (experiments/2026-11-29-sdpa-fp8-producer24) the 256-key
// producer keeps its unit cursor in shared memory (its issuing thread alone), makes its transpose addresses again per
// tile and steps each V^T panel with one counter: transposing one unit at a time it has no spills at 24 (consumers
// 240), causal and not (two units at a time: 4 / 4 bytes).
// The 256-key kernel's consumer loop (mainloop.cuh): 0 = consumer_loop256 (P V waited for in the turn, then Q K^T),
// 1 = consumer_loop256_split (P V issued in two halves of 128 keys right after the softmax, the first while the
// exponentials of the second half are taken; waited for before the next turn).  The same arithmetic.
#ifndef SDPA_SM90_BN256_LOOP
#define SDPA_SM90_BN256_LOOP 0
#endif
static_assert(SDPA_SM90_BN256_LOOP == 0 || SDPA_SM90_BN256_LOOP == 1, "SDPA_SM90_BN256_LOOP: 0 or 1");
// SDPA_SM90_NCWG3_D128 (default 1): the fp8 tier at head dim 128 with three consumer warpgroups (192 rows per block),
// 128-key tiles, the 256-key kernel's loop (S and P never live together, Q's E4M3 codes in shared memory) and its
// 24-register producer, so that the consumers get 160 registers (fp8_traits.cuh LEAN3; cpasync builds only: the
// baseline producer loads from global memory and needs 64, and at 144 the consumers spill).  It runs where
// select_config would run the 256-key kernel: 0 = never; 1 = where its makespan model is the shorter
// (tile_plan.cuh prefers_ncwg3_d128); 2 = always there.  1x H200, cold p50 against the 256-key kernel
// (experiments/2026-11-29-sdpa-fp8-d128-three-warpgroups call 1): 3.2% faster at (1,16,16384,128), 2.8% at
// (2,32,4096,128) and (4,16,4096,128), 2.9% at (1,16,8192,128) causal; 2.0% slower at (1,16,8192,128), 0.8% at
// (2,16,2048,128), 8.4% at (1,32,1024,128), where its units fill the last wave less (the model takes 256 there).
#ifndef SDPA_SM90_NCWG3_D128
#define SDPA_SM90_NCWG3_D128 1
#endif
static_assert(SDPA_SM90_NCWG3_D128 >= 0 && SDPA_SM90_NCWG3_D128 <= 2, "SDPA_SM90_NCWG3_D128: 0, 1 or 2");
#ifndef SDPA_SM90_BN256_PRODUCER_REGS
#define SDPA_SM90_BN256_PRODUCER_REGS 24
#endif
// The fp16 tier's key-chunk kernels (KVCHUNK, cpasync, head dim 128) with V decoded by the consumer warpgroup that
// reads it, from the copy engine's stage into its own fp16 V buffer, before its next Q K^T (the producer decodes K
// only): 1 (default), 0 = the producer decodes both (the ablation).  The producer's decode of K and V bounded these
// kernels at about 20 GB/s of codes per SM; with V off its path they are 9-15% faster at 64 rows per K/V head, bit
// for bit the same (2026-11-29, 1x H200, experiments/2026-11-29-sdpa-decode-wgmma call 10).
#ifndef SDPA_SM90_KV_VDEC
#define SDPA_SM90_KV_VDEC 1
#endif
static_assert(SDPA_SM90_KV_VDEC == 0 || SDPA_SM90_KV_VDEC == 1, "SDPA_SM90_KV_VDEC: 0 or 1");
#ifndef SDPA_SM90_KV_VDEC_PRODUCER_REGS
#define SDPA_SM90_KV_VDEC_PRODUCER_REGS 56
#endif
#ifndef SDPA_SM90_KV_VDEC_BATCH
#define SDPA_SM90_KV_VDEC_BATCH 4
#endif
// The key-chunk configuration (KVCHUNK, tile_plan.cuh; kernel.cuh kv_tier) in the fp8 tier too: 1 (default) = both
// tiers, 0 = the fp16 tier's only (the fp8 tier's decode-shaped cases then go to the decode kernel alone).  It was 0
// until the split configuration's K stages were made even at head dim 128 (fp8_traits.cuh NS): with 3 its cpasync
// variant failed 4-stream soaks; with 4 the same soaks pass (experiments/2026-11-29-sdpa-decode-wgmma calls 5-8).
#ifndef SDPA_SM90_KV_FP8
#define SDPA_SM90_KV_FP8 1
#endif
static_assert(SDPA_SM90_KV_FP8 == 0 || SDPA_SM90_KV_FP8 == 1, "SDPA_SM90_KV_FP8: 0 or 1");

// ---- both tiers (fp8_traits.cuh, traits.cuh, kernel.cuh; the fp16 tier since 2026-11-26, measured there on
// 2026-11-27: experiments/2026-11-27-sdpa-fp16-persistent, 1x H100, outputs bit-identical; one unit per block is
// 4.6% slower cold at (2,16,2048,64), 8-9.5% at (8,8,1024,64), 2.5-2.8% at (4,16,1024,128), a tie at
// (2,16,2048,128), and within the run-to-run noise of 2-7% at (1,16,8192,128))
// SDPA_SM90_PERSISTENT = 1 (default) or 0: the unsplit kernels run one block per SM (at most), each
// taking the work units (the tiles of tile_plan.cuh) blockIdx.x, blockIdx.x + gridDim.x, ... in
// turn.  The K/V ring runs on across units, so the producer brings the next unit's first tiles in
// while the consumers finish the current one; Q is two buffers deep, the next unit's loaded during
// the current one (Q empty: the epilogue, which stages O in the Q rows, is done with a buffer; the fp16
// tier at head dim 128 has room for one, loaded after the last unit's epilogue, prefetched to L2).  The
// ping-pong turn passes straight from a unit's last P V to the next unit's first Q K^T.  0 = one
// unit per block (the grid of every build before); the split configuration and the ablations are
// always one unit per block.
#ifndef SDPA_SM90_PERSISTENT
#define SDPA_SM90_PERSISTENT 1
#endif
