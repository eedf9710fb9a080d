// Can one warpgroup's FP8 warpgroup MMAs and another warpgroup's MUFU.EX2 (or FFMA) run at the same time on an H100 /
// H200 SM, each at its own rate?  One block per SM, two warpgroups (255 registers each), each with a role chosen by the mode:
//   warpgroup 0, "tensor": per iteration one 256-key tile of the fp8 tier's 256-key loop at head dim 128: S = Q K^T
//     (4 wgmma m64n256k32, both operands in shared memory) and O += P V (8 wgmma m64n128k32, P in registers), each
//     waited for (the loop's products, without its softmax);
//   warpgroup 1, "mufu": per iteration 128 exponentials per thread (ex2.approx.ftz of an FFMA, 128 independent
//     values: the loop's softmax without its maxima), "mufu_pure": 128 rsqrt.approx per thread (MUFU alone, no other
//     operand traffic), or "ffma": 128 x 4 FFMAs per thread (128 independent chains);
//   or warpgroup 0 "tensor_rs": two P V per iteration (P in registers: Q K^T alone, both operands in shared memory,
//     was not measured: ptxas serialized its wgmma in this kernel, C7512);
//   or both warpgroups "mufu" (two sharing MUFU, as the loop's two consumers do).
// Each warpgroup times its own loop with clock64 (SM cycles); the host prints cycles per iteration per role, the median
// over blocks.  A role's rate alone against its rate beside another says whether the two share a resource.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a overlap.cu -o overlap && ./overlap [iters]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../kernels_cuda/sdpa_fp8_sm90/ptx.cuh"
#include "../../kernels_cuda/sdpa_fp8_sm90/wgmma_ops.cuh"

using namespace sdpa_sm90;

enum Role { kIdle = 0, kTensor = 1, kMufu = 2, kFfma = 3, kMufuPure = 4, kTensorRS = 6, kSoftFfma = 7, kSoftFadd = 8 };

__device__ __forceinline__ float rsq(float x) {
    float y;
    asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int R0, int R1>
__global__ void __launch_bounds__(256, 1) overlap_kernel(int iters, long long* cycles, float* sink) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const int wg = threadIdx.x / 128, ctid = threadIdx.x % 128;
    // Q (64 x 128 E4M3, 8 KiB) and K (256 x 128, 32 KiB) and V^T (128 x 256, 32 KiB): small random codes (|x| < 2)
    for (int i = threadIdx.x; i < (8 + 32 + 32) * 1024 / 4; i += blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u + blockIdx.x * 40503u;
        h ^= h >> 13;
        reinterpret_cast<uint32_t*>(smem)[i] = h & 0x37373737u;  // E4M3 below 1.0 in magnitude, either sign: 0x00-0x37
    }
    fence_proxy_async();
    __syncthreads();
    const int role = wg == 0 ? R0 : R1;
    const long long t0 = clock64();
    float keep = 0.f;
    if ((R0 == kTensor || R0 == kTensorRS) && wg == 0) {
        const uint64_t qd = smem_desc(smem_u32(smem), 16, 1024);
        const uint64_t kd = smem_desc(smem_u32(smem + 8192), 16, 1024);
        const uint64_t vd = smem_desc(smem_u32(smem + 8192 + 32768), 16, 1024);
        float s[128], o[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) o[i] = 0.f;
        constexpr bool kSS = R0 != kTensorRS, kRS = true;
        for (int it = 0; it < iters * (R0 == kTensor ? 1 : 2); ++it) {
          if constexpr (kSS) {
            wgmma_fence();
            wgmma::ss_e4m3_m64n256k32_zero(s, qd, kd);
#pragma unroll
            for (int kk = 1; kk < 4; ++kk) wgmma::ss_e4m3_m64n256k32(s, qd + 2u * kk, kd + 2u * kk, 1);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(s);
          }
          if constexpr (kRS) {
            // P from S, as the loop packs it (here a mask of S's bits into small E4M3 codes: S dies here, as there)
            uint32_t p[8][4];
#pragma unroll
            for (int k = 0; k < 8; ++k)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    p[k][e] = kSS ? __float_as_uint(s[16 * k + e]) & 0x37373737u : (uint32_t)(it * 32 + k * 4 + e) & 0x37373737u;
            fence_regs(o);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 8; ++kk)
                wgmma::rs_e4m3_m64n128k32(o, p[kk], vd + (uint64_t)((kk >> 2) * (16384 >> 4) + 2 * (kk & 3)), 1);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(o);
            fence_regs(p);
          }
        }
        keep += o[0] + o[63];
    } else if ((R1 == kSoftFfma || R1 == kSoftFadd) && wg == 1) {
        // The fp8 loop's softmax on 128 scores per thread (rows r = 0, 1: scores 4j + 2r + e), in two forms:
        //   soft_ffma: row maxima (four partial FMNMX chains, a tree, two shuffles), then 2^(s * scale + (8 - m * scale))
        //     with the scale per row in a register (one FFMA and one MUFU.EX2 per score), packed to E4M3 (F2FP);
        //   soft_fadd: the same with the scale already in the scores: 2^(s + (8 - m)) (one FADD per score).
        // (Their loops: 493 instructions per iteration, FMNMX 130, FFMA or FADD 130, MUFU 128, F2FP 64.)
        // The next iteration's scores are this one's probabilities (no extra instruction; they stay in [0, 256]).
        float x[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) x[i] = 0.01f * (float)((i * 7 + ctid) & 63);
        const float sc[2] = {0.1275f + 1e-7f * (float)ctid, 0.1276f - 1e-7f * (float)ctid};
        uint32_t acc = 0;
        for (int it = 0; it < iters; ++it) {
            {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float m4[4];
#pragma unroll
                    for (int q = 0; q < 4; ++q) m4[q] = fmaxf(x[4 * q + 2 * r], x[4 * q + 2 * r + 1]);
#pragma unroll
                    for (int j = 4; j < 32; ++j) m4[j & 3] = fmaxf(m4[j & 3], fmaxf(x[4 * j + 2 * r], x[4 * j + 2 * r + 1]));
                    float m = fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3]));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                    if constexpr (R1 == kSoftFfma) {
                        const float off = 8.f - m * sc[r];
#pragma unroll
                        for (int j = 0; j < 32; ++j)
#pragma unroll
                            for (int e = 0; e < 2; ++e) x[4 * j + 2 * r + e] = ex2(fmaf(x[4 * j + 2 * r + e], sc[r], off));
                    } else {
                        const float off = 8.f - m;
#pragma unroll
                        for (int j = 0; j < 32; ++j)
#pragma unroll
                            for (int e = 0; e < 2; ++e) x[4 * j + 2 * r + e] = ex2(x[4 * j + 2 * r + e] + off);
                    }
                }
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const float* y = x + 16 * k;
                    acc ^= pack_e4m3x4(y[0], y[1], y[4], y[5]) ^ pack_e4m3x4(y[2], y[3], y[6], y[7]) ^
                           pack_e4m3x4(y[8], y[9], y[12], y[13]) ^ pack_e4m3x4(y[10], y[11], y[14], y[15]);
                }
            }
        }
        keep += (float)(acc & 0xffu) + x[0];
    } else if (R1 != kIdle && wg == 1 || R0 == kMufu && wg == 0) {
        constexpr int kMine = R1;
        float x[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) x[i] = -1.f - 0.001f * (float)(i + ctid);
        if (kMine == kMufuPure) {
#pragma unroll
            for (int i = 0; i < 128; ++i) x[i] = 0.5f + 0.001f * (float)((i + ctid) & 255);
        }
        const float c = 0.999f, d = -0.001f;
        for (int it = 0; it < iters; ++it) {
            if ((wg == 0 ? R0 : R1) == kMufu) {
#pragma unroll
                for (int i = 0; i < 128; ++i) x[i] = ex2(fmaf(x[i], c, d)) - 2.f;  // stays in [-2, -1]
            } else if (kMine == kMufuPure) {
#pragma unroll
                for (int i = 0; i < 128; ++i) x[i] = rsq(x[i]);  // one MUFU.RSQ per value (the same unit), towards 1
            } else {
#pragma unroll
                for (int i = 0; i < 128; ++i) x[i] = fmaf(fmaf(fmaf(fmaf(x[i], c, d), c, d), c, d), c, d);
            }
        }
#pragma unroll
        for (int i = 0; i < 128; ++i) keep += x[i];
    }
    const long long t1 = clock64();
    if (ctid == 0) cycles[blockIdx.x * 2 + wg] = role == kIdle ? 0 : t1 - t0;
    if (keep == 12345.f) sink[threadIdx.x] = keep;
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int smem = (8 + 32 + 32) * 1024 + 1024;
    long long* cycles;
    float* sink;
    cudaMalloc(&cycles, sizeof(long long) * sms * 2);
    cudaMalloc(&sink, sizeof(float) * 256);
    const char* names[] = {"idle", "tensor", "mufu", "ffma", "mufu_pure", "", "tensor_rs", "soft_ffma", "soft_fadd"};
    auto run = [&](auto kernel, int r0, int r1) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
            cudaEvent_t a, b;
            cudaEventCreate(&a);
            cudaEventCreate(&b);
            cudaEventRecord(a);
            kernel<<<sms, 256, smem>>>(iters, cycles, sink);
            cudaEventRecord(b);
            cudaError_t err = cudaDeviceSynchronize();
            if (err != cudaSuccess) {
                printf("{\"error\": \"%s\"}\n", cudaGetErrorString(err));
                exit(1);
            }
            float ms = 0.f;
            cudaEventElapsedTime(&ms, a, b);
            std::vector<long long> c(sms * 2);
            cudaMemcpy(c.data(), cycles, sizeof(long long) * sms * 2, cudaMemcpyDeviceToHost);
            if (rep == 0) continue;
            printf("{\"roles\": [\"%s\", \"%s\"], \"iters\": %d, \"launch_ms\": %.3f, \"cycles_per_iter_median\": [",
                   names[r0], names[r1], iters, ms);
            for (int w = 0; w < 2; ++w) {
                std::vector<long long> v;
                for (int i = 0; i < sms; ++i) v.push_back(c[i * 2 + w]);
                std::sort(v.begin(), v.end());
                printf("%s%.1f", w ? ", " : "", (double)v[sms / 2] / iters);
            }
            printf("]}\n");
        }
    };
    run(overlap_kernel<kTensor, kIdle>, kTensor, kIdle);
    run(overlap_kernel<kIdle, kMufu>, kIdle, kMufu);
    run(overlap_kernel<kIdle, kFfma>, kIdle, kFfma);
    run(overlap_kernel<kMufu, kMufu>, kMufu, kMufu);
    run(overlap_kernel<kTensor, kMufu>, kTensor, kMufu);
    run(overlap_kernel<kTensor, kFfma>, kTensor, kFfma);
    // call 2: MUFU alone (no FP operand traffic beside it), and P V alone (two per iteration: the same MMA work)
    run(overlap_kernel<kIdle, kMufuPure>, kIdle, kMufuPure);
    run(overlap_kernel<kTensor, kMufuPure>, kTensor, kMufuPure);
    run(overlap_kernel<kTensorRS, kIdle>, kTensorRS, kIdle);
    run(overlap_kernel<kTensorRS, kMufuPure>, kTensorRS, kMufuPure);
    run(overlap_kernel<kTensorRS, kFfma>, kTensorRS, kFfma);
    // call 3: the softmax in two forms, alone and beside the products
    run(overlap_kernel<kIdle, kSoftFfma>, kIdle, kSoftFfma);
    run(overlap_kernel<kTensor, kSoftFfma>, kTensor, kSoftFfma);
    run(overlap_kernel<kIdle, kSoftFadd>, kIdle, kSoftFadd);
    run(overlap_kernel<kTensor, kSoftFadd>, kTensor, kSoftFadd);
    return 0;
}
