// Layout probe for the Hopper SDPA kernel's warpgroup MMAs, each against a CPU product:
//   qk64 / qk128: S = A B^T, A [64][D] and B [128][D] fp16 K-major in 128-byte-swizzled
//                 64-column panels (the Q and K tiles), m64n128k16 x D/16 (ss_m64n128k16)
//   pv64 / pv128: O = P V, P [64][128] from registers (the S fragment packed), V [128][D]
//                 MN-major in the same panels (the V tile), m64nDk16 x 8 (rs_m64nDk16_tb)
// One warpgroup per test. Prints one line per test: max |gpu - cpu| (fp32 accumulation of fp16
// products: expect ~1e-5 relative). Build: nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a
//   -I kernels_cuda/sdpa_fp8_sm90 wgmma_probe.cu -o wgmma_probe
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>

#include "ptx.cuh"
#include "wgmma_ops.cuh"

using namespace sdpa_sm90;

// Store row-major fp16 matrix [rows][cols] (cols = 64 * panels) into swizzled panels.
__device__ void to_panels(const __half* g, uint8_t* s, int rows, int cols) {
    for (int i = threadIdx.x; i < rows * cols / 8; i += blockDim.x) {
        const int r = i / (cols / 8), c = i % (cols / 8);
        const uint4 v = reinterpret_cast<const uint4*>(g + r * cols)[c];
        *reinterpret_cast<uint4*>(s + (c / 8) * rows * 128 + swz128(r, c % 8)) = v;
    }
}

template <int D>
__global__ void qk_probe(const __half* A, const __half* B, float* out) {
    extern __shared__ __align__(1024) uint8_t sm[];
    uint8_t* sa = sm;
    uint8_t* sb = sm + 64 * D * 2;
    to_panels(A, sa, 64, D);
    to_panels(B, sb, 128, D);
    fence_proxy_async();
    __syncthreads();
    float d[64];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da = smem_desc(smem_u32(sa) + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024);
        const uint64_t db = smem_desc(smem_u32(sb) + (kk >> 2) * 128 * 128 + (kk & 3) * 32, 16, 1024);
        wgmma::ss_m64n128k16(d, da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    for (int j = 0; j < 16; ++j)
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * w + l / 4 + 8 * (e / 2), col = 8 * j + 2 * (l % 4) + (e & 1);
            out[row * 128 + col] = d[4 * j + e];
        }
}

template <int D>
__global__ void pv_probe(const float* P, const __half* V, float* out) {
    extern __shared__ __align__(1024) uint8_t sm[];
    to_panels(V, sm, 128, D);
    fence_proxy_async();
    __syncthreads();
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    // P in the S accumulator layout, packed to A fragments as the kernel does.
    float s[64];
    for (int j = 0; j < 16; ++j)
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * w + l / 4 + 8 * (e / 2), col = 8 * j + 2 * (l % 4) + (e & 1);
            s[4 * j + e] = P[row * 128 + col];
        }
    uint32_t p[8][4];
    for (int k = 0; k < 8; ++k)
        for (int i = 0; i < 4; ++i) p[k][i] = pack_half2(s[8 * k + 2 * i], s[8 * k + 2 * i + 1]);
    float d[D / 2];
    for (int i = 0; i < D / 2; ++i) d[i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const uint64_t db = smem_desc(smem_u32(sm) + kk * 16 * 128, 128 * 128, 1024);
        if constexpr (D == 64) wgmma::rs_m64n64k16_tb(d, p[kk], db, 1);
        else wgmma::rs_m64n128k16_tb(d, p[kk], db, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(d);
    for (int j = 0; j < D / 8; ++j)
        for (int e = 0; e < 4; ++e) {
            const int row = 16 * w + l / 4 + 8 * (e / 2), col = 8 * j + 2 * (l % 4) + (e & 1);
            out[row * D + col] = d[4 * j + e];
        }
}

static float frand(unsigned& s) { s = s * 1664525u + 1013904223u; return ((s >> 8) & 0xffff) / 32768.f - 1.f; }

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("error: %s: %s\n", #x, cudaGetErrorString(e)); return 3; } } while (0)

template <int D>
int run(unsigned seed) {
    std::vector<__half> A(64 * D), B(128 * D), V(128 * D);
    std::vector<float> Af(64 * D), Bf(128 * D), Vf(128 * D), P(64 * 128);
    for (int i = 0; i < 64 * D; ++i) { A[i] = __float2half(frand(seed)); Af[i] = __half2float(A[i]); }
    for (int i = 0; i < 128 * D; ++i) { B[i] = __float2half(frand(seed)); Bf[i] = __half2float(B[i]); }
    for (int i = 0; i < 128 * D; ++i) { V[i] = __float2half(frand(seed)); Vf[i] = __half2float(V[i]); }
    for (int i = 0; i < 64 * 128; ++i) P[i] = __half2float(__float2half(0.5f * (frand(seed) + 1.f)));
    __half *dA, *dB, *dV; float *dP, *dO;
    CK(cudaMalloc(&dA, A.size() * 2)); CK(cudaMalloc(&dB, B.size() * 2)); CK(cudaMalloc(&dV, V.size() * 2));
    CK(cudaMalloc(&dP, P.size() * 4)); CK(cudaMalloc(&dO, 64 * 128 * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dV, V.data(), V.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dP, P.data(), P.size() * 4, cudaMemcpyHostToDevice));
    const int smem_qk = (64 + 128) * D * 2, smem_pv = 128 * D * 2;
    CK(cudaFuncSetAttribute(qk_probe<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_qk));
    CK(cudaFuncSetAttribute(pv_probe<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_pv));
    std::vector<float> out(64 * 128);
    qk_probe<D><<<1, 128, smem_qk>>>(dA, dB, dO);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out.data(), dO, 64 * 128 * 4, cudaMemcpyDeviceToHost));
    double err = 0, ref_max = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 128; ++n) {
            double r = 0; for (int k = 0; k < D; ++k) r += (double)Af[m * D + k] * Bf[n * D + k];
            err = fmax(err, fabs(r - out[m * 128 + n])); ref_max = fmax(ref_max, fabs(r));
        }
    printf("{\"probe\":\"qk%d\",\"max_abs_err\":%.3g,\"ref_max\":%.3g,\"ok\":%s}\n", D, err, ref_max, err < 1e-3 * ref_max ? "true" : "false");
    pv_probe<D><<<1, 128, smem_pv>>>(dP, dV, dO);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out.data(), dO, 64 * D * 4, cudaMemcpyDeviceToHost));
    err = 0; ref_max = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < D; ++n) {
            double r = 0; for (int k = 0; k < 128; ++k) r += (double)P[m * 128 + k] * Vf[k * D + n];
            err = fmax(err, fabs(r - out[m * D + n])); ref_max = fmax(ref_max, fabs(r));
        }
    printf("{\"probe\":\"pv%d\",\"max_abs_err\":%.3g,\"ref_max\":%.3g,\"ok\":%s}\n", D, err, ref_max, err < 1e-3 * ref_max ? "true" : "false");
    return 0;
}

int main() {
    if (run<64>(1u)) return 3;
    if (run<128>(2u)) return 3;
    return 0;
}
