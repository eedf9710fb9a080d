// Tile loads of the fp16 tier (wgmma_sm90): the producer warpgroup's per-tile work, decoding K/V tiles
// (E4M3 codes -> fp16, exact) into the 128-byte-swizzled fp16 tiles the consumers' wgmma reads; and what
// both tiers' loads share: the tensor maps and the baseline's Q load.
//
//   cpasync: the copy engine brings the uint8 tiles into stages (producer.cuh), all 128 producer threads
//     decode a stage into an fp16 buffer (decode_tile_smem) while the copies of the next tiles are in flight.
//   baseline: the same decode, from ordinary 16-byte global loads issued right before it
//     (load_decode_tile_global; rows past S read as zero); Q is loaded by the consumers themselves.
#pragma once

#include "ptx.cuh"
#include "traits.cuh"

namespace sdpa_sm90 {

// Producer thread ptid decodes the 16-byte chunks c = ptid + 128 i of a uint8 tile [BN][D]
// (16 codes each): row r = c / (D/16), codes [16 c16, 16 c16 + 16) with c16 = c % (D/16) the
// same for every i.  They become two 16-byte fp16 chunks 2 (c16 % 4) and +1 of row r in panel
// c16 / 4.  Rows advance by ROW_STEP (a multiple of 8) per i, so the swizzle (chunk ^ row % 8)
// is the same for every i and every address is a per-thread base plus a constant.
template <class T>
struct DecodeMap {
    static constexpr int ROW_STEP = 128 / (T::D / 16);
    static_assert(ROW_STEP % 8 == 0, "the swizzle must repeat every i");
    uint32_t lo;  // byte offset of the first fp16 chunk for i = 0 (the second: second())
    __device__ __forceinline__ explicit DecodeMap(int ptid) {
        const int c16 = ptid % (T::D / 16), r = ptid / (T::D / 16);
        const uint32_t panel = (uint32_t)(c16 >> 2) * (T::BN * 128);
        lo = panel + swz128(r, (c16 & 3) * 2);
    }
    // The second chunk's offset: chunk 2c + 1 is chunk 2c with bit 0 flipped, under any swizzle row, so
    // it is lo ^ 16 (one register less for the producer than keeping both offsets).
    __device__ __forceinline__ uint32_t second() const { return lo ^ 16u; }
};

__device__ __forceinline__ void decode16(uint4 w, uint4& lo, uint4& hi) {
    decode4(w.x, lo.x, lo.y);
    decode4(w.y, lo.z, lo.w);
    decode4(w.z, hi.x, hi.y);
    decode4(w.w, hi.z, hi.w);
}

// uint8 tile in shared memory -> fp16 tile, all 128 producer threads.
template <class T>
__device__ __forceinline__ void decode_tile_smem(const uint8_t* u8, uint8_t* t16, int ptid) {
    const DecodeMap<T> map(ptid);
    const uint8_t* src = u8 + ptid * 16;
    // All loads of a batch first: the compiler may not move a shared load above a shared store
    // (they might alias), so a load-decode-store loop would wait out every load's latency.
    constexpr int BATCH = T::DECODE_BATCH;
    static_assert(T::CHUNKS_PER_THREAD % BATCH == 0, "batches");
#pragma unroll
    for (int i0 = 0; i0 < T::CHUNKS_PER_THREAD; i0 += BATCH) {
        uint4 w[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) w[i] = *reinterpret_cast<const uint4*>(src + (i0 + i) * 2048);
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            uint4 lo, hi;
            decode16(w[i], lo, hi);
            *reinterpret_cast<uint4*>(t16 + map.lo + (i0 + i) * DecodeMap<T>::ROW_STEP * 128) = lo;
            *reinterpret_cast<uint4*>(t16 + map.second() + (i0 + i) * DecodeMap<T>::ROW_STEP * 128) = hi;
        }
    }
}

// uint8 tile straight from global memory (synchronous loads) -> fp16 tile.  Rows past S are
// decoded from zero codes (0.0), like the copy engine's fill.
template <class T>
__device__ __forceinline__ void load_decode_tile_global(const uint8_t* __restrict__ g, int n0, int S, uint8_t* t16,
                                                        int ptid) {
    constexpr int BATCH = T::DECODE_BATCH;  // loads in flight per thread
    static_assert(T::CHUNKS_PER_THREAD % BATCH == 0, "batches");
    constexpr int ROW_STEP = DecodeMap<T>::ROW_STEP;
    const DecodeMap<T> map(ptid);
    const int r0 = ptid / (T::D / 16);
    const uint8_t* src = g + (size_t)n0 * T::D + ptid * 16;
#pragma unroll 1
    for (int i0 = 0; i0 < T::CHUNKS_PER_THREAD; i0 += BATCH) {
        uint4 w[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            w[i] = make_uint4(0u, 0u, 0u, 0u);
            if (n0 + r0 + (i0 + i) * ROW_STEP < S) w[i] = __ldg(reinterpret_cast<const uint4*>(src + (i0 + i) * 2048));
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            uint4 lo, hi;
            decode16(w[i], lo, hi);
            *reinterpret_cast<uint4*>(t16 + map.lo + (i0 + i) * ROW_STEP * 128) = lo;
            *reinterpret_cast<uint4*>(t16 + map.second() + (i0 + i) * ROW_STEP * 128) = hi;
        }
    }
}

// baseline: the consumers load the 64 Q rows r0 .. r0+63 of the block's tile (fp16) with 16-byte
// global loads into Q's 128-byte-swizzled panels (rows past S as zero), `nthreads` threads
// together (one warpgroup for its own rows; both, for the split configuration's shared rows).
template <class T>
__device__ __forceinline__ void load_q_rows_global(const __half* __restrict__ Qg, int S, int m0, uint8_t* q, int r0,
                                                   int tid, int nthreads) {
    constexpr int CHUNKS_PER_ROW = T::D / 8;
    for (int c = tid; c < 64 * CHUNKS_PER_ROW; c += nthreads) {
        const int r = r0 + c / CHUNKS_PER_ROW, col = c % CHUNKS_PER_ROW;
        uint4 w = make_uint4(0u, 0u, 0u, 0u);
        if (m0 + r < S) w = __ldg(reinterpret_cast<const uint4*>(Qg + (size_t)(m0 + r) * T::D) + col);
        *reinterpret_cast<uint4*>(q + (col >> 3) * (T::BM * 128) + swz128(r, col & 7)) = w;
    }
    fence_proxy_async();
}

struct TileMaps {
    CUtensorMap q;  // fp16 {D, S, BH}, box {64, BM, 1}, 128-byte swizzle
    CUtensorMap k;  // uint8 {D, S, BH}, box {D, BN, 1}
    CUtensorMap v;
    // SDPA_SM90_L2_PREFETCH_NEXT: the block index distance to the block that takes this SM in the
    // next wave (the SM count); 0 = no prefetch.
    int next_stride;
};

}  // namespace sdpa_sm90
