// One 32-key K/V tile from memory to the registers of a warp, in the layouts the MMAs take (no decode here).
//
// Lane (g = lane / 4, t = lane % 4) reads, for a tile of keys [key0, key0 + 32):
//   K: of key 8i + g (i = 0..3, the four 8-key MMA column tiles of S), bytes [64h + 16t, 64h + 16t + 16) for
//      h < D/64: KRegs w[i][4h + w] = the word at bytes 64h + 16t + 4w.  The lane's 16 * D/64 channels of a key are
//      the ones its Q fragment holds (tier_ops.cuh): the contraction over channels may take them in any order
//      as long as Q and K agree, and this one makes every load 16 contiguous bytes.
//   V: rows R = 2t, 2t+1, 2t+8, 2t+9, 16+2t, 17+2t, 24+2t, 25+2t (vrow below), bytes [16g, 16g+16) (D 128) or
//      [8g, 8g+8) (D 64): VRegs w[r][q] = the word at byte 16g + 4q (8g + 4q).  Byte j of the lane's slice is the
//      channel (D/8) g + j: P·V's output column n of column tile j is channel (D/8) n + j (the epilogue puts
//      them back in order), and those rows are the keys of the P fragment the lane holds.
// Both variants run the same fetch on the same bytes, so their outputs are bit-identical:
//   baseline (USE_CP_ASYNC=0): straight from global memory (16- or 8-byte read-only loads; keys past Skv as 0);
//   cpasync: from a shared-memory stage that cp.async filled (keys past Skv zero-filled by src-size 0), laid out
//            [K 32 x D][V 32 x D] with the 16-byte chunks of each 128-byte line XOR-swizzled (stage_offset) so
//            that the fetch's 16-byte and 8-byte shared loads and the copies are free of bank conflicts.
#pragma once

#include <cstdint>

#include "plan.h"
#include "ptx.cuh"

namespace sdpa_decode {

template <int D>
struct TileGeom {
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    static constexpr int kKWords = D / 16;            // K words per lane and 8-key column tile
    static constexpr int kVWords = D / 32;            // V words per lane and row
    static constexpr int kTensorBytes = kTileKeys * D;  // one tile of K (or V)
    static constexpr int kStageBytes = 2 * kTensorBytes;
    static constexpr int kStages = D == 128 ? 3 : 4;  // cp.async ring per key group: 24 KiB (D 128), 16 KiB (D 64)
    static constexpr int kChunks = kStageBytes / 16;  // 16-byte copies per stage
};

// The V rows lane t reads, r = 0..7 (see above).
__device__ __forceinline__ int vrow(int r, int t) { return 2 * t + (r & 1) + 8 * ((r >> 1) & 1) + 16 * (r >> 2); }

// Byte offset of (row, byte) of a K or V tile in a stage: 16-byte chunks XOR-swizzled within each 128-byte line.
// D 128 (a line is a row): chunk c of row r at c ^ ((r & 6) ^ ((r & 1) << 2)).  D 64 (a line is rows 2L, 2L+1):
// slot (4 (r & 1) + c) ^ 2 (L & 3).  Conflict-free for the K fetch (8 lanes: rows 2a, 2a+1, four chunks each),
// the V fetch (rows R + 2t for t = 0..3, chunks g) and the copies (consecutive chunks of a line).
template <int D>
__device__ __forceinline__ int stage_offset(int row, int byte) {
    if constexpr (D == 128) {
        const int sw = (row & 6) ^ ((row & 1) << 2);
        return row * 128 + ((((byte >> 4) ^ sw)) << 4) + (byte & 15);
    } else {
        const int line = row >> 1;
        const int slot = ((((row & 1) << 2) | (byte >> 4)) ^ ((line & 3) << 1));
        return line * 128 + (slot << 4) + (byte & 15);
    }
}

// A tile's words in registers: K (read by Q K^T) and V (read by P V) apart, so that the cpasync build can fetch V
// from its stage after the softmax (fewer live registers); the baseline issues both loads first (latency).
template <int D>
struct KRegs {
    uint32_t w[4][TileGeom<D>::kKWords];
};
template <int D>
struct VRegs {
    uint32_t w[8][TileGeom<D>::kVWords];
};

// Baseline: the tile straight from global memory.  k, v point at key0's row; `valid` keys of the tile exist.
// Key 8i + g's 64-channel slice h: the words w[i][4h .. 4h + 3].
template <int D>
__device__ __forceinline__ void fetch_k_global_word(KRegs<D>& r, const uint8_t* k, int valid, int g, int t,
                                                    uint64_t pol, int i, int h) {
    const int row = 8 * i + g;
    const uint4 x = row < valid ? ldg16_kv(k + (int64_t)row * D + 64 * h + 16 * t, pol) : make_uint4(0, 0, 0, 0);
    r.w[i][4 * h + 0] = x.x;
    r.w[i][4 * h + 1] = x.y;
    r.w[i][4 * h + 2] = x.z;
    r.w[i][4 * h + 3] = x.w;
}
template <int D>
__device__ __forceinline__ void fetch_k_global(KRegs<D>& r, const uint8_t* k, int valid, int g, int t, uint64_t pol) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < D / 64; ++h) fetch_k_global_word<D>(r, k, valid, g, t, pol, i, h);
}
// Only the 64-channel slice h of each key.
template <int D>
__device__ __forceinline__ void fetch_k_global_slice(KRegs<D>& r, const uint8_t* k, int valid, int g, int t,
                                                     uint64_t pol, int h) {
#pragma unroll
    for (int i = 0; i < 4; ++i) fetch_k_global_word<D>(r, k, valid, g, t, pol, i, h);
}
template <int D>
__device__ __forceinline__ void fetch_v_global(VRegs<D>& r, const uint8_t* v, int valid, int g, int t, uint64_t pol) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int row = vrow(q, t);
        if constexpr (D == 128) {
            const uint4 x = row < valid ? ldg16_kv(v + (int64_t)row * D + 16 * g, pol) : make_uint4(0, 0, 0, 0);
            r.w[q][0] = x.x;
            r.w[q][1] = x.y;
            r.w[q][2] = x.z;
            r.w[q][3] = x.w;
        } else {
            const uint2 x = row < valid ? ldg8_kv(v + (int64_t)row * D + 8 * g, pol) : make_uint2(0, 0);
            r.w[q][0] = x.x;
            r.w[q][1] = x.y;
        }
    }
}

// cpasync: the tile from its shared-memory stage (K at stage, V at stage + kTensorBytes).  Rows 8i + g share their
// swizzle (it depends on row % 8; D 64: on (row / 2) % 4), so K's addresses are one base plus constants; V's rows
// take two swizzles (rows 2t and 2t+1 plus multiples of 8).
template <int D>
__device__ __forceinline__ void fetch_k_stage(KRegs<D>& r, const uint8_t* stage, int g, int t) {
#pragma unroll
    for (int h = 0; h < D / 64; ++h) {
        const uint8_t* base = stage + stage_offset<D>(g, 64 * h + 16 * t);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 x = *reinterpret_cast<const uint4*>(base + 8 * i * D);
            r.w[i][4 * h + 0] = x.x;
            r.w[i][4 * h + 1] = x.y;
            r.w[i][4 * h + 2] = x.z;
            r.w[i][4 * h + 3] = x.w;
        }
    }
}
template <int D>
__device__ __forceinline__ void fetch_v_stage(VRegs<D>& r, const uint8_t* stage, int g, int t) {
    const uint8_t* vs = stage + TileGeom<D>::kTensorBytes;
    const uint8_t* even = vs + stage_offset<D>(2 * t, (D / 8) * g);
    const uint8_t* odd = vs + stage_offset<D>(2 * t + 1, (D / 8) * g);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const uint8_t* p = ((q & 1) ? odd : even) + (8 * ((q >> 1) & 1) + 16 * (q >> 2)) * D;  // vrow(q, t) - 2t - q%2
        if constexpr (D == 128) {
            const uint4 x = *reinterpret_cast<const uint4*>(p);
            r.w[q][0] = x.x;
            r.w[q][1] = x.y;
            r.w[q][2] = x.z;
            r.w[q][3] = x.w;
        } else {
            const uint2 x = *reinterpret_cast<const uint2*>(p);
            r.w[q][0] = x.x;
            r.w[q][1] = x.y;
        }
    }
}

// cpasync: the group's threads (gtid of NTHREADS) copy one tile into a stage: 16-byte chunks, consecutive threads
// consecutive chunks of a row, NTHREADS / (D/16) rows per pass; keys past `valid` zero-filled (src-size 0, the
// address clamped to key0's row).
template <int D, int NTHREADS>
__device__ __forceinline__ void issue_stage(uint8_t* stage, const uint8_t* k, const uint8_t* v, int valid, int gtid,
                                            uint64_t pol) {
    constexpr int kRowChunks = D / 16;
    constexpr int kRowsPerPass = NTHREADS / kRowChunks;
    static_assert(NTHREADS % kRowChunks == 0 && kTileKeys % kRowsPerPass == 0, "stage chunks over the group's threads");
    const int row0 = gtid / kRowChunks, col = (gtid % kRowChunks) * 16;
    const uint32_t base = smem_u32(stage);
#pragma unroll
    for (int tensor = 0; tensor < 2; ++tensor) {
        const uint8_t* src = tensor ? v : k;
#pragma unroll
        for (int pass = 0; pass < kTileKeys / kRowsPerPass; ++pass) {
            const int row = row0 + pass * kRowsPerPass;
            const bool ok = row < valid;
            cp_async16(base + tensor * TileGeom<D>::kTensorBytes + stage_offset<D>(row, col),
                       src + (ok ? (int64_t)row * D + col : 0), ok ? 16 : 0, pol);
        }
    }
}

}  // namespace sdpa_decode
