// What does NVLink carry per direction between two H200s when BOTH directions are busy, as a
// 2-GPU allreduce needs? Copy engine vs SM loads (pull) vs SM stores (push) vs TMA bulk stores,
// one-way and both ways at once. Both GPUs start together: each stream first spins on a host flag.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bidir.cu -o bidir
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <string>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2);} } while (0)

__global__ void spin_on(volatile int* flag) { while (*flag == 0) { __nanosleep(100); } }

// dst[i] = src[i], int4, grid-stride, UNROLL independent 16-byte loads in flight per thread.
template <int UNROLL>
__global__ void copy_sm(int4* __restrict__ dst, const int4* __restrict__ src, size_t n16) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}

// out[i] = a[i] + b[i] as float4 (b may be the peer's): the 1-stage allreduce's data movement.
template <int UNROLL>
__global__ void add_sm(float4* __restrict__ out, const float4* __restrict__ a, const float4* __restrict__ b, size_t n16) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
    float4 x[UNROLL], y[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) { x[u] = a[i + u * stride]; y[u] = b[i + u * stride]; }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float4 r = make_float4(x[u].x + y[u].x, x[u].y + y[u].y, x[u].z + y[u].z, x[u].w + y[u].w);
      out[i + u * stride] = r;
    }
  }
  for (; i < n16; i += stride) { float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
}

// TMA bulk copy: global (src) -> shared -> global (dst), STAGES buffers of CHUNK bytes per block,
// one elected thread drives it. Block b handles chunks b, b+grid, ...
template <int STAGES, int CHUNK>
__global__ void copy_bulk(char* __restrict__ dst, const char* __restrict__ src, size_t bytes) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t full[STAGES];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < STAGES; ++s) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(&full[s]);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(a));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  size_t nchunks = bytes / CHUNK;
  uint32_t phase[STAGES] = {0};
  // prime
  size_t c = blockIdx.x;
  auto load = [&](size_t chunk, int st) {
    uint32_t bar = (uint32_t)__cvta_generic_to_shared(&full[st]);
    uint32_t dsts = (uint32_t)__cvta_generic_to_shared(smem + st * CHUNK);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(CHUNK) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dsts), "l"(src + chunk * CHUNK), "r"(CHUNK), "r"(bar) : "memory");
  };
  std::size_t todo[STAGES];
  int inflight = 0;
  for (; inflight < STAGES && c < nchunks; ++inflight, c += gridDim.x) { load(c, inflight); todo[inflight] = c; }
  int st = 0;
  while (inflight > 0) {
    uint32_t bar = (uint32_t)__cvta_generic_to_shared(&full[st]);
    asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }"
                 :: "r"(bar), "r"(phase[st]) : "memory");
    phase[st] ^= 1;
    uint32_t srcs = (uint32_t)__cvta_generic_to_shared(smem + st * CHUNK);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst + todo[st] * CHUNK), "r"(srcs), "r"(CHUNK) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    --inflight;
    if (c < nchunks) {
      // the buffer may be refilled once its store has read it
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      load(c, st); todo[st] = c; c += gridDim.x; ++inflight;
    }
    st = (st + 1) % STAGES;
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Gpu { int dev; cudaStream_t s; cudaEvent_t e0, e1; char *a, *b, *c; };

static volatile int* g_flag;

enum Kind { CE, PULL, PUSH, ADD, BULK_PUSH, BULK_PULL };

static void enqueue(Gpu& me, Gpu& peer, Kind k, size_t bytes, int blocks, int unroll) {
  CK(cudaSetDevice(me.dev));
  size_t n16 = bytes / 16;
  switch (k) {
    case CE: CK(cudaMemcpyPeerAsync(peer.b, peer.dev, me.a, me.dev, bytes, me.s)); break;  // me -> peer
    case PULL:  // me.b = peer.a (reads over the link)
      if (unroll == 4) copy_sm<4><<<blocks, 512, 0, me.s>>>((int4*)me.b, (const int4*)peer.a, n16);
      else copy_sm<8><<<blocks, 512, 0, me.s>>>((int4*)me.b, (const int4*)peer.a, n16);
      break;
    case PUSH:  // peer.b = me.a (stores over the link)
      if (unroll == 4) copy_sm<4><<<blocks, 512, 0, me.s>>>((int4*)peer.b, (const int4*)me.a, n16);
      else copy_sm<8><<<blocks, 512, 0, me.s>>>((int4*)peer.b, (const int4*)me.a, n16);
      break;
    case ADD:  // me.c = me.a + peer.a
      if (unroll == 4) add_sm<4><<<blocks, 512, 0, me.s>>>((float4*)me.c, (const float4*)me.a, (const float4*)peer.a, n16);
      else add_sm<8><<<blocks, 512, 0, me.s>>>((float4*)me.c, (const float4*)me.a, (const float4*)peer.a, n16);
      break;
    case BULK_PUSH: copy_bulk<4, 32768><<<blocks, 32, 4 * 32768, me.s>>>(peer.b, me.a, bytes); break;
    case BULK_PULL: copy_bulk<4, 32768><<<blocks, 32, 4 * 32768, me.s>>>(me.b, peer.a, bytes); break;
  }
  CK(cudaGetLastError());
}

static const char* kname[] = {"ce", "sm_pull", "sm_push", "sm_pull_add", "bulk_push", "bulk_pull"};

// returns per-direction GB/s (bytes / slowest active GPU's time), median over iters
static double measure(std::vector<Gpu>& g, Kind k, bool both, size_t bytes, int blocks, int unroll, int iters) {
  std::vector<double> gbps;
  for (int it = 0; it < iters + 2; ++it) {
    *g_flag = 0;
    int active = both ? 2 : 1;
    for (int r = 0; r < active; ++r) {
      CK(cudaSetDevice(g[r].dev));
      spin_on<<<1, 1, 0, g[r].s>>>(g_flag);
      CK(cudaEventRecord(g[r].e0, g[r].s));
      enqueue(g[r], g[1 - r], k, bytes, blocks, unroll);
      CK(cudaEventRecord(g[r].e1, g[r].s));
    }
    __sync_synchronize();
    *g_flag = 1;
    float worst = 0;
    for (int r = 0; r < active; ++r) {
      CK(cudaSetDevice(g[r].dev));
      CK(cudaEventSynchronize(g[r].e1));
      float ms; CK(cudaEventElapsedTime(&ms, g[r].e0, g[r].e1));
      worst = std::max(worst, ms);
    }
    if (it >= 2) gbps.push_back(bytes / (worst * 1e-3) / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

int main(int argc, char** argv) {
  int ndev; CK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) { fprintf(stderr, "needs 2 GPUs, found %d\n", ndev); return 3; }
  size_t max_bytes = 256ull << 20;
  std::vector<Gpu> g(2);
  int* hflag; CK(cudaHostAlloc(&hflag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  g_flag = hflag;
  for (int r = 0; r < 2; ++r) {
    g[r].dev = r; CK(cudaSetDevice(r));
    CK(cudaDeviceEnablePeerAccess(1 - r, 0));
    CK(cudaStreamCreateWithFlags(&g[r].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[r].e0)); CK(cudaEventCreate(&g[r].e1));
    CK(cudaMalloc(&g[r].a, max_bytes)); CK(cudaMalloc(&g[r].b, max_bytes)); CK(cudaMalloc(&g[r].c, max_bytes));
    CK(cudaMemset(g[r].a, 1, max_bytes)); CK(cudaMemset(g[r].b, 0, max_bytes));
    CK(cudaFuncSetAttribute(copy_bulk<4, 32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 32768));
  }
  for (int r = 0; r < 2; ++r) { CK(cudaSetDevice(r)); CK(cudaDeviceSynchronize()); }
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("{\"sms\": %d}\n", sms);
  std::vector<size_t> sizes = {16ull << 20, 256ull << 20};
  struct Cfg { Kind k; int blocks_per_sm; int unroll; };
  std::vector<Cfg> cfgs = {{CE, 0, 0},
                           {PULL, 1, 4}, {PULL, 2, 4}, {PULL, 4, 4}, {PULL, 2, 8},
                           {PUSH, 1, 4}, {PUSH, 2, 4}, {PUSH, 4, 4}, {PUSH, 2, 8},
                           {ADD, 2, 4}, {ADD, 4, 4},
                           {BULK_PUSH, 1, 0}, {BULK_PULL, 1, 0}};
  for (size_t bytes : sizes) {
    for (auto& c : cfgs) {
      int blocks = c.k == CE ? 0 : c.blocks_per_sm * sms;
      if (c.k == BULK_PUSH || c.k == BULK_PULL) blocks = sms;  // 1 block/SM, 128 KiB smem each
      for (int both = 0; both < 2; ++both) {
        double v = measure(g, c.k, both, bytes, blocks, c.unroll, 20);
        printf("{\"bytes\": %zu, \"kind\": \"%s\", \"blocks\": %d, \"unroll\": %d, \"dirs\": %d, \"gbps_per_dir\": %.1f}\n",
               bytes, kname[c.k], blocks, c.unroll, both + 1, v);
        fflush(stdout);
      }
    }
  }
  // correctness spot check of the bulk push: GPU1.b must equal GPU0.a
  std::vector<char> h(1 << 20);
  CK(cudaSetDevice(1)); CK(cudaMemcpy(h.data(), g[1].b, h.size(), cudaMemcpyDeviceToHost));
  int bad = 0; for (char x : h) bad += (x != 1);
  printf("{\"check_push_first_MiB_bad\": %d}\n", bad);
  return 0;
}
