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

// Producer thread ptid decodes 16-byte chunks of a uint8 tile [BN][D] (16 codes each), one per
// i = 0 .. CHUNKS_PER_THREAD-1: row r + i ROW_STEP, codes [16 c16, 16 c16 + 16) of that row.  They become
// two 16-byte fp16 chunks 2 (c16 % 4) and +1 of the row in panel c16 / 4.  Rows advance by ROW_STEP (a
// multiple of 8) per i, so the swizzle (chunk ^ row % 8) is the same for every i and every address is a
// per-thread base plus a constant.
//
// Which thread takes which chunk is chosen for the shared-memory banks: a 16-byte access by a warp is
// served 8 threads at a time, and each group of 8 must touch 8 different 16-byte bank groups.  Group g
// (threads 8g .. 8g+7) takes c16 = 0 .. 7 (D 128; 0 .. 3 twice at D 64) so its loads from the uint8 row
// (128 bytes at D 128, unswizzled) are distinct.  At D 128 the panel-1 chunks (c16 >= 4) take row g ^ 1
// rather than g: their fp16 chunks land on 2 (c16 % 4) ^ (row % 8), the other parity than the panel-0
// chunks of row g, so the 8 stores are distinct too.  With both halves on row g (the map before
// 2026-11-26) panels 0 and 1 hit the same 4 bank groups: Nsight Compute counted every decode store 2-way
// conflicted at (1,16,8192,128), 33.5M of the kernel's 169M shared wavefronts
// (experiments/2026-11-26-sdpa-fp16-decode-banks).  At D 64 one group covers rows 2h, 2h+1 of the one
// panel, already distinct.
template <class T>
struct DecodeMap {
    static constexpr int CHUNKS_PER_ROW = T::D / 16;
    static constexpr int ROW_STEP = 128 / CHUNKS_PER_ROW;
    static_assert(ROW_STEP % 8 == 0, "the swizzle must repeat every i");
    int r;        // row for i = 0
    int c16;      // 16-code chunk of the row
    uint32_t lo;  // byte offset of the first fp16 chunk for i = 0 (the second: second())
    __device__ __forceinline__ explicit DecodeMap(int ptid) {
        c16 = ptid % CHUNKS_PER_ROW;
        r = (ptid / CHUNKS_PER_ROW) ^ ((c16 >> 2) & 1);
        const uint32_t panel = (uint32_t)(c16 >> 2) * (T::BN * 128);
        lo = panel + swz128(r, (c16 & 3) * 2);
    }
    // Byte offset of the chunk in the uint8 tile [BN][D] for i = 0.
    __device__ __forceinline__ int src() const { return (r * CHUNKS_PER_ROW + c16) * 16; }
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
template <class T, int BATCH = T::DECODE_BATCH>
__device__ __forceinline__ void decode_tile_smem(const uint8_t* u8, uint8_t* t16, int ptid) {
    const DecodeMap<T> map(ptid);
    const uint8_t* src = u8 + map.src();
    // All loads of a batch first: the compiler may not move a shared load above a shared store
    // (they might alias), so a load-decode-store loop would wait out every load's latency.  (BATCH: chunks in
    // flight per thread; the consumers' decode of V, SDPA_SM90_KV_VDEC, takes fewer.)
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
    const int r0 = map.r;
    const uint8_t* src = g + (size_t)n0 * T::D + map.src();
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
