// Split-KV (flash-decoding) SDPA forward for few query rows on E4M3-stored K/V: `decode_sm89` (fp16 tier) and
// `decode_fp8_sm89` (fp8 tier), sm_89 and newer (mma.sync; cvt and MMA on E4M3).  README.md has the design.
//
// Block (b, hkv, split, mblock) (plan.h): WK key groups of WM warps; warp (group, wm) holds RT 16-row tiles, the rows
// 16 RT wm .. 16 RT (wm + 1) - 1 of the block (all query heads of K/V head hkv times all queries: one K/V read serves
// them all) and runs the online softmax over its group's 32-key tiles of the chunk:
//   baseline (USE_CP_ASYNC=0): each tile fetched straight from global memory into registers;
//   cpasync: each group streams its tiles through a ring of kStages shared-memory stages with cp.async, kStages-1
//            tiles ahead; per tile: wait -> group barrier -> refill the stage read one tile ago -> fetch -> math.
// Then the block merges its groups' states through shared memory, and either writes O (one chunk) or its partial
// (O unnormalized, m, l in fp32) to the workspace; the last block of a (b, hkv, mblock) to finish (an atomic
// counter, reset by that block) merges the chunks' partials in chunk order and writes O.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../sdpa_fp8/attn_shape.h"
#include "../sdpa_fp8/chunk_workspace.h"
#include "plan.h"
#include "ptx.cuh"
#include "tier_ops.cuh"
#include "tile_load.cuh"

#ifndef USE_CP_ASYNC
#define USE_CP_ASYNC 0
#endif

namespace sdpa_decode {

constexpr bool kAsync = USE_CP_ASYNC != 0;

enum class Tier { kFp16 = 0, kFp8 = 1 };
// The names the runner's JSON line carries (driver/records.py SdpaLine.kernel).
inline const char* kernel_name(Tier t) { return t == Tier::kFp8 ? "decode_fp8_sm89" : "decode_sm89"; }

struct Params {
    const __half* q;
    const uint8_t* k;
    const uint8_t* v;
    __half* o;
    float* part_o;   // [B*Hkv*mblocks][nsplit][rows_per_block][D]
    float* part_ml;  // [B*Hkv*mblocks][nsplit][rows_per_block][2]: m, l
    int* counters;   // [B*Hkv*mblocks], zero between launches
    int64_t Sq, Skv, rows, mblocks, nsplit, chunk_tiles, tiles;
    float score_scale;  // k_scale * log2(e) / sqrt(D)
    float v_scale;
    int causal;
};

template <int D, int WM, bool FP8, int RT = 1>
struct Traits {
    static_assert(RT == 1 || (RT == 2 && WM == 1 && !FP8), "two row tiles per warp: the fp16 tier, one warp per group");
    static constexpr int WK = RT == 2 ? 8 : WM == 4 ? 2 : 4;  // plan.h groups_for
    static constexpr int TG = 32 * WM;          // threads per key group
    static constexpr int NT = TG * WK;          // threads per block
    static constexpr int MB = kRowsPerWarp * WM * RT;
    using Geo = TileGeom<D>;
    using Ops = std::conditional_t<RT == 2, Fp16Ops2<D>, std::conditional_t<FP8, Fp8Ops<D>, Fp16Ops<D>>>;
    static constexpr int kRing = kAsync ? WK * Geo::kStages * Geo::kStageBytes : 0;
    static constexpr int kQOff = kRing;  // RT 2: Q's fragments after the ring (dead before the merge buffer's use)
    static constexpr int kQBytes = RT == 2 ? Fp16Ops2<D>::kQBytes : 0;
    // merge buffer row (floats).  D 128: channels in order, 16-byte unit 4 n + (q ^ (n >> 1)) for channels
    // 16 n + 4 q .. + 3 (column n of the MMA tiles; the XOR and the pitch of 36 units keep the writes' and the reads'
    // 16-byte accesses free of bank conflicts); D 64: column tile j, column n at 8 j + n.
    static constexpr int kPitch = D == 128 ? D + 16 : D + 8;
    static constexpr int kMerge = WK * MB * kPitch * 4 + 2 * WK * MB * 4;
    static constexpr int kFinal = 2 * kMaxSplitRows * 4;
    static constexpr int kSmemA = kRing + kQBytes > kMerge ? kRing + kQBytes : kMerge;
    static constexpr int kSmem = kSmemA > kFinal ? kSmemA : kFinal;
    static constexpr int kMinBlocks = blocks_per_sm_for(WM, RT);
    static_assert(WK + 1 <= 16, "named barriers 1..WK");
};

// The threads of one key group in step: a group of one warp (WM 1) by __syncwarp, which orders the lanes' shared
// memory accesses as a barrier does (and costs less than a 32-thread named barrier); larger groups by their named
// barrier (1 + grp).
template <int TG, int WK>
__device__ __forceinline__ void group_sync(int grp) {
    if constexpr (TG == 32) {
        __syncwarp();
    } else {
        group_barrier<TG, 0, WK>(grp);
    }
}

template <int D, int WM, bool FP8, int RT>
__device__ __forceinline__ void decode_block(const Params& p) {
    using T = Traits<D, WM, FP8, RT>;
    using Geo = TileGeom<D>;
    using Ops = typename T::Ops;
    constexpr int WK = T::WK, MB = T::MB, NT = T::NT;
    extern __shared__ __align__(128) uint8_t dec_smem[];
    uint8_t* smem = dec_smem;
    __shared__ int s_last;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // warp-uniform by construction; the shuffle tells ptxas so
    const int grp = __shfl_sync(0xffffffffu, warp / WM, 0), wm = __shfl_sync(0xffffffffu, warp % WM, 0);
    const int g = lane >> 2, t = lane & 3;
    int64_t bi = blockIdx.x;
    const int64_t mblk = bi % p.mblocks;
    bi /= p.mblocks;
    const int64_t split = bi % p.nsplit;
    const int64_t bh = bi / p.nsplit;  // b * Hkv + hkv
    const int64_t m0 = mblk * MB;
    const int rows_valid = (int)(p.rows - m0 < MB ? p.rows - m0 : MB);
    const TileRange range =
        split_tiles(p.tiles, p.chunk_tiles, split, rows_key_limit(p.Sq, p.Skv, p.causal != 0, m0, rows_valid));
    const int n_my = (int)group_tile_count(range, grp, WK);

    // The warp's rows g and g+8 of each of its tiles, each with the keys it sees.
    const int64_t r0 = m0 + 16 * RT * wm + g;
    int lim[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int64_t r = r0 + 16 * rt + 8 * rr;
            lim[rt][rr] = (int)(p.causal && r < p.rows ? r % p.Sq + 1 + p.Skv - p.Sq : p.Skv);
        }
    // Q after the first K/V loads are on their way (both variants), so that their latencies overlap.
    Ops ops;
    auto init_q = [&] {
        if constexpr (RT == 2) {
            ops.init(p.q + bh * p.rows * D, m0, p.rows, warp, lane, smem + T::kQOff, p.score_scale);
            __syncthreads();  // warps 0 and 1 wrote every warp's Q fragments
        } else {
            QRegs<D> qr;
            load_q<D>(qr, p.q + bh * p.rows * D, r0, p.rows, t);
            ops.init(qr, p.score_scale);
        }
    };
    // The tier's products on a tile: RT 1 takes one tile's arrays, RT 2 both.
    auto qk = [&](float (&S)[RT][4][4], const KRegs<D>& kr) {
        if constexpr (RT == 2) ops.qk(S, kr); else ops.qk(S[0], kr);
    };

    const float kNegInf = -__int_as_float(0x7f800000);
    float m[RT][2];
    float L[RT][4];
    float O[RT][D / 8][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
        m[rt][0] = m[rt][1] = kNegInf;
        L[rt][0] = L[rt][1] = L[rt][2] = L[rt][3] = 0.f;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) O[rt][j][0] = O[rt][j][1] = O[rt][j][2] = O[rt][j][3] = 0.f;
    }

    const uint64_t pol = kv_l2_policy();
    const uint8_t* kb = p.k + bh * p.Skv * D;
    const uint8_t* vb = p.v + bh * p.Skv * D;
    auto tile_key0 = [&](int it) { return (int)((range.begin + grp + (int64_t)it * WK) * kTileKeys); };
    auto valid_keys = [&](int key0) { return (int)(p.Skv - key0 < kTileKeys ? p.Skv - key0 : kTileKeys); };
    auto softmax = [&](float (&S)[RT][4][4], int it) {
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
            softmax_tile<D, Ops::kLazy>(S[rt], m[rt], O[rt], L[rt], ops.c, tile_key0(it), lim[rt], t, Ops::kPBias);
    };
    auto pv = [&](const float (&S)[RT][4][4], const VRegs<D>& vr) {
        if constexpr (RT == 2) ops.pv(O, L, S, vr); else ops.pv(O[0], L[0], S[0], vr);
    };

    if constexpr (kAsync) {
        uint8_t* ring = smem + grp * Geo::kStages * Geo::kStageBytes;
        const int gtid = tid - grp * T::TG;
        auto issue = [&](int it) {
            const int key0 = tile_key0(it);
            const int valid = valid_keys(key0);
            issue_stage<D, T::TG>(ring + (it % Geo::kStages) * Geo::kStageBytes, kb + (int64_t)key0 * D,
                                  vb + (int64_t)key0 * D, valid, gtid, pol);
        };
#pragma unroll
        for (int s = 0; s < Geo::kStages - 1; ++s) {
            if (s < n_my) issue(s);
            cp_async_commit();
        }
        init_q();
#pragma unroll 1
        for (int it = 0; it < n_my; ++it) {
            cp_async_wait<Geo::kStages - 2>();  // this thread's copies of tile `it` have landed
            group_sync<T::TG, WK>(grp);           // ... and every group thread's; all are done reading tile it-1
            if (it + Geo::kStages - 1 < n_my) issue(it + Geo::kStages - 1);  // into tile it-1's stage
            cp_async_commit();
            const uint8_t* stage = ring + (it % Geo::kStages) * Geo::kStageBytes;
            KRegs<D> kr;
            fetch_k_stage<D>(kr, stage, g, t);
            float S[RT][4][4];
            qk(S, kr);
            softmax(S, it);
            VRegs<D> vr;
            fetch_v_stage<D>(vr, stage, g, t);
            pv(S, vr);
        }
        // Every group meets its barrier as often as group 0, which has the most tiles (at most one more than any
        // other).  The code is ordered without it (every ring read comes before the __syncthreads below); it is
        // for compute-sanitizer racecheck, which reports hazards across that __syncthreads when key groups pass
        // their named barriers unequal numbers of times (experiments/2026-11-29-sdpa-decode-racecheck: a reduced
        // kernel reproduces it).  After the loop, so that the loop's code is the same.
        for (int it = n_my; it < (int)group_tile_count(range, 0, WK); ++it) group_sync<T::TG, WK>(grp);
    } else {
        KRegs<D> kr;
        VRegs<D> vr;
        if constexpr (RT == 1) {  // K and V of a tile loaded together, before its Q K^T
            auto fetch = [&](int it) {
                const int key0 = tile_key0(it);
                const int valid = valid_keys(key0);
                fetch_k_global<D>(kr, kb + (int64_t)key0 * D, valid, g, t, pol);
                fetch_v_global<D>(vr, vb + (int64_t)key0 * D, valid, g, t, pol);
            };
            if (n_my > 0) fetch(0);
            init_q();
#pragma unroll 1
            for (int it = 0; it < n_my; ++it) {
                if (it > 0) fetch(it);
                float S[RT][4][4];
                qk(S, kr);
                softmax(S, it);
                pv(S, vr);
            }
        } else {  // K a 64-channel slice at a time, V after the softmax: two tiles' accumulators, S, K and V at once
                  // spilled at head dim 128
            init_q();
#pragma unroll 1
            for (int it = 0; it < n_my; ++it) {
                float S[RT][4][4];
                const int key0 = tile_key0(it);
                const int valid = valid_keys(key0);
#pragma unroll
                for (int h = 0; h < D / 64; ++h) {
                    fetch_k_global_slice<D>(kr, kb + (int64_t)key0 * D, valid, g, t, pol, h);
                    ops.qk_slice(S, kr, h);
                }
                softmax(S, it);
                fetch_v_global<D>(vr, vb + (int64_t)key0 * D, valid, g, t, pol);
                pv(S, vr);
            }
        }
    }

    // ---------------------------------------------------------------- the block's groups merged
    if constexpr (kAsync) cp_async_wait<0>();  // no copy group left open (the last ones are empty) when the ring
                                               // becomes the merge buffer
    __syncthreads();  // every group is done with its ring: the merge buffer aliases it
    float* mo = reinterpret_cast<float*>(smem);  // [WK][MB][kPitch]
    float* mm = mo + WK * MB * T::kPitch;        // [WK][MB]
    float* ml = mm + WK * MB;                    // [WK][MB]
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
        const int rl = 16 * (RT * wm + rt) + g;
        if constexpr (D == 128) {
            float* row0 = mo + (grp * MB + rl) * T::kPitch;
            float* row1 = row0 + 8 * T::kPitch;
#pragma unroll
            for (int e = 0; e < 2; ++e)  // column n = 2t + e: channels 16 n .. 16 n + 15 = column tiles j 0..15
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int at = 4 * (4 * (2 * t + e) + (q ^ t));
                    *reinterpret_cast<float4*>(row0 + at) =
                        make_float4(O[rt][4 * q][e], O[rt][4 * q + 1][e], O[rt][4 * q + 2][e], O[rt][4 * q + 3][e]);
                    *reinterpret_cast<float4*>(row1 + at) = make_float4(O[rt][4 * q][2 + e], O[rt][4 * q + 1][2 + e],
                                                                        O[rt][4 * q + 2][2 + e], O[rt][4 * q + 3][2 + e]);
                }
        } else {
            float* row0 = mo + (grp * MB + rl) * T::kPitch + 2 * t;
            float* row1 = row0 + 8 * T::kPitch;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                *reinterpret_cast<float2*>(row0 + 8 * j) = make_float2(O[rt][j][0], O[rt][j][1]);
                *reinterpret_cast<float2*>(row1 + 8 * j) = make_float2(O[rt][j][2], O[rt][j][3]);
            }
        }
        if (t == 0) {
            mm[grp * MB + rl] = m[rt][0];
            mm[grp * MB + rl + 8] = m[rt][1];
            ml[grp * MB + rl] = L[rt][0];
            ml[grp * MB + rl + 8] = L[rt][2];
        }
    }
    __syncthreads();

    constexpr int kQuads = D / 4;  // items: (row, 4 channels); channel (D/8) n + j sits at 8 j + n
    const bool single = p.nsplit == 1;
    const int64_t grp_idx = bh * p.mblocks + mblk;
    const int64_t pidx = grp_idx * p.nsplit + split;
    __half* out = p.o + (bh * p.rows + m0) * D;
    for (int item = tid; item < rows_valid * kQuads; item += NT) {
        const int row = item / kQuads, d0 = (item % kQuads) * 4, n = d0 / (D / 8), j0 = d0 % (D / 8);
        float mx = kNegInf;
#pragma unroll
        for (int w = 0; w < WK; ++w) mx = fmaxf(mx, mm[w * MB + row]);
        float o[4] = {0.f, 0.f, 0.f, 0.f}, l = 0.f;
#pragma unroll
        for (int w = 0; w < WK; ++w) {
            const float mw = mm[w * MB + row];
            const float wt = mw == kNegInf ? 0.f : fast_exp2(mw - mx);
            l += wt * ml[w * MB + row];
            if constexpr (D == 128) {
                const float4 x = *reinterpret_cast<const float4*>(mo + (w * MB + row) * T::kPitch +
                                                                  4 * (4 * n + (((d0 >> 2) & 3) ^ (n >> 1))));
                o[0] += wt * x.x;
                o[1] += wt * x.y;
                o[2] += wt * x.z;
                o[3] += wt * x.w;
            } else {
                const float* src = mo + (w * MB + row) * T::kPitch + n;
#pragma unroll
                for (int c = 0; c < 4; ++c) o[c] += wt * src[8 * (j0 + c)];
            }
        }
        if (single) {
            const float f = p.v_scale / l;
            *reinterpret_cast<uint2*>(out + (int64_t)row * D + d0) =
                make_uint2(pack_half2(o[0] * f, o[1] * f), pack_half2(o[2] * f, o[3] * f));
        } else {
            *reinterpret_cast<float4*>(p.part_o + (pidx * MB + row) * D + d0) = make_float4(o[0], o[1], o[2], o[3]);
            if (d0 == 0) *reinterpret_cast<float2*>(p.part_ml + (pidx * MB + row) * 2) = make_float2(mx, l);
        }
    }
    if (single) return;

    // ---------------------------------------------------------------- the chunks merged by the last block
    __threadfence();  // this thread's partial is visible device-wide before the block is counted
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(p.counters + grp_idx, 1) == (int)p.nsplit - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const int ns = (int)p.nsplit;
    float* fm = reinterpret_cast<float*>(smem);  // [ns][MB]: m, then the chunk's weight
    float* fl = fm + ns * MB;                    // [ns][MB]: l
    const int64_t pbase = grp_idx * p.nsplit;
    for (int i = tid; i < ns * rows_valid; i += NT) {
        const int s = i / rows_valid, row = i % rows_valid;
        const float2 v = __ldcg(reinterpret_cast<const float2*>(p.part_ml + ((pbase + s) * MB + row) * 2));
        fm[s * MB + row] = v.x;
        fl[s * MB + row] = v.y;
    }
    __syncthreads();
    for (int row = tid; row < rows_valid; row += NT) {
        float mx = kNegInf;
        for (int s = 0; s < ns; ++s) mx = fmaxf(mx, fm[s * MB + row]);
        float l = 0.f;
        for (int s = 0; s < ns; ++s) {
            const float ms = fm[s * MB + row];
            l += (ms == kNegInf ? 0.f : fast_exp2(ms - mx)) * fl[s * MB + row];
        }
        const float f = p.v_scale / l;
        for (int s = 0; s < ns; ++s) {
            const float ms = fm[s * MB + row];
            fm[s * MB + row] = (ms == kNegInf ? 0.f : fast_exp2(ms - mx)) * f;
        }
    }
    __syncthreads();
    for (int item = tid; item < rows_valid * kQuads; item += NT) {
        const int row = item / kQuads, d0 = (item % kQuads) * 4;
        float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 16
        for (int s = 0; s < ns; ++s) {
            const float wt = fm[s * MB + row];
            const float4 x = __ldcg(reinterpret_cast<const float4*>(p.part_o + ((pbase + s) * MB + row) * D + d0));
            o[0] += wt * x.x;
            o[1] += wt * x.y;
            o[2] += wt * x.z;
            o[3] += wt * x.w;
        }
        *reinterpret_cast<uint2*>(out + (int64_t)row * D + d0) =
            make_uint2(pack_half2(o[0], o[1]), pack_half2(o[2], o[3]));
    }
    if (tid == 0) p.counters[grp_idx] = 0;  // for the next launch on this workspace
}

// The two tiers' entry points (their PTX names tell the build's gates the tiers apart: thresholds.toml).
template <int D, int WM, int RT>
__global__ void __launch_bounds__(Traits<D, WM, false, RT>::NT, Traits<D, WM, false, RT>::kMinBlocks)
    sdpa_decode_fp16_kernel(const Params p) {
    decode_block<D, WM, false, RT>(p);
}
template <int D, int WM>
__global__ void __launch_bounds__(Traits<D, WM, true>::NT, Traits<D, WM, true>::kMinBlocks)
    sdpa_decode_fp8_kernel(const Params p) {
    decode_block<D, WM, true, 1>(p);
}

// ------------------------------------------------------------------------------------------------ host side
struct LaunchInfo {
    Plan plan;
    Tier tier = Tier::kFp16;
    int D = 0;
    const void* func = nullptr;
    int grid = 0, block = 0, smem = 0;
    int blocks_per_sm = 1;  // the plan's wave per SM: the launch bounds' blocks per SM
};

template <int D, int WM>
const void* kernel_for(Tier tier, int* smem) {
    if (tier == Tier::kFp8) {
        *smem = Traits<D, WM, true>::kSmem;
        return reinterpret_cast<const void*>(&sdpa_decode_fp8_kernel<D, WM>);
    }
    *smem = Traits<D, WM, false>::kSmem;
    return reinterpret_cast<const void*>(&sdpa_decode_fp16_kernel<D, WM, 1>);
}

template <int D>
const void* kernel_for_d(Tier tier, int wm, int rt, int* smem) {
    if (rt == 2) {  // plan.h plan_decode: the fp16 tier, 8 key groups of one warp
        *smem = Traits<D, 1, false, 2>::kSmem;
        return reinterpret_cast<const void*>(&sdpa_decode_fp16_kernel<D, 1, 2>);
    }
    return wm == 1 ? kernel_for<D, 1>(tier, smem) : wm == 2 ? kernel_for<D, 2>(tier, smem) : kernel_for<D, 4>(tier, smem);
}

// The launch for a case on num_sms SMs (split_override: plan.h), or false with the reason.  The plan's wave is
// num_sms times the blocks per SM the kernel's launch bounds declare (plan.h blocks_per_sm_for_warps: 2 blocks of
// 128 threads, 1 of 256), not what the CUDA runtime reports for this build: the baseline and cpasync builds differ in registers
// and shared memory, and a plan that followed them would cut the keys differently and break the bit-identical A/B
// (it did at head dim 64, experiments/2026-11-28-sdpa-decode run 2; at head dim 128 the runtime gives the declared
// counts in both builds).
inline bool select(Tier tier, const AttnShape& s, int num_sms, int64_t split_override, LaunchInfo* li, const char** why) {
    if (s.D != 64 && s.D != 128) {
        *why = "the decode kernel supports head dims 64 and 128";
        return false;
    }
    if (s.B < 1 || s.Hkv < 1 || s.Hq % s.Hkv != 0 || s.Sq < 1 || s.Skv < 1 || (s.causal && s.Sq > s.Skv)) {
        *why = "the decode kernel needs B, Hkv, Sq, Skv >= 1, Hq a multiple of Hkv, and Sq <= Skv with the causal mask";
        return false;
    }
    li->tier = tier;
    li->D = (int)s.D;
    li->blocks_per_sm = blocks_per_sm_for_warps(warps_for_rows(s.group() * s.Sq));
    li->plan = plan_decode(s, tier == Tier::kFp8, num_sms, li->blocks_per_sm, split_override);
    const int wm = li->plan.wm, rt = li->plan.rt;
    if (blocks_per_sm_for(wm, rt) != li->blocks_per_sm) {  // (plan.h: one block per SM in either plan there)
        *why = "the decode kernel's plan counts on other blocks per SM than its kernel declares";
        return false;
    }
    li->func = s.D == 64 ? kernel_for_d<64>(tier, wm, rt, &li->smem) : kernel_for_d<128>(tier, wm, rt, &li->smem);
    if (li->plan.blocks > INT32_MAX) {
        *why = "the decode kernel's grid is too large for this case (more than 2^31 - 1 blocks)";
        return false;
    }
    li->grid = (int)li->plan.blocks;
    li->block = li->plan.threads;
    return true;
}

// The chunks' partials and the counters of one stream's launches (launches in flight at once on different streams
// need one each).  Counters are zeroed here and by every launch's last blocks after.
using Workspace = sdpa_chunks::Workspace;  // (../sdpa_fp8/chunk_workspace.h, shared with the Hopper kernel's key chunks)

// A block's rows are its slots; one counter per (b, hkv, mblock) group of nsplit blocks.
inline cudaError_t workspace_alloc(const LaunchInfo& li, Workspace* ws) {
    *ws = Workspace{};
    const Plan& p = li.plan;
    if (p.nsplit <= 1) return cudaSuccess;
    return sdpa_chunks::workspace_alloc((size_t)p.blocks * (size_t)p.rows_per_block, li.D, (size_t)(p.blocks / p.nsplit),
                                        ws);
}

inline cudaError_t launch(const LaunchInfo& li, const Workspace& ws, const AttnShape& s, const __half* q,
                          const uint8_t* k, const uint8_t* v, __half* o, float k_scale, float v_scale,
                          cudaStream_t stream) {
    Params p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.part_o = ws.part_o;
    p.part_ml = ws.part_ml;
    p.counters = ws.counters;
    p.Sq = s.Sq;
    p.Skv = s.Skv;
    p.rows = li.plan.rows;
    p.mblocks = li.plan.mblocks;
    p.nsplit = li.plan.nsplit;
    p.chunk_tiles = li.plan.chunk_tiles;
    p.tiles = li.plan.tiles;
    p.score_scale = (float)((double)k_scale * 1.4426950408889634 / std::sqrt((double)s.D));
    p.v_scale = v_scale;
    p.causal = s.causal ? 1 : 0;
    void* args[] = {&p};
    return cudaLaunchKernel(li.func, dim3((unsigned)li.grid), dim3((unsigned)li.block), args, (size_t)li.smem, stream);
}

}  // namespace sdpa_decode
