// The workspace of the kernels that cut a head's keys into chunks across blocks and let the last block of each head
// merge the chunks' partials (../sdpa_decode: flash-decoding; ../sdpa_fp8_sm90: the key chunks of decode-shaped
// cases): per slot (a row of a block) the unnormalized O (D floats) and (m, l), and one arrival counter per merged
// group, zeroed here and reset by the merging block for the next launch.  Launches in flight on several streams must
// not share counters, so the runner keeps one workspace per stream (PerStream).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace sdpa_chunks {

struct Workspace {
    float* part_o = nullptr;   // [slots][D]
    float* part_ml = nullptr;  // [slots][2]
    int* counters = nullptr;   // [groups]
};

inline cudaError_t workspace_alloc(size_t slots, int D, size_t groups, Workspace* ws) {
    *ws = Workspace{};
    cudaError_t e = cudaMalloc(&ws->part_o, slots * (size_t)D * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&ws->part_ml, slots * 2 * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&ws->counters, groups * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(ws->counters, 0, groups * sizeof(int));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();  // the zeros land before any launch on another stream
    return e;
}

inline void workspace_free(Workspace* ws) {
    cudaFree(ws->part_o);
    cudaFree(ws->part_ml);
    cudaFree(ws->counters);
    *ws = Workspace{};
}

// One case's workspaces, one per stream, each made at its stream's first launch by alloc(Workspace*) (the kernel's
// workspace_alloc for its launch), all freed with the list.
class PerStream {
public:
    PerStream() = default;
    PerStream(const PerStream&) = delete;
    PerStream& operator=(const PerStream&) = delete;
    ~PerStream() {
        for (auto& w : ws_) workspace_free(&w.second);
    }
    template <class Alloc>
    cudaError_t get(cudaStream_t stream, Alloc alloc, const Workspace** out) {
        auto it = std::find_if(ws_.begin(), ws_.end(), [&](const auto& w) { return w.first == stream; });
        if (it == ws_.end()) {
            ws_.emplace_back(stream, Workspace{});
            it = ws_.end() - 1;
            const cudaError_t e = alloc(&it->second);
            if (e != cudaSuccess) return e;
        }
        *out = &it->second;
        return cudaSuccess;
    }

private:
    std::vector<std::pair<cudaStream_t, Workspace>> ws_;
};

}  // namespace sdpa_chunks
