// GPU unit test of SDPA_SM90_VT_LDSM's transpose (kernels_cuda/sdpa_fp8_sm90/fp8_load.cuh transpose_v_tile_ldsm)
// against today's (transpose_v_tile, transpose_v_tile_fast at 128 / 192 keys, transpose_v_tile256 at 256): one
// producer warpgroup per block, random V tiles; today's read the stage unswizzled, the new one the 128-byte-swizzled
// stage (written here with the copy engine's formula; the copy engine itself is checked by the runners' outputs);
// every byte of the V^T buffers (untouched bytes pre-filled) compared with each other and with the definition
// V^T[d][position L of group G] = V[16 G + vt_key_perm(L)][d].  Prints one line per tile width; exit 0 when all
// match, 1 otherwise.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -DSDPA_SM90A=1 -DUSE_CP_ASYNC=1 -o vt_unit vt_unit.cu
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../kernels_cuda/sdpa_fp8_sm90/fp8_load.cuh"

using namespace sdpa_sm90;

constexpr uint8_t kFill = 0xA5;
constexpr int kTiles = 64;  // blocks, one random tile each

template <class T>
__global__ void __launch_bounds__(128) vt_unit_kernel(const uint8_t* __restrict__ v, uint8_t* out) {
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* raw = smem;                  // [BN][128] unswizzled (today's input)
    uint8_t* swz = raw + T::V_TILE;       // [BN][128] 128-byte swizzle (the new input), 1024-aligned
    uint8_t* vt = swz + T::V_TILE;        // 4 V^T buffers: generic, fast / 256, ldsm, (spare)
    const int ptid = threadIdx.x;
    const uint8_t* g = v + (size_t)blockIdx.x * T::V_TILE;
    for (int c = ptid; c < T::V_TILE / 16; c += 128) {
        const uint4 x = reinterpret_cast<const uint4*>(g)[c];
        const int r = c / 8, k = c % 8;
        reinterpret_cast<uint4*>(raw)[c] = x;
        *reinterpret_cast<uint4*>(swz + r * 128 + ((k ^ (r & 7)) << 4)) = x;
    }
    for (int c = ptid; c < 3 * T::VT_BYTES / 16; c += 128)
        reinterpret_cast<uint4*>(vt)[c] = make_uint4(0xA5A5A5A5u, 0xA5A5A5A5u, 0xA5A5A5A5u, 0xA5A5A5A5u);
    __syncthreads();
    transpose_v_tile<T, false>(raw, T::BN, vt, ptid);
    if constexpr (T::BN == 256) transpose_v_tile256<T>(raw, vt + T::VT_BYTES, vt_addr256<T>(ptid), ptid);
    else transpose_v_tile_fast<T>(raw, vt + T::VT_BYTES, vt_fast_addr<T>(ptid));
    const VtLdsmAddr a = vt_ldsm_addr<T>(smem_u32(swz), ptid);
    transpose_v_tile_ldsm<T>(0u, smem_u32(vt + 2 * T::VT_BYTES), a);
    __syncthreads();
    uint8_t* o = out + (size_t)blockIdx.x * 3 * T::VT_BYTES;
    for (int c = ptid; c < 3 * T::VT_BYTES / 16; c += 128) reinterpret_cast<uint4*>(o)[c] = reinterpret_cast<uint4*>(vt)[c];
}

template <class T>
static bool run(const char* name) {
    const size_t vbytes = (size_t)kTiles * T::V_TILE, obytes = (size_t)kTiles * 3 * T::VT_BYTES;
    std::vector<uint8_t> hv(vbytes), ho(obytes);
    uint32_t s = 12345u + T::BN;
    for (auto& b : hv) { s = s * 1664525u + 1013904223u; b = (uint8_t)(s >> 24); }
    uint8_t *dv = nullptr, *dout = nullptr;
    cudaMalloc(&dv, vbytes);
    cudaMalloc(&dout, obytes);
    cudaMemcpy(dv, hv.data(), vbytes, cudaMemcpyHostToDevice);
    const int smem = 2 * T::V_TILE + 3 * T::VT_BYTES + 1024;
    cudaFuncSetAttribute(vt_unit_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    vt_unit_kernel<T><<<kTiles, 128, smem>>>(dv, dout);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { std::printf("BN %d: %s\n", T::BN, cudaGetErrorString(e)); return false; }
    cudaMemcpy(ho.data(), dout, obytes, cudaMemcpyDeviceToHost);
    cudaFree(dv);
    cudaFree(dout);
    long bad_old = 0, bad_new = 0, bad_def = 0;
    for (int t = 0; t < kTiles; ++t) {
        const uint8_t* o = ho.data() + (size_t)t * 3 * T::VT_BYTES;
        std::vector<uint8_t> def(T::VT_BYTES, kFill);
        for (int d = 0; d < 128; ++d)
            for (int G = 0; G < T::BN / 16; ++G)
                for (int L = 0; L < 16; ++L)
                    def[vt_chunk<T>(d, G) + L] = hv[(size_t)t * T::V_TILE + (16 * G + vt_key_perm(L)) * 128 + d];
        bad_def += std::memcmp(o, def.data(), T::VT_BYTES) != 0;
        bad_old += std::memcmp(o, o + T::VT_BYTES, T::VT_BYTES) != 0;
        bad_new += std::memcmp(o, o + 2 * T::VT_BYTES, T::VT_BYTES) != 0;
    }
    const bool ok = bad_def == 0 && bad_old == 0 && bad_new == 0;
    std::printf("vt_unit %s BN %d: %d tiles, generic vs definition %ld bad, %s vs generic %ld bad, ldsm vs generic %ld "
                "bad: %s\n", name, T::BN, kTiles, bad_def, T::BN == 256 ? "tile256" : "fast", bad_old, bad_new,
                ok ? "IDENTICAL" : "DIFFERENT");
    return ok;
}

int main() {
    bool ok = run<Fp8Traits<128, true, 0, false, 128>>("bn128");
    ok = run<Fp8Traits<128, true, 0, false, 192>>("bn192") && ok;
    ok = run<Fp8Traits<128, true, 0, false, 256>>("bn256") && ok;
    return ok ? 0 : 1;
}
