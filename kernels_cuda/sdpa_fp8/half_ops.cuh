// Device helpers both SDPA kernel families use (the mma.sync kernel in sdpa_fp8.cuh and the Hopper
// wgmma kernel in ../sdpa_fp8_sm90/): base-2 exponential and fp32 pair -> packed half2.
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

}  // namespace sdpa_half_ops
