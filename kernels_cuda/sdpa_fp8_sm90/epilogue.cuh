// Epilogue: O / l * v_scale -> fp16, rows past S not stored.
//
// Each consumer warpgroup stages its 64 output rows in its own rows of the Q tile (only this
// warpgroup reads them, and its last Q K^T has completed), in Q's own 128-byte-swizzled panel
// layout: the fragment stores are bank-conflict free (the 8 rows of a lane group hit 8
// different 16-byte bank groups) and so are the 16-byte reads that follow; then each row goes
// to global memory with coalesced 16-byte stores.
#pragma once

#include "ptx.cuh"
#include "softmax.cuh"
#include "traits.cuh"

namespace sdpa_sm90 {

// Barrier among the 128 threads of consumer warpgroup wg (ptx.cuh NamedBarrier).
template <int NC = 2>
__device__ __forceinline__ void consumer_wg_barrier(int wg) {
    if (wg == 0) named_barrier<kBarConsumerWg0, 128>();
    else if (NC == 2 || wg == 1) named_barrier<kBarConsumerWg1, 128>();
    else named_barrier<kBarConsumerWg2, 128>();
}

template <class T>
__device__ __forceinline__ void epilogue(const float (&o)[T::D / 2], const OnlineSoftmax<T::BN>& sm, uint8_t* q,
                                         int wg, __half* __restrict__ Og, int S, int row0, float out_scale) {
    static_assert(T::NCWG == 2 || T::NCWG == 3, "consumer_wg_barrier has ids for three consumer warpgroups");
    constexpr int D = T::D;
    const int ctid = threadIdx.x % 128;
    const int lane = ctid & 31, warp = ctid >> 5;
    // Row r (0..63) of this warpgroup, 16-byte chunk c (0..D/8-1): panel c/8, chunk c%8.
    uint8_t* rows = q + wg * 64 * 128;  // q: the Q buffer
    auto chunk_addr = [&](int r, int c) { return rows + (c >> 3) * (T::BM * 128) + swz128(r, c & 7); };

    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = sm.l[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[r] = out_scale / l;
    }
    fence_proxy_async();  // the Q rows were last read by wgmma (async proxy)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + (lane >> 2) + 8 * r;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<uint32_t*>(chunk_addr(row, j) + (lane & 3) * 4) =
                pack_half2(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
    }
    consumer_wg_barrier<T::NCWG>(wg);
    constexpr int CHUNKS_PER_ROW = D / 8;
#pragma unroll
    for (int i = 0; i < 64 * CHUNKS_PER_ROW / 128; ++i) {
        const int c = ctid + i * 128;
        const int row = c / CHUNKS_PER_ROW, col = c % CHUNKS_PER_ROW;
        if (row0 + row < S) {
            const uint4 v = *reinterpret_cast<const uint4*>(chunk_addr(row, col));
            reinterpret_cast<uint4*>(Og + (size_t)(row0 + row) * D)[col] = v;
        }
    }
}

}  // namespace sdpa_sm90
