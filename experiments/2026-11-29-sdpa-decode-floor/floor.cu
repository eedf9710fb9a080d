// What does a launch that only reads N bytes of HBM take under the runners' cold timing, and how much of it is the
// timing method's L2 flush (a memset that leaves L2 full of dirty lines, which the reads must write back)?
// The floor under the decode kernel's time at B 1 (experiments/2026-11-29-sdpa-decode-floor/README.md).
//
// Kernels: `empty` (no memory), `read` (every byte of an N-byte buffer once, 16-byte loads, 8 in flight per thread,
// grid-stride over 4 blocks of 256 threads per SM; plain, or with the L2 evict_first policy the decode kernel uses).
// Timing: `dirty` = bench_timing::time_cold as the runners time (memset flush of max(2 x L2, 64 MiB) before each
// launch, outside its events); `clean` = the same, then a read of another buffer of that size before the events
// (L2 holds clean lines: nothing to write back); `hot` = bench_timing::time_hot (CUDA graph of 20 launches).
// Output: one JSON line per (kernel, policy, bytes, mode) with the samples' p50 in us.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../kernels_cuda/sdpa_fp8/timing.cuh"

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(3);
    }
}

__global__ void empty_kernel() {}

// Each thread keeps kUnroll 16-byte loads in flight (a block's tile is 256 x kUnroll x 16 bytes), grid-stride over
// the tiles: enough bytes in flight to keep HBM busy (a first version with one load in flight per thread, run 1,
// read at 2.8-3.6 TB/s and was a floor of that code, not of the memory).
constexpr int kUnroll = 8;
template <bool EVICT_FIRST>
__global__ void read_kernel(const uint4* __restrict__ p, size_t n16, unsigned* sink) {
    uint64_t pol = 0;
    if (EVICT_FIRST) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    unsigned acc = 0;
    const size_t tile = (size_t)blockDim.x * kUnroll;
    for (size_t t0 = blockIdx.x * tile; t0 < n16; t0 += (size_t)gridDim.x * tile) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const size_t i = t0 + (size_t)u * blockDim.x + threadIdx.x;
            if (i >= n16) {
                v[u] = make_uint4(0, 0, 0, 0);
            } else if (EVICT_FIRST) {
                asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + i), "l"(pol));
            } else {
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + i));
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;  // never (the buffer is zeros): keeps the loads
}

double p50(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
    const long iters = argc > 1 ? std::atol(argv[1]) : 100;
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attr");
    const size_t flush = bench_timing::l2_flush_bytes(0, check);
    const size_t max_bytes = size_t(2048) << 20;
    uint4* buf = nullptr;
    uint4* clean = nullptr;
    unsigned* sink = nullptr;
    check(cudaMalloc(&buf, max_bytes), "malloc");
    check(cudaMalloc(&clean, flush), "malloc");
    check(cudaMalloc(&sink, 4), "malloc");
    check(cudaMemset(buf, 0, max_bytes), "memset");
    check(cudaMemset(clean, 0, flush), "memset");
    cudaStream_t st;
    check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    const int grid = 4 * sms;  // 4 blocks of 256 threads per SM, 8 loads of 16 B each in flight: 16 MiB on 132 SMs

    struct Case {
        std::string kernel;
        size_t bytes;
        int policy;  // 0 plain, 1 evict_first
    };
    std::vector<Case> cases = {{"empty", 0, 0}};
    for (size_t mb : {8, 64, 256, 512, 2048})
        for (int pol : {0, 1}) cases.push_back({"read", mb << 20, pol});

    for (const Case& c : cases) {
        auto launch = [&](cudaStream_t s) -> cudaError_t {
            if (c.kernel == "empty") {
                empty_kernel<<<2 * sms, 128, 0, s>>>();
            } else if (c.policy) {
                read_kernel<true><<<grid, 256, 0, s>>>(buf, c.bytes / 16, sink);
            } else {
                read_kernel<false><<<grid, 256, 0, s>>>(buf, c.bytes / 16, sink);
            }
            return cudaGetLastError();
        };
        for (int w = 0; w < 5; ++w) check(launch(st), "warmup");
        check(cudaStreamSynchronize(st), "sync");
        // dirty: the runners' cold mode
        const auto dirty = bench_timing::time_cold(launch, st, iters, true, flush, check);
        // clean: the flush, then a read of `flush` other bytes, outside the events
        auto clean_launch = [&](cudaStream_t s) -> cudaError_t {
            return launch(s);
        };
        std::vector<double> clean_us;
        {
            cudaEvent_t e0, e1;
            check(cudaEventCreate(&e0), "ev");
            check(cudaEventCreate(&e1), "ev");
            void* fl = nullptr;
            check(cudaMalloc(&fl, flush), "malloc");
            for (long i = 0; i < iters; ++i) {
                bench_timing::spin_wait_kernel<<<1, 1, 0, st>>>(20000);
                check(cudaMemsetAsync(fl, (int)i & 0xFF, flush, st), "flush");
                read_kernel<false><<<grid, 256, 0, st>>>(clean, flush / 16, sink);
                check(cudaEventRecord(e0, st), "rec");
                check(clean_launch(st), "launch");
                check(cudaEventRecord(e1, st), "rec");
                check(cudaStreamSynchronize(st), "sync");
                float ms = 0.f;
                check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
                clean_us.push_back(ms * 1000.0);
            }
            check(cudaFree(fl), "free");
            check(cudaEventDestroy(e0), "ev");
            check(cudaEventDestroy(e1), "ev");
        }
        const auto hot = bench_timing::time_hot(launch, st, iters * 5, 10, 20, true, check);
        const char* pol = c.policy ? "evict_first" : "plain";
        for (const auto& [mode, us] : {std::pair<const char*, const std::vector<double>*>{"dirty", &dirty.us},
                                       {"clean", &clean_us}, {"hot", &hot.us}}) {
            const double t = p50(*us);
            std::printf("{\"kernel\":\"%s\",\"policy\":\"%s\",\"bytes\":%zu,\"mode\":\"%s\",\"p50_us\":%.3f,"
                        "\"gbps\":%.1f,\"samples\":%zu}\n",
                        c.kernel.c_str(), pol, c.bytes, mode, t, t > 0 ? c.bytes / t / 1e3 : 0.0, us->size());
        }
        std::fflush(stdout);
    }
    return 0;
}
