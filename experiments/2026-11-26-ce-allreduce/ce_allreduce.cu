// Can a two-shot allreduce whose data the copy engines move (SMs only add, in local memory) pass the
// ~350 GB/s per GPU that SM stores reach when every GPU sends to every other (../2026-11-26-nvlink-alltoall)?
//
// fp32, n GPUs, S bytes per GPU. Chunk j (S/n) belongs to GPU j; each chunk is cut into P pieces.
// Reduce-scatter: GPU g copies piece p of its chunk j into GPU j's scratch (slot g), in rounds r = 1..n-1 with
// j = (g + r) % n, one cudaMemcpyPeerAsync after another on one copy stream, so that in each round every GPU
// sends to one GPU and receives from one (a permutation, as on 2 GPUs where the copy engine moved 385 GB/s
// per direction with both directions busy: ../2026-11-23-nvlink-bidir).
// Reduce: once every peer's piece p is in (cross-GPU event waits), GPU j adds its own piece and the n-1
// received ones, rank order 0..n-1, into its output (an SM kernel reading local memory only).
// All-gather: GPU j copies its reduced piece p into every peer's output, same rounds, same copy stream,
// enqueued after the reduce-scatter of piece p+1 so that the reduce of p hides behind that copy.
//
// Every GPU's streams first spin on one host-mapped flag, so host enqueue time is not in the figure (the
// enqueue time per iteration is reported beside it, `host_enqueue_us`). Each GPU's time runs from its flag
// release to the end of its last copy and reduce; the slowest GPU counts; median of `iters` after 2.
// busbw = 2 (n-1)/n S / t. Inputs are small integers, so every order of the sum is exact: every element of
// every GPU's output is compared with the host's sum (`bad`), after the timed runs.
// `rs_only` rows time the reduce-scatter copies alone (no reduce, no all-gather): the copy engines' rate per
// GPU in rounds, (n-1)/n S / t.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ce_allreduce.cu -o ce_allreduce
// Run:   ./ce_allreduce [ngpus] > ce_allreduce_<n>gpu.jsonl
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

constexpr int kMaxGpus = 8;
constexpr int kMaxPieces = 64;

__global__ void spin_on(volatile int* flag) {
    while (*flag == 0) __nanosleep(100);
}

struct Slots {
    const float4* p[kMaxGpus];  // slot h: GPU h's piece (own input for h == me, scratch otherwise)
};

// out[i] = sum over h = 0..n-1 of slot h [i], in rank order.
__global__ void reduce_piece(Slots s, float4* __restrict__ out, int n, size_t count4) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = s.p[0][i];
        for (int h = 1; h < n; ++h) {
            const float4 b = s.p[h][i];
            a.x += b.x;
            a.y += b.y;
            a.z += b.z;
            a.w += b.w;
        }
        out[i] = a;
    }
}

struct Gpu {
    int dev;
    cudaStream_t s0, cs, rs;  // s0: start and end; cs: every copy of this GPU; rs: the reduces
    cudaEvent_t e0, e1, start, cs_done, rs_done;
    cudaEvent_t rs_ev[kMaxPieces];  // this GPU's reduce-scatter copies of piece p are done
    cudaEvent_t red_ev[kMaxPieces];  // this GPU's reduce of piece p is done
    float* in;
    float* out;
    float* rx;  // slot h (chunk bytes): GPU h's copy of this GPU's chunk
};

static volatile int* g_flag;
static int g_sms;

static void enqueue_rs(std::vector<Gpu>& g, int me, size_t chunk, size_t piece, int p) {
    const int n = (int)g.size();
    Gpu& m = g[me];
    CK(cudaSetDevice(m.dev));
    for (int r = 1; r < n; ++r) {
        const int j = (me + r) % n;
        CK(cudaMemcpyPeerAsync((char*)g[j].rx + me * chunk + p * piece, g[j].dev,
                               (char*)m.in + j * chunk + p * piece, m.dev, piece, m.cs));
    }
    CK(cudaEventRecord(m.rs_ev[p], m.cs));
}

static void enqueue_reduce(std::vector<Gpu>& g, int me, size_t chunk, size_t piece, int p) {
    const int n = (int)g.size();
    Gpu& m = g[me];
    CK(cudaSetDevice(m.dev));
    Slots s{};
    for (int h = 0; h < n; ++h) {
        if (h != me) CK(cudaStreamWaitEvent(m.rs, g[h].rs_ev[p], 0));
        const char* base = h == me ? (const char*)m.in + me * chunk : (const char*)m.rx + h * chunk;
        s.p[h] = (const float4*)(base + p * piece);
    }
    reduce_piece<<<2 * g_sms, 512, 0, m.rs>>>(s, (float4*)((char*)m.out + me * chunk + p * piece), n, piece / 16);
    CK(cudaGetLastError());
    CK(cudaEventRecord(m.red_ev[p], m.rs));
}

static void enqueue_ag(std::vector<Gpu>& g, int me, size_t chunk, size_t piece, int p) {
    const int n = (int)g.size();
    Gpu& m = g[me];
    CK(cudaSetDevice(m.dev));
    CK(cudaStreamWaitEvent(m.cs, m.red_ev[p], 0));
    for (int r = 1; r < n; ++r) {
        const int j = (me + r) % n;
        CK(cudaMemcpyPeerAsync((char*)g[j].out + me * chunk + p * piece, g[j].dev,
                               (char*)m.out + me * chunk + p * piece, m.dev, piece, m.cs));
    }
}

struct Result {
    double us, host_us;
};

static Result measure(std::vector<Gpu>& g, size_t bytes, int pieces, bool rs_only, int iters) {
    const int n = (int)g.size();
    const size_t chunk = bytes / n, piece = chunk / pieces;
    std::vector<double> us, host;
    for (int it = 0; it < iters + 2; ++it) {
        *g_flag = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < n; ++r) {
            CK(cudaSetDevice(g[r].dev));
            spin_on<<<1, 1, 0, g[r].s0>>>(g_flag);
            CK(cudaEventRecord(g[r].e0, g[r].s0));
            CK(cudaEventRecord(g[r].start, g[r].s0));
            CK(cudaStreamWaitEvent(g[r].cs, g[r].start, 0));
            CK(cudaStreamWaitEvent(g[r].rs, g[r].start, 0));
        }
        for (int p = 0; p < pieces; ++p) {
            for (int r = 0; r < n; ++r) enqueue_rs(g, r, chunk, piece, p);
            if (rs_only) continue;
            for (int r = 0; r < n; ++r) enqueue_reduce(g, r, chunk, piece, p);
            if (p > 0)
                for (int r = 0; r < n; ++r) enqueue_ag(g, r, chunk, piece, p - 1);
        }
        if (!rs_only)
            for (int r = 0; r < n; ++r) enqueue_ag(g, r, chunk, piece, pieces - 1);
        for (int r = 0; r < n; ++r) {
            CK(cudaSetDevice(g[r].dev));
            CK(cudaEventRecord(g[r].cs_done, g[r].cs));
            CK(cudaEventRecord(g[r].rs_done, g[r].rs));
            CK(cudaStreamWaitEvent(g[r].s0, g[r].cs_done, 0));
            CK(cudaStreamWaitEvent(g[r].s0, g[r].rs_done, 0));
            CK(cudaEventRecord(g[r].e1, g[r].s0));
        }
        const auto t1 = std::chrono::steady_clock::now();
        __sync_synchronize();
        *g_flag = 1;
        float worst = 0;
        for (int r = 0; r < n; ++r) {
            CK(cudaSetDevice(g[r].dev));
            CK(cudaEventSynchronize(g[r].e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, g[r].e0, g[r].e1));
            worst = std::max(worst, ms);
        }
        if (it >= 2) {
            us.push_back(worst * 1e3);
            host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
    }
    std::sort(us.begin(), us.end());
    std::sort(host.begin(), host.end());
    return {us[us.size() / 2], host[host.size() / 2]};
}

static float value(int g, size_t i) { return (float)((int)((i * 7 + (size_t)g * 13) % 64) - 32); }

static void fill(std::vector<Gpu>& g, size_t bytes) {
    const size_t count = bytes / 4;
    std::vector<float> h(count);
    for (size_t r = 0; r < g.size(); ++r) {
        for (size_t i = 0; i < count; ++i) h[i] = value((int)r, i);
        CK(cudaSetDevice(g[r].dev));
        CK(cudaMemcpy(g[r].in, h.data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaMemset(g[r].out, 0, bytes));
        CK(cudaMemset(g[r].rx, 0, bytes));
        CK(cudaDeviceSynchronize());
    }
}

static long check(std::vector<Gpu>& g, size_t bytes) {
    const size_t count = bytes / 4;
    const int n = (int)g.size();
    std::vector<float> want(count), h(count);
    for (size_t i = 0; i < count; ++i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += value(r, i);
        want[i] = s;
    }
    long bad = 0;
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(g[r].dev));
        CK(cudaMemcpy(h.data(), g[r].out, bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; ++i) bad += h[i] != want[i];
    }
    return bad;
}

int main(int argc, char** argv) {
    int ndev;
    CK(cudaGetDeviceCount(&ndev));
    const int n = argc > 1 ? atoi(argv[1]) : ndev;
    if ((n != 2 && n != 4 && n != 8) || n > ndev) {
        fprintf(stderr, "needs 2, 4 or 8 GPUs, at most the %d visible; asked for %d\n", ndev, n);
        return 3;
    }
    const size_t max_bytes = 256ull << 20;
    std::vector<Gpu> g(n);
    int* hflag;
    CK(cudaHostAlloc(&hflag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    g_flag = hflag;
    for (int r = 0; r < n; ++r) {
        Gpu& m = g[r];
        m.dev = r;
        CK(cudaSetDevice(r));
        for (int j = 0; j < n; ++j)
            if (j != r) CK(cudaDeviceEnablePeerAccess(j, 0));
        CK(cudaStreamCreateWithFlags(&m.s0, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&m.cs, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&m.rs, cudaStreamNonBlocking));
        CK(cudaEventCreate(&m.e0));
        CK(cudaEventCreate(&m.e1));
        for (cudaEvent_t* e : {&m.start, &m.cs_done, &m.rs_done}) CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        for (int p = 0; p < kMaxPieces; ++p) {
            CK(cudaEventCreateWithFlags(&m.rs_ev[p], cudaEventDisableTiming));
            CK(cudaEventCreateWithFlags(&m.red_ev[p], cudaEventDisableTiming));
        }
        CK(cudaMalloc(&m.in, max_bytes));
        CK(cudaMalloc(&m.out, max_bytes));
        CK(cudaMalloc(&m.rx, max_bytes));
    }
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    printf("{\"ngpus\": %d, \"sms\": %d}\n", n, g_sms);
    for (size_t bytes : {16ull << 20, 64ull << 20, 256ull << 20}) {
        fill(g, bytes);
        for (int pieces : {1, 4}) {
            const Result r = measure(g, bytes, pieces, true, 10);
            printf("{\"ngpus\": %d, \"bytes\": %zu, \"mode\": \"rs_only\", \"pieces\": %d, \"us\": %.1f, "
                   "\"gbps_per_gpu\": %.1f, \"host_enqueue_us\": %.0f}\n",
                   n, bytes, pieces, r.us, (double)bytes * (n - 1) / n / (r.us * 1e-6) / 1e9, r.host_us);
            fflush(stdout);
        }
        for (int pieces : {1, 2, 4, 8, 16, 32}) {
            CK(cudaSetDevice(0));
            const Result r = measure(g, bytes, pieces, false, 10);
            const long bad = check(g, bytes);
            printf("{\"ngpus\": %d, \"bytes\": %zu, \"mode\": \"allreduce\", \"pieces\": %d, \"us\": %.1f, "
                   "\"busbw_gbps\": %.1f, \"host_enqueue_us\": %.0f, \"bad\": %ld}\n",
                   n, bytes, pieces, r.us, 2.0 * (n - 1) / n * bytes / (r.us * 1e-6) / 1e9, r.host_us, bad);
            fflush(stdout);
            for (int q = 0; q < n; ++q) {  // the next row's check must see its own run's output
                CK(cudaSetDevice(g[q].dev));
                CK(cudaMemset(g[q].out, 0, bytes));
                CK(cudaDeviceSynchronize());
            }
        }
    }
    return 0;
}
