// Host-only check of the Hopper SDPA kernel's configuration choice (sdpa_sm90::select_config in
// kernels_cuda/sdpa_fp8_sm90/kernel.cuh), run by tests/test_sdpa_sm90_select.py without a GPU.
// Compiled for a virtual architecture below sm_90 (the kernel bodies are empty there), nothing is
// launched.  Prints one JSON line per argument set read from stdin ("B H S D num_sms split policy
// plan bn fp8 q2"; policy / plan / bn / q2 -1 = the build's default; bn: SDPA_SM90_BN_D128's policy, 0 = by S;
// fp8: 1 = the fp8 tier's kernel, 0 = the fp16 tier's; q2: SDPA_SM90_FP8_Q2's policy):
// the launch configuration select_config gives (with "bn", the keys per K/V tile), or
// its error, with what the work units of its tile plan cover (block_tile, the kernel's own mapping):
// "cover" = every row of every head in exactly one unit and the grid one block per unit (persistent:
// min(units, SMs) blocks, each taking units grid apart), "nc" = units per number of consumer
// warpgroups with rows.
#include <cstdio>
#include <vector>

#include "../../kernels_cuda/sdpa_fp8_sm90/kernel.cuh"

template <class T>
static void cover(const sdpa_sm90::LaunchInfo& li, int BH, int S, bool* ok, int (&nc)[4]) {
    std::vector<unsigned char> seen((size_t)BH * S, 0);
    const int units = (li.plan.full + li.plan.nshort) * BH;
    const int blocks = li.persistent && li.num_sms < units ? li.num_sms : units;  // persistent: units grid apart
    *ok = li.plan.units == units && li.plan.full_blocks == li.plan.full * BH && li.grid == blocks;
    for (int b = 0; b < units && *ok; ++b) {
        const sdpa_sm90::BlockTile t = sdpa_sm90::block_tile<T>(b, li.plan, S);
        const int rows = b < li.plan.full_blocks ? T::BM : T::BM - 64;
        if (t.bh < 0 || t.bh >= BH || t.m0 < 0 || t.m0 >= S || t.nc < 1 || t.nc > T::NCWG) { *ok = false; break; }
        const int end = t.m0 + rows < S ? t.m0 + rows : S;
        const int want = sdpa_sm90::kShortTiles<T> ? (end - t.m0 + 63) / 64 : T::NCWG;  // warpgroups that run
        if (t.nc != want) { *ok = false; break; }
        ++nc[t.nc];
        for (int r = t.m0; r < end; ++r) {
            unsigned char& c = seen[(size_t)t.bh * S + r];
            if (c) *ok = false;
            c = 1;
        }
    }
    for (unsigned char c : seen)
        if (!c) *ok = false;
}

// The traits of the configuration select_config chose, by what it reports.
template <bool FP8>
static void cover_all(const sdpa_sm90::LaunchInfo& li, int BH, int S, int D, bool* ok, int (&nc)[4]) {
    using namespace sdpa_sm90;
    if (D == 64 && li.split == 2) cover<KernelTraits<FP8, 64, kAsync, kAblNone, true>>(li, BH, S, ok, nc);
    else if (D == 64 && li.ncwg == 3) cover<KernelTraits<FP8, 64, kAsync, kAblNone, false, 3>>(li, BH, S, ok, nc);
    else if (D == 64) cover<KernelTraits<FP8, 64, kAsync, kAblNone, false>>(li, BH, S, ok, nc);
    else if (li.split == 2 && li.bn == 192) cover<KernelTraits<FP8, 128, kAsync, kAblNone, true, 2, 192>>(li, BH, S, ok, nc);
    else if (li.split == 2) cover<KernelTraits<FP8, 128, kAsync, kAblNone, true>>(li, BH, S, ok, nc);
    else if (li.bn == 192) cover<KernelTraits<FP8, 128, kAsync, kAblNone, false, 2, 192>>(li, BH, S, ok, nc);
    else cover<KernelTraits<FP8, 128, kAsync, kAblNone, false>>(li, BH, S, ok, nc);
}

int main() {
    long long B, H, S;
    int D, sms, split, policy, plan, bnpol, fp8, q2pol;
    while (std::scanf("%lld %lld %lld %d %d %d %d %d %d %d %d", &B, &H, &S, &D, &sms, &split, &policy, &plan, &bnpol, &fp8,
                      &q2pol) == 11) {
        sdpa_sm90::LaunchInfo li;
        const char* err = nullptr;
        const int BH = (int)(B * H);
        const int pol = policy < 0 ? SDPA_SM90_NCWG3_D64 : policy;
        const int pl = plan < 0 ? SDPA_SM90_TILE_PLAN : plan;
        const int bp = bnpol < 0 ? SDPA_SM90_BN_D128 : bnpol;
        const int q2p = q2pol < 0 ? SDPA_SM90_FP8_Q2 : q2pol;
        const sdpa_sm90::Precision prec = fp8 ? sdpa_sm90::Precision::kFp8 : sdpa_sm90::Precision::kFp16;
        if (!sdpa_sm90::select_config(prec, BH, (int)S, D, sms, split, 0, &li, &err, pol, pl, bp, q2p)) {
            std::printf("{\"error\":\"%s\"}\n", err);
            continue;
        }
        bool ok = false;
        int nc[4] = {0, 0, 0, 0};
        using namespace sdpa_sm90;
        if (fp8) cover_all<true>(li, BH, (int)S, D, &ok, nc);
        else cover_all<false>(li, BH, (int)S, D, &ok, nc);
        std::printf("{\"kernel\":\"%s\",\"grid\":%d,\"block\":%d,\"bm\":%d,\"bn\":%d,\"split\":%d,\"ncwg\":%d,\"smem\":%d,\"func\":\"%p\","
                    "\"tiles\":[%d,%d],\"units\":%d,\"persistent\":%s,\"cover\":%s,\"nc\":[%d,%d,%d],\"q_terms\":%d}\n",
                    sdpa_sm90::kernel_name(li.precision), li.grid, li.block, li.bm, li.bn, li.split, li.ncwg, li.smem, li.func, li.plan.full,
                    li.plan.nshort, li.plan.units, li.persistent ? "true" : "false", ok ? "true" : "false", nc[1],
                    nc[2], nc[3], li.q_terms);
    }
    return 0;
}
