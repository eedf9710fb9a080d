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
// Variants (second run): `first_frac`, the share of the chunk in piece 0 (the rest split evenly), so that
// the reduce left exposed at the end is small; `aligned`, where before each copy a GPU waits (cross-GPU event)
// until the GPU that sent to the same destination in the step before has finished, so that rounds stay a
// permutation instead of drifting into two senders per destination.
// `rs_only` rows time the reduce-scatter copies alone (no reduce, no all-gather): the copy engines' rate per
// GPU in rounds, (n-1)/n S / t.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ce_allreduce.cu -o ce_allreduce
// Run:   ./ce_allreduce [ngpus] > ce_allreduce2_<n>gpu.jsonl   (the first run's rows: ce_allreduce_<n>gpu.jsonl, ebf6ac8)
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

struct Op {
    bool ag;  // all-gather (else reduce-scatter)
    int piece, round;
};

// The copy program every GPU runs on its copy stream, the same for all GPUs: RS(0), RS(1), AG(0), RS(2),
// AG(1), ..., AG(P-1); each a run of rounds 1..n-1.
static std::vector<Op> program(int n, int pieces, bool rs_only) {
    std::vector<Op> ops;
    auto add = [&](bool ag, int p) {
        for (int r = 1; r < n; ++r) ops.push_back({ag, p, r});
    };
    for (int p = 0; p < pieces; ++p) {
        add(false, p);
        if (!rs_only && p > 0) add(true, p - 1);
    }
    if (!rs_only) add(true, pieces - 1);
    return ops;
}

constexpr int kMaxSteps = 2 * kMaxPieces * (kMaxGpus - 1);
static cudaEvent_t g_step_ev[kMaxGpus][kMaxSteps];

static void enqueue_reduce(std::vector<Gpu>& g, int me, size_t chunk, size_t off, size_t len, int p) {
    const int n = (int)g.size();
    Gpu& m = g[me];
    CK(cudaSetDevice(m.dev));
    Slots s{};
    for (int h = 0; h < n; ++h) {
        if (h != me) CK(cudaStreamWaitEvent(m.rs, g[h].rs_ev[p], 0));
        const char* base = h == me ? (const char*)m.in + me * chunk : (const char*)m.rx + h * chunk;
        s.p[h] = (const float4*)(base + off);
    }
    reduce_piece<<<2 * g_sms, 512, 0, m.rs>>>(s, (float4*)((char*)m.out + me * chunk + off), n, len / 16);
    CK(cudaGetLastError());
    CK(cudaEventRecord(m.red_ev[p], m.rs));
}

struct Result {
    double us, host_us;
};

struct Cfg {
    int pieces;
    double first_frac;  // share of piece 0; <= 0: even pieces
    bool aligned, rs_only;
};

static Result measure(std::vector<Gpu>& g, size_t bytes, const Cfg& c, int iters) {
    const int n = (int)g.size();
    const size_t chunk = bytes / n;
    std::vector<size_t> off(c.pieces + 1);
    const size_t first = c.first_frac > 0 && c.pieces > 1 ? (size_t)(chunk * c.first_frac) / 16 * 16 : 0;
    for (int p = 0; p <= c.pieces; ++p) {
        if (first == 0) off[p] = chunk / c.pieces * p / 16 * 16;
        else off[p] = p == 0 ? 0 : first + (chunk - first) / (c.pieces - 1) * (p - 1) / 16 * 16;
    }
    off[c.pieces] = chunk;
    const std::vector<Op> ops = program(n, c.pieces, c.rs_only);
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
        for (size_t k = 0; k < ops.size(); ++k) {
            const Op& o = ops[k];
            const size_t po = off[o.piece], len = off[o.piece + 1] - off[o.piece];
            for (int me = 0; me < n; ++me) {
                Gpu& m = g[me];
                CK(cudaSetDevice(m.dev));
                if (o.ag && o.round == 1) CK(cudaStreamWaitEvent(m.cs, m.red_ev[o.piece], 0));
                if (c.aligned && k > 0) {  // the previous sender to my destination has finished
                    const int prev = (me + o.round - ops[k - 1].round + n) % n;
                    if (prev != me) CK(cudaStreamWaitEvent(m.cs, g_step_ev[prev][k - 1], 0));
                }
                const int j = (me + o.round) % n;
                if (o.ag)
                    CK(cudaMemcpyPeerAsync((char*)g[j].out + me * chunk + po, g[j].dev, (char*)m.out + me * chunk + po,
                                           m.dev, len, m.cs));
                else
                    CK(cudaMemcpyPeerAsync((char*)g[j].rx + me * chunk + po, g[j].dev, (char*)m.in + j * chunk + po,
                                           m.dev, len, m.cs));
                if (c.aligned) CK(cudaEventRecord(g_step_ev[me][k], m.cs));
                if (!o.ag && o.round == n - 1) CK(cudaEventRecord(m.rs_ev[o.piece], m.cs));
            }
            if (!c.rs_only && !o.ag && o.round == n - 1)
                for (int me = 0; me < n; ++me) enqueue_reduce(g, me, chunk, off[o.piece], len, o.piece);
        }
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
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(g[r].dev));
        for (int k = 0; k < kMaxSteps; ++k) CK(cudaEventCreateWithFlags(&g_step_ev[r][k], cudaEventDisableTiming));
    }
    const std::vector<Cfg> cfgs = {
        {1, 0, false, true},     {1, 0, true, true},      {4, 0, false, true},     {4, 0, true, true},
        {1, 0, false, false},    {2, 0, false, false},    {2, 0, true, false},     {2, 0.75, false, false},
        {2, 0.75, true, false},  {3, 0.5, false, false},  {3, 0.5, true, false},   {4, 0, true, false},
        {4, 0.55, true, false},  {8, 0, true, false},
    };
    for (size_t bytes : {64ull << 20, 128ull << 20, 256ull << 20}) {
        fill(g, bytes);
        for (const Cfg& c : cfgs) {
            const Result r = measure(g, bytes, c, 10);
            long bad = -1;
            if (!c.rs_only) {
                bad = check(g, bytes);
                for (int q = 0; q < n; ++q) {  // the next row's check must see its own run's output
                    CK(cudaSetDevice(g[q].dev));
                    CK(cudaMemset(g[q].out, 0, bytes));
                    CK(cudaDeviceSynchronize());
                }
            }
            const double moved = c.rs_only ? (double)(n - 1) / n * bytes : 2.0 * (n - 1) / n * bytes;
            printf("{\"ngpus\": %d, \"bytes\": %zu, \"mode\": \"%s\", \"pieces\": %d, \"first_frac\": %.2f, "
                   "\"aligned\": %s, \"us\": %.1f, \"%s\": %.1f, \"host_enqueue_us\": %.0f, \"bad\": %ld}\n",
                   n, bytes, c.rs_only ? "rs_only" : "allreduce", c.pieces, c.first_frac, c.aligned ? "true" : "false",
                   r.us, c.rs_only ? "gbps_per_gpu" : "busbw_gbps", moved / (r.us * 1e-6) / 1e9, r.host_us, bad);
            fflush(stdout);
        }
    }
    return 0;
}
