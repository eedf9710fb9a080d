// The runners' two timing modes (docs/TIMING.md; the torch-driven peers do the same in
// driver/peers/torch_timing.py, so ours and the peers are timed alike).
//
//   cold: each launch timed alone by its own CUDA event pair.  Samples are queued in chunks
//         behind a one-thread spin kernel, so the host has enqueued a chunk before the GPU
//         reaches it and the events time the device, not host launch latency.  Before every
//         sample (outside its event pair) a cudaMemsetAsync writes max(2 x L2, 64 MiB) bytes,
//         so every launch starts with none of its inputs in L2.
//   hot:  `batch` launches captured once in a CUDA graph (stream capture) and replayed; each
//         replay is timed by one event pair after a 50 us spin, and gives one sample,
//         replay time / batch.  max(iters / batch, 5) samples.
//
// A sample whose launch the host had not enqueued before the spin ended may include host
// latency: those are counted in `hold_overruns`, and the next chunk is held twice as long.
// The launch is a callable `cudaError_t(cudaStream_t)`; `check(err, what)` handles a CUDA error
// (the runner's exits with code 3).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace bench_timing {

enum class Mode { kCold, kHot };

inline const char* mode_name(Mode m) { return m == Mode::kCold ? "cold" : "hot"; }

inline bool parse_mode(const std::string& s, Mode* m) {
    if (s == "cold") *m = Mode::kCold;
    else if (s == "hot") *m = Mode::kHot;
    else return false;
    return true;
}

constexpr long kColdChunk = 20;                      // samples queued behind one spin (as torch_timing.HOLD_CHUNK)
constexpr unsigned long long kColdHoldNs = 20000;    // spin per queued sample: a memset, two events and a launch
constexpr unsigned long long kHotHoldNs = 50000;     // spin before each graph replay (as torch_timing.time_hot)
constexpr size_t kMinFlushBytes = size_t(64) << 20;  // as torch_timing.l2_flush_bytes

using CheckFn = void (*)(cudaError_t, const char*);

// Holds the stream for `ns` nanoseconds of device time (globaltimer), touching no memory.
__global__ void spin_wait_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

struct Samples {
    std::vector<double> us;  // per-launch microseconds, one per sample
    long batch = 1;          // launches per sample
    size_t flush_bytes = 0;  // bytes written before each sample (cold)
    long hold_overruns = 0;  // samples enqueued after their hold had ended
};

// The raw samples as a JSON array, in the order timed, 3 decimals (nanoseconds).  The runner prints no
// statistic of its own: the driver computes p50/p90/min/mean/std from these (driver/stats.py), by one
// estimator for ours and every peer.
inline std::string json_samples(const std::vector<double>& us) {
    std::string out = "[";
    char buf[32];
    for (size_t i = 0; i < us.size(); ++i) {
        std::snprintf(buf, sizeof buf, i ? ",%.3f" : "%.3f", us[i]);
        out += buf;
    }
    return out + "]";
}

// max(2 x the L2 size of `device`, 64 MiB): a write of that much leaves nothing else in L2.
inline size_t l2_flush_bytes(int device, CheckFn check) {
    int l2 = 0;
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute(L2CacheSize)");
    return std::max(size_t(2) * (size_t)l2, kMinFlushBytes);
}

inline double host_ns_since(std::chrono::steady_clock::time_point t0) {
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

template <class Launch>
Samples time_cold(Launch&& launch, cudaStream_t st, long iters, bool hold, size_t flush_bytes, CheckFn check) {
    Samples out;
    out.flush_bytes = flush_bytes;
    void* flush = nullptr;
    if (flush_bytes) check(cudaMalloc(&flush, flush_bytes), "cudaMalloc(L2 flush buffer)");
    std::vector<cudaEvent_t> ev0((size_t)kColdChunk), ev1((size_t)kColdChunk);
    for (long i = 0; i < kColdChunk; ++i) {
        check(cudaEventCreate(&ev0[i]), "cudaEventCreate");
        check(cudaEventCreate(&ev1[i]), "cudaEventCreate");
    }
    unsigned long long hold_ns = kColdHoldNs;
    std::vector<double> enqueued_ns((size_t)kColdChunk);
    while ((long)out.us.size() < iters) {
        const long n = std::min(kColdChunk, iters - (long)out.us.size());
        const auto t0 = std::chrono::steady_clock::now();
        if (hold) {
            spin_wait_kernel<<<1, 1, 0, st>>>(hold_ns * (unsigned long long)n);
            check(cudaGetLastError(), "spin_wait_kernel launch");
        }
        for (long i = 0; i < n; ++i) {
            if (flush) check(cudaMemsetAsync(flush, (int)(out.us.size() + i) & 0xFF, flush_bytes, st), "cudaMemsetAsync(L2 flush)");
            check(cudaEventRecord(ev0[i], st), "cudaEventRecord");
            check(launch(st), "SDPA kernel launch");
            check(cudaEventRecord(ev1[i], st), "cudaEventRecord");
            enqueued_ns[i] = host_ns_since(t0);
        }
        check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        long overruns = 0;
        for (long i = 0; i < n; ++i) {
            float ms = 0.f;
            check(cudaEventElapsedTime(&ms, ev0[i], ev1[i]), "cudaEventElapsedTime");
            out.us.push_back((double)ms * 1000.0);
            overruns += hold && enqueued_ns[i] > (double)(hold_ns * (unsigned long long)n);
        }
        out.hold_overruns += overruns;
        if (overruns && hold_ns < 1000000) hold_ns *= 2;
    }
    for (long i = 0; i < kColdChunk; ++i) {
        check(cudaEventDestroy(ev0[i]), "cudaEventDestroy");
        check(cudaEventDestroy(ev1[i]), "cudaEventDestroy");
    }
    if (flush) check(cudaFree(flush), "cudaFree(L2 flush buffer)");
    return out;
}

template <class Launch>
Samples time_hot(Launch&& launch, cudaStream_t st, long iters, long warmup, long batch, bool hold, CheckFn check) {
    Samples out;
    out.batch = batch;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    cudaError_t launched = cudaSuccess;
    for (long i = 0; i < batch && launched == cudaSuccess; ++i) launched = launch(st);
    const cudaError_t ended = cudaStreamEndCapture(st, &graph);
    check(launched, "SDPA kernel launch (graph capture)");
    check(ended, "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaGraphUpload(exec, st), "cudaGraphUpload");
    for (long i = 0; i < std::max(warmup / batch, 1L); ++i) check(cudaGraphLaunch(exec, st), "cudaGraphLaunch");
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    cudaEvent_t ev0, ev1;
    check(cudaEventCreate(&ev0), "cudaEventCreate");
    check(cudaEventCreate(&ev1), "cudaEventCreate");
    const long samples = std::max(iters / batch, 5L);
    for (long s = 0; s < samples; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        if (hold) {
            spin_wait_kernel<<<1, 1, 0, st>>>(kHotHoldNs);
            check(cudaGetLastError(), "spin_wait_kernel launch");
        }
        check(cudaEventRecord(ev0, st), "cudaEventRecord");
        check(cudaGraphLaunch(exec, st), "cudaGraphLaunch");
        const double enqueued_ns = host_ns_since(t0);
        check(cudaEventRecord(ev1, st), "cudaEventRecord");
        check(cudaEventSynchronize(ev1), "cudaEventSynchronize");
        float ms = 0.f;
        check(cudaEventElapsedTime(&ms, ev0, ev1), "cudaEventElapsedTime");
        out.us.push_back((double)ms * 1000.0 / (double)batch);
        out.hold_overruns += hold && enqueued_ns > (double)kHotHoldNs;
    }
    check(cudaEventDestroy(ev0), "cudaEventDestroy");
    check(cudaEventDestroy(ev1), "cudaEventDestroy");
    check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    return out;
}

}  // namespace bench_timing
