// What does each GPU move per second when every GPU of the host sends to every other at once, as one phase
// of a two-shot allreduce does (reduce-scatter or all-gather: GPU g sends its chunk j, S/n bytes, to GPU j for
// every j != g)? SM stores into the peers (push), SM loads from the peers (pull) and the copy engine
// (one cudaMemcpyPeerAsync per peer, each on its own stream). All GPUs start together: every stream first spins
// on one host-mapped flag. The rate per GPU, (n-1)/n * S / time, is the bus bandwidth a two-shot allreduce
// moving its data that way could reach at most (busbw = 2 (n-1)/n S / t, two phases of (n-1)/n S each).
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a alltoall.cu -o alltoall
// Run:   ./alltoall [ngpus]   (default: every visible GPU, at least 2) > alltoall_<n>gpu.jsonl
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

constexpr int kMaxGpus = 8;

__global__ void spin_on(volatile int* flag) {
    while (*flag == 0) __nanosleep(100);
}

struct Peers {
    int4* p[kMaxGpus];  // where this GPU writes (push) or reads (pull) chunk j: peer j's buffer
};

// Push: the blocks are split over the n-1 peers (block b serves peer order[b % (n-1)]), each block copies its
// share of this GPU's chunk j (src + j * chunk) into peer j's receive buffer at this GPU's slot (dst_j + me *
// chunk), grid-stride, UNROLL 16-byte loads in flight, then as many stores. Pull is the same with the roles of
// local and remote swapped: chunk `me` of peer j's source into this GPU's slot j.
template <int UNROLL, bool PUSH>
__global__ void alltoall_sm(Peers remote, int4* __restrict__ local, int me, int n, size_t chunk16) {
    const int peers = n - 1;
    const int which = blockIdx.x % peers;
    const int j = which < me ? which : which + 1;  // skip me
    const int blocks_per_peer = gridDim.x / peers;
    const int bp = blockIdx.x / peers;
    if (bp >= blocks_per_peer) return;
    const size_t stride = (size_t)blocks_per_peer * blockDim.x;
    size_t i = (size_t)bp * blockDim.x + threadIdx.x;
    int4* dst = PUSH ? remote.p[j] + (size_t)me * chunk16 : local + (size_t)j * chunk16;
    const int4* src = PUSH ? local + (size_t)j * chunk16 : remote.p[j] + (size_t)me * chunk16;
    for (; i + (UNROLL - 1) * stride < chunk16; i += UNROLL * stride) {
        int4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v[u];
    }
    for (; i < chunk16; i += stride) dst[i] = src[i];
}

enum Kind { CE, PUSH, PULL };
static const char* kname[] = {"ce", "sm_push", "sm_pull"};

struct Gpu {
    int dev;
    cudaStream_t s[kMaxGpus];  // s[0] times the whole phase; s[1..] carry the copy engine's extra copies
    cudaEvent_t e0, e1, fork, join[kMaxGpus];
    int4* src;  // this GPU's data: chunk j goes to GPU j
    int4* rx;   // what the peers put here (push) or what this GPU pulled (pull): slot j from GPU j
};

static volatile int* g_flag;

static void enqueue(std::vector<Gpu>& g, int me, Kind k, size_t bytes, int blocks, int unroll) {
    const int n = (int)g.size();
    Gpu& m = g[me];
    const size_t chunk = bytes / n;
    CK(cudaSetDevice(m.dev));
    if (k == CE) {  // one copy per peer, each on its own stream, all forked from and joined to s[0]
        CK(cudaEventRecord(m.fork, m.s[0]));
        int q = 0;
        for (int j = 0; j < n; ++j) {
            if (j == me) continue;
            cudaStream_t st = m.s[1 + q];
            CK(cudaStreamWaitEvent(st, m.fork, 0));
            CK(cudaMemcpyPeerAsync((char*)g[j].rx + me * chunk, g[j].dev, (char*)m.src + j * chunk, m.dev, chunk, st));
            CK(cudaEventRecord(m.join[q], st));
            CK(cudaStreamWaitEvent(m.s[0], m.join[q], 0));
            ++q;
        }
        return;
    }
    Peers remote{};
    for (int j = 0; j < n; ++j) remote.p[j] = k == PUSH ? g[j].rx : g[j].src;
    int4* local = k == PUSH ? m.src : m.rx;
    const size_t chunk16 = chunk / 16;
    if (k == PUSH) {
        if (unroll == 4) alltoall_sm<4, true><<<blocks, 512, 0, m.s[0]>>>(remote, local, me, n, chunk16);
        else alltoall_sm<8, true><<<blocks, 512, 0, m.s[0]>>>(remote, local, me, n, chunk16);
    } else {
        if (unroll == 4) alltoall_sm<4, false><<<blocks, 512, 0, m.s[0]>>>(remote, local, me, n, chunk16);
        else alltoall_sm<8, false><<<blocks, 512, 0, m.s[0]>>>(remote, local, me, n, chunk16);
    }
    CK(cudaGetLastError());
}

// GB/s each GPU sends ((n-1)/n * bytes over the slowest GPU's time), median over `iters` after 2 warm-ups.
static double measure(std::vector<Gpu>& g, Kind k, size_t bytes, int blocks, int unroll, int iters) {
    const int n = (int)g.size();
    std::vector<double> rates;
    for (int it = 0; it < iters + 2; ++it) {
        *g_flag = 0;
        for (int r = 0; r < n; ++r) {
            CK(cudaSetDevice(g[r].dev));
            spin_on<<<1, 1, 0, g[r].s[0]>>>(g_flag);
            CK(cudaEventRecord(g[r].e0, g[r].s[0]));
            enqueue(g, r, k, bytes, blocks, unroll);
            CK(cudaEventRecord(g[r].e1, g[r].s[0]));
        }
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
        if (it >= 2) rates.push_back((double)bytes * (n - 1) / n / (worst * 1e-3) / 1e9);
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

// Every slot j != r of GPU r's receive buffer must hold GPU j's chunk r. fill() sets every byte of GPU r's
// chunk j to 16 r + j + 1, so a chunk that went to the wrong GPU or slot, or did not arrive, is found.
static int check(std::vector<Gpu>& g, size_t bytes) {
    const int n = (int)g.size();
    const size_t chunk = bytes / n;
    std::vector<unsigned char> h(chunk);
    int bad = 0;
    for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) {
            if (j == r) continue;
            CK(cudaSetDevice(g[r].dev));
            CK(cudaMemcpy(h.data(), (char*)g[r].rx + j * chunk, chunk, cudaMemcpyDeviceToHost));
            const unsigned char want = (unsigned char)(16 * j + r + 1);
            for (size_t b = 0; b < chunk; ++b) bad += h[b] != want;
        }
    }
    return bad;
}

static void fill(std::vector<Gpu>& g, size_t bytes) {
    const int n = (int)g.size();
    const size_t chunk = bytes / n;
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(g[r].dev));
        for (int j = 0; j < n; ++j) CK(cudaMemset((char*)g[r].src + j * chunk, 16 * r + j + 1, chunk));
        CK(cudaMemset(g[r].rx, 0, bytes));
        CK(cudaDeviceSynchronize());
    }
}

int main(int argc, char** argv) {
    int ndev;
    CK(cudaGetDeviceCount(&ndev));
    const int n = argc > 1 ? atoi(argv[1]) : ndev;
    if ((n != 2 && n != 4 && n != 8) || n > ndev) {  // chunks of S/n bytes, whole 16-byte packs
        fprintf(stderr, "needs 2, 4 or 8 GPUs, at most the %d visible; asked for %d\n", ndev, n);
        return 3;
    }
    const size_t max_bytes = 256ull << 20;
    std::vector<Gpu> g(n);
    int* hflag;
    CK(cudaHostAlloc(&hflag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    g_flag = hflag;
    for (int r = 0; r < n; ++r) {
        g[r].dev = r;
        CK(cudaSetDevice(r));
        for (int j = 0; j < n; ++j)
            if (j != r) CK(cudaDeviceEnablePeerAccess(j, 0));
        for (int q = 0; q < n; ++q) CK(cudaStreamCreateWithFlags(&g[r].s[q], cudaStreamNonBlocking));
        CK(cudaEventCreate(&g[r].e0));
        CK(cudaEventCreate(&g[r].e1));
        CK(cudaEventCreateWithFlags(&g[r].fork, cudaEventDisableTiming));
        for (int q = 0; q < n; ++q) CK(cudaEventCreateWithFlags(&g[r].join[q], cudaEventDisableTiming));
        CK(cudaMalloc(&g[r].src, max_bytes));
        CK(cudaMalloc(&g[r].rx, max_bytes));
    }
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("{\"ngpus\": %d, \"sms\": %d}\n", n, sms);
    struct Cfg {
        Kind k;
        int blocks_per_sm;
        int unroll;
    };
    const std::vector<Cfg> cfgs = {{CE, 0, 0},   {PUSH, 1, 4}, {PUSH, 2, 4}, {PUSH, 4, 4},
                                   {PUSH, 2, 8}, {PULL, 1, 4}, {PULL, 2, 4}, {PULL, 2, 8}};
    for (size_t bytes : {16ull << 20, 64ull << 20, 256ull << 20}) {
        for (const Cfg& c : cfgs) {
            // a multiple of n-1 blocks, so every peer gets the same number
            const int blocks = c.k == CE ? 0 : (c.blocks_per_sm * sms / (n - 1)) * (n - 1);
            fill(g, bytes);
            const double v = measure(g, c.k, bytes, blocks, c.unroll, 20);
            const int bad = check(g, bytes);
            printf("{\"ngpus\": %d, \"bytes\": %zu, \"kind\": \"%s\", \"blocks\": %d, \"unroll\": %d, "
                   "\"gbps_per_gpu\": %.1f, \"bad_bytes\": %d}\n",
                   n, bytes, kname[c.k], blocks, c.unroll, v, bad);
            fflush(stdout);
        }
    }
    return 0;
}
