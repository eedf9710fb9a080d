// SDPA forward for Hopper (sm_90a) on K/V stored as E4M3, both precision tiers: the thin kernel that wires
// the parts, and its host side (the tier's configuration, tensor maps, launch).
//
//   O = softmax(Q K^T / sqrt(D) + mask) V,  K = decode(K_u8) * k_scale,  V = decode(V_u8) * v_scale
//   Q fp16 [B,Hq,Sq,D], K/V uint8 E4M3 codes [B,Hkv,Skv,D], O fp16 [B,Hq,Sq,D]; D = 64 or 128; every case of
//   ../sdpa_fp8/attn_shape.h: query head h reads K/V head h / G (G = Hq / Hkv), Sq and Skv >= 1, and the
//   bottom-right causal mask (row i sees keys j <= i + Skv - Sq; Sq <= Skv) or none (tile_plan.cuh: which
//   units, in which order, with which K/V tiles).
//
// One kernel template, instantiated per tier's traits (KernelTraits<FP8, ...>; the tier is a run-time
// choice, select_config(precision, ...)), and since 2026-11-26 one skeleton for both tiers: a producer
// warpgroup (producer.cuh) and two or three consumer warpgroups (mainloop.cuh), persistent blocks taking
// work units of 128 query rows of one (b, h) (64 in the split configuration; the fp8 tier at head dim 64
// also 192 with three consumer warpgroups, or 128 in a short tile of that kernel: tile_plan.cuh).  What
// differs between the tiers is a small policy:
//   fp16 tier (wgmma_sm90; traits.cuh Fp16Traits, tier_ops.cuh, tile_load.cuh): the producer decodes the
//     copy engine's uint8 K/V tiles into fp16 tiles in shared memory (baseline: from global loads), two
//     buffers deep; Q K^T reads fp16 Q and K from shared memory (k16), P is packed to fp16, P V reads V
//     MN-major; two consumer warpgroups, 128-key tiles.
//   fp8 tier (wgmma_fp8_sm90; fp8_traits.cuh, tier_ops.cuh, fp8_load.cuh): K used as it lands, V transposed
//     in shared memory, Q and P rounded to E4M3 in registers, E4M3 wgmma (k32); three consumer warpgroups
//     at head dim 64 (by the grid), 192-key tiles at head dim 128 (by Skv).
// In each tier both variants (USE_CP_ASYNC) load the same tiles into the same layout and run the same
// math, so their outputs are bit-identical.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../sdpa_fp8/attn_shape.h"
#include "../sdpa_fp8/chunk_workspace.h"
#include "epilogue.cuh"
#include "fp8_traits.cuh"
#include "mainloop.cuh"
#include "producer.cuh"
#include "ptx.cuh"
#include "tile_load.cuh"
#include "tile_plan.cuh"
#include "traits.cuh"

// Which matrix products the Hopper kernel runs is a run-time choice: the precision tier (see README.md
// "Tiers"). Every sm_90a build has both kernels:
//   fp16 tier (default): wgmma_sm90, fp16 operands (K and V decoded E4M3 -> fp16 in shared memory): the
//                        seeds' contract;
//   fp8 tier:            wgmma_fp8_sm90, E4M3 operands (Q and P rounded to E4M3, K used as loaded, V
//                        transposed in shared memory).
namespace sdpa_sm90 {

enum class Precision { kFp16 = 0, kFp8 = 1 };

inline const char* kernel_name(Precision p) { return p == Precision::kFp8 ? "wgmma_fp8_sm90" : "wgmma_sm90"; }
inline const char* precision_name(Precision p) { return p == Precision::kFp8 ? "fp8" : "fp16"; }

// NCWG: consumer warpgroups; 3 = the fp8 tier's unsplit head-dim-64 kernel of 192 rows per block.  BN: keys
// per K/V tile, the fp8 tier's at head dim 128 (128 or 192).  The fp16 tier has two consumer warpgroups and
// 128-key tiles (traits.cuh says why): NCWG and BN are ignored there.
// Q2: the fp8 tier's Q as two E4M3 terms (SDPA_SM90_FP8_Q2; two warpgroups, 128-key tiles, no ablation).
template <bool FP8, int D, bool ASYNC, int ABL, bool SPLIT, int NCWG = 2, int BN = 128, bool Q2 = false>
using KernelTraits = std::conditional_t<
    FP8, std::conditional_t<NCWG == 3, Fp8Traits3<D, ASYNC, ABL>, Fp8Traits<D, ASYNC, ABL, SPLIT, BN, Q2>>,
    Fp16Traits<D, ASYNC, ABL, SPLIT>>;
// Whether a tier has a three-consumer-warpgroup kernel (the fp8 tier's, at head dim 64).
template <bool FP8>
constexpr bool kHasNcwg3 = KernelTraits<FP8, 64, kAsync, kAblNone, false, 3>::NCWG == 3;

// CAUSAL: the kernel of the bottom-right causal mask (tile_plan.cuh CaseTraits: what it changes), a template
// argument of its own so that the tier's traits (and the entry names the build gates match) stay as they are.
// The kernel's body, T: CaseTraits (kv: the KVCHUNK kernels' key chunks; the others ignore it).
template <class T>
__device__ __forceinline__ void kernel_body(const TileMaps& maps, const __half* __restrict__ Q,
                                            const uint8_t* __restrict__ K, const uint8_t* __restrict__ V,
                                            __half* __restrict__ O, const TilePlan& plan, float scale_log2,
                                            float out_scale, const KvChunks& kv) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    // The swizzled tiles need 1024-byte alignment; the dynamic allocation has 1024 bytes of slack.
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const uint32_t bars = smem_u32(smem + T::OFF_BAR);
    auto bar = [&](int i) { return bars + 8u * (uint32_t)i; };

    if (threadIdx.x == 0) {
        if constexpr (T::FP8) {
            // One arrival per consumer warp (a warpgroup without rows in a unit takes and releases its
            // tiles all the same: consumer).
            for (int b = 0; b < T::NQ; ++b) {
                mbar_init(bar(T::BAR_Q + b), 1);
                mbar_init(bar(T::BAR_QEMPTY + b), T::CONSUMER_WARPS);
            }
            for (int s = 0; s < T::NS; ++s) {
                mbar_init(bar(T::BAR_KFULL + s), T::ASYNC ? 1 : 128);  // copy engine (+ bytes) or 128 producer threads
                mbar_init(bar(T::BAR_VRAW + s), 1);
                mbar_init(bar(T::BAR_KEMPTY + s), T::CONSUMER_WARPS);
            }
            for (int b = 0; b < T::NVT; ++b) {
                mbar_init(bar(T::BAR_VFULL + b), 128);
                mbar_init(bar(T::BAR_VEMPTY + b), T::CONSUMER_WARPS);
            }
        } else {
            // fp16 tier: the copy engine's stages (one arrival + bytes), the decoded buffers (128 producer
            // threads; one arrival per consumer warp when released).
            for (int b = 0; b < T::NQ; ++b) {
                mbar_init(bar(T::BAR_Q + b), 1);
                mbar_init(bar(T::BAR_QEMPTY + b), T::CONSUMER_WARPS);
            }
            for (int s = 0; s < T::NS; ++s) {
                mbar_init(bar(T::BAR_KRAW + s), 1);
                mbar_init(bar(T::BAR_VRAW + s), 1);
            }
            for (int b = 0; b < T::NKB; ++b) {
                mbar_init(bar(T::BAR_KFULL + b), 128);
                mbar_init(bar(T::BAR_KEMPTY + b), T::CONSUMER_WARPS);
            }
            for (int b = 0; b < T::NVB; ++b) {
                mbar_init(bar(T::BAR_VFULL + b), 128);
                mbar_init(bar(T::BAR_VEMPTY + b), T::CONSUMER_WARPS);
            }
        }
        fence_mbar_init();
        if constexpr (!T::FP8 && T::ROWSUM) {
            // The row sums' B (traits.cuh OFF_ONES): 16 rows of {1.0, 0 x 7} fp16, for the tensor core's reads.
            for (int r = 0; r < 16; ++r)
                *reinterpret_cast<uint4*>(smem + T::OFF_ONES + 16 * r) = make_uint4(0x3C00u, 0u, 0u, 0u);
            fence_proxy_async();
        }
        if constexpr (T::ASYNC) {
            prefetch_tensormap(&maps.q);
            prefetch_tensormap(&maps.k);
            prefetch_tensormap(&maps.v);
        }
    }
    __syncthreads();

    // Block coordinates are computed inside each role, after the register reallocation, so
    // that nothing is live across it.
    if (threadIdx.x < 128) {
        regs_dealloc<T::PRODUCER_REGS>();
        producer<T>(smem, bars, &maps, plan, K, V, kv);
    } else {
        regs_alloc<T::CONSUMER_REGS>();
        consumer<T>(smem, bars, plan, Q, O, scale_log2, out_scale, kv);
    }
#endif
}

template <class Traits, bool CAUSAL>
__global__ void __launch_bounds__(Traits::THREADS, 1)
sdpa_fp8_sm90_kernel(const __grid_constant__ TileMaps maps, const __half* __restrict__ Q, const uint8_t* __restrict__ K,
                     const uint8_t* __restrict__ V, __half* __restrict__ O, TilePlan plan, float scale_log2,
                     float out_scale) {
    kernel_body<CaseTraits<Traits, CAUSAL>>(maps, Q, K, V, O, plan, scale_log2, out_scale, KvChunks{});
}

// The KVCHUNK kernels (tile_plan.cuh: decode-shaped cases, packed rows, key chunks across blocks), an overload of
// the same name (its entries match the build gates' patterns): ROWMASK the packed rows' causal mask.  Traits: the
// split configuration with 128-key tiles.
template <class Traits, bool ROWMASK>
__global__ void __launch_bounds__(Traits::THREADS, 1)
sdpa_fp8_sm90_kernel(const __grid_constant__ TileMaps maps, const __half* __restrict__ Q, const uint8_t* __restrict__ K,
                     const uint8_t* __restrict__ V, __half* __restrict__ O, TilePlan plan, float scale_log2,
                     float out_scale, KvChunks kv) {
    kernel_body<CaseTraits<Traits, false, true, ROWMASK>>(maps, Q, K, V, O, plan, scale_log2, out_scale, kv);
}

// ------------------------------------------------------------------------------------------
// host side
// ------------------------------------------------------------------------------------------
// Which attention cases these kernels serve (attn_shape.h): since 2026-11-28 every one the runner accepts (grouped-query
// heads, Sq != Skv, the bottom-right causal mask with Sq <= Skv), within the index ranges of the kernels' 32-bit unit
// and row counters; false with the reason in *why for the others, which the runner refuses with exit 5 ("not offered
// here").
inline bool serves(const AttnShape& a, const char** why) {
    if (a.B < 1 || a.Hq < 1 || a.Hkv < 1 || a.Sq < 1 || a.Skv < 1 || a.Hq % a.Hkv != 0) {
        *why = "needs B, Hq, Hkv, Sq, Skv >= 1 and Hq a multiple of Hkv";
        return false;
    }
    if (a.causal && a.Sq > a.Skv) {
        *why = "the bottom-right causal mask needs Sq <= Skv (rows i < Sq - Skv would see no key)";
        return false;
    }
    if (a.B * a.Hq > ((int64_t)1 << 30) || a.Sq > ((int64_t)1 << 30) || a.Skv > ((int64_t)1 << 30)) {
        *why = "B*Hq, Sq and Skv must each be at most 2^30";
        return false;
    }
    return true;
}

struct LaunchInfo {
    const void* func = nullptr;
    int D = 0;
    int grid = 0;
    int block = 0;
    int smem = 0;
    int bm = 0;
    int bn = 0;
    int split = 1;  // 2: both consumer warpgroups on the same rows, alternate K/V tiles
    int ncwg = 2;   // consumer warpgroups (3: unsplit head dim 64, 192 rows per block)
    bool causal = false;  // the kernel of the causal mask (CaseTraits; kv: ROWMASK); else the one without
    int num_sms = 0;  // the SM count select_config was given
    int ablate = kAblNone;
    bool persistent = false;  // blocks take units grid apart (SDPA_SM90_PERSISTENT); else grid = units
    TilePlan plan{};  // full and short tiles per (b, h) (tile_plan.cuh); units = (full + nshort) * BH
    Precision precision = Precision::kFp16;  // the tier: which kernel family func belongs to
    int q_terms = 1;  // fp8 tier: E4M3 terms of Q in Q K^T (2: SDPA_SM90_FP8_Q2); the fp16 tier: 1 (fp16 Q)
    // The KVCHUNK kernels (decode-shaped cases: kv_shaped): the packed case (B * Hkv heads of G * Sq rows, group 1;
    // plan.bh, plan.sq), the key chunks per head and K/V tiles per chunk (kv_plan), the case's Sq (the rows' period).
    bool kv = false;
    int kv_chunks = 1;
    int kv_chunk_tiles = 0;
    int kv_sq = 0;
};

// Blocks of a grid of `units` work units: one per unit, or at most one per SM for a persistent kernel.
inline int grid_for(const LaunchInfo& li) {
    return li.persistent && li.num_sms > 0 && li.num_sms < li.plan.units ? li.num_sms : li.plan.units;
}

template <bool FP8, int D, int ABL, bool SPLIT, int NCWG, int BN, bool Q2, bool CAUSAL>
inline LaunchInfo info_for(int BH, int S) {
    using Base = KernelTraits<FP8, D, kAsync, ABL, SPLIT, NCWG, BN, Q2>;
    using T = CaseTraits<Base, CAUSAL>;
    LaunchInfo li;
    using Fn = void (*)(TileMaps, const __half*, const uint8_t*, const uint8_t*, __half*, TilePlan, float, float);
    li.func = reinterpret_cast<const void*>(static_cast<Fn>(&sdpa_fp8_sm90_kernel<Base, CAUSAL>));
    li.D = D;
    li.plan = make_tile_plan((S + T::BM - 1) / T::BM, 0, BH);
    li.grid = li.plan.units;  // select_config: grid_for
    li.block = T::THREADS;
    li.smem = T::SMEM;
    li.causal = CAUSAL;
    li.bm = T::BM;
    li.bn = T::BN;
    li.split = SPLIT ? 2 : 1;
    li.ncwg = T::NCWG;
    li.ablate = ABL;
    li.precision = FP8 ? Precision::kFp8 : Precision::kFp16;
    li.persistent = T::PERSIST;
    li.q_terms = T::Q2 ? 2 : 1;
    return li;
}

// The KVCHUNK kernel of a tier and head dim (tile_plan.cuh): the split configuration, 128-key tiles, Q in one term;
// rowmask: the packed rows' causal mask.  BH, S: the packed heads and rows.
template <bool FP8, int D, bool ROWMASK>
inline LaunchInfo info_for_kv(int BH, int S) {
    using Base = KernelTraits<FP8, D, kAsync, kAblNone, true, 2, 128, false>;
    using T = CaseTraits<Base, false, true, ROWMASK>;
    using Fn = void (*)(TileMaps, const __half*, const uint8_t*, const uint8_t*, __half*, TilePlan, float, float, KvChunks);
    LaunchInfo li = info_for<FP8, D, kAblNone, true, 2, 128, false, false>(BH, S);
    li.func = reinterpret_cast<const void*>(static_cast<Fn>(&sdpa_fp8_sm90_kernel<Base, ROWMASK>));
    li.smem = T::SMEM;
    li.kv = true;
    return li;
}

// causal: the kernel of the mask (no ablation: select_config refuses the pair).
template <bool FP8, int D, bool SPLIT, int NCWG = 2, int BN = 128>
inline LaunchInfo info_for(int BH, int S, int ablate, bool q2, bool causal) {
    // Two Q terms only for the fp8 tier's two-warpgroup, 128-key kernels without ablation (select_config).
    if constexpr (FP8 && NCWG == 2 && BN == 128)
        if (q2 && ablate == kAblNone)
            return causal ? info_for<FP8, D, kAblNone, SPLIT, NCWG, BN, true, true>(BH, S)
                          : info_for<FP8, D, kAblNone, SPLIT, NCWG, BN, true, false>(BH, S);
    if (causal) return info_for<FP8, D, kAblNone, SPLIT, NCWG, BN, false, true>(BH, S);
    switch (ablate) {
        case kAblNoCompute: return info_for<FP8, D, kAblNoCompute, SPLIT, NCWG, BN, false, false>(BH, S);
        case kAblNoLoads: return info_for<FP8, D, kAblNoLoads, SPLIT, NCWG, BN, false, false>(BH, S);
        default: return info_for<FP8, D, kAblNone, SPLIT, NCWG, BN, false, false>(BH, S);
    }
}

// Split (both consumer warpgroups on the same 64 rows, alternate K/V tiles) when the unsplit grid
// would fill at most half of the SMs and there are at least two K/V tiles: twice the blocks,
// half the tiles per warpgroup.  split_override: 0 = that rule, 1 = unsplit, 2 = split.
// Head dim 64, unsplit, FP8 tier: three consumer warpgroups (192 rows per block) or two (128) by
// ncwg_policy (SDPA_SM90_NCWG3_D64, config.cuh): 0 = two; 1 = three when the three-warpgroup grid
// has at least num_sms blocks (one full wave), the split rule taken on the two-warpgroup grid (so
// every shape it splits splits as with two), and with the causal mask only where the makespan model
// (tile_plan.cuh causal_makespan) does not find two shorter; 2 = three, the split rule on the
// three-warpgroup grid.
// Then, unsplit (both tiers), the tile plan (tile_plan.cuh) by plan_policy
// (SDPA_SM90_TILE_PLAN: it chooses only for three consumer warpgroups; two keep full tiles).
// Head dim 128, FP8 tier: 128-, 192- or 256-key tiles by bn_policy (SDPA_SM90_BN_D128, config.cuh; fp8_traits.cuh
// bn_d128, prefers_bn256), chosen first: the split rule counts K/V tiles of that width.
// FP8 tier, last: Q as one or two E4M3 terms by q2_policy (SDPA_SM90_FP8_Q2, config.cuh): 0 = one; 1 = two
// for a short launch (fp8_q2_short: less than one wave of work units, at most 8 K/V tiles per consumer
// warpgroup at head dim 64, 4 at 128) where the kernel has them (two consumer warpgroups, 128-key tiles, no
// ablation); 2 = two wherever the kernel has them.
// FP8 tier, head dim 128, where the 256-key kernel would run: three consumer warpgroups on 128-key tiles instead by
// ncwg128_policy (SDPA_SM90_NCWG3_D128, config.cuh): 0 = never; 1 = where tile_plan.cuh prefers_ncwg3_d128's makespan
// model finds them faster; 2 = always (cpasync builds; the baseline keeps the 256-key kernel).
// Returns false (reason in *err) for an unsupported head dim, override or policy, or a grid too large.
// The attention case (attn_shape.h): units are (query head, rows of Sq), so BH = B * Hq and S = Sq count the rows
// and units; K/V tiles count Skv (the split rule, the 192-key choice, the short-launch rule take ceil(Skv / BN), the
// tiles of the heaviest unit); the causal mask keeps full tiles (choose_tile_plan) and orders the units heaviest
// first (tile_plan.cuh).
// Decode-shaped cases (few query rows per K/V head, as ../sdpa_decode/plan.h decode_shaped counts them: G * Sq <= 64,
// not the square MHA case) run the KVCHUNK kernels (tile_plan.cuh): the G query heads of a K/V head packed into one
// block of G * Sq <= 64 rows (the split configuration: both consumer warpgroups on them, alternate K/V tiles), its
// keys cut into chunks across blocks, so that K/V is read once and the grid fills the GPU.  Not with a --split
// override or an ablation (those run the per-head units as before).
constexpr int64_t kKvMaxRows = 64;
inline bool kv_shaped(const AttnShape& a) { return !a.square_mha() && a.group() * a.Sq <= kKvMaxRows; }
// The tiers that have them: both (SDPA_SM90_KV_FP8, config.cuh; 0 leaves the fp8 tier's decode-shaped cases to the
// decode kernel).  The fp8 tier's failed 4-stream soaks while its split configuration had 3 K stages at head dim 128
// (mbarrier parity aliasing between the warpgroups' alternate tiles); with 4 they pass
// (experiments/2026-11-29-sdpa-decode-wgmma calls 5-8).
inline bool kv_tier(bool fp8) { return !fp8 || SDPA_SM90_KV_FP8 != 0; }
// The runner's --kernel auto on an sm_90 GPU takes these kernels over the decode kernel (../sdpa_decode, mma.sync) for
// decode-shaped cases of at least kv_auto_min_rows query rows per K/V head, where the warpgroup MMA's rate pays; fewer
// rows stay with the decode kernel (64-row tiles would be mostly padding).  Measured on 1x H200, cold
// (experiments/2026-11-29-sdpa-decode-wgmma call 11):
// - fp16 tier, from 33 rows: at 64 rows 1.11-1.68x the decode kernel; at 32 rows and fewer 0.73-0.94x (the key chunks
//   decode every K tile in the producer: about 185 us at B 8, Skv 32K whatever the rows), where the decode kernel
//   runs its two-warp groups (from 33 rows its four-warp groups, its 64-row cost).
// - fp8 tier, from 17 rows: no decode, so the key chunks stream at 0.84-0.86 of the copy bandwidth at B 8, Skv 32K: at 64
//   rows 1.30-2.58x the decode kernel, at 32 rows 1.01-1.37x but 0.87x at B 1 MQA (34.1 against 29.8 us), at 4-16
//   rows 0.92-1.02x (a tie at large B, behind at small).
constexpr int64_t kKvAutoMinRowsFp16 = 33;
constexpr int64_t kKvAutoMinRowsFp8 = 17;
inline int64_t kv_auto_min_rows(bool fp8) { return fp8 ? kKvAutoMinRowsFp8 : kKvAutoMinRowsFp16; }
inline bool kv_auto_preferred(bool fp8, const AttnShape& a) {
    return kv_tier(fp8) && kv_shaped(a) && a.group() * a.Sq >= kv_auto_min_rows(fp8);
}
// Key chunks per packed head (kv_plan): each consumer warpgroup keeps at least kKvMinTilesPerWg tiles of 128 keys in
// a chunk (fewer spend the block on its pipeline's fill), and the merge's weights fit the Q buffer (64 rows x 8 bytes
// per chunk: 16 chunks at head dim 64, 32 at 128).  The count: with base = B * Hkv blocks short of one per SM,
// floor(SMs / base) chunks (one wave, every SM streaming to the end, as the decode kernel's plan does); with a wave or
// more, 1 .. kKvMaxWaveChunks chunks, the count whose last wave is fullest (the fewest on a tie).
constexpr int kKvMinTilesPerWg = 2;
constexpr int kKvMaxWaveChunks = 4;
inline int kv_max_chunks(int D) { return D * 2 * 64 / (64 * 8); }
inline void kv_plan(const AttnShape& a, int num_sms, int* chunks, int* chunk_tiles) {
    const int64_t tiles = (a.Skv + 127) / 128, base = a.B * a.Hkv, slots = num_sms > 0 ? num_sms : 1;
    int64_t cap = tiles / (2 * kKvMinTilesPerWg);
    if (cap > kv_max_chunks((int)a.D)) cap = kv_max_chunks((int)a.D);
    if (cap < 1) cap = 1;
    auto fill = [&](int64_t blocks) {
        const int64_t waves = (blocks + slots - 1) / slots;
        return (double)blocks / (double)(waves * slots);
    };
    int64_t n = 1;
    if (base < slots) {
        n = slots / base;
    } else {
        for (int64_t k = 2; k <= kKvMaxWaveChunks && k <= cap; ++k)
            if (fill(base * k) > fill(base * n) + 1e-9) n = k;
    }
    if (n > cap) n = cap;
    const int64_t ct = (tiles + n - 1) / n;
    *chunk_tiles = (int)ct;
    *chunks = (int)((tiles + ct - 1) / ct);  // no empty chunk
}

template <bool FP8>
inline bool select_config_tier(const AttnShape& a, int num_sms, int split_override, int ablate, LaunchInfo* li,
                               const char** err, int ncwg_policy, int plan_policy, int bn_policy, int q2_policy,
                               int ncwg128_policy) {
    if (ablate < kAblNone || ablate > kAblNoLoads) { *err = "bad ablation mode"; return false; }
    const int D = (int)a.D;
    if (D != 64 && D != 128) { *err = "unsupported head dim (supported: 64, 128)"; return false; }
    if (!serves(a, err)) return false;
    if (a.causal && ablate != kAblNone) {
        *err = "--ablate runs the kernels without the causal mask only (a diagnostic, not built with it): drop --causal or --ablate";
        return false;
    }
    const int BH = (int)(a.B * a.Hq), S = (int)a.Sq, Skv = (int)a.Skv;
    if (split_override < 0 || split_override > 2) {
        *err = FP8 ? "--split for wgmma_fp8_sm90 must be 0, 1 or 2" : "--split for wgmma_sm90 must be 0, 1 or 2";
        return false;
    }
    if (ncwg_policy < 0 || ncwg_policy > 2) { *err = "SDPA_SM90_NCWG3_D64 must be 0, 1 or 2"; return false; }
    if (kv_tier(FP8) && kv_shaped(a) && split_override == 0 && ablate == kAblNone) {
        const int BHp = (int)(a.B * a.Hkv), Sp = (int)(a.group() * a.Sq);
        const bool rm = a.causal;
        if constexpr (!FP8 || SDPA_SM90_KV_FP8 != 0) {
            if (D == 64) *li = rm ? info_for_kv<FP8, 64, true>(BHp, Sp) : info_for_kv<FP8, 64, false>(BHp, Sp);
            else *li = rm ? info_for_kv<FP8, 128, true>(BHp, Sp) : info_for_kv<FP8, 128, false>(BHp, Sp);
        }
        kv_plan(a, num_sms, &li->kv_chunks, &li->kv_chunk_tiles);
        if ((long long)BHp * li->kv_chunks > 0x7fffffffLL) { *err = "grid too large"; return false; }
        li->kv_sq = (int)a.Sq;
        li->causal = a.causal;  // the kernel of the mask: here the packed rows' (ROWMASK)
        li->num_sms = num_sms;
        AttnShape packed = a;
        packed.Hq = a.Hkv;
        packed.Sq = Sp;
        packed.causal = false;  // the mask is the packed rows' (ROWMASK), on the tiles without it
        li->plan = with_case(make_tile_plan(1, 0, BHp * li->kv_chunks), packed);
        li->grid = li->plan.units;
        return true;
    }
    if (q2_policy < 0 || q2_policy > 2) { *err = "SDPA_SM90_FP8_Q2 must be 0, 1 or 2"; return false; }
    if (ncwg128_policy < 0 || ncwg128_policy > 2) { *err = "SDPA_SM90_NCWG3_D128 must be 0, 1 or 2"; return false; }
    if (plan_policy < 0 || plan_policy > 2) { *err = "SDPA_SM90_TILE_PLAN must be 0, 1 or 2"; return false; }
    if (bn_policy != 0 && bn_policy != 128 && bn_policy != 192 && bn_policy != 256) {
        *err = "SDPA_SM90_BN_D128 must be 0, 128, 192 or 256";
        return false;
    }
    // Unsplit blocks with two consumer warpgroups (128 rows; the largest unsplit grid) and, where
    // this tier has them at this head dim, three (192 rows).
    const int bm2 = KernelTraits<FP8, 64, kAsync, kAblNone, false>::BM;
    static_assert(KernelTraits<FP8, 64, kAsync, kAblNone, false>::BM == KernelTraits<FP8, 128, kAsync, kAblNone, false>::BM,
                  "two consumer warpgroups: the same rows per block at both head dims");
    const int bm3 = KernelTraits<FP8, 64, kAsync, kAblNone, false, 3>::BM;
    const long long blocks2 = ((long long)S + bm2 - 1) / bm2 * BH;
    const long long blocks3 = ((long long)S + bm3 - 1) / bm3 * BH;
    if (2 * blocks2 > 0x7fffffffLL) { *err = "grid too large"; return false; }  // >= the split grid
    const bool can3 = kHasNcwg3<FP8> && D == 64 && ncwg_policy != 0;
    // With the causal mask, policy 1 takes two consumer warpgroups where their makespan model is the shorter
    // (tile_plan.cuh causal_makespan; grids of more than kMaxPlanWaves waves keep three, whose tiles cost less per row).
    using Causal2 = CaseTraits<KernelTraits<FP8, 64, kAsync, kAblNone, false>, true>;
    using Causal3 = CaseTraits<KernelTraits<FP8, 64, kAsync, kAblNone, false, 3>, true>;
    const bool causal_two =
        can3 && a.causal && ncwg_policy == 1 && blocks3 <= (long long)kMaxPlanWaves * num_sms &&
        causal_makespan<Causal2>(with_case(make_tile_plan((int)(blocks2 / BH), 0, BH), a), num_sms) <
            causal_makespan<Causal3>(with_case(make_tile_plan((int)(blocks3 / BH), 0, BH), a), num_sms);
    // Keys per K/V tile: head dim 128 in the FP8 tier by Skv, else the traits' own.  Policy 0: 128 or 192 by bn_d128,
    // then 256 where prefers_bn256 says and that launch is unsplit with Q in one term (fp8_traits.cuh); policy 128,
    // 192 or 256: that width.  The 256-key kernel runs unsplit and without ablation: a launch that would split on its
    // tiles, or an ablation, takes policy 0's 128 or 192 instead (pick_for).
    struct Pick {
        int bn;
        bool split, three, q2;
    };
    auto pick_for = [&](int bn_pick) {
        if (bn_pick == 256) {
            const int nt256 = (Skv + 255) / 256;
            const bool split256 = split_override == 2 || (split_override == 0 && nt256 >= 2 && 2 * blocks2 <= num_sms);
            if (split256 || ablate != kAblNone) bn_pick = bn_d128(Skv, 0);
        }
        const bool wide256 = FP8 && D == 128 && bn_pick == 256;
        const bool wide = FP8 && D == 128 && bn_pick == 192;
        const int bn = wide256 ? 256 : wide ? 192 : D == 64 ? KernelTraits<FP8, 64, kAsync, kAblNone, false>::BN
                                                            : KernelTraits<FP8, 128, kAsync, kAblNone, false>::BN;
        const int ntiles = (Skv + bn - 1) / bn;
        const long long split_blocks = can3 && ncwg_policy == 2 ? blocks3 : blocks2;
        const bool split = split_override == 2 || (split_override == 0 && ntiles >= 2 && 2 * split_blocks <= num_sms);
        const bool three = !split && can3 && (ncwg_policy == 2 || (blocks3 >= num_sms && !causal_two));
        const long long units2 = ((long long)S + (split ? 63 : 127)) / (split ? 64 : 128) * BH;
        const int tiles_per_wg = split ? (ntiles + 1) / 2 : ntiles;
        const bool q2 = FP8 && !three && !wide && !wide256 &&
                        (q2_policy == 2 || (q2_policy == 1 && fp8_q2_short(units2, tiles_per_wg, D, num_sms)));
        return Pick{bn, split, three, q2};
    };
    Pick pk = pick_for(bn_d128(Skv, bn_policy));
    if (FP8 && D == 128 && bn_policy == 0 && ablate == kAblNone && !pk.split && !pk.q2 &&
        prefers_bn256(Skv, a.causal, pk.bn)) {
        const Pick w = pick_for(256);
        if (w.bn == 256) pk = w;
    }
    const bool wide256 = pk.bn == 256, wide = FP8 && D == 128 && pk.bn == 192;
    const bool split = pk.split, three = pk.three, q2 = pk.q2;
    const bool c = a.causal;  // the kernel of the mask, or the one without (every other case: kernels of 90347d1)
    if (D == 64) {
        if (split) *li = info_for<FP8, 64, true>(BH, S, ablate, q2, c);
        else if (three) *li = info_for<FP8, 64, false, 3>(BH, S, ablate, false, c);
        else *li = info_for<FP8, 64, false>(BH, S, ablate, q2, c);
    } else {
        // SDPA_SM90_NCWG3_D128 (config.cuh): the three-warpgroup kernel where the 256-key kernel would run
        // (unsplit, Q in one term, no ablation), by tile_plan.cuh prefers_ncwg3_d128 under policy 1 (cpasync builds).
        bool three128 = false;
        if constexpr (FP8 && kAsync) {
            using Three = KernelTraits<FP8, 128, kAsync, kAblNone, false, 3, 128>;
            using Wide = KernelTraits<FP8, 128, kAsync, kAblNone, false, 2, 256>;
            if (wide256 && ncwg128_policy != 0 &&
                (ncwg128_policy == 2 ||
                 prefers_ncwg3_d128<CaseTraits<Three, true>, CaseTraits<Wide, true>>(a, num_sms, Three::PERSIST,
                                                                                     plan_policy))) {
                *li = c ? info_for<FP8, 128, kAblNone, false, 3, 128, false, true>(BH, S)
                        : info_for<FP8, 128, kAblNone, false, 3, 128, false, false>(BH, S);
                three128 = true;
            }
        }
        if (three128) {
        } else if (wide256) {
            if constexpr (FP8)
                *li = c ? info_for<FP8, 128, kAblNone, false, 2, 256, false, true>(BH, S)
                        : info_for<FP8, 128, kAblNone, false, 2, 256, false, false>(BH, S);
        } else if (wide) *li = split ? info_for<FP8, 128, true, 2, 192>(BH, S, ablate, false, c)
                              : info_for<FP8, 128, false, 2, 192>(BH, S, ablate, false, c);
        else *li = split ? info_for<FP8, 128, true>(BH, S, ablate, q2, c) : info_for<FP8, 128, false>(BH, S, ablate, q2, c);
    }
    li->num_sms = num_sms;
    if (li->split == 1)
        li->plan = choose_tile_plan(BH, S, li->bm, li->ncwg, num_sms, li->persistent, plan_policy, a.causal);
    li->plan = with_case(li->plan, a);
    li->grid = grid_for(*li);  // units <= the split grid, checked above
    return true;
}

// The tier's kernel and its configuration: the one tile selection of both tiers (the policies above that
// concern three consumer warpgroups and 192-key tiles apply to the fp8 tier; the fp16 kernel has two
// consumer warpgroups, 128-key tiles and so full tiles only, persistent as the fp8 tier's).
inline bool select_config(Precision precision, const AttnShape& a, int num_sms, int split_override, int ablate,
                          LaunchInfo* li, const char** err, int ncwg_policy = SDPA_SM90_NCWG3_D64,
                          int plan_policy = SDPA_SM90_TILE_PLAN, int bn_policy = SDPA_SM90_BN_D128,
                          int q2_policy = SDPA_SM90_FP8_Q2, int ncwg128_policy = SDPA_SM90_NCWG3_D128) {
    return precision == Precision::kFp8
               ? select_config_tier<true>(a, num_sms, split_override, ablate, li, err, ncwg_policy, plan_policy,
                                          bn_policy, q2_policy, ncwg128_policy)
               : select_config_tier<false>(a, num_sms, split_override, ablate, li, err, ncwg_policy, plan_policy,
                                           bn_policy, q2_policy, ncwg128_policy);
}

// Tensor maps for the copy engine: Q fp16 {D, Sq, B Hq} in boxes {64, BM, 1} with the 128-byte
// swizzle (one box per 64-column panel); K, V uint8 {D, Skv, B Hkv} in boxes {D, BN, 1} (rows past Skv
// read as zero; strides 64-bit: K and V may hold more than 2^31 elements).  The baseline does not use
// them (zeroed maps).
inline cudaError_t make_maps(TileMaps* maps, const LaunchInfo& li, const __half* q, const uint8_t* k,
                             const uint8_t* v, const AttnShape& a, const char** err) {
    *maps = TileMaps{};
    if (!kAsync) return cudaSuccess;
    const bool fp8 = li.precision == Precision::kFp8;
    maps->next_stride = SDPA_SM90_L2_PREFETCH_NEXT ? li.num_sms : 0;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult qr;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr);
    if (e != cudaSuccess) return e;
    if (qr != cudaDriverEntryPointSuccess || fn == nullptr) {
        *err = "cuTensorMapEncodeTiled is not available from the driver";
        return cudaErrorNotSupported;
    }
    auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    const cuuint64_t D = (cuuint64_t)li.D;
    const cuuint32_t ones[3] = {1, 1, 1};
    {
        // KVCHUNK: the packed case's B * Hkv heads of G * Sq rows (the same bytes).
        const cuuint64_t rows = li.kv ? (cuuint64_t)li.plan.sq : (cuuint64_t)a.Sq;
        const cuuint64_t heads = li.kv ? (cuuint64_t)li.plan.bh : (cuuint64_t)(a.B * a.Hq);
        const cuuint64_t dims[3] = {D, rows, heads};
        const cuuint64_t strides[2] = {D * 2, D * 2 * rows};
        const cuuint32_t box[3] = {64, (cuuint32_t)li.bm, 1};
        if (encode(&maps->q, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<__half*>(q), dims, strides, box, ones,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
            *err = "cuTensorMapEncodeTiled failed for Q";
            return cudaErrorInvalidValue;
        }
    }
    const cuuint64_t dims[3] = {D, (cuuint64_t)a.Skv, (cuuint64_t)(a.B * a.Hkv)};
    const cuuint64_t strides[2] = {D, D * (cuuint64_t)a.Skv};
    const cuuint32_t box[3] = {(cuuint32_t)D, (cuuint32_t)li.bn, 1};
    // FP8 operands: K lands in the swizzled K-major layout wgmma reads (rows of D bytes: 64- or
    // 128-byte swizzle); V unswizzled (the producer transposes it).  fp16 operands: both unswizzled.
    const CUtensorMapSwizzle k_swizzle = !fp8 ? CU_TENSOR_MAP_SWIZZLE_NONE
                                         : li.D == 64   ? CU_TENSOR_MAP_SWIZZLE_64B
                                                        : CU_TENSOR_MAP_SWIZZLE_128B;
    // SDPA_SM90_VT_LDSM: V of head dim 128 with the 128-byte swizzle too, for the producer's ldmatrix (fp8_load.cuh);
    // always for the 256-key kernel and the three-warpgroup one (ncwg 3 at head dim 128: fp8_traits.cuh P24).
    const CUtensorMapSwizzle v_swizzle =
        fp8 && li.D == 128 && (SDPA_SM90_VT_LDSM != 0 || li.bn == 256 || (li.ncwg == 3 && kAsync)) ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE;
    for (int i = 0; i < 2; ++i) {
        if (encode(i == 0 ? &maps->k : &maps->v, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3,
                   const_cast<uint8_t*>(i == 0 ? k : v), dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   i == 0 ? k_swizzle : v_swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
            *err = i == 0 ? "cuTensorMapEncodeTiled failed for K" : "cuTensorMapEncodeTiled failed for V";
            return cudaErrorInvalidValue;
        }
    }
    return cudaSuccess;
}

// The KVCHUNK kernels' chunk partials and counters (tile_plan.cuh KvChunks) for one stream's launches (launches in
// flight at once on different streams need one each); nothing for the other kernels or one chunk.  The counters are
// zeroed here and by every launch's last blocks after.
using Workspace = sdpa_chunks::Workspace;  // (../sdpa_fp8/chunk_workspace.h, shared with the decode kernel)
// 64 slots (rows) per block; one counter per packed head.
inline cudaError_t workspace_alloc(const LaunchInfo& li, Workspace* ws) {
    *ws = Workspace{};
    if (!li.kv || li.kv_chunks <= 1) return cudaSuccess;
    return sdpa_chunks::workspace_alloc((size_t)li.grid * 64, li.D, (size_t)li.plan.bh, ws);
}

// The case is in li.plan (with_case); ws: the stream's workspace (KVCHUNK kernels of more than one chunk).
inline cudaError_t launch(const LaunchInfo& li, const TileMaps& maps, const __half* q, const uint8_t* k,
                          const uint8_t* v, __half* o, float k_scale, float v_scale, cudaStream_t stream,
                          const Workspace& ws = Workspace{}) {
    const float scale_log2 = k_scale * 1.4426950408889634f / sqrtf((float)li.D);
    TilePlan plan = li.plan;
    KvChunks kv{li.kv_chunks, li.kv_chunk_tiles, li.kv_sq, ws.part_o, ws.part_ml, ws.counters};
    void* args[] = {(void*)&maps, (void*)&q, (void*)&k, (void*)&v, (void*)&o, (void*)&plan, (void*)&scale_log2,
                    (void*)&v_scale, (void*)&kv};
    cudaError_t e = cudaLaunchKernel(li.func, dim3(li.grid), dim3(li.block), args, (size_t)li.smem, stream);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
}

}  // namespace sdpa_sm90
