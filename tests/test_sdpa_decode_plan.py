"""The decode kernel's work plan (kernels_cuda/sdpa_decode/plan.h plan_decode), without a GPU.

tests/native/sdpa_decode_plan.cu calls the plan the runner calls (a pure function of the case, the SM count and
--split), compiled with nvcc as host code, and prints it per case, with whether the kernel's own tile mapping
(split_tiles, rows_key_limit, group_tile_count) visits every 32-key tile a block's rows see exactly once. The rule,
restated here: M = G * Sq rows of a K/V head in blocks of 16, 32 or 64 rows (1, 2 or 4 warps per key group of one
16-row MMA tile each; in the fp16 tier 17-32 rows take one warp per key group holding two tiles; 4 key groups, 2 with
4-warp groups); base = B * Hkv * row blocks; with the slots (SMs x the blocks per SM the kernel's
launch bounds declare: 2 of 128 threads, 1 of 256) more than base, floor(slots / base) key chunks (one full wave), else the count up to
4 whose last wave is fullest (the fewest on a tie); at most one chunk per 2 * groups tiles (two tiles per key
group) and 2048 / rows-per-block chunks (the final merge's shared memory); the chunks are equal but for the last,
none empty.
"""

import json
import subprocess

import pytest

from driver import paths, toolchain
from driver.errors import ToolchainMissing

SRC = paths.ROOT / "tests" / "native" / "sdpa_decode_plan.cu"
pytestmark = pytest.mark.nvcc
H200_SMS = 132  # H100 / H200 SXM


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    try:
        nvcc = toolchain.find_nvcc().path
    except ToolchainMissing as e:
        pytest.skip(f"no nvcc here ({e}): the plan check compiles plan.h")
    exe = tmp_path_factory.mktemp("sdpa_decode_plan") / "plan"
    subprocess.run([nvcc, "-std=c++17", str(SRC), "-o", str(exe)], check=True, capture_output=True, text=True,
                   timeout=600)

    def run(cases):
        """cases: (B, Hq, Hkv, Sq, Skv, D, causal, sms, blocks_per_sm, split_override[, fp8]) (fp8: the tier, 0 if left
        out)."""
        stdin = "".join(" ".join(str(int(x)) for x in (*c, 0)[:11]) + "\n" for c in cases)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=120, check=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    return run


def wave_fill(blocks, slots):
    return blocks / (_cdiv(blocks, slots) * slots)


def expected(b, hq, hkv, sq, skv, d, causal, sms, bps, split, fp8=0):
    """plan_decode's rule, restated: two row tiles per warp in the fp16 tier at 17-32 rows where their plan gives each
    of its 8 key groups at least 16 tiles of a chunk, else one."""
    rows = hq // hkv * sq
    if not fp8 and 16 < rows <= 32:
        p2 = _plan(b, hkv, skv, sms, bps, split, rows, 2)
        if p2["chunk_tiles"] >= 16 * p2["wk"]:
            return p2
    return _plan(b, hkv, skv, sms, bps, split, rows, 1)


def _plan(b, hkv, skv, sms, bps, split, rows, rt):
    mt = _cdiv(_cdiv(rows, rt), 16)
    wm = 1 if mt <= 1 else 2 if mt <= 2 else 4
    wk = 8 if rt == 2 else 2 if wm == 4 else 4
    rpb = 16 * wm * rt
    mblocks = _cdiv(rows, rpb)
    tiles = _cdiv(skv, 32)
    base = b * hkv * mblocks
    if split > 0:
        n = split
    else:
        slots = sms * bps
        cap = min(max(1, tiles // (2 * wk)), 2048 // rpb)
        if base < slots:
            n = slots // base
        else:
            n = 1
            for k in range(2, min(4, cap) + 1):
                if wave_fill(base * k, slots) > wave_fill(base * n, slots) + 1e-9:
                    n = k
        n = min(n, cap)
    n = max(1, min(n, 2048 // rpb, tiles))
    chunk = _cdiv(tiles, n)
    nsplit = _cdiv(tiles, chunk)
    return {"rt": rt, "wm": wm, "wk": wk, "threads": 32 * wm * wk, "rows": rows, "mblocks": mblocks, "tiles": tiles,
            "nsplit": nsplit, "chunk_tiles": chunk, "blocks": base * nsplit}


def _pick(r):
    return {k: r[k] for k in ("rt", "wm", "wk", "threads", "rows", "mblocks", "tiles", "nsplit", "chunk_tiles", "blocks")}


def test_the_benchmark_cases(plan):
    """Issue 50's decode cases on 132 SMs (H200): (B, Hq, Hkv, Sq, Skv) -> (rows per block, chunks, blocks), with the
    blocks per SM the kernel declares (plan.h blocks_per_sm_for_warps: 2 of the 128-thread blocks, 1 of the
    256-thread ones; the H200 held as many of each at head dim 128, experiments/2026-11-28-sdpa-decode run 2)."""
    cases = {
        (1, 32, 8, 1, 4096): (16, 16, 128),     # 8 tiles per chunk: two per key group
        (8, 32, 8, 1, 4096): (16, 4, 256),      # one wave: 264 slots
        (64, 32, 8, 1, 4096): (16, 1, 512),     # 1.94 waves; 2, 3 or 4 chunks fill the last no better
        (1, 32, 8, 1, 32768): (16, 32, 256),    # 33 chunks of 32 tiles would be 32 after rounding
        (8, 32, 8, 1, 32768): (16, 4, 256),
        (64, 32, 8, 1, 32768): (16, 1, 512),
        (1, 32, 8, 1, 131072): (16, 33, 264),
        (8, 32, 8, 1, 131072): (16, 4, 256),
        (8, 32, 8, 4, 32768): (16, 4, 256),     # 16 rows: one warp per key group still
        (8, 32, 8, 16, 32768): (64, 2, 128),    # 64 rows: four warps per key group, two groups; 132 slots
        (8, 64, 8, 1, 32768): (16, 4, 256),
        (8, 32, 1, 1, 32768): (32, 16, 128),   # 32 rows (MQA): two warps of one tile (two tiles: 8 a key group)
        (8, 32, 8, 8, 32768): (32, 2, 128),    # 32 rows, 64 tiles a key group: 8 key groups of one warp, two tiles
    }
    declared = plan([(*c, 128, 0, H200_SMS, 1, 0) for c in cases])  # the blocks per SM select() plans with
    got = plan([(*c, 128, 0, H200_SMS, d["declared_blocks_per_sm"], 0) for c, d in zip(cases, declared, strict=True)])
    assert [d["declared_blocks_per_sm"] for d in declared] == [2 if d["wm"] == 1 and d["rt"] == 1 else 1
                                                               for d in declared]
    for c, r in zip(cases, got, strict=True):
        assert (16 * r["wm"] * r["rt"], r["nsplit"], r["blocks"]) == cases[c], (c, r)
        assert r["rt"] == (2 if c == (8, 32, 8, 8, 32768) else 1), (c, r)
        assert r["mblocks"] == 1 and r["cover"] and r["decode_shaped"]


def test_every_case_follows_the_rule_and_covers_every_key(plan):
    cases = [(b, g * hkv, hkv, sq, skv, d, causal, sms, bps, split, fp8)
             for b in (1, 3, 64) for (g, hkv) in ((1, 1), (4, 2), (8, 1), (32, 1), (5, 3)) for sq in (1, 4, 16, 33, 100)
             for skv in (1, 31, 32, 100, 257, 4096, 32768) for d in (64,) for causal in (0, 1)
             for sms, bps in ((132, 2), (78, 1), (132, 3)) for split in (0, 1, 2, 4) for fp8 in (0, 1)
             if not (causal and sq > skv)]
    got = plan(cases)
    bad = [(c, _pick(r), expected(*c)) for c, r in zip(cases, got, strict=True) if _pick(r) != expected(*c)]
    assert not bad, bad[:5]
    assert all(r["cover"] for r in got), [c for c, r in zip(cases, got, strict=True) if not r["cover"]][:5]
    assert all(r["nsplit"] * r["chunk_tiles"] >= r["tiles"] > (r["nsplit"] - 1) * r["chunk_tiles"] for r in got)
    assert all(r["nsplit"] * 16 * r["wm"] * r["rt"] <= 2048 for r in got)


def test_causal_rows_skip_the_keys_they_do_not_see(plan):
    """Chunked prefill through the decode kernel (--kernel decode_sm89): with the bottom-right mask the first row
    blocks see fewer keys; their chunks past the last key they see are skipped, and cover still holds."""
    (r,) = plan([(1, 4, 4, 512, 8192, 128, 1, H200_SMS, 1, 0)])
    assert r["cover"] and r["mblocks"] == 8 and r["wm"] == 4


@pytest.mark.parametrize(("shape", "decode"), [
    ((1, 32, 8, 1, 32768, 128, 0), True),    # decode
    ((8, 32, 8, 16, 32768, 128, 1), True),   # speculative decode, 64 rows per K/V head
    ((8, 32, 8, 17, 32768, 128, 1), False),  # 68 rows: more than one row block
    ((1, 64, 1, 1, 4096, 128, 0), True),     # MQA, 64 query heads: 64 rows
    ((2, 8, 8, 1, 1, 64, 0), False),         # square MHA: the records before the decode kernel keep their kernel
    ((2, 8, 8, 1, 1, 64, 1), True),          # ... unless causal (not the square case)
    ((1, 32, 8, 512, 8192, 128, 1), False),  # chunked prefill
])
def test_decode_shaped(plan, shape, decode):
    (r,) = plan([(*shape, H200_SMS, 1, 0)])
    assert r["decode_shaped"] == decode


def test_the_sanitizer_cases_take_the_paths_they_are_named_for(plan):
    """config.SANITIZER_CASES (stress runs every sanitizer on them): on 132 SMs the decode kernel's split case merges
    several chunks, its 64-row case runs four warps a key group, and the two Hopper cases are not decode-shaped
    (`--kernel auto` takes the wgmma kernels there)."""
    from driver.config import SANITIZER_CASES

    rows = []
    for c in SANITIZER_CASES.values():
        (b, hq, sq, d), (_, hkv, skv, _) = c.q_shape, c.kv_shape
        rows.append((b, hq, hkv, sq, skv, d, int(c.causal), H200_SMS, 1, 0))
    by_name = dict(zip(SANITIZER_CASES, plan(rows), strict=True))
    split = by_name["san_decode_split"]
    assert split["decode_shaped"] and split["nsplit"] > 1 and split["wm"] == 1
    assert by_name["san_decode_rows32"]["wm"] == 2 and by_name["san_decode_rows32"]["nsplit"] > 1  # short chunks
    two = by_name["san_decode_two_tiles_d64"]  # the fp16 tier's two row tiles per warp, chunks merged
    assert (two["rt"], two["wm"], two["wk"], two["nsplit"]) == (2, 1, 8, 2) and two["decode_shaped"]
    (two_fp8,) = plan([(*rows[list(SANITIZER_CASES).index("san_decode_two_tiles_d64")], 1)])  # the fp8 tier: two warps
    assert (two_fp8["rt"], two_fp8["wm"]) == (1, 2)
    wide = by_name["san_decode_rows64_d64"]
    assert wide["decode_shaped"] and wide["wm"] == 4 and wide["mblocks"] == 1 and wide["nsplit"] > 1
    assert not by_name["san_gqa_causal_d128"]["decode_shaped"] and not by_name["san_gqa_d64"]["decode_shaped"]
