// Hopper (sm_90 / sm_90a) PTX the SDPA kernel needs, each wrapped once: mbarriers, the tensor
// copy engine (TMA), proxy fences, warpgroup MMA sequencing, register reallocation, named
// barriers, shared-memory matrix descriptors and the exact E4M3 -> fp16 decode.
//
// Written against the PTX ISA (9.x) rather than taken from CUTLASS/CuTe: the kernel needs a
// decode stage between the copy engine and the tensor cores (uint8 in global memory, fp16 in
// shared memory), which none of CUTLASS's collective main loops has, so only the thin atoms
// below would have been used, at the price of CuTe's compile time (minutes per instantiation
// on the 2-core build hosts, for 2 variants x 2 head dims x 3 ablation modes).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_fp16.h>
#include <cstdint>

#include "../sdpa_fp8/half_ops.cuh"

namespace sdpa_sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ------------------------------------------------------------------------------ mbarrier
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the other threads and to the copy engine.
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrive (release semantics at CTA scope): writes before it are visible to a thread whose
// wait on the completed phase returns.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

// Arrive and add `bytes` to the phase's expected transaction count (the copies that follow
// complete it).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}

// Wait until the phase with the given parity (0, 1, 0, ... for the barrier's 1st, 2nd, 3rd
// completion) has completed (acquire semantics).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

// ------------------------------------------------------------------------------ copy engine
// 3-D tiled tensor copy global -> shared, completing on `bar` (bytes counted there).  The
// map is a __grid_constant__ kernel parameter; coordinates are (innermost, middle, outer)
// elements, and a box reaching past the tensor is zero-filled (and still counts in full).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// 3-D tiled tensor prefetch global -> L2 (no shared memory, no barrier): the box at (c0, c1, c2).
__device__ __forceinline__ void tma_prefetch_l2_3d(const CUtensorMap* map, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Generic-proxy shared-memory writes (st.shared) become visible to the async proxy (wgmma,
// the copy engine).  Every writing thread runs it before the barrier that hands over.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ------------------------------------------------------------------------------ warpgroup MMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins registers an asynchronous wgmma reads or writes: the compiler may not move their
// reads or writes across this point (placed right after wgmma_wait and before wgmma_fence).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// ptxas hoists a wgmma.wait_group above independent arithmetic (seen with nvcc 13.0: the
// softmax exponentials of tile t sank below the wait for P V of tile t-1, serialising them).
// A shared-memory store of a value computed from that arithmetic is not moved across the
// wait, so storing one such value to a per-thread scratch word keeps the work above it.
__device__ __forceinline__ void keep_above_wait(uint32_t scratch, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(scratch), "f"(v) : "memory");
}

// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format", sm_90):
//   bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4,
//   32-45 stride-dimension byte offset >> 4, 62-63 swizzle (1 = 128-byte).
// Every tile here uses the 128-byte swizzle: rows of 128 bytes (64 fp16), 8-row atoms of
// 1024 bytes aligned to 1024, 16-byte chunk c of row r stored at chunk c ^ (r % 8).
//   K-major operand (Q, K): SBO = 1024 (next 8 rows), LBO unused (1); a k-step of 16
//     elements inside a 64-wide panel adds 32 bytes to the start address.
//   MN-major operand (V as B of P V): SBO = 1024 (next 8 keys), LBO = bytes between
//     64-column panels; a k-step of 16 keys adds 16 * 128 bytes.
// The FP8 kernel also uses the 64-byte swizzle (swizzle = 2) for K tiles of head dim 64: rows of
// 64 bytes, 8-row atoms of 512 bytes (SBO 512), chunk c of row r at chunk c ^ ((r / 2) % 4).
constexpr uint32_t kSwizzleNone = 0, kSwizzle128B = 1, kSwizzle64B = 2;
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                              uint32_t swizzle = kSwizzle128B) {
    uint64_t d = (uint64_t)((addr & 0x3FFFFu) >> 4);
    d |= (uint64_t)((lbo_bytes >> 4) & 0x3FFFu) << 16;
    d |= (uint64_t)((sbo_bytes >> 4) & 0x3FFFu) << 32;
    d |= (uint64_t)swizzle << 62;
    return d;
}

// Byte offset of 16-byte chunk `c` (0..7) of row `r` in a 128-byte-swizzled panel.
__device__ __forceinline__ uint32_t swz128(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }
// Byte offset of 16-byte chunk `c` (0..3) of row `r` in a 64-byte-swizzled tile (the copy engine's
// CU_TENSOR_MAP_SWIZZLE_64B: address bits 4-5 ^= bits 7-8).
__device__ __forceinline__ uint32_t swz64(int r, int c) { return (uint32_t)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4)); }

// ------------------------------------------------------------------------------ misc
template <int R>
__device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Named barrier ids (bar.sync / bar.arrive; 0 is __syncthreads), the one list for both tiers' kernels:
enum NamedBarrier : int {
    kBarProducer = 1,     // the producer warpgroup's 128 threads (a stage read by all before its refill)
    kBarConsumerWg0 = 2,  // consumer warpgroup 0's 128 threads (epilogue, baseline Q load)
    kBarConsumerWg1 = 3,  // consumer warpgroup 1's
    kBarTurn0 = 4,        // ping-pong: consumer warpgroup 0's turn to issue (256 threads: one sync, one arrive)
    kBarTurn1 = 5,        // warpgroup 1's turn
    kBarConsumers = 6,    // both consumer warpgroups (256: Q load and merge of the split configuration)
    kBarTurn2 = 7,        // warpgroup 2's turn (three consumer warpgroups: 0 -> 1 -> 2 -> 0)
    kBarConsumerWg2 = 8,  // consumer warpgroup 2's 128 threads
};

// bar.sync among NTHREADS threads (whole warps); id 0 is __syncthreads (../sdpa_fp8/half_ops.cuh).
using sdpa_half_ops::named_barrier;

// threadIdx.x read where it stands (asm volatile: the compiler neither hoists nor keeps it), so that values derived
// from it are recomputed where used rather than held in registers across a loop (the 256-key producer at 24).
__device__ __forceinline__ int tid_x_here() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

// bar.arrive: counts toward the barrier's NTHREADS without waiting for it.
template <int ID, int NTHREADS>
__device__ __forceinline__ void named_barrier_arrive() {
    static_assert(ID > 0 && ID < 16 && NTHREADS % 32 == 0, "named barrier");
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(NTHREADS) : "memory");
}

using sdpa_half_ops::fast_exp2;
using sdpa_half_ops::pack_half2;

// Four E4M3 codes -> two half2 words, exact (../sdpa_fp8/half_ops.cuh, shared with the mma.sync kernel).
__device__ __forceinline__ void decode4(uint32_t x, uint32_t& lo, uint32_t& hi) { sdpa_half_ops::decode4_e4m3(x, lo, hi); }

// ldmatrix / stmatrix (sm_90 for stmatrix), four 8x8 matrices of b16: lane 8j + i gives the shared-memory address of
// row i (16 bytes) of matrix j.  ldsm_x4_trans: register j of lane l holds b16 elements (row 2 (l % 4), column l / 4)
// and (row 2 (l % 4) + 1, column l / 4) of matrix j; stsm_x4: register j of lane l goes to row l / 4, bytes
// 4 (l % 4) .. 4 (l % 4) + 3 of matrix j.  Both ordered by "memory" like the plain loads and stores they replace.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

// Four floats -> four E4M3 codes, and the byte permute (../sdpa_fp8/half_ops.cuh, shared with the decode kernel).
using sdpa_half_ops::pack_e4m3x4;
using sdpa_half_ops::prmt;

}  // namespace sdpa_sm90
