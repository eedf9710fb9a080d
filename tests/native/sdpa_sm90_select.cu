// Host-only check of the Hopper SDPA kernel's configuration choice (sdpa_sm90::select_config in
// kernels_cuda/sdpa_fp8_sm90/kernel.cuh), run by tests/test_sdpa_sm90_select.py without a GPU.
// Compiled for a virtual architecture below sm_90 (the kernel bodies are empty there), nothing is
// launched.  Prints one JSON line per argument set read from stdin ("B Hq Hkv Sq Skv D causal num_sms split
// policy plan bn fp8 q2 ablate"; the attention case of ../../kernels_cuda/sdpa_fp8/attn_shape.h; policy / plan / bn /
// q2 -1 = the build's default; bn: SDPA_SM90_BN_D128's policy, 0 = by Skv; fp8: 1 = the fp8 tier's kernel, 0 =
// the fp16 tier's; q2: SDPA_SM90_FP8_Q2's policy; ablate: --ablate's mode, 0 none, 1 no_compute, 2 no_loads):
// the launch configuration select_config gives (with "bn", the keys per K/V tile), or
// its error, with what the work units of its tile plan cover (block_tile, the kernel's own mapping):
// "cover" = every row of every query head in exactly one unit, each unit reading K/V head bh / G and
// exactly the K/V tiles its rows see (every tile; with the causal mask those up to its last row's diagonal),
// and the grid one block per unit (persistent: min(units, SMs) blocks, whose unit sequences, unit_index up to
// units_of_block, take every unit exactly once); "nc" = units per number of consumer warpgroups with rows;
// "order" = with the causal mask, the units' tile counts never increase with the unit index (heaviest
// first); "tiles_total" = K/V tiles of all units, "tiles_max_block" = most K/V tiles one block runs (a
// persistent block: its units' sum; else the largest unit); "causal_kernel" = the kernel select_config chose is
// the one with the causal mask (sdpa_sm90::CaseTraits), else the one without.
// The key-chunk configuration (li.kv: decode-shaped cases, kernel.cuh kv_shaped) instead: "kv_chunks" = key chunks
// per packed head, "cover" = every row of every query head in exactly one packed row (packed head b Hkv + hkv, row
// r = query head hkv G + r / Sq, query r % Sq), every K/V tile of a packed head in exactly one block's chunk
// (kv_block_tile, the kernel's own mapping), each block reading its own packed head's K/V, the grid one block per
// (packed head, chunk), the chunks within the merge's limit (kv_max_chunks); "tiles_total" = K/V tiles of all
// blocks, "tiles_max_block" = the largest chunk.  "kv_auto": the runner's --kernel auto takes this configuration over
// the decode kernel (kernel.cuh kv_auto_preferred).
#include <cstdio>
#include <string>
#include <vector>

#include "../../kernels_cuda/sdpa_fp8_sm90/kernel.cuh"

struct Cover {
    bool ok = false;
    bool order = true;        // causal: tile counts non-increasing in the unit index
    int nc[4] = {0, 0, 0, 0};
    long long tiles_total = 0, tiles_max_block = 0;
};

template <class T>
static void cover(const sdpa_sm90::LaunchInfo& li, const AttnShape& a, Cover* cv) {
    const int BH = (int)(a.B * a.Hq), S = (int)a.Sq, G = (int)a.group();
    std::vector<unsigned char> seen((size_t)BH * S, 0);
    const int units = (li.plan.full + li.plan.nshort) * BH;
    const int blocks = li.persistent && li.num_sms < units ? li.num_sms : units;  // persistent: units grid apart
    bool ok = li.plan.units == units && li.plan.full_blocks == li.plan.full * BH && li.grid == blocks &&
              li.plan.bh == BH && li.plan.group == G && li.plan.sq == S && li.plan.skv == (int)a.Skv &&
              li.plan.causal == (a.causal ? 1 : 0) && (!a.causal || li.plan.nshort == 0);
    std::vector<int> nt(units, 0);
    for (int b = 0; b < units && ok; ++b) {
        const sdpa_sm90::BlockTile t = sdpa_sm90::block_tile<T>(b, li.plan);
        const int rows = b < li.plan.full_blocks ? T::BM : T::BM - 64;
        if (t.bh < 0 || t.bh >= BH || t.m0 < 0 || t.m0 >= S || t.nc < 1 || t.nc > T::NCWG) { ok = false; break; }
        const int end = t.m0 + rows < S ? t.m0 + rows : S;
        const int want = sdpa_sm90::kShortTiles<T> ? (end - t.m0 + 63) / 64 : T::NCWG;  // warpgroups that run
        if (t.nc != want) { ok = false; break; }
        // K/V head: query head h of batch b reads head h / G of the same batch.
        const int64_t bq = t.bh / a.Hq, hq = t.bh % a.Hq;
        if (t.kvh != bq * a.Hkv + hq / G) { ok = false; break; }
        // K/V tiles: up to the last key its last row sees (attn_shape.h keys_of_row), every key it sees inside.
        const int64_t keys = a.keys_of_row(end - 1);
        if ((int64_t)t.nt != (keys + li.bn - 1) / li.bn || keys > a.Skv || a.keys_of_row(t.m0) < 1) { ok = false; break; }
        nt[b] = t.nt;
        cv->tiles_total += t.nt;
        if (a.causal && b > 0 && nt[b] > nt[b - 1]) cv->order = false;
        ++cv->nc[t.nc];
        for (int r = t.m0; r < end; ++r) {
            unsigned char& c = seen[(size_t)t.bh * S + r];
            if (c) ok = false;
            c = 1;
        }
    }
    for (unsigned char c : seen)
        if (!c) ok = false;
    // The blocks' unit sequences (the kernel's unit_index / units_of_block): every unit exactly once.
    if (ok) {
        std::vector<unsigned char> taken(units, 0);
        const int grid = li.grid;
        for (int blk = 0; blk < grid && ok; ++blk) {
            const int n = li.persistent ? sdpa_sm90::units_of_block(blk, grid, li.plan) : 1;
            long long sum = 0;
            for (int i = 0; i < n; ++i) {
                const int u = li.persistent ? sdpa_sm90::unit_index(blk, grid, i, li.plan.causal) : blk;
                if (u < 0 || u >= units || taken[u]) { ok = false; break; }
                taken[u] = 1;
                sum += nt[u];
            }
            if (li.persistent && sdpa_sm90::unit_index(blk, grid, n, li.plan.causal) < units) ok = false;
            if (sum > cv->tiles_max_block) cv->tiles_max_block = sum;
        }
        for (unsigned char c : taken)
            if (!c) ok = false;
    }
    cv->ok = ok;
}

static void cover_kv(const sdpa_sm90::LaunchInfo& li, const AttnShape& a, Cover* cv) {
    using T = sdpa_sm90::CaseTraits<sdpa_sm90::KernelTraits<false, 128, sdpa_sm90::kAsync, sdpa_sm90::kAblNone, true>,
                                    false, true, false>;  // kv_block_tile reads T::BN and T::NCWG only
    const int G = (int)a.group(), Sq = (int)a.Sq, BHp = (int)(a.B * a.Hkv), rows = G * Sq;
    const int tiles = (int)((a.Skv + 127) / 128);
    sdpa_sm90::KvChunks kv{li.kv_chunks, li.kv_chunk_tiles, li.kv_sq, nullptr, nullptr, nullptr};
    bool ok = li.kv && li.bn == 128 && li.bm == 64 && li.split == 2 && li.causal == a.causal && !li.persistent &&
              li.kv_sq == Sq && rows <= 64 && li.plan.bh == BHp && li.plan.sq == rows && li.plan.group == 1 &&
              li.plan.skv == (int)a.Skv && li.plan.causal == 0 && li.kv_chunks >= 1 &&
              li.kv_chunks <= sdpa_sm90::kv_max_chunks((int)a.D) && li.grid == BHp * li.kv_chunks &&
              li.plan.units == li.grid;
    // Rows: packed head p's row r is query head (p % Hkv) G + r / Sq of batch p / Hkv, query r % Sq, at the flat row
    // offset p * rows + r of Q viewed as [B * Hkv][rows][D] (the same bytes as [B][Hq][Sq][D]).
    std::vector<unsigned char> seen((size_t)a.B * a.Hq * Sq, 0);
    for (int p = 0; p < BHp && ok; ++p)
        for (int r = 0; r < rows; ++r) {
            const long long b = p / a.Hkv, hq = (p % a.Hkv) * G + r / Sq, i = r % Sq;
            const long long flat = (b * a.Hq + hq) * Sq + i;
            if (flat != (long long)p * rows + r || seen[(size_t)flat]) ok = false;
            seen[(size_t)flat] = 1;
        }
    for (unsigned char c : seen)
        if (!c) ok = false;
    std::vector<int> cnt((size_t)BHp * tiles, 0);
    for (int blk = 0; blk < li.grid && ok; ++blk) {
        const sdpa_sm90::BlockTile t = sdpa_sm90::kv_block_tile<T>(blk, li.plan, kv);
        if (t.bh < 0 || t.bh >= BHp || t.kvh != t.bh || t.m0 != 0 || t.nt < 1 || t.t0 < 0 || t.t0 + t.nt > tiles) {
            ok = false;
            break;
        }
        for (int j = t.t0; j < t.t0 + t.nt; ++j) ++cnt[(size_t)t.bh * tiles + j];
        cv->tiles_total += t.nt;
        if (t.nt > cv->tiles_max_block) cv->tiles_max_block = t.nt;
        ++cv->nc[t.nc];
    }
    for (int c : cnt)
        if (c != 1) ok = false;
    cv->ok = ok;
}

// The traits of the configuration select_config chose, by what it reports: C, the kernel with the causal mask or
// the one without (CaseTraits), as li.causal says; the units are those that kernel's block_tile takes.
template <bool FP8, bool C>
static void cover_case(const sdpa_sm90::LaunchInfo& li, const AttnShape& a, Cover* cv) {
    using namespace sdpa_sm90;
    const int D = (int)a.D;
    if (D == 64 && li.split == 2) cover<CaseTraits<KernelTraits<FP8, 64, kAsync, kAblNone, true>, C>>(li, a, cv);
    else if (D == 64 && li.ncwg == 3) cover<CaseTraits<KernelTraits<FP8, 64, kAsync, kAblNone, false, 3>, C>>(li, a, cv);
    else if (D == 64) cover<CaseTraits<KernelTraits<FP8, 64, kAsync, kAblNone, false>, C>>(li, a, cv);
    else if (li.ncwg == 3) {
        if constexpr (FP8) cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, false, 3, 128>, C>>(li, a, cv);
    } else if (li.split == 2 && li.bn == 192) cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, true, 2, 192>, C>>(li, a, cv);
    else if (li.split == 2) cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, true>, C>>(li, a, cv);
    else if (li.bn == 192) cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, false, 2, 192>, C>>(li, a, cv);
    else if (li.bn == 256) cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, false, 2, 256>, C>>(li, a, cv);
    else cover<CaseTraits<KernelTraits<FP8, 128, kAsync, kAblNone, false>, C>>(li, a, cv);
}
template <bool FP8>
static void cover_all(const sdpa_sm90::LaunchInfo& li, const AttnShape& a, Cover* cv) {
    if (li.kv) cover_kv(li, a, cv);
    else if (li.causal) cover_case<FP8, true>(li, a, cv);
    else cover_case<FP8, false>(li, a, cv);
}

// --fast-div: sdpa_sm90::fast_div (the kernels' division of a unit or head index by a divisor fixed at launch)
// against '/' for every divisor up to 5000 and the divisors near powers of two up to 2^30, at numerators 0..4999
// and around every multiple of the divisor near powers of two and 2^31 - 1; prints the count checked and wrong.
static int check_fast_div() {
    std::vector<uint32_t> ds, ns;
    for (uint32_t d = 1; d <= 5000; ++d) ds.push_back(d);
    for (int k = 12; k <= 30; ++k)
        for (int e = -3; e <= 3; ++e) ds.push_back((uint32_t)((1u << k) + e));
    long long checked = 0, wrong = 0;
    for (uint32_t d : ds) {
        const sdpa_sm90::FastDiv f = sdpa_sm90::make_fast_div(d);
        ns.clear();
        for (uint32_t n = 0; n < 5000; ++n) ns.push_back(n);
        for (int k = 0; k <= 31; ++k) {
            const uint64_t p = k == 31 ? 0x7fffffffull : (1ull << k);
            for (uint64_t m : {p / d * d, p / d * d + d}) {
                for (int e = -2; e <= 2; ++e) {
                    const long long n = (long long)m + e;
                    if (n >= 0 && n <= 0x7fffffffLL) ns.push_back((uint32_t)n);
                }
            }
        }
        for (uint32_t n : ns) {
            ++checked;
            if ((uint32_t)sdpa_sm90::fast_div((int)n, f) != n / d) ++wrong;
        }
    }
    std::printf("{\"fast_div_checked\":%lld,\"fast_div_wrong\":%lld}\n", checked, wrong);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "--fast-div") return check_fast_div();
    long long B, Hq, Hkv, Sq, Skv;
    int D, causal, sms, split, policy, plan, bnpol, fp8, q2pol, ablate;
    while (std::scanf("%lld %lld %lld %lld %lld %d %d %d %d %d %d %d %d %d %d", &B, &Hq, &Hkv, &Sq, &Skv, &D, &causal, &sms,
                      &split, &policy, &plan, &bnpol, &fp8, &q2pol, &ablate) == 15) {
        sdpa_sm90::LaunchInfo li;
        const char* err = nullptr;
        AttnShape a;
        a.B = B; a.Hq = Hq; a.Hkv = Hkv; a.Sq = Sq; a.Skv = Skv; a.D = D; a.causal = causal != 0;
        const int pol = policy < 0 ? SDPA_SM90_NCWG3_D64 : policy;
        const int pl = plan < 0 ? SDPA_SM90_TILE_PLAN : plan;
        const int bp = bnpol < 0 ? SDPA_SM90_BN_D128 : bnpol;
        const int q2p = q2pol < 0 ? SDPA_SM90_FP8_Q2 : q2pol;
        const sdpa_sm90::Precision prec = fp8 ? sdpa_sm90::Precision::kFp8 : sdpa_sm90::Precision::kFp16;
        if (!sdpa_sm90::select_config(prec, a, sms, split, ablate, &li, &err, pol, pl, bp, q2p)) {
            std::printf("{\"error\":\"%s\"}\n", err);
            continue;
        }
        Cover cv;
        if (fp8) cover_all<true>(li, a, &cv);
        else cover_all<false>(li, a, &cv);
        std::printf("{\"kernel\":\"%s\",\"grid\":%d,\"block\":%d,\"bm\":%d,\"bn\":%d,\"split\":%d,\"ncwg\":%d,\"smem\":%d,\"func\":\"%p\","
                    "\"tiles\":[%d,%d],\"units\":%d,\"persistent\":%s,\"cover\":%s,\"nc\":[%d,%d,%d],\"q_terms\":%d,"
                    "\"order\":%s,\"tiles_total\":%lld,\"tiles_max_block\":%lld,\"causal_kernel\":%s,\"ablate\":%d,"
                    "\"kv_chunks\":%d,\"kv_auto\":%s}\n",
                    sdpa_sm90::kernel_name(li.precision), li.grid, li.block, li.bm, li.bn, li.split, li.ncwg, li.smem, li.func, li.plan.full,
                    li.plan.nshort, li.plan.units, li.persistent ? "true" : "false", cv.ok ? "true" : "false", cv.nc[1],
                    cv.nc[2], cv.nc[3], li.q_terms, cv.order ? "true" : "false", cv.tiles_total, cv.tiles_max_block,
                    li.causal ? "true" : "false", li.ablate, li.kv ? li.kv_chunks : 0,
                    sdpa_sm90::kv_auto_preferred(fp8 != 0, a) ? "true" : "false");
    }
    return 0;
}
