// The decode kernel's work plan: how the rows and keys of one attention case are cut into blocks.  Host code
// and a few __host__ __device__ helpers the kernel uses too, so that the kernel and the CPU test
// (tests/native/sdpa_decode_plan.cu) agree on one mapping.  No CUDA runtime call: a pure function of the case,
// the SM count and the --split override.
//
//   rows   M = G * Sq query rows share one K/V head (b, hkv): row r is query head hkv*G + r / Sq, query r % Sq,
//          so a (b, hkv)'s rows are one contiguous slab of Q and O ([B, Hq, Sq, D] with Hq = Hkv * G).
//   block  (b, hkv, split, mblock): WM * RT * 16 rows (WM warps, RT 16-row MMA tiles each) x a chunk of the keys;
//          WK key groups of WM warps each take the chunk's 32-key tiles in turn (tile j of the chunk: group j % WK),
//          so every K/V byte of the chunk is read from memory once per block; with M <= 64 (mblocks = 1) once.
//   split  the key tiles [0, ceil(Skv / 32)) cut into nsplit chunks of chunk_tiles; a block's partial softmax state
//          (m, l, O) is merged with the other chunks' by the last block of its (b, hkv, mblock) to finish.
#pragma once

#include <cstdint>

#include "../sdpa_fp8/attn_shape.h"

#if defined(__CUDACC__)
#define DECODE_HD __host__ __device__ __forceinline__
#else
#define DECODE_HD inline
#endif

namespace sdpa_decode {

constexpr int kTileKeys = 32;        // keys per tile: one pipeline step of a key group
constexpr int kRowsPerWarp = 16;     // one m16 MMA tile
constexpr int kMaxSplitRows = 2048;  // nsplit * rows per block: the final merge's shared memory (16 KiB)
constexpr int kMaxWaveSplit = 4;     // with a grid of a wave or more: at most this many chunks to even the waves

// The auto-dispatch rule (runner.cu, --kernel auto): few query rows per K/V head, and not the square MHA case
// whose records predate this kernel.  M = G * Sq <= 64 fits one block's rows (mblocks = 1), so K/V is read once.
constexpr int64_t kDecodeMaxRows = 64;
inline bool decode_shaped(const AttnShape& s) {
    return !s.square_mha() && s.group() * s.Sq <= kDecodeMaxRows;
}

struct Plan {
    int rt = 0;              // 16-row MMA tiles per warp (plan_decode)
    int wm = 0;              // warps per key group
    int wk = 0;              // key groups per block
    int threads = 0;         // 32 * wm * wk
    int rows_per_block = 0;  // 16 * wm * rt
    int64_t rows = 0;        // M = G * Sq
    int64_t mblocks = 0;     // ceil(M / rows_per_block)
    int64_t tiles = 0;       // ceil(Skv / 32)
    int64_t nsplit = 0;      // key chunks
    int64_t chunk_tiles = 0; // tiles per chunk (the last may have fewer)
    int64_t blocks = 0;      // B * Hkv * mblocks * nsplit
};

// Warps per key group for M rows: 1, 2 or 4 MMA tiles of 16 rows (more rows: more row blocks).  Key groups: 4 (2
// with 4-warp groups: 8 warps per block either way, the 2-warp and 1-warp configurations 256 and 128 threads).
DECODE_HD int warps_for_rows(int64_t rows) {
    const int64_t mt = (rows + kRowsPerWarp - 1) / kRowsPerWarp;
    return mt <= 1 ? 1 : mt <= 2 ? 2 : 4;
}
// 16-row MMA tiles per warp (plan_decode): 2 in the fp16 tier at 17-32 rows per K/V head where each key group's share
// of a chunk is at least kTwoTileMinTiles tiles: one warp holds all 32 rows and every K/V fragment it decodes serves
// both tiles (two warps of 16 rows each decode the whole tile: twice the E4M3 decode per byte); else 1.  A warp's
// tile takes longer with two tiles, which short chunks do not repay (1x H200, experiments/2026-11-29-sdpa-decode-two-
// row-tiles: 0.86-0.96x the time at 16-64 tiles a group, 0.99-1.02x at 8, 1.03-1.5x at 2).  Not the fp8 tier: its
// E4M3 MMA takes K and V as stored (no decode to share).
constexpr int64_t kTwoTileMinTiles = 16;
DECODE_HD bool two_tiles_eligible(int64_t rows, bool fp8) {
    return !fp8 && rows > kRowsPerWarp && rows <= 2 * kRowsPerWarp;
}
// Warps per key group for M rows at rt tiles per warp.
DECODE_HD int warps_for(int64_t rows, int rt) { return warps_for_rows((rows + rt - 1) / rt); }
DECODE_HD int groups_for_warps(int wm) { return wm == 4 ? 2 : 4; }
// Blocks per SM the kernel is built for (its launch bounds) and the plan counts on: two of 128 threads, one of 256.
DECODE_HD constexpr int blocks_per_sm_for_warps(int wm) { return wm == 1 ? 2 : 1; }
// With two row tiles per warp: 8 key groups of one warp (256 threads, one block per SM), so that a block holds as many
// warps, and a case as many key chunks, as the two-warp groups it replaces (the final merge reads chunks x rows
// partials in one block: 4 groups, two blocks per SM and twice the chunks made it 21-25% slower at MQA).
DECODE_HD int groups_for(int wm, int rt) { return rt == 2 ? 8 : groups_for_warps(wm); }
DECODE_HD constexpr int blocks_per_sm_for(int wm, int rt) { return rt == 2 ? 1 : blocks_per_sm_for_warps(wm); }

// The keys any row of rows [r0, r0 + n) sees: Skv, or with the causal mask the last row's limit (bottom-right:
// query i sees keys j <= i + Skv - Sq).  A row's query index is r % Sq.
DECODE_HD int64_t rows_key_limit(int64_t Sq, int64_t Skv, bool causal, int64_t r0, int64_t n) {
    if (!causal) return Skv;
    const int64_t first = r0 % Sq, last = (r0 + n - 1) % Sq;
    const int64_t max_q = (n >= Sq || last < first) ? Sq - 1 : last;
    return max_q + 1 + Skv - Sq;
}

// Tiles [begin, end) of chunk `split`, cut at the last key a row of the block sees (tiles past it are skipped:
// no loads, no math; the block still reports its (empty) state to the merge).
struct TileRange {
    int64_t begin, end;
};
DECODE_HD TileRange split_tiles(int64_t tiles, int64_t chunk_tiles, int64_t split, int64_t key_limit) {
    const int64_t b = split * chunk_tiles;
    int64_t e = b + chunk_tiles < tiles ? b + chunk_tiles : tiles;
    const int64_t lim = (key_limit + kTileKeys - 1) / kTileKeys;
    if (e > lim) e = lim;
    return {b, e > b ? e : b};
}
// Tiles of key group `grp` in a range: begin + grp, begin + grp + wk, ...
DECODE_HD int64_t group_tile_count(TileRange r, int grp, int wk) {
    const int64_t n = r.end - r.begin - grp;
    return n > 0 ? (n + wk - 1) / wk : 0;
}

// The plan for a case of a tier (fp8: the fp8 tier's, else the fp16 tier's) on num_sms SMs that hold blocks_per_sm
// of its blocks at once (the slots: one wave).
// split_override 0: the rule below; 1, 2, 4, ...: that many chunks (at most one per tile).  The rule: with
// base = B * Hkv * mblocks blocks short of a wave, cut the keys into floor(slots / base) chunks: one wave, every
// slot busy, every block streaming until the end (a partial second wave runs on few SMs, which cannot keep the
// memory busy: 320 blocks on 264 slots took 1.3x the time of 256, experiments/2026-11-28-sdpa-decode run 1);
// with a wave or more, the count of chunks up to kMaxWaveSplit whose last wave is fullest (the fewest on a tie).
// Either way every key group keeps at least two tiles per block (a block of fewer keys spends its time filling
// the pipeline) and nsplit * rows_per_block <= kMaxSplitRows.
DECODE_HD double wave_fill(int64_t blocks, int64_t slots) {  // blocks / (waves * slots): 1 = every wave full
    const int64_t waves = (blocks + slots - 1) / slots;
    return (double)blocks / (double)(waves * slots);
}

inline Plan plan_for_tiles(const AttnShape& s, int rt, int num_sms, int blocks_per_sm, int64_t split_override) {
    Plan p;
    p.rows = s.group() * s.Sq;
    p.rt = rt;
    p.wm = warps_for(p.rows, p.rt);
    p.wk = groups_for(p.wm, p.rt);
    p.threads = 32 * p.wm * p.wk;
    p.rows_per_block = kRowsPerWarp * p.wm * p.rt;
    p.mblocks = (p.rows + p.rows_per_block - 1) / p.rows_per_block;
    p.tiles = (s.Skv + kTileKeys - 1) / kTileKeys;
    const int64_t base = s.B * s.Hkv * p.mblocks;
    const int64_t max_by_merge = kMaxSplitRows / p.rows_per_block;
    int64_t n;
    if (split_override > 0) {
        n = split_override;
    } else {
        const int64_t slots = (int64_t)(num_sms > 0 ? num_sms : 1) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
        const int64_t min_chunk = 2 * (int64_t)p.wk;
        int64_t cap = p.tiles / min_chunk > 1 ? p.tiles / min_chunk : 1;
        if (cap > max_by_merge) cap = max_by_merge;
        if (base < slots) {
            n = slots / base;
        } else {
            n = 1;
            for (int64_t k = 2; k <= kMaxWaveSplit && k <= cap; ++k)
                if (wave_fill(base * k, slots) > wave_fill(base * n, slots) + 1e-9) n = k;
        }
        if (n > cap) n = cap;
    }
    if (n > max_by_merge) n = max_by_merge;
    if (n > p.tiles) n = p.tiles;
    if (n < 1) n = 1;
    p.chunk_tiles = (p.tiles + n - 1) / n;
    p.nsplit = (p.tiles + p.chunk_tiles - 1) / p.chunk_tiles;  // no empty chunk
    p.blocks = base * p.nsplit;
    return p;
}

// The plan of a tier (fp8: the fp8 tier's, else the fp16 tier's): two row tiles per warp where eligible and their
// plan gives each key group at least kTwoTileMinTiles tiles of a chunk, else one.  blocks_per_sm: the one-tile plan's
// (blocks_per_sm_for_warps; where two tiles are eligible, one block per SM either way).
inline Plan plan_decode(const AttnShape& s, bool fp8, int num_sms, int blocks_per_sm, int64_t split_override) {
    if (two_tiles_eligible(s.group() * s.Sq, fp8)) {
        const Plan p2 = plan_for_tiles(s, 2, num_sms, blocks_per_sm, split_override);
        if (p2.chunk_tiles >= kTwoTileMinTiles * p2.wk) return p2;
    }
    return plan_for_tiles(s, 1, num_sms, blocks_per_sm, split_override);
}

}  // namespace sdpa_decode
