// Does a copy-engine two-shot allreduce with FEWER copies reach 360 GB/s bus bandwidth at 256 MiB on 4 GPUs?
//
// `pieces` (the family's 2stage_ce today, ../2026-11-26-ce-allreduce): each chunk is cut into 2 pieces (3/4,
// 1/4); the reduce of piece 0 hides behind the reduce-scatter copies of piece 1. Every piece costs one copy per
// round per phase: 4 (n-1) copies per GPU.
//
// `inc` (this experiment): no pieces. The reduce is incremental, one add per reduce-scatter round: after round
// k (GPU j has GPU (j-k)'s copy of chunk j), GPU j adds it into its output chunk (round 1: own input + copy;
// later rounds: output + copy). Each add hides behind the next round's copy, so only the last round's add is
// exposed. `last_split` b > 0 also cuts the LAST reduce-scatter round into two copies (1-b, b), so only the add
// of the b share is exposed; `ag_split` cuts the all-gather into the same two pieces, the first starting before
// the b share is added. Copies per GPU: 2 (n-1), plus 1 (last_split), plus n-1 (ag_split).
// Summation order of chunk j: ((in_j + x_{j-1}) + x_{j-2}) + ..., rounded at each add (fp32 here); fixed, so
// the same bits every run; all ranks hold the bits GPU j computed.
//
// Every GPU's streams first spin on one host-mapped flag. A sample is the slowest GPU's time from its flag
// release to the end of its last copy and add. Variants are interleaved: `rounds` rounds, `iters` samples of
// each variant per round, 2 warm-ups before each. Inputs are small integers, so every order is exact: every
// element of every GPU's output is compared with the host's sum (`bad`) after each variant's last round.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ce_incremental.cu -o ce_incremental
// Run:   ./ce_incremental <ngpus> <MiB,...> [iters] [rounds] > rows_<n>gpu.jsonl
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

__global__ void spin_on(volatile int* flag) {
    while (*flag == 0) __nanosleep(100);
}

struct Slots {
    const float4* p[kMaxGpus];
};

// out[i] = sum over h of slot h [i], in slot order (the `pieces` scheme's reduce).
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

// out[i] = a[i] + b[i] (`inc`: a is the own input in round 1, the output itself later).
__global__ void add2(const float4* a, const float4* __restrict__ b, float4* out, size_t count4) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = a[i], y = b[i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

struct Gpu {
    int dev;
    cudaStream_t s0, cs, rs;  // s0: start and end; cs: every copy of this GPU; rs: the adds
    cudaEvent_t e0, e1, start, cs_done, rs_done;
    cudaEvent_t rs_ev[kMaxGpus][2];  // [round][piece]: this GPU's reduce-scatter copy is done
    cudaEvent_t red_ev[2];  // [piece]: this GPU's reduce of the piece is done
    float* in;
    float* out;
    float* rx;  // slot h (chunk bytes): GPU h's copy of this GPU's chunk
};

static volatile int* g_flag;
static int g_sms;

struct Variant {
    std::string scheme;  // "pieces" or "inc"
    double share;  // pieces: share of piece 0; inc: share b of the last round's second copy (0: none)
    bool ag_split;
};

static void copy_to(Gpu& m, Gpu& d, char* dst, const char* src, size_t len) {
    if (len) CK(cudaMemcpyPeerAsync(dst, d.dev, src, m.dev, len, m.cs));
}

// Offsets of the two pieces of a chunk: [0, cut) and [cut, chunk).
static size_t cut_at(size_t chunk, double first_share) { return (size_t)(chunk * first_share) / 4096 * 4096; }

static void enqueue_pieces(std::vector<Gpu>& g, size_t chunk, double first_share) {
    const int n = (int)g.size();
    const size_t cut = cut_at(chunk, first_share);
    const size_t off[3] = {0, cut, chunk};
    auto rs_piece = [&](int p) {
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            for (int r = 1; r < n; ++r) {
                const int j = (me + r) % n;
                copy_to(m, g[j], (char*)g[j].rx + me * chunk + off[p], (char*)m.in + j * chunk + off[p],
                        off[p + 1] - off[p]);
            }
            CK(cudaEventRecord(m.rs_ev[0][p], m.cs));
        }
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            Slots s{};
            for (int h = 0; h < n; ++h) {
                if (h != me) CK(cudaStreamWaitEvent(m.rs, g[h].rs_ev[0][p], 0));
                const char* base = h == me ? (const char*)m.in + me * chunk : (const char*)m.rx + h * chunk;
                s.p[h] = (const float4*)(base + off[p]);
            }
            reduce_piece<<<2 * g_sms, 512, 0, m.rs>>>(s, (float4*)((char*)m.out + me * chunk + off[p]), n,
                                                      (off[p + 1] - off[p]) / 16);
            CK(cudaGetLastError());
            CK(cudaEventRecord(m.red_ev[p], m.rs));
        }
    };
    auto ag_piece = [&](int p) {
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            CK(cudaStreamWaitEvent(m.cs, m.red_ev[p], 0));
            for (int r = 1; r < n; ++r) {
                const int j = (me + r) % n;
                copy_to(m, g[j], (char*)g[j].out + me * chunk + off[p], (char*)m.out + me * chunk + off[p],
                        off[p + 1] - off[p]);
            }
        }
    };
    rs_piece(0);
    rs_piece(1);
    ag_piece(0);
    ag_piece(1);
}

static void enqueue_inc(std::vector<Gpu>& g, size_t chunk, double b_share, bool ag_split) {
    const int n = (int)g.size();
    const size_t cut = b_share > 0 ? cut_at(chunk, 1.0 - b_share) : chunk;
    for (int r = 1; r < n; ++r) {
        const bool split = r == n - 1 && cut < chunk;
        for (int me = 0; me < n; ++me) {  // round r: me -> (me + r) % n
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            const int j = (me + r) % n;
            char* dst = (char*)g[j].rx + me * chunk;
            const char* src = (char*)m.in + j * chunk;
            copy_to(m, g[j], dst, src, split ? cut : chunk);
            CK(cudaEventRecord(m.rs_ev[r][0], m.cs));
            if (split) {
                copy_to(m, g[j], dst + cut, src + cut, chunk - cut);
                CK(cudaEventRecord(m.rs_ev[r][1], m.cs));
            }
        }
        for (int j = 0; j < n; ++j) {  // add round r's copy: GPU j received from (j - r) % n
            Gpu& m = g[j];
            CK(cudaSetDevice(m.dev));
            const int q = (j - r + n) % n;
            const char* a = r == 1 ? (const char*)m.in + j * chunk : (const char*)m.out + j * chunk;
            const char* b = (const char*)m.rx + q * chunk;
            char* o = (char*)m.out + j * chunk;
            const size_t ends[3] = {0, split ? cut : chunk, chunk};
            for (int p = 0; p < (split ? 2 : 1); ++p) {
                CK(cudaStreamWaitEvent(m.rs, g[q].rs_ev[r][p], 0));
                add2<<<2 * g_sms, 512, 0, m.rs>>>((const float4*)(a + ends[p]), (const float4*)(b + ends[p]),
                                                  (float4*)(o + ends[p]), (ends[p + 1] - ends[p]) / 16);
                CK(cudaGetLastError());
                if (r == n - 1) CK(cudaEventRecord(m.red_ev[p], m.rs));
            }
            if (r == n - 1 && !split) CK(cudaEventRecord(m.red_ev[1], m.rs));
        }
    }
    const bool ags = ag_split && cut < chunk;
    const size_t ends[3] = {0, ags ? cut : chunk, chunk};
    for (int p = 0; p < (ags ? 2 : 1); ++p)
        for (int me = 0; me < n; ++me) {
            Gpu& m = g[me];
            CK(cudaSetDevice(m.dev));
            CK(cudaStreamWaitEvent(m.cs, m.red_ev[ags ? p : 1], 0));
            for (int r = 1; r < n; ++r) {
                const int j = (me + r) % n;
                copy_to(m, g[j], (char*)g[j].out + me * chunk + ends[p], (char*)m.out + me * chunk + ends[p],
                        ends[p + 1] - ends[p]);
            }
        }
}

static double one_sample(std::vector<Gpu>& g, size_t bytes, const Variant& v) {
    const int n = (int)g.size();
    const size_t chunk = bytes / n;
    *g_flag = 0;
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(g[r].dev));
        spin_on<<<1, 1, 0, g[r].s0>>>(g_flag);
        CK(cudaEventRecord(g[r].e0, g[r].s0));
        CK(cudaEventRecord(g[r].start, g[r].s0));
        CK(cudaStreamWaitEvent(g[r].cs, g[r].start, 0));
        CK(cudaStreamWaitEvent(g[r].rs, g[r].start, 0));
    }
    if (v.scheme == "pieces")
        enqueue_pieces(g, chunk, v.share);
    else
        enqueue_inc(g, chunk, v.share, v.ag_split);
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(g[r].dev));
        CK(cudaEventRecord(g[r].cs_done, g[r].cs));
        CK(cudaEventRecord(g[r].rs_done, g[r].rs));
        CK(cudaStreamWaitEvent(g[r].s0, g[r].cs_done, 0));
        CK(cudaStreamWaitEvent(g[r].s0, g[r].rs_done, 0));
        CK(cudaEventRecord(g[r].e1, g[r].s0));
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
    return worst * 1e3;
}

static float value(int g, size_t i) { return (float)((int)((i * 7 + (size_t)g * 13) % 64) - 32); }

static void fill(std::vector<Gpu>& g, size_t bytes) {
    const size_t count = bytes / 4;
    std::vector<float> h(count);
    for (size_t r = 0; r < g.size(); ++r) {
        for (size_t i = 0; i < count; ++i) h[i] = value((int)r, i);
        CK(cudaSetDevice(g[r].dev));
        CK(cudaMemcpy(g[r].in, h.data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize());
    }
}

static void clear_out(std::vector<Gpu>& g, size_t bytes) {
    for (auto& m : g) {
        CK(cudaSetDevice(m.dev));
        CK(cudaMemset(m.out, 0, bytes));
        CK(cudaMemset(m.rx, 0, bytes));
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

static double pct(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(q * (v.size() - 1) + 0.5))];
}

int main(int argc, char** argv) {
    int ndev;
    CK(cudaGetDeviceCount(&ndev));
    if (argc < 3) {
        fprintf(stderr, "usage: %s <ngpus> <MiB,...> [iters] [rounds]\n", argv[0]);
        return 3;
    }
    const int n = atoi(argv[1]);
    if ((n != 2 && n != 4 && n != 8) || n > ndev) {
        fprintf(stderr, "needs 2, 4 or 8 GPUs, at most the %d visible; asked for %d\n", ndev, n);
        return 3;
    }
    std::vector<size_t> sizes;
    for (char* t = strtok(argv[2], ","); t; t = strtok(nullptr, ",")) sizes.push_back((size_t)atoi(t) << 20);
    const int iters = argc > 3 ? atoi(argv[3]) : 30;
    const int rounds = argc > 4 ? atoi(argv[4]) : 3;
    size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
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
        for (cudaEvent_t* e : {&m.start, &m.cs_done, &m.rs_done, &m.red_ev[0], &m.red_ev[1]})
            CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        for (int k = 0; k < kMaxGpus; ++k)
            for (int p = 0; p < 2; ++p) CK(cudaEventCreateWithFlags(&m.rs_ev[k][p], cudaEventDisableTiming));
        CK(cudaMalloc(&m.in, max_bytes));
        CK(cudaMalloc(&m.out, max_bytes));
        CK(cudaMalloc(&m.rx, max_bytes));
    }
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    const std::vector<Variant> vs = {
        {"pieces", 0.75, false}, {"inc", 0, false},      {"inc", 0.25, false},  {"inc", 0.125, false},
        {"inc", 0.0625, false},  {"inc", 0.25, true},    {"inc", 0.5, true},
    };
    for (size_t bytes : sizes) {
        fill(g, bytes);
        std::vector<std::vector<double>> samples(vs.size());
        std::vector<std::vector<double>> round_p50(vs.size());
        std::vector<long> bad(vs.size(), 0);
        for (int rd = 0; rd < rounds; ++rd)
            for (size_t k = 0; k < vs.size(); ++k) {
                clear_out(g, bytes);
                std::vector<double> s;
                for (int it = 0; it < iters + 2; ++it) {
                    const double us = one_sample(g, bytes, vs[k]);
                    if (it >= 2) s.push_back(us);
                }
                bad[k] += check(g, bytes);
                round_p50[k].push_back(pct(s, 0.5));
                samples[k].insert(samples[k].end(), s.begin(), s.end());
            }
        const double moved = 2.0 * (n - 1) / n * bytes;
        for (size_t k = 0; k < vs.size(); ++k) {
            const double p50 = pct(samples[k], 0.5);
            printf("{\"ngpus\": %d, \"bytes\": %zu, \"scheme\": \"%s\", \"share\": %.4f, \"ag_split\": %s, "
                   "\"samples\": %zu, \"p10_us\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, \"min_us\": %.1f, "
                   "\"busbw_p50_gbps\": %.1f, \"round_p50_us\": [",
                   n, bytes, vs[k].scheme.c_str(), vs[k].share, vs[k].ag_split ? "true" : "false", samples[k].size(),
                   pct(samples[k], 0.1), p50, pct(samples[k], 0.9), pct(samples[k], 0.0), moved / (p50 * 1e-6) / 1e9);
            for (size_t i = 0; i < round_p50[k].size(); ++i) printf("%s%.1f", i ? ", " : "", round_p50[k][i]);
            printf("], \"bad\": %ld}\n", bad[k]);
        }
        fflush(stdout);
    }
    return 0;
}
