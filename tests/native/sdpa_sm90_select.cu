// Host-only check of the Hopper SDPA kernel's configuration choice (sdpa_sm90::select_config in
// kernels_cuda/sdpa_fp8_sm90/kernel.cuh), run by tests/test_sdpa_sm90_select.py without a GPU.
// Compiled for a virtual architecture below sm_90 (the kernel bodies are empty there), nothing is
// launched.  Prints one JSON line per argument set read from stdin ("B H S D num_sms split policy";
// policy -1 = the build's default): the launch configuration select_config gives, or its error.
#include <cstdio>

#include "../../kernels_cuda/sdpa_fp8_sm90/kernel.cuh"

int main() {
    long long B, H, S;
    int D, sms, split, policy;
    while (std::scanf("%lld %lld %lld %d %d %d %d", &B, &H, &S, &D, &sms, &split, &policy) == 7) {
        sdpa_sm90::LaunchInfo li;
        const char* err = nullptr;
        const bool ok = policy < 0 ? sdpa_sm90::select_config((int)(B * H), (int)S, D, sms, split, 0, &li, &err)
                                   : sdpa_sm90::select_config((int)(B * H), (int)S, D, sms, split, 0, &li, &err, policy);
        if (!ok) {
            std::printf("{\"error\":\"%s\"}\n", err);
            continue;
        }
        std::printf("{\"kernel\":\"%s\",\"grid\":%d,\"block\":%d,\"bm\":%d,\"split\":%d,\"ncwg\":%d,\"smem\":%d,\"func\":\"%p\"}\n",
                    sdpa_sm90::kKernelName, li.grid, li.block, li.bm, li.split, li.ncwg, li.smem, li.func);
    }
    return 0;
}
