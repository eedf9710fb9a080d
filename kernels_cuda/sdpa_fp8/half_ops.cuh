// Device helpers the SDPA kernel families share (the mma.sync kernel in sdpa_fp8.cuh, the Hopper wgmma kernel in
// ../sdpa_fp8_sm90/, the decode kernel in ../sdpa_decode/): base-2 exponential, fp32 pair -> packed half2, the exact
// E4M3 -> fp16 decode of four codes, four floats -> E4M3 codes, byte permute, named barriers.
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

// Four floats -> four E4M3 codes (a in the lowest byte), round to nearest even, saturating to
// +-448 (cvt's first source goes to the upper byte of each pair; sm_89+).
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo, hi;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
        "mov.b32 %0, {lo, hi};\n\t}\n"
        : "=r"(r)
        : "f"(a), "f"(b), "f"(c), "f"(d));
    return r;
}

// Byte permute: bytes of {b, a} (a = bytes 0-3, b = 4-7) picked by the selector's nibbles (result byte 0 = nibble 0).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// Named barrier for NTHREADS threads (whole warps) of the block; id 0 is __syncthreads.
// Same memory ordering as __syncthreads among the participating threads.
template <int ID, int NTHREADS>
__device__ __forceinline__ void named_barrier() {
    static_assert(ID > 0 && ID < 16 && NTHREADS % 32 == 0, "named barrier");
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(NTHREADS) : "memory");
}

// bar.sync 1 + grp among the NT threads of group grp (0 <= grp < N), with a compile-time barrier id (a register id
// makes ptxas reserve all 16 barriers): a chain of branches, warp-uniform where a group is whole warps.
template <int NT, int I, int N>
__device__ __forceinline__ void group_barrier(int grp) {
    if constexpr (I == N - 1) {
        named_barrier<1 + I, NT>();
    } else {
        if (grp == I) named_barrier<1 + I, NT>();
        else group_barrier<NT, I + 1, N>(grp);
    }
}

}  // namespace sdpa_half_ops
