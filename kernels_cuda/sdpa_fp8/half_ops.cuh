// Device helpers both SDPA kernel families use (the mma.sync kernel in sdpa_fp8.cuh and the Hopper
// wgmma kernel in ../sdpa_fp8_sm90/): base-2 exponential, fp32 pair -> packed half2, and the exact
// E4M3 -> fp16 decode of four codes.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace sdpa_half_ops {

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

// Four E4M3 codes (little-endian in x) -> two half2 words (lo: codes 0,1; hi: codes 2,3), with the
// hardware conversion (sm_89+). Exact: every E4M3 value is an fp16 value.
__device__ __forceinline__ void decode4_e4m3(uint32_t x, uint32_t& lo, uint32_t& hi) {
    asm("{\n\t.reg .b16 l16, h16;\n\t"
        "mov.b32 {l16, h16}, %2;\n\t"
        "cvt.rn.f16x2.e4m3x2 %0, l16;\n\t"
        "cvt.rn.f16x2.e4m3x2 %1, h16;\n\t}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(x));
}

}  // namespace sdpa_half_ops
