// The decode kernel's shared-memory order, without its math, for compute-sanitizer racecheck
// (README.md "The reduced kernel"): a block of NT threads in key groups of TG threads; each group streams tiles
// through its own ring of 3 stages (each thread fills 16 bytes of a stage, reads 16 bytes another group thread
// filled), stepping with the group's barrier; then every thread waits for its copies, the whole block meets at
// __syncthreads, and the ring's memory is overwritten by other threads (the merge buffer aliasing the rings).
// Every read of the ring comes before that __syncthreads in every thread, so a race reported between a ring read
// and a merge write is the tool's, not the code's.
//
//   nvcc -O3 -arch=sm_90 -lineinfo -o repro repro.cu
//   compute-sanitizer --tool racecheck ./repro VARIANT      (VARIANT: see kVariants below)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

constexpr int kMaxThreads = 256, kStages = 3, kTiles = 12;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// How a group of TG threads steps: 0 named barrier `bar.sync 1 + grp, TG`; 1 __syncwarp (TG 32 only);
// 2 __syncthreads (every group the same tile count, so the whole block can meet)
template <int TG, int SYNC>
__device__ __forceinline__ void group_step(int grp) {
    if constexpr (SYNC == 0) {
        asm volatile("bar.sync %0, %1;\n" ::"r"(1 + grp), "n"(TG) : "memory");
    } else if constexpr (SYNC == 1) {
        static_assert(TG == 32, "__syncwarp orders one warp");
        __syncwarp();
    } else {
        __syncthreads();
    }
}

// ASYNC: the stage filled by cp.async (as the decode kernel's cpasync build) or by plain stores; UNEVEN: group g
// takes kTiles - g tiles (the decode kernel's groups differ by a tile where a chunk's tiles do not divide evenly)
template <int NT, int TG, int SYNC, bool ASYNC, bool UNEVEN = false>
__global__ void ring_then_merge(const uint4* in, uint4* out) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int kThreads = NT, kStageBytes = TG * 16;
    static_assert(!(UNEVEN && SYNC == 2), "the whole block meets only with equal tile counts");
    const int tid = threadIdx.x, grp = tid / TG, gtid = tid % TG;
    const int n_tiles = UNEVEN ? kTiles - grp : kTiles;
    uint4* ring = reinterpret_cast<uint4*>(smem + grp * kStages * kStageBytes);
    const uint4* src = in + (int64_t)blockIdx.x * kTiles * kMaxThreads + grp * TG;
    auto issue = [&](int it) {
        uint4* dst = ring + (it % kStages) * TG + gtid;
        if constexpr (ASYNC) cp_async16(dst, src + it * kThreads + gtid);
        else *dst = src[it * kThreads + gtid];
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < n_tiles) issue(s);
        if constexpr (ASYNC) commit();
    }
    uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll 1
    for (int it = 0; it < n_tiles; ++it) {
        if constexpr (ASYNC) wait_group<kStages - 2>();  // this thread's copies of tile it have landed
        group_step<TG, SYNC>(grp);                       // ... and the group's; all are done with tile it-1
        if (it + kStages - 1 < n_tiles) issue(it + kStages - 1);  // into tile it-1's stage
        if constexpr (ASYNC) commit();
        const uint4 x = ring[(it % kStages) * TG + (gtid + 7) % TG];  // another group thread's 16 bytes
        acc.x ^= x.x; acc.y += x.y; acc.z ^= x.z; acc.w += x.w;
    }
    if constexpr (ASYNC) wait_group<0>();
    __syncthreads();  // every ring read is done: the merge buffer aliases the rings
    uint4* merge = reinterpret_cast<uint4*>(smem);
    merge[(tid * 5) % (kThreads * kStages)] = acc;  // lands in other groups' rings
    __syncthreads();
    out[(int64_t)blockIdx.x * kThreads + tid] = merge[(tid * 5 + 16) % (kThreads * kStages)];
}

struct Variant {
    const char* name;
    int threads;
    void (*kernel)(const uint4*, uint4*);
};
constexpr Variant kVariants[] = {
    {"named32_async", 128, ring_then_merge<128, 32, 0, true>},
    {"syncwarp32_async", 128, ring_then_merge<128, 32, 1, true>},
    {"named64_async", 128, ring_then_merge<128, 64, 0, true>},
    {"named128_async", 128, ring_then_merge<128, 128, 0, true>},
    {"block64_async", 128, ring_then_merge<128, 64, 2, true>},
    {"named32_plain", 128, ring_then_merge<128, 32, 0, false>},
    {"named64_plain", 128, ring_then_merge<128, 64, 0, false>},
    {"syncwarp32_plain", 128, ring_then_merge<128, 32, 1, false>},
    // the decode kernel's shapes: 4 groups of 1 and 2 warps, 2 groups of 4 warps, tile counts differing by group
    {"named32x4_uneven_async", 128, ring_then_merge<128, 32, 0, true, true>},
    {"syncwarp32x4_uneven_async", 128, ring_then_merge<128, 32, 1, true, true>},
    {"named64x4_uneven_async", 256, ring_then_merge<256, 64, 0, true, true>},
    {"named64x4_async", 256, ring_then_merge<256, 64, 0, true>},
    {"named128x2_uneven_async", 256, ring_then_merge<256, 128, 0, true, true>},
};

int main(int argc, char** argv) {
    const int blocks = 4;
    const size_t n_in = (size_t)blocks * kTiles * kMaxThreads, n_out = (size_t)blocks * kMaxThreads;
    uint4 *in, *out;
    cudaMalloc(&in, n_in * sizeof(uint4));
    cudaMalloc(&out, n_out * sizeof(uint4));
    cudaMemset(in, 1, n_in * sizeof(uint4));
    int ran = 0;
    for (const Variant& v : kVariants) {
        if (argc > 1 && strcmp(argv[1], v.name) != 0) continue;
        const int smem = v.threads * 16 * kStages;
        v.kernel<<<blocks, v.threads, smem>>>(in, out);
        const cudaError_t e = cudaDeviceSynchronize();
        printf("%s: %s\n", v.name, cudaGetErrorString(e));
        if (e != cudaSuccess) return 1;
        ++ran;
    }
    if (ran == 0) {
        fprintf(stderr, "error: no variant named %s\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    return 0;
}
