// The decode kernel's PTX, each wrapped once: mma.sync (fp16 m16n8k16, E4M3 m16n8k32: sm_89+), byte permutes,
// f32 -> E4M3 packing, cp.async, named barriers.  The exact E4M3 -> fp16 decode is ../sdpa_fp8/half_ops.cuh's.
// The arithmetic wrappers are plain (not volatile) asm, so that ptxas may schedule them; the memory and barrier
// ones are volatile with a memory clobber, so that no shared-memory access moves across them.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "../sdpa_fp8/half_ops.cuh"

// K and V are read once: their loads ask L2 to evict them first (an L2 cache policy, createpolicy ... evict_first),
// so that streaming them does not push out what else L2 holds: in a server, other layers' data; in the runners'
// cold timing, the dirty lines of the L2 flush, whose write-back would otherwise share HBM with the K/V reads.
// 0: plain loads (experiments/2026-11-28-sdpa-decode run 2 has both).
#ifndef SDPA_DECODE_L2_EVICT_FIRST
#define SDPA_DECODE_L2_EVICT_FIRST 1
#endif

namespace sdpa_decode {

using sdpa_half_ops::decode4_e4m3;
using sdpa_half_ops::fast_exp2;
using sdpa_half_ops::group_barrier;
using sdpa_half_ops::named_barrier;
using sdpa_half_ops::pack_e4m3x4;
using sdpa_half_ops::pack_half2;
using sdpa_half_ops::prmt;

// C (16x8 f32) += A (16x16 f16, row) * B (16x8 f16, col)
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// C (16x8 f32) += A (16x32 E4M3, row) * B (32x8 E4M3, col)   (sm_89+)
__device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The L2 policy of the K/V loads (SDPA_DECODE_L2_EVICT_FIRST; unused when 0).
__device__ __forceinline__ uint64_t kv_l2_policy() {
    uint64_t p = 0;
#if SDPA_DECODE_L2_EVICT_FIRST
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
#endif
    return p;
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes, uint64_t policy) {
#if SDPA_DECODE_L2_EVICT_FIRST
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
#else
    (void)policy;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Read-only global loads: Q (ldg16), the baseline's K/V with the K/V policy (ldg16_kv, ldg8_kv).
__device__ __forceinline__ uint4 ldg16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint4 ldg16_kv(const void* p, uint64_t policy) {
#if SDPA_DECODE_L2_EVICT_FIRST
    uint4 r;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(policy));
    return r;
#else
    (void)policy;
    return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}
__device__ __forceinline__ uint2 ldg8_kv(const void* p, uint64_t policy) {
#if SDPA_DECODE_L2_EVICT_FIRST
    uint2 r;
    asm("ld.global.nc.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;\n" : "=r"(r.x), "=r"(r.y) : "l"(p), "l"(policy));
    return r;
#else
    (void)policy;
    return __ldg(reinterpret_cast<const uint2*>(p));
#endif
}

}  // namespace sdpa_decode
