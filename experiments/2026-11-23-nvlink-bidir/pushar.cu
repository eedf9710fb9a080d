// Prototype: a 2-GPU one-shot allreduce built on stores (push) with per-chunk flags, to find the
// chunk size, block count and flag protocol that keep the link at its bidirectional store rate
// (~363 GB/s per direction at 256 MiB, bidir.cu) before writing it in Mojo.
// Each rank pushes chunk k of its input into the peer's scratch, then a release store of the launch's
// generation into the peer's flag k; it reduces chunk k-LAG (own input + scratch) once its own flag
// k-LAG carries the generation. Scratch has two generations so launch t+1 never overwrites launch t.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a pushar.cu -o pushar
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2);} } while (0)

__global__ void spin_on(volatile int* flag) { while (*flag == 0) { __nanosleep(100); } }

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v; asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}

// MODE 0: one block pushes chunk k then reduces chunk k-LAG (fence per chunk in thread 0).
// MODE 1: warp-specialized: warps [0, W-1) push, then bar.arrive; the last warp waits for the
//         chunk's barrier, releases the flag; reduction of k-LAG by the push warps.
template <int THREADS, int LAG>
__global__ void __launch_bounds__(THREADS) push_ar(const float4* __restrict__ in, float4* __restrict__ out,
    float4* __restrict__ my_scr, float4* __restrict__ peer_scr, uint32_t* my_flags, uint32_t* peer_flags,
    size_t n16, int chunk16, uint32_t gen) {
  size_t nchunks = (n16 + chunk16 - 1) / chunk16;
  size_t slot = (gen & 1) * n16;
  int t = threadIdx.x;
  size_t mine = 0;
  for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x) ++mine;
  for (size_t j = 0; j < mine + LAG; ++j) {
    if (j < mine) {
      size_t c = blockIdx.x + j * gridDim.x;
      size_t lo = c * chunk16, hi = min(lo + chunk16, n16);
      // 4 loads in flight per thread, then 4 stores
      size_t i = lo + t;
      for (; i + 3 * THREADS < hi; i += 4 * THREADS) {
        float4 v0 = in[i], v1 = in[i + THREADS], v2 = in[i + 2 * THREADS], v3 = in[i + 3 * THREADS];
        peer_scr[slot + i] = v0; peer_scr[slot + i + THREADS] = v1;
        peer_scr[slot + i + 2 * THREADS] = v2; peer_scr[slot + i + 3 * THREADS] = v3;
      }
      for (; i < hi; i += THREADS) peer_scr[slot + i] = in[i];
      __syncthreads();
      if (t == 0) st_release_sys(&peer_flags[c], gen);
    }
    if (j >= LAG) {
      size_t c = blockIdx.x + (j - LAG) * gridDim.x;
      if (t == 0) { while (ld_acquire_sys(&my_flags[c]) != gen) { } }
      __syncthreads();
      size_t lo = c * chunk16, hi = min(lo + chunk16, n16);
      size_t i = lo + t;
      for (; i + 3 * THREADS < hi; i += 4 * THREADS) {
        float4 a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) { a[u] = in[i + u * THREADS]; b[u] = my_scr[slot + i + u * THREADS]; }
#pragma unroll
        for (int u = 0; u < 4; ++u)
          out[i + u * THREADS] = make_float4(a[u].x + b[u].x, a[u].y + b[u].y, a[u].z + b[u].z, a[u].w + b[u].w);
      }
      for (; i < hi; i += THREADS) { float4 x = in[i], y = my_scr[slot + i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
    }
  }
}


// Split roles: blocks [0, P) only push (chunk b, b+P, ...; a release flag after each), blocks
// [P, P+R) only reduce (chunk b-P, b-P+R, ...) once the peer's flag for it arrived. Pushers never
// wait, so the link never idles behind a reduction. All P+R blocks must be resident at once.
template <int THREADS>
__global__ void __launch_bounds__(THREADS, 2) push_ar_split(const float4* __restrict__ in, float4* __restrict__ out,
    float4* __restrict__ my_scr, float4* __restrict__ peer_scr, uint32_t* my_flags, uint32_t* peer_flags,
    size_t n16, int chunk16, uint32_t gen, int P) {
  size_t nchunks = (n16 + chunk16 - 1) / chunk16;
  size_t slot = (gen & 1) * n16;
  int t = threadIdx.x;
  if ((int)blockIdx.x < P) {
    for (size_t c = blockIdx.x; c < nchunks; c += P) {
      size_t lo = c * chunk16, hi = min(lo + chunk16, n16);
      size_t i = lo + t;
      for (; i + 3 * THREADS < hi; i += 4 * THREADS) {
        float4 v0 = in[i], v1 = in[i + THREADS], v2 = in[i + 2 * THREADS], v3 = in[i + 3 * THREADS];
        peer_scr[slot + i] = v0; peer_scr[slot + i + THREADS] = v1;
        peer_scr[slot + i + 2 * THREADS] = v2; peer_scr[slot + i + 3 * THREADS] = v3;
      }
      for (; i < hi; i += THREADS) peer_scr[slot + i] = in[i];
      __syncthreads();
      if (t == 0) st_release_sys(&peer_flags[c], gen);
    }
  } else {
    int R = gridDim.x - P;
    for (size_t c = blockIdx.x - P; c < nchunks; c += R) {
      if (t == 0) { while (ld_acquire_sys(&my_flags[c]) != gen) { } }
      __syncthreads();
      size_t lo = c * chunk16, hi = min(lo + chunk16, n16);
      size_t i = lo + t;
      for (; i + 3 * THREADS < hi; i += 4 * THREADS) {
        float4 a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) { a[u] = in[i + u * THREADS]; b[u] = my_scr[slot + i + u * THREADS]; }
#pragma unroll
        for (int u = 0; u < 4; ++u)
          out[i + u * THREADS] = make_float4(a[u].x + b[u].x, a[u].y + b[u].y, a[u].z + b[u].z, a[u].w + b[u].w);
      }
      for (; i < hi; i += THREADS) { float4 x = in[i], y = my_scr[slot + i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
      __syncthreads();
    }
  }
}

struct Gpu { int dev; cudaStream_t s; cudaEvent_t e0, e1; float *in, *out, *scr; uint32_t* flags; };
static volatile int* g_flag;

template <int THREADS, int LAG>
static void launch(Gpu& me, Gpu& peer, size_t n16, int blocks, int chunk16, uint32_t gen) {
  push_ar<THREADS, LAG><<<blocks, THREADS, 0, me.s>>>((const float4*)me.in, (float4*)me.out, (float4*)me.scr,
      (float4*)peer.scr, me.flags, peer.flags, n16, chunk16, gen);
}

int main() {
  size_t max_bytes = 256ull << 20, max16 = max_bytes / 16;
  std::vector<Gpu> g(2);
  int* hflag; CK(cudaHostAlloc(&hflag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable)); g_flag = hflag;
  size_t max_chunks = max16 / 512 + 1;
  for (int r = 0; r < 2; ++r) {
    g[r].dev = r; CK(cudaSetDevice(r)); CK(cudaDeviceEnablePeerAccess(1 - r, 0));
    CK(cudaStreamCreateWithFlags(&g[r].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[r].e0)); CK(cudaEventCreate(&g[r].e1));
    CK(cudaMalloc(&g[r].in, max_bytes)); CK(cudaMalloc(&g[r].out, max_bytes)); CK(cudaMalloc(&g[r].scr, 2 * max_bytes));
    CK(cudaMalloc(&g[r].flags, max_chunks * 4)); CK(cudaMemset(g[r].flags, 0, max_chunks * 4));
    std::vector<float> h(max_bytes / 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = (float)((i * 7 + r * 13) % 1001) - 500.0f;
    CK(cudaMemcpy(g[r].in, h.data(), max_bytes, cudaMemcpyHostToDevice));
  }
  uint32_t gen = 0;
  struct Cfg { int threads, lag, blocks_per_sm, chunk_kib; int split_p = 0, split_r = 0; };
  std::vector<Cfg> cfgs;
  for (int bps : {1, 2}) for (int ck : {32, 64}) cfgs.push_back({512, 1, bps, ck});
  for (int p : {132, 264}) for (int r : {66, 132}) for (int ck : {8, 16, 32, 64}) cfgs.push_back({512, 0, 0, ck, p, r});
  for (size_t bytes : {1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20, 256ull << 20}) {
    size_t n16 = bytes / 16;
    for (auto& c : cfgs) {
      int blocks = c.split_p ? c.split_p + c.split_r : 132 * c.blocks_per_sm, chunk16 = c.chunk_kib * 1024 / 16;
      std::vector<float> us;
      int bad = -1;
      for (int it = 0; it < 22; ++it) {
        ++gen; *g_flag = 0;
        for (int r = 0; r < 2; ++r) {
          CK(cudaSetDevice(r));
          spin_on<<<1, 1, 0, g[r].s>>>(g_flag);
          CK(cudaEventRecord(g[r].e0, g[r].s));
          if (c.split_p) push_ar_split<512><<<blocks, 512, 0, g[r].s>>>((const float4*)g[r].in, (float4*)g[r].out, (float4*)g[r].scr,
              (float4*)g[1 - r].scr, g[r].flags, g[1 - r].flags, n16, chunk16, gen, c.split_p);
          else if (c.lag == 1) launch<512, 1>(g[r], g[1 - r], n16, blocks, chunk16, gen);
          else launch<512, 2>(g[r], g[1 - r], n16, blocks, chunk16, gen);
          CK(cudaGetLastError());
          CK(cudaEventRecord(g[r].e1, g[r].s));
        }
        __sync_synchronize(); *g_flag = 1;
        float worst = 0;
        for (int r = 0; r < 2; ++r) { CK(cudaSetDevice(r)); CK(cudaEventSynchronize(g[r].e1));
          float ms; CK(cudaEventElapsedTime(&ms, g[r].e0, g[r].e1)); worst = std::max(worst, ms); }
        if (it >= 2) us.push_back(worst * 1e3f);
        if (it == 21) {  // check every element on both ranks
          bad = 0;
          for (int r = 0; r < 2; ++r) {
            std::vector<float> o(bytes / 4); CK(cudaSetDevice(r));
            CK(cudaMemcpy(o.data(), g[r].out, bytes, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < o.size(); ++i) {
              float e = ((float)((i * 7) % 1001) - 500.0f) + ((float)((i * 7 + 13) % 1001) - 500.0f);
              if (o[i] != e) ++bad;
            }
            CK(cudaMemset(g[r].out, 0, bytes));
          }
        }
      }
      std::sort(us.begin(), us.end());
      double p50 = us[us.size() / 2];
      printf("{\"bytes\": %zu, \"split_p\": %d, \"blocks\": %d, \"chunk_kib\": %d, \"lag\": %d, \"p50_us\": %.2f, \"algbw_gbps\": %.1f, \"bad\": %d}\n",
             bytes, c.split_p, blocks, c.chunk_kib, c.lag, p50, bytes / (p50 * 1e-6) / 1e9, bad);
      fflush(stdout);
    }
  }
  return 0;
}
