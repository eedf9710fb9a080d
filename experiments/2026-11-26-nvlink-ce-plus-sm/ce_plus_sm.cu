// Can the copy engine and SM stores together move more per GPU than either alone, when every GPU of the host
// sends to every other at once (one phase of a two-shot allreduce)? Alone, on 4 H200s: the copy engine in rounds
// 370-373 GB/s per GPU (../2026-11-26-ce-allreduce, rs_only), SM stores 347-350 (../2026-11-26-nvlink-alltoall).
//
// n GPUs, S bytes per GPU, chunk = S/n (rounded down to 16 bytes). GPU g sends its chunk j (source offset j*chunk)
// to GPU j's receive slot g (offset g*chunk), for every j != g: (n-1) * chunk bytes per GPU. Each chunk is split:
// - bytes [0, ce_len) go by the copy engine: one cudaMemcpyPeerAsync per peer, all on one copy stream, in rounds
//   r = 1..n-1 (copy r goes to GPU (g+r)%n), so that in each round every GPU sends to one GPU and receives from
//   one;
// - bytes [ce_len, chunk) go by SM stores: one push kernel on a second stream, launched to run alongside the copies.
//   ce_len = (1-f) * chunk, rounded down to 16 bytes; f = 0 is the copy engine alone, f = 1 SM stores alone.
// Push kernel (as in ../2026-11-26-nvlink-alltoall): 512 threads a block, 16-byte loads, UNROLL loads in flight
// then as many stores, grid-stride. sm_order "split": the blocks are split over the peers (block b serves peer
// (g + 1 + b % (n-1)) % n), all peers at once. sm_order "rounds": every block serves the peers one after another
// in round order (g+1)%n, (g+2)%n, ..., as the copy stream does (its own pace, not tied to the copies' rounds).
//
// Timing: both streams of every GPU first spin on one host-mapped flag (one spin kernel on each stream), so all
// GPUs and both streams start together once the host has enqueued everything. An event after each stream's spin
// and one at each stream's end; a GPU's time is max(ends) - min(starts) over the streams that have work (all
// read against one reference event recorded before the spins, so no elapsed time is negative); the slowest
// GPU's time counts. median of 10 after 2 warm-ups (also min and max). ce_only_us / sm_only_us: each stream's
// own span (its start to its end, slowest GPU, median), so ce_gbps / sm_gbps are each mover's rate while the
// other runs.
// Check: every GPU's source holds a pattern of (gpu, byte index), no byte zero; receive buffers are zeroed before
// each row; after the row's timed runs, every byte of every receive slot j != g of every GPU g is compared on
// the device with GPU j's source bytes [g*chunk, (g+1)*chunk) (bad_bytes).
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ce_plus_sm.cu -o ce_plus_sm
// Run:   ./ce_plus_sm [ngpus]   (default: every visible GPU, at least 2) > ce_plus_sm_<n>gpu.jsonl
#include <cuda_runtime.h>

#include <algorithm>
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
constexpr int kThreads = 512;
constexpr int kUnroll = 4;
constexpr int kIters = 10;
constexpr int kWarmups = 2;

__global__ void spin_on(volatile int* flag) {
    while (*flag == 0) __nanosleep(100);
}

// Word w (4 bytes, byte index 4w..4w+3) of GPU g's source. Every byte is odd, so never 0: a byte that nobody
// wrote (receive buffers are zeroed before each row) is always caught.
__host__ __device__ __forceinline__ uint32_t pattern_word(int g, uint64_t w) {
    uint64_t x = w + 0x9E3779B97F4A7C15ull * (uint64_t)(g + 1);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)x | 0x01010101u;
}

__global__ void fill_pattern(uint32_t* __restrict__ p, int g, size_t words) {
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += (size_t)gridDim.x * blockDim.x)
        p[w] = pattern_word(g, w);
}

// Receive slot of GPU `me` from GPU `from`: words [0, words) must equal `from`'s source words from `first`.
__global__ void check_slot(const uint32_t* __restrict__ slot, int from, size_t first, size_t words,
                           unsigned long long* bad) {
    unsigned long long mine = 0;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t d = slot[w] ^ pattern_word(from, first + w);
        if (d) mine += ((d & 0xffu) != 0) + ((d & 0xff00u) != 0) + ((d & 0xff0000u) != 0) + ((d & 0xff000000u) != 0);
    }
    if (mine) atomicAdd(bad, mine);
}

struct Peers {
    int4* rx[kMaxGpus];  // peer j's receive buffer
};

template <int UNROLL>
__device__ __forceinline__ void copy_range(int4* __restrict__ dst, const int4* __restrict__ src, size_t count,
                                           size_t i, size_t stride) {
    for (; i + (UNROLL - 1) * stride < count; i += UNROLL * stride) {
        int4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v[u];
    }
    for (; i < count; i += stride) dst[i] = src[i];
}

// SM part of every chunk: for peer j, src + j*chunk16 + off16 -> peer j's rx + me*chunk16 + off16, len16 int4s.
template <int UNROLL, bool ROUNDS>
__global__ void __launch_bounds__(kThreads) push_sm(Peers p, const int4* __restrict__ src, int me, int n,
                                                    size_t chunk16, size_t off16, size_t len16) {
    const int peers = n - 1;
    if (ROUNDS) {
        const size_t stride = (size_t)gridDim.x * blockDim.x;
        for (int r = 1; r < n; ++r) {
            const int j = (me + r) % n;
            copy_range<UNROLL>(p.rx[j] + (size_t)me * chunk16 + off16, src + (size_t)j * chunk16 + off16, len16,
                               (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride);
        }
    } else {
        const int blocks_per_peer = gridDim.x / peers;
        const int bp = blockIdx.x / peers;
        if (bp >= blocks_per_peer) return;
        const int j = (me + 1 + blockIdx.x % peers) % n;
        copy_range<UNROLL>(p.rx[j] + (size_t)me * chunk16 + off16, src + (size_t)j * chunk16 + off16, len16,
                           (size_t)bp * blockDim.x + threadIdx.x, (size_t)blocks_per_peer * blockDim.x);
    }
}

struct Gpu {
    int dev;
    cudaStream_t cs, ss;  // cs: the copies; ss: the push kernel
    cudaEvent_t ref, cs0, cs1, ss0, ss1;
    int4* src;  // chunk j (offset j*chunk) goes to GPU j
    int4* rx;   // slot h (offset h*chunk): GPU h's chunk for this GPU
    unsigned long long* bad;
};

static volatile int* g_flag;

enum Order { NONE, SPLIT, ROUNDS };
static const char* order_name[] = {"none", "split", "rounds"};

struct Cfg {
    double f;
    Order order;
    int blocks;  // as asked; launched: for split, rounded down to a multiple of n-1
};

struct Row {
    size_t ce_len, sm_len;
    int blocks;
    std::vector<double> total, ce, sm;  // us, slowest GPU, one per timed run
};

static float since(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static Row measure(std::vector<Gpu>& g, size_t chunk, const Cfg& c) {
    const int n = (int)g.size();
    Row row;
    row.ce_len = (size_t)((1.0 - c.f) * (double)chunk) / 16 * 16;
    row.sm_len = chunk - row.ce_len;
    row.blocks = c.order == SPLIT ? c.blocks / (n - 1) * (n - 1) : c.blocks;
    if (row.sm_len == 0) row.blocks = 0;
    const bool ce = row.ce_len > 0, sm = row.sm_len > 0;
    Peers peers{};
    for (int j = 0; j < n; ++j) peers.rx[j] = g[j].rx;
    const size_t chunk16 = chunk / 16, off16 = row.ce_len / 16, len16 = row.sm_len / 16;
    for (int it = 0; it < kWarmups + kIters; ++it) {
        *g_flag = 0;
        __sync_synchronize();
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            CK(cudaEventRecord(m.ref, m.cs));
            if (ce) {
                spin_on<<<1, 1, 0, m.cs>>>(g_flag);
                CK(cudaGetLastError());
                CK(cudaEventRecord(m.cs0, m.cs));
                for (int r = 1; r < n; ++r) {
                    const int j = (me + r) % n;
                    CK(cudaMemcpyPeerAsync((char*)g[j].rx + me * chunk, g[j].dev, (char*)m.src + j * chunk, m.dev,
                                           row.ce_len, m.cs));
                }
                CK(cudaEventRecord(m.cs1, m.cs));
            }
            if (sm) {
                spin_on<<<1, 1, 0, m.ss>>>(g_flag);
                CK(cudaGetLastError());
                CK(cudaEventRecord(m.ss0, m.ss));
                if (c.order == ROUNDS)
                    push_sm<kUnroll, true><<<row.blocks, kThreads, 0, m.ss>>>(peers, m.src, me, n, chunk16, off16, len16);
                else
                    push_sm<kUnroll, false><<<row.blocks, kThreads, 0, m.ss>>>(peers, m.src, me, n, chunk16, off16, len16);
                CK(cudaGetLastError());
                CK(cudaEventRecord(m.ss1, m.ss));
            }
        }
        __sync_synchronize();
        *g_flag = 1;
        double worst = 0, worst_ce = 0, worst_sm = 0;
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            double t0 = 1e30, t1 = -1e30;
            if (ce) {
                CK(cudaEventSynchronize(m.cs1));
                const double a = since(m.ref, m.cs0), b = since(m.ref, m.cs1);
                t0 = std::min(t0, a), t1 = std::max(t1, b);
                worst_ce = std::max(worst_ce, b - a);
            }
            if (sm) {
                CK(cudaEventSynchronize(m.ss1));
                const double a = since(m.ref, m.ss0), b = since(m.ref, m.ss1);
                t0 = std::min(t0, a), t1 = std::max(t1, b);
                worst_sm = std::max(worst_sm, b - a);
            }
            worst = std::max(worst, t1 - t0);
        }
        if (it >= kWarmups) {
            row.total.push_back(worst * 1e3);
            row.ce.push_back(worst_ce * 1e3);
            row.sm.push_back(worst_sm * 1e3);
        }
    }
    return row;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static void clear_rx(std::vector<Gpu>& g, size_t bytes) {
    for (Gpu& m : g) {
        CK(cudaSetDevice(m.dev));
        CK(cudaMemset(m.rx, 0, bytes));
    }
    for (Gpu& m : g) {
        CK(cudaSetDevice(m.dev));
        CK(cudaDeviceSynchronize());
    }
}

static unsigned long long check(std::vector<Gpu>& g, size_t chunk) {
    const int n = (int)g.size();
    unsigned long long total = 0;
    for (int me = 0; me < n; ++me) {
        Gpu& m = g[me];
        CK(cudaSetDevice(m.dev));
        CK(cudaMemset(m.bad, 0, sizeof(unsigned long long)));
        for (int h = 0; h < n; ++h) {
            if (h == me) continue;
            check_slot<<<264, 512>>>((const uint32_t*)((const char*)m.rx + h * chunk), h, me * chunk / 4, chunk / 4,
                                     m.bad);
            CK(cudaGetLastError());
        }
        unsigned long long b;
        CK(cudaMemcpy(&b, m.bad, sizeof b, cudaMemcpyDeviceToHost));
        total += b;
    }
    return total;
}

int main(int argc, char** argv) {
    int ndev;
    CK(cudaGetDeviceCount(&ndev));
    const int n = argc > 1 ? atoi(argv[1]) : ndev;
    if (n < 2 || n > kMaxGpus || n > ndev) {
        fprintf(stderr, "needs 2 to %d GPUs, at most the %d visible; asked for %d\n", kMaxGpus, ndev, n);
        return 3;
    }
    const size_t max_bytes = 256ull << 20;
    std::vector<Gpu> g(n);
    int* hflag;
    CK(cudaHostAlloc(&hflag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *hflag = 0;
    g_flag = hflag;
    for (int r = 0; r < n; ++r) {
        Gpu& m = g[r];
        m.dev = r;
        CK(cudaSetDevice(r));
        for (int j = 0; j < n; ++j)
            if (j != r) CK(cudaDeviceEnablePeerAccess(j, 0));
        CK(cudaStreamCreateWithFlags(&m.cs, cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&m.ss, cudaStreamNonBlocking));
        for (cudaEvent_t* e : {&m.ref, &m.cs0, &m.cs1, &m.ss0, &m.ss1}) CK(cudaEventCreate(e));
        CK(cudaMalloc(&m.src, max_bytes));
        CK(cudaMalloc(&m.rx, max_bytes));
        CK(cudaMalloc(&m.bad, sizeof(unsigned long long)));
        // the pattern is a function of (gpu, byte index of the source), so one fill serves every S
        fill_pattern<<<264, 512>>>((uint32_t*)m.src, r, max_bytes / 4);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"ngpus\": %d, \"sms\": %d, \"device\": \"%s\", \"iters\": %d, \"warmups\": %d, \"unroll\": %d}\n", n,
           sms, prop.name, kIters, kWarmups, kUnroll);
    fflush(stdout);

    std::vector<Cfg> cfgs = {{0.0, NONE, 0}};
    const double fracs[] = {0.1, 0.2, 0.3, 0.4, 0.5, 1.0};
    for (double f : fracs)
        for (int b : {66, 132, 264}) cfgs.push_back({f, SPLIT, b});
    if (n > 2)  // on 2 GPUs there is one peer, and "rounds" is "split"
        for (double f : fracs)
            for (int b : {132, 264}) cfgs.push_back({f, ROUNDS, b});

    for (size_t S : {64ull << 20, 256ull << 20}) {
        const size_t chunk = S / n / 16 * 16;
        const double sent = (double)(n - 1) * chunk;  // bytes each GPU sends
        for (const Cfg& c : cfgs) {
            clear_rx(g, max_bytes);
            const Row row = measure(g, chunk, c);
            const unsigned long long bad = check(g, chunk);
            const double med = median(row.total), ce_us = median(row.ce), sm_us = median(row.sm);
            const double lo = *std::min_element(row.total.begin(), row.total.end());
            const double hi = *std::max_element(row.total.begin(), row.total.end());
            const double ce_sent = (double)(n - 1) * row.ce_len, sm_sent = (double)(n - 1) * row.sm_len;
            printf("{\"ngpus\": %d, \"S_bytes\": %zu, \"f\": %.2f, \"sm_order\": \"%s\", \"sm_blocks\": %d, "
                   "\"ce_bytes_per_gpu\": %.0f, \"sm_bytes_per_gpu\": %.0f, \"median_us\": %.1f, \"min_us\": %.1f, "
                   "\"max_us\": %.1f, \"gbps_per_gpu\": %.1f, \"ce_only_us\": %.1f, \"sm_only_us\": %.1f, "
                   "\"ce_gbps\": %.1f, \"sm_gbps\": %.1f, \"bad_bytes\": %llu}\n",
                   n, S, c.f, order_name[row.sm_len ? c.order : NONE], row.blocks, ce_sent, sm_sent, med, lo, hi,
                   sent / (med * 1e-6) / 1e9, ce_us, sm_us, ce_us > 0 ? ce_sent / (ce_us * 1e-6) / 1e9 : 0.0,
                   sm_us > 0 ? sm_sent / (sm_us * 1e-6) / 1e9 : 0.0, bad);
            fflush(stdout);
            fprintf(stderr, "n=%d S=%zuMiB f=%.2f %s blocks=%d: %.1f us (%.1f-%.1f) = %.1f GB/s per GPU; ce %.1f us, sm %.1f us; bad %llu\n",
                    n, S >> 20, c.f, order_name[row.sm_len ? c.order : NONE], row.blocks, med, lo, hi,
                    sent / (med * 1e-6) / 1e9, ce_us, sm_us, bad);
        }
    }
    return 0;
}
