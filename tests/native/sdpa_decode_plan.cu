// Host-only check of the decode kernel's work plan (sdpa_decode::plan_decode, kernels_cuda/sdpa_decode/plan.h),
// run by tests/test_sdpa_decode_plan.py without a GPU; nothing is launched.  Reads one case per line on stdin,
// "B Hq Hkv Sq Skv D causal num_sms blocks_per_sm split_override fp8" (fp8: 1 = the fp8 tier's plan), and prints the plan as one JSON line, with "cover": whether
// the kernel's own mapping (split_tiles cut at rows_key_limit, group_tile_count) visits, for every block of rows,
// every 32-key tile a row of that block sees exactly once, and no tile past the last one any of its rows sees;
// "decode_shaped": the runner's auto-dispatch rule; "declared_blocks_per_sm": the blocks per SM the kernel's
// launch bounds declare for the plan's warps, which the runner's plan counts on (kernel.cuh select).
#include <cstdio>
#include <vector>

#include "../../kernels_cuda/sdpa_decode/plan.h"

using namespace sdpa_decode;

// Every block (split, mblock) of one (b, hkv): its groups' tiles, as the kernel derives them.
static bool covers(const AttnShape& s, const Plan& p) {
    for (int64_t mb = 0; mb < p.mblocks; ++mb) {
        const int64_t m0 = mb * p.rows_per_block;
        const int64_t rows = p.rows - m0 < p.rows_per_block ? p.rows - m0 : p.rows_per_block;
        // the keys the block must see: the largest limit of its rows, each row's by attn_shape.h
        int64_t need = 0;
        for (int64_t r = m0; r < m0 + rows; ++r) {
            const int64_t lim = s.keys_of_row(r % s.Sq);
            need = lim > need ? lim : need;
        }
        if (rows_key_limit(s.Sq, s.Skv, s.causal, m0, rows) != need) return false;
        const int64_t need_tiles = (need + kTileKeys - 1) / kTileKeys;
        std::vector<int> seen((size_t)p.tiles, 0);
        for (int64_t sp = 0; sp < p.nsplit; ++sp) {
            const TileRange r = split_tiles(p.tiles, p.chunk_tiles, sp, need);
            if (r.begin < 0 || r.end > p.tiles || r.end < r.begin) return false;
            for (int grp = 0; grp < p.wk; ++grp) {
                const int64_t n = group_tile_count(r, grp, p.wk);
                for (int64_t it = 0; it < n; ++it) {
                    const int64_t tile = r.begin + grp + it * p.wk;
                    if (tile < r.begin || tile >= r.end) return false;
                    ++seen[(size_t)tile];
                }
            }
        }
        for (int64_t t = 0; t < p.tiles; ++t)
            if (seen[(size_t)t] != (t < need_tiles ? 1 : 0)) return false;
    }
    return true;
}

int main() {
    long long B, Hq, Hkv, Sq, Skv, D, split;
    int causal, sms, bps, fp8;
    while (std::scanf("%lld %lld %lld %lld %lld %lld %d %d %d %lld %d", &B, &Hq, &Hkv, &Sq, &Skv, &D, &causal, &sms, &bps,
                      &split, &fp8) == 11) {
        AttnShape s;
        s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Sq = Sq, s.Skv = Skv, s.D = D, s.causal = causal != 0;
        const Plan p = plan_decode(s, fp8 != 0, sms, bps, split);
        std::printf("{\"rt\":%d,\"wm\":%d,\"wk\":%d,\"threads\":%d,\"rows\":%lld,\"mblocks\":%lld,\"tiles\":%lld,\"nsplit\":%lld,"
                    "\"chunk_tiles\":%lld,\"blocks\":%lld,\"cover\":%s,\"decode_shaped\":%s,\"declared_blocks_per_sm\":%d}\n",
                    p.rt, p.wm, p.wk, p.threads, (long long)p.rows, (long long)p.mblocks, (long long)p.tiles,
                    (long long)p.nsplit, (long long)p.chunk_tiles, (long long)p.blocks, covers(s, p) ? "true" : "false",
                    decode_shaped(s) ? "true" : "false", blocks_per_sm_for(p.wm, p.rt));
    }
    return 0;
}
