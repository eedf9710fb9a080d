// Per-block %globaltimer stamps of the decode kernel (fp16 tier) under the runners' cold timing, built from a source
// tree patched with trace.patch (kernel.cuh SDPA_DECODE_TRACE):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -DUSE_CP_ASYNC=1 -DSDPA_DECODE_TRACE=1 \
//        -I$SRC timeline.cu -o timeline
//   ./timeline SAMPLES NAME:B,Hq,Hkv,Sq,Skv,D,causal [...]   > timeline.jsonl
// Per case and sample, one JSON line: the event-timed launch (us, as the runners' cold mode: a memset of
// max(2 x L2, 64 MiB) before it, outside the event pair), the globaltimer of a one-thread marker kernel launched
// just before the first event (after the memset), and every block's 10 stamps (ns, 0 where not reached).  Inputs
// are random (fp16 Q in [-1, 1), E4M3 codes of finite values); the values do not matter to the timing.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels_cuda/sdpa_decode/kernel.cuh"
#include "kernels_cuda/sdpa_fp8/timing.cuh"

static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "timeline: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(3);
    }
}

__device__ unsigned long long g_marker;
__global__ void marker_kernel() { g_marker = sdpa_decode::gtimer(); }

__global__ void fill_kernel(uint8_t* k, uint8_t* v, __half* q, size_t nkv, size_t nq) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nkv; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 32);
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        k[i] = (uint8_t)(h & 0xF7);          // exponent field < 15 at most 14 + mantissa: never the NaN code
        v[i] = (uint8_t)((h >> 8) & 0xF7);
        if (i < nq) q[i] = __float2half((float)((h >> 16) & 0xFFFF) / 32768.f - 1.f);
    }
}

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: timeline SAMPLES NAME:B,Hq,Hkv,Sq,Skv,D,causal [...]\n");
        return 2;
    }
    const int samples = std::atoi(argv[1]);
    int dev = 0, sms = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
    const size_t flush_bytes = bench_timing::l2_flush_bytes(dev, check);
    void* flush = nullptr;
    check(cudaMalloc(&flush, flush_bytes), "cudaMalloc(flush)");
    cudaStream_t st;
    check(cudaStreamCreate(&st), "cudaStreamCreate");
    for (int a = 2; a < argc; ++a) {
        std::string arg = argv[a];
        const size_t colon = arg.find(':');
        const std::string name = arg.substr(0, colon);
        long long v[7];
        if (std::sscanf(arg.c_str() + colon + 1, "%lld,%lld,%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4],
                        &v[5], &v[6]) != 7) {
            std::fprintf(stderr, "timeline: bad case %s\n", arg.c_str());
            return 2;
        }
        AttnShape s;
        s.B = v[0]; s.Hq = v[1]; s.Hkv = v[2]; s.Sq = v[3]; s.Skv = v[4]; s.D = v[5]; s.causal = v[6] != 0;
        sdpa_decode::LaunchInfo li;
        const char* why = nullptr;
        if (!sdpa_decode::select(sdpa_decode::Tier::kFp16, s, sms, 0, &li, &why)) {
            std::fprintf(stderr, "timeline: %s: %s\n", name.c_str(), why);
            return 2;
        }
        if (li.grid > sdpa_decode::kTraceMaxBlocks) {
            std::fprintf(stderr, "timeline: %s: %d blocks, more than the trace holds\n", name.c_str(), li.grid);
            return 2;
        }
        check(cudaFuncSetAttribute(li.func, cudaFuncAttributeMaxDynamicSharedMemorySize, li.smem), "smem attribute");
        const size_t nkv = (size_t)s.kv_elems(), nq = (size_t)s.q_elems();
        uint8_t *k, *vv;
        __half *q, *o;
        check(cudaMalloc(&k, nkv), "cudaMalloc k");
        check(cudaMalloc(&vv, nkv), "cudaMalloc v");
        check(cudaMalloc(&q, nq * 2), "cudaMalloc q");
        check(cudaMalloc(&o, nq * 2), "cudaMalloc o");
        fill_kernel<<<1024, 256, 0, st>>>(k, vv, q, nkv, nq);
        check(cudaGetLastError(), "fill");
        sdpa_decode::Workspace ws;
        check(sdpa_decode::workspace_alloc(li, &ws), "workspace");
        cudaEvent_t e0, e1;
        check(cudaEventCreate(&e0), "event");
        check(cudaEventCreate(&e1), "event");
        std::vector<unsigned long long> tr((size_t)li.grid * sdpa_decode::kTraceStamps);
        for (int i = -3; i < samples; ++i) {  // 3 warm-up launches, not printed
            std::vector<unsigned long long> zero(tr.size(), 0ull);
            check(cudaMemcpyToSymbol(sdpa_decode::g_trace, zero.data(), zero.size() * 8), "zero trace");
            check(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, st), "flush");
            marker_kernel<<<1, 1, 0, st>>>();
            check(cudaEventRecord(e0, st), "record");
            check(sdpa_decode::launch(li, ws, s, q, k, vv, o, 1.f / 64, 1.f / 64, st), "launch");
            check(cudaEventRecord(e1, st), "record");
            check(cudaStreamSynchronize(st), "sync");
            float ms = 0.f;
            check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
            unsigned long long marker = 0;
            check(cudaMemcpyFromSymbol(&marker, g_marker, 8), "marker");
            check(cudaMemcpyFromSymbol(tr.data(), sdpa_decode::g_trace, tr.size() * 8), "trace");
            if (i < 0) continue;
            std::printf("{\"case\":\"%s\",\"sample\":%d,\"us\":%.3f,\"grid\":%d,\"block\":%d,\"nsplit\":%lld,\"rt\":%d,"
                        "\"wm\":%d,\"wk\":%d,\"chunk_tiles\":%lld,\"marker\":%llu,\"stamps\":[",
                        name.c_str(), i, ms * 1000.0, li.grid, li.block, (long long)li.plan.nsplit, li.plan.rt,
                        li.plan.wm, li.plan.wk, (long long)li.plan.chunk_tiles, marker);
            for (size_t j = 0; j < tr.size(); ++j) std::printf(j ? ",%llu" : "%llu", tr[j]);
            std::printf("]}\n");
        }
        std::fflush(stdout);
        cudaFree(k); cudaFree(vv); cudaFree(q); cudaFree(o);
        sdpa_chunks::workspace_free(&ws);
    }
    return 0;
}
