"""The Hopper SDPA kernel's configuration choice (sdpa_sm90::select_config), without a GPU.

tests/native/sdpa_sm90_select.cu calls the same select_config the runner calls, compiled with nvcc
for a virtual architecture below sm_90 (empty kernel bodies, nothing launched), and prints the launch
configuration per (B, H, S, D, num_sms, --split, policy, plan).  Head dim 64: two or three consumer
warpgroups is a run-time choice (SDPA_SM90_NCWG3_D64 = the policy: 0 two, 1 three from one full wave
of three-warpgroup blocks, 2 three), with the split rule on top.  Then the tile plan
(SDPA_SM90_TILE_PLAN, tile_plan.cuh): 0 full tiles of BM rows only, 1 full tiles then short ones of
BM - 64 rows as a makespan model chooses, 2 short tiles only; the program checks with the kernel's
own block_tile that the work units cover every row of every head exactly once.  The unsplit FP8 kernels
are persistent (SDPA_SM90_PERSISTENT): min(units, SMs) blocks, each taking units grid apart; every
other configuration has one block per unit.

Since 2026-11-28 the program takes the attention case of kernels_cuda/sdpa_fp8/attn_shape.h (B, Hq, Hkv, Sq, Skv, D,
causal): a case here is either (B, H, S, D), square non-causal MHA as before, or (B, Hq, Hkv, Sq, Skv, D, causal). It
also checks with the kernel's own functions that each unit reads K/V head bh / G and exactly the K/V tiles its rows see
(with the bottom-right causal mask: up to its last row's diagonal), that the persistent blocks' unit sequences take
every unit once, and reports the K/V tiles of all units and of the busiest block.
"""

import json
import subprocess

import pytest

from driver import paths, toolchain
from driver.errors import ToolchainMissing

SRC = paths.ROOT / "tests" / "native" / "sdpa_sm90_select.cu"
pytestmark = pytest.mark.nvcc  # every test compiles tests/native/sdpa_sm90_select.cu
SHAPES = [(3, 5, 777, 64), (8, 8, 1024, 64), (2, 16, 2048, 64), (4, 32, 4096, 64), (1, 8, 512, 64), (1, 1, 1, 64)]


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _compile(tmp_path_factory, name: str, *defines: str, cp_async: bool = True):
    try:
        nvcc = toolchain.find_nvcc().path
    except ToolchainMissing as e:
        pytest.skip(f"no nvcc here ({e}): the select_config check compiles kernel.cuh's host code")
    exe = tmp_path_factory.mktemp("sdpa_sm90_select") / name
    cmd = [nvcc, "-std=c++17", "-gencode", "arch=compute_80,code=compute_80", "-DSDPA_SM90A=1",
           f"-DUSE_CP_ASYNC={int(cp_async)}",
           *(f"-D{d}" for d in defines), str(SRC), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)

    def run(cases, plan: int = 0, bn: int = -1, fp8: bool = True, q2: int = -1, ablate: int = 0):
        """plan: the tile plan policy of every case (0: full tiles, the grids of the rule below); bn: the
        head-dim-128 tile width policy (-1: the build's SDPA_SM90_BN_D128); fp8: the tier (both kernels are
        in every build: --precision at run time); q2: the fp8 tier's Q-terms policy (-1: the build's
        SDPA_SM90_FP8_Q2); ablate: --ablate's mode (0 none, 1 no_compute, 2 no_loads). A case's shape:
        (B, H, S, D) or (B, Hq, Hkv, Sq, Skv, D, causal)."""
        stdin = "".join(f"{' '.join(map(str, _case(shape)))} {sms} {split} {pol} {plan} {bn} {int(fp8)} {q2} {ablate}\n"
                        for shape, sms, split, pol in cases)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=60, check=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    run.exe = exe
    return run


def _case(shape: tuple) -> tuple:
    """(B, Hq, Hkv, Sq, Skv, D, causal) of a case given as (B, H, S, D) (square, non-causal MHA) or in full."""
    if len(shape) == 4:
        b, h, s, d = shape
        return (b, h, h, s, s, d, 0)
    return tuple(int(x) for x in shape)


@pytest.fixture(scope="module")
def fp8(tmp_path_factory):
    """The build whose choices the rules below restate: the default policies but SDPA_SM90_NCWG3_D128's, which is 0 here
    (the head-dim-128 three-warpgroup kernel never); the default build, which takes it where a makespan model says,
    is checked against this one (test_head_dim_128_three_warpgroups_*)."""
    return _compile(tmp_path_factory, "fp8", "SDPA_SM90_NCWG3_D128=0")


@pytest.fixture(scope="module")
def fp8_default(tmp_path_factory):
    return _compile(tmp_path_factory, "fp8_default")


def expected_bn(s: int, d: int, fp8: bool = True, bn_policy: int = 0) -> int:
    """Keys per K/V tile: 128, except at head dim 128 in the FP8 build, where policy 0 (SDPA_SM90_BN_D128's
    default) takes 192 when S padded to 192-key tiles is less than 1.02x S padded to 128-key tiles."""
    if not fp8 or d != 128:
        return 128
    if bn_policy:
        return bn_policy
    return 192 if _cdiv(s, 192) * 192 * 49 < _cdiv(s, 128) * 128 * 50 else 128


def _expected_base(shape, sms: int, split_override: int, policy: int, fp8: bool, bn_policy: int) -> dict:
    b, h, s, d = shape
    bh = b * h
    blocks2, blocks3 = _cdiv(s, 128) * bh, _cdiv(s, 192) * bh
    can3 = fp8 and d == 64 and policy != 0
    split_blocks = blocks3 if can3 and policy == 2 else blocks2
    bn = expected_bn(s, d, fp8, bn_policy)
    split = split_override == 2 or (split_override == 0 and _cdiv(s, bn) >= 2 and 2 * split_blocks <= sms)
    three = not split and can3 and (policy == 2 or blocks3 >= sms)
    bm = 64 if split else 192 if three else 128
    return {"units": _cdiv(s, bm) * bh, "block": 512 if three else 384, "bm": bm, "bn": bn, "split": 2 if split else 1,
            "ncwg": 3 if three else 2}


def _q_terms_of(e: dict, shape, sms: int, q2_policy: int, fp8: bool) -> int:
    """SDPA_SM90_FP8_Q2 restated: two E4M3 terms of Q only in the fp8 tier's two-warpgroup kernels with
    128-key tiles; policy 1 only for a short launch (fewer work units than SMs, at most 8 K/V tiles per
    consumer warpgroup at head dim 64, 4 at 128), policy 2 wherever those kernels run."""
    if not fp8 or e["ncwg"] != 2 or e["bn"] != 128 or q2_policy == 0:
        return 1
    tiles = _cdiv(shape[2], e["bn"])
    per_wg = _cdiv(tiles, 2) if e["split"] == 2 else tiles
    return 2 if q2_policy == 2 or (e["units"] < sms and per_wg * (shape[3] // 64) <= 8) else 1


def expected(shape, sms: int, split_override: int, policy: int, fp8: bool = True, bn_policy: int = 0,
             q2_policy: int = 1, ablate: int = 0, causal: bool = False) -> dict:
    """The rule select_config documents, restated: the warpgroups, the split and the tile width (expected_bn); then,
    at head dim 128 in the fp8 tier under policy 0 and without ablation, the 256-key kernel where the launch so far is
    unsplit with Q in one term, 256-key tiles pad no more keys than the width chosen, the mask (if any) has at least
    8192 keys, and the launch does not split on 256-key tiles (fp8_traits.cuh prefers_bn256)."""
    e = _expected_base(shape, sms, split_override, policy, fp8, bn_policy)
    b, h, s, d = shape
    if (fp8 and d == 128 and bn_policy == 0 and not ablate and e["split"] == 1
            and _q_terms_of(e, shape, sms, q2_policy, fp8) == 1
            and _cdiv(s, 256) * 256 <= _cdiv(s, e["bn"]) * e["bn"] and (not causal or s >= 8192)):
        split256 = split_override == 2 or (split_override == 0 and _cdiv(s, 256) >= 2 and 2 * _cdiv(s, 128) * b * h <= sms)
        if not split256:
            return {"units": _cdiv(s, 128) * b * h, "block": 384, "bm": 128, "bn": 256, "split": 1, "ncwg": 2}
    return e


def _pick(r: dict) -> dict:
    return {k: r[k] for k in ("units", "block", "bm", "bn", "split", "ncwg")}


@pytest.mark.parametrize("sms", [132, 114])
def test_wave_rule_at_the_listed_shapes(fp8, sms):
    """Policy 1 (the wave rule): three warpgroups only from one full wave of 192-row blocks; the mission
    shape splits exactly as with two; (3,5,777,64) (75 three-warpgroup blocks) stays on two (105)."""
    got = {shape: _pick(r) for shape, r in zip(SHAPES, fp8([(shape, sms, 0, 1) for shape in SHAPES]))}
    two = {"block": 384, "bm": 128, "bn": 128, "split": 1, "ncwg": 2}
    three = {"block": 512, "bm": 192, "bn": 128, "split": 1, "ncwg": 3}
    assert got[(3, 5, 777, 64)] == {"units": 105, **two}
    assert got[(8, 8, 1024, 64)] == {"units": 384, **three}
    assert got[(2, 16, 2048, 64)] == {"units": 352, **three}
    assert got[(4, 32, 4096, 64)] == {"units": 2816, **three}
    assert got[(1, 8, 512, 64)] == {"units": 64, "block": 384, "bm": 64, "bn": 128, "split": 2, "ncwg": 2}
    assert got[(1, 1, 1, 64)] == {"units": 1, **two}


def test_forced_policies_are_the_former_builds(fp8):
    """Policy 0 chooses what a build with two warpgroups only did, policy 2 what the build with three
    at every unsplit head-dim-64 shape did."""
    r0 = [_pick(r) for r in fp8([(s, 132, 0, 0) for s in SHAPES])]
    r2 = [_pick(r) for r in fp8([(s, 132, 0, 2) for s in SHAPES])]
    assert [r["ncwg"] for r in r0] == [2] * 6
    assert r0[0]["units"] == 105 and r0[1]["units"] == 512 and r0[4]["split"] == 2
    assert [r["ncwg"] for r in r2] == [3, 3, 3, 3, 2, 3]
    assert r2[0]["units"] == 75 and r2[4] == {"units": 64, "block": 384, "bm": 64, "bn": 128, "split": 2, "ncwg": 2}


def test_every_policy_and_override_follows_the_rule(fp8):
    shapes = SHAPES + [(b, h, s, d) for d in (64, 128) for (b, h) in ((1, 1), (1, 8), (2, 10), (1, 20), (3, 22), (4, 33))
                       for s in (1, 128, 129, 192, 193, 256, 384, 512, 777, 1000, 1536, 2048)]
    cases = [(s, sms, split, pol) for s in shapes for sms in (132, 114, 66) for split in (0, 1, 2) for pol in (0, 1, 2)]
    got = fp8(cases)
    bad = [(c, _pick(r), expected(*c)) for c, r in zip(cases, got) if _pick(r) != expected(*c)]
    assert not bad, bad[:5]
    assert all(r["cover"] for r in got)
    # the two head-dim-64 unsplit kernels are distinct entry points; head dim 128 never has three
    funcs = {(r["ncwg"], r["split"], c[0][3]): r["func"] for c, r in zip(cases, got)}
    assert len({funcs[(2, 1, 64)], funcs[(3, 1, 64)], funcs[(2, 2, 64)]}) == 3
    assert not any(k[0] == 3 and k[2] == 128 for k in funcs)


def test_bad_policy_is_an_error(fp8):
    assert fp8([((1, 1, 1, 64), 132, 0, 3)]) == [{"error": "SDPA_SM90_NCWG3_D64 must be 0, 1 or 2"}]


@pytest.mark.parametrize("policy", [0, 2])
def test_the_define_sets_the_default_policy(tmp_path_factory, policy):
    run = _compile(tmp_path_factory, f"fp8_policy{policy}", f"SDPA_SM90_NCWG3_D64={policy}", "SDPA_SM90_NCWG3_D128=0")
    cases = [(s, 132, 0, -1) for s in SHAPES]
    assert [_pick(r) for r in run(cases)] == [expected(s, 132, 0, policy) for s in SHAPES]


def test_fp16_tier_has_two_warpgroups_only(fp8):
    run = fp8  # the same build: the tier is chosen at run time
    cases = [(s, sms, 0, pol) for s in SHAPES for sms in (132, 114) for pol in (0, 1, 2)]
    got = run(cases, fp8=False)
    assert {r["kernel"] for r in got} == {"wgmma_sm90"}
    assert [_pick(r) for r in got] == [expected(s, sms, 0, pol, fp8=False) for s, sms, _, pol in cases]


def test_fp16_tier_keeps_full_tiles(fp8):
    run = fp8
    cases = [(s, 132, 0, 1) for s in SHAPES]
    for plan in (1, 2):
        got = run(cases, plan, fp8=False)
        assert [r["tiles"][1] for r in got] == [0] * len(SHAPES)
        assert [_pick(r) for r in got] == [expected(s, 132, 0, 1, fp8=False) for s in SHAPES]
        assert all(r["cover"] for r in got)


def test_every_tile_plan_covers_every_row_once(fp8):
    """Plans 1 and 2 at odd and even sizes, SM counts and policies: the blocks cover each row of each
    head once, a three-warpgroup block runs as many warpgroups as its rows need, and short tiles only
    appear in the three-warpgroup kernel."""
    shapes = [(b, h, s, d) for d in (64, 128) for (b, h) in ((1, 1), (1, 8), (2, 10), (3, 22), (4, 33))
              for s in (1, 63, 64, 65, 128, 129, 192, 193, 255, 256, 384, 777, 1000, 2048)]
    cases = [(s, sms, split, pol) for s in shapes for sms in (132, 114, 66) for split in (0, 1) for pol in (1, 2)]
    for plan in (1, 2):
        got = fp8(cases, plan)
        bad = [(c, r) for c, r in zip(cases, got) if not r["cover"] or (r["split"] == 2 and r["tiles"][1])]
        assert not bad, bad[:3]
        # short tiles only in the three-warpgroup kernel; plan 2: nothing else there
        assert all(r["tiles"][1] == 0 for r in got if r["ncwg"] != 3)
        assert all(r["nc"][0] == 0 and r["nc"][2] == 0 for r in got if r["ncwg"] == 2)  # "nc": blocks of 1, 2, 3
        if plan == 2:
            assert all(r["tiles"][0] == 0 for r in got if r["ncwg"] == 3)


def test_tile_plan_at_the_listed_shapes(fp8):
    """Plan 1 on 132 SMs: (2,16,2048,64) takes 8 tiles of 192 rows and 4 of 128 per head (256 blocks
    of three warpgroups, then 128 of two in the last wave) instead of 11 of 192 (352: 2.67 waves);
    (8,8,1024,64) 4 and 2; (4,32,4096,64) moves its 64-row remainder to the end of the grid; head dim
    128 at (2,16,2048,128) and (1,16,8192,128) keeps full tiles; the split mission shape is unchanged."""
    shapes = [(2, 16, 2048, 64), (8, 8, 1024, 64), (4, 32, 4096, 64), (2, 16, 2048, 128), (1, 16, 8192, 128),
              (1, 8, 512, 64)]
    got = fp8([(s, 132, 0, 1) for s in shapes], 1)
    assert [r["tiles"] for r in got] == [[8, 4], [4, 2], [21, 1], [16, 0], [64, 0], [8, 0]]
    assert [r["units"] for r in got] == [384, 384, 2816, 512, 1024, 64]
    assert got[0]["nc"] == [0, 128, 256] and got[2]["nc"] == [128, 0, 2688]
    # persistent: one block per SM; the split mission shape: one block per unit
    assert [(r["grid"], r["persistent"]) for r in got] == [(132, True)] * 5 + [(64, False)]
    default = fp8([(s, 132, 0, 1) for s in shapes], -1)  # the build's default is plan 1
    assert [(r["tiles"], r["grid"]) for r in default] == [(r["tiles"], r["grid"]) for r in got]
    # plan 0: the units of every build before the plan
    assert [r["units"] for r in fp8([(s, 132, 0, 1) for s in shapes], 0)] == [352, 384, 2816, 512, 1024, 64]


def test_bad_tile_plan_is_an_error(fp8):
    assert fp8([((1, 1, 1, 64), 132, 0, 1)], 3) == [{"error": "SDPA_SM90_TILE_PLAN must be 0, 1 or 2"}]


def test_the_build_default_is_the_wave_rule(fp8):
    """Without the define the policy is 1 (three warpgroups only from one full wave of 192-row blocks),
    the policy that won run 2 of experiments/2026-11-23-sdpa-fp8-d64 on 1x H100: (3,5,777,64) takes two
    warpgroups (15.84 us against 18.13 with three), the large shapes take three."""
    cases = [(s, 132, 0, -1) for s in SHAPES]
    got = [_pick(r) for r in fp8(cases)]
    assert got == [expected(s, 132, 0, 1) for s in SHAPES]
    assert got[0]["ncwg"] == 2 and got[2]["ncwg"] == 3


def test_persistent_grid(fp8, tmp_path_factory):
    """Unsplit FP8 kernels are persistent: min(units, SMs) blocks (the native check asserts that the
    grid is this and that the units cover every row once); split kernels, and every kernel of a build
    with SDPA_SM90_PERSISTENT=0, one block per unit."""
    shapes = [(b, h, s, d) for d in (64, 128) for (b, h) in ((1, 1), (2, 10), (4, 33)) for s in (1, 193, 777, 2048)]
    cases = [(s, sms, split, 1) for s in shapes for sms in (132, 66) for split in (0, 1, 2)]
    got = fp8(cases, 1)
    assert all(r["cover"] for r in got)
    assert all(r["persistent"] == (r["split"] == 1) for r in got)
    assert all(r["grid"] == min(r["units"], c[1]) if r["persistent"] else r["grid"] == r["units"]
               for c, r in zip(cases, got))
    assert any(r["grid"] < r["units"] for r in got)
    run = _compile(tmp_path_factory, "fp8_nonpersistent", "SDPA_SM90_PERSISTENT=0", "SDPA_SM90_NCWG3_D128=0")
    off = run(cases, 1)
    assert all(not r["persistent"] and r["grid"] == r["units"] and r["cover"] for r in off)


def test_fp16_tier_is_persistent(fp8, tmp_path_factory):
    """The fp16 tier runs on the fp8 tier's skeleton since 2026-11-26: its unsplit kernels are persistent too
    (min(units, SMs) blocks, units grid apart; full tiles of 128 rows, two consumer warpgroups), its split ones
    one block per unit; a build without persistence (SDPA_SM90_PERSISTENT=0) has one block per unit in both tiers."""
    shapes = [(b, h, s, d) for d in (64, 128) for (b, h) in ((1, 1), (2, 10), (4, 33)) for s in (1, 193, 777, 2048)]
    cases = [(s, sms, split, 1) for s in shapes for sms in (132, 66) for split in (0, 1, 2)]
    got = fp8(cases, 1, fp8=False)
    assert all(r["cover"] and r["ncwg"] == 2 and r["tiles"][1] == 0 for r in got)
    assert all(r["persistent"] == (r["split"] == 1) for r in got)
    assert all(r["grid"] == min(r["units"], c[1]) if r["persistent"] else r["grid"] == r["units"]
               for c, r in zip(cases, got))
    assert any(r["grid"] < r["units"] for r in got)
    nonpersistent = _compile(tmp_path_factory, "fp16_nonpersistent", "SDPA_SM90_PERSISTENT=0", "SDPA_SM90_NCWG3_D128=0")
    old = nonpersistent(cases, 1, fp8=False)
    assert all(not r["persistent"] and r["grid"] == r["units"] and r["cover"] for r in old)
    assert [_pick(r) for r in old] == [_pick(r) for r in got]  # the same configuration, another grid


def test_head_dim_128_tile_width(fp8, tmp_path_factory):
    """Head dim 128 in the FP8 build: every tile width is compiled in. select_config picks 192 keys where S padded
    to 192-key tiles is less than 1.02x S padded to 128-key tiles (a key costs 0.98 as much in the wide tile: run 2
    of experiments/2026-11-23-sdpa-d128-pipes on 1x H100), then 256 where that pads no more keys and the launch is
    unsplit with Q in one term (experiments/2026-11-29-sdpa-fp8-producer24, 1x H200). So (1,16,1,128) keeps 128
    (a short launch: Q in two terms), (1,16,384,128) 192 (256-key tiles would pad 512 keys), (2048 and 8192 keys)
    256. Policies 128 and 192 force a width; head dim 64 keeps 128; the widths are distinct kernels."""
    sizes = [1, 77, 128, 129, 192, 193, 256, 384, 777, 1000, 2048, 4096, 8192, 16384]
    shapes = [(1, 16, s, 128) for s in sizes]
    got = fp8([(s, 132, 0, 1) for s in shapes])
    assert [r["bn"] for r in got] == [expected(sh, 132, 0, 1)["bn"] for sh in shapes]
    by_s = {s: r["bn"] for s, r in zip(sizes, got)}
    assert (by_s[1], by_s[384], by_s[2048], by_s[8192]) == (128, 192, 256, 256)
    assert all(r["cover"] for r in got)
    # the unsplit kernels' shared memory differs (192: two K/V stages of 24 KiB, V^T of two panels; 256: one Q buffer)
    assert len({r["smem"] for r in got if r["split"] == 1}) == 3
    for pol in (128, 192):
        cases = [(s, sms, split, 1) for s in shapes for sms in (132, 66) for split in (0, 1, 2)]
        forced = fp8(cases, 1, pol)
        assert all(r["bn"] == pol and r["cover"] for r in forced)
        assert [_pick(r) for r in forced] == [expected(*c, bn_policy=pol) for c in cases]
    funcs = {(r["bn"], r["split"]): r["func"] for r in fp8([(s, 66, split, 1) for s in shapes for split in (1, 2)])}
    assert len(set(funcs.values())) == len(funcs) == 5  # 128 and 192 split and not, 256 unsplit
    d64 = fp8([((1, 16, s, 64), 132, 0, 1) for s in sizes], 1, 192)
    assert {r["bn"] for r in d64} == {128}
    assert fp8([((1, 1, 1, 128), 132, 0, 1)], 0, 100) == [{"error": "SDPA_SM90_BN_D128 must be 0, 128, 192 or 256"}]
    run = _compile(tmp_path_factory, "fp8_bn192", "SDPA_SM90_BN_D128=192", "SDPA_SM90_NCWG3_D128=0")
    assert {r["bn"] for r in run([(s, 132, 0, 1) for s in shapes])} == {192}


def test_the_mask_takes_256_key_tiles_from_8192_keys(fp8):
    """Policy 0 with the causal mask: the 256-key kernel only from Skv 8192 (at (2,16,2048,128) it was 4.9% slower
    than the 128-key kernel, at (1,16,8192,128) 3.5% faster: experiments/2026-11-29-sdpa-fp8-producer24); without
    the mask at both. The chunked prefill presets (8192 and 32768 cached keys) take it; head dim 64 never."""
    cases = [(2, 16, 16, 2048, 2048, 128, 1), (2, 16, 16, 2048, 2048, 128, 0), (1, 16, 16, 4096, 4096, 128, 1),
             (1, 16, 16, 8192, 8192, 128, 1), (1, 32, 8, 512, 8192, 128, 1), (1, 32, 8, 2048, 32768, 128, 1),
             (1, 16, 16, 8192, 8192, 64, 1)]
    got = fp8([(c, 132, 0, -1) for c in cases])
    assert [r["bn"] for r in got] == [128, 256, 128, 256, 256, 256, 128]
    assert all(r["cover"] and r["q_terms"] == 1 for r in got)
    assert [r["bn"] for r in fp8([(c, 132, 0, -1) for c in cases], fp8=False)] == [128] * len(cases)


def expected_bn256(shape, sms: int, split_override: int, ablate: int = 0) -> dict:
    """SDPA_SM90_BN_D128=256 restated: the 256-key kernel (two consumer warpgroups, 128 rows per unit) at head dim
    128 unless the launch would split on 256-key tiles (forced, or at least two of them and an unsplit grid of at
    most half the SMs) or runs an ablation: those take the rule of policy 0."""
    b, h, s, d = shape
    split256 = split_override == 2 or (split_override == 0 and _cdiv(s, 256) >= 2 and 2 * _cdiv(s, 128) * b * h <= sms)
    if d != 128 or split256 or ablate:
        return expected(shape, sms, split_override, 1, bn_policy=0, ablate=ablate)
    return {"units": _cdiv(s, 128) * b * h, "block": 384, "bm": 128, "bn": 256, "split": 1, "ncwg": 2}


def test_head_dim_128_256_key_tiles(fp8, tmp_path_factory):
    """SDPA_SM90_BN_D128=256 (off by default: policy 0's rule never takes 256): the 256-key kernel at every
    head-dim-128 case it serves, with or without the mask, one Q term, its work units covering every row once; a
    launch that would split on 256-key tiles, or an ablation, takes policy 0's choice; head dim 64 and the fp16 tier
    keep 128; the 256-key kernels (with and without the mask) are entry points of their own."""
    sizes = [1, 17, 77, 128, 129, 256, 257, 333, 1000, 2048, 4096, 8192, 16384]
    shapes = [(b, h, s, 128) for s in sizes for (b, h) in ((1, 16), (2, 32), (7, 3), (1, 4))]
    cases = [(sh, sms, split, 1) for sh in shapes for sms in (132, 66) for split in (0, 1, 2)]
    got = fp8(cases, 1, 256)
    assert [_pick(r) for r in got] == [expected_bn256(*c[:3]) for c in cases]
    assert all(r["cover"] for r in got)
    assert all(r["q_terms"] == 1 for r in got if r["bn"] == 256)
    assert {r["bn"] for r in got} == {128, 192, 256}
    # on 132 SMs: (7,3,333,128) (63 blocks, two 256-key tiles) splits, on policy 0's 192-key tiles; (1,4,17,128) has
    # one tile and does not split
    listed = [(1, 16, 8192, 128), (1, 16, 16384, 128), (2, 32, 4096, 128), (4, 16, 4096, 128), (2, 16, 2048, 128),
              (7, 3, 333, 128), (1, 4, 17, 128)]
    got = fp8([(s, 132, 0, 1) for s in listed], 1, 256)
    assert [(r["bn"], r["split"]) for r in got] == [(256, 1)] * 5 + [(192, 2), (256, 1)]
    # ablations and the fp16 tier: policy 0's choice; head dim 64: 128
    abl = [(sh, 132, 1, 1) for sh in shapes]
    assert [_pick(r) for r in fp8(abl, 1, 256, ablate=2)] == [expected_bn256(*c[:3], ablate=2) for c in abl]
    assert {r["bn"] for r in fp8(cases, 1, 256, fp8=False)} == {128}
    assert {r["bn"] for r in fp8([((1, 16, s, 64), 132, 0, 1) for s in sizes], 1, 256)} == {128}
    # with the mask (and grouped heads): the 256-key kernel of the mask, covering exactly the tiles its rows see
    causal = [(1, 16, 16, 8192, 8192, 128, 1), (2, 16, 16, 2048, 2048, 128, 1), (1, 32, 8, 512, 8192, 128, 1),
              (3, 12, 4, 129, 129, 128, 1), (1, 16, 4, 1000, 3000, 128, 0)]
    cg = fp8([(c, 132, 1, 1) for c in causal], 1, 256)
    assert [r["bn"] for r in cg] == [256] * 5 and all(r["cover"] for r in cg)
    for shape, r in zip(causal, cg):
        b, hq, _, sq, skv, _, c = shape
        rows_last = [min((t + 1) * 128, sq) - 1 for t in range(_cdiv(sq, 128))]
        assert r["tiles_total"] == b * hq * sum(_tiles_of_row(i, sq, skv, bool(c), 256) for i in rows_last), shape
    funcs = {(r["bn"], c[6]): r["func"] for c, r in zip(causal, cg)}
    assert len(set(funcs.values())) == 2
    assert not set(funcs.values()) & {r["func"] for r in fp8(cases, 1, 0) + fp8(cases, 1, 192)}
    # the define sets the default
    run = _compile(tmp_path_factory, "fp8_bn256", "SDPA_SM90_BN_D128=256", "SDPA_SM90_NCWG3_D128=0")
    assert {r["bn"] for r in run([((1, 16, 8192, 128), 132, 0, 1), ((2, 32, 4096, 128), 132, 0, 1)])} == {256}


def expected_q_terms(shape, sms: int, split_override: int, policy: int, q2_policy: int, fp8: bool = True) -> int:
    """The Q terms of the configuration expected() gives (_q_terms_of: SDPA_SM90_FP8_Q2 restated)."""
    e = expected(shape, sms, split_override, policy, fp8, q2_policy=q2_policy)
    return _q_terms_of(e, shape, sms, q2_policy, fp8)


def test_q_terms_follow_the_rule(fp8):
    """Every Q-terms policy, split override and warpgroup policy, both tiers and head dims: the term count
    select_config reports is the rule's, and two terms are their own entry points."""
    shapes = SHAPES + [(b, h, s, d) for d in (64, 128) for (b, h) in ((1, 1), (1, 2), (1, 8), (3, 5), (1, 30))
                       for s in (1, 77, 128, 129, 512, 777, 1000, 1024, 1025, 2048, 4096)]
    for tier in (True, False):
        for q2 in (0, 1, 2):
            cases = [(s, sms, split, pol) for s in shapes for sms in (132, 66) for split in (0, 1, 2) for pol in (0, 1)]
            got = fp8(cases, fp8=tier, q2=q2)
            bad = [(c, r["q_terms"], expected_q_terms(*c, q2, tier)) for c, r in zip(cases, got)
                   if r["q_terms"] != expected_q_terms(*c, q2, tier)]
            assert not bad, (tier, q2, bad[:5])
            assert all(r["cover"] for r in got)
            if tier and q2 == 2:
                one = {(r["split"], c[0][3]): r["func"] for c, r in zip(cases, fp8(cases, fp8=True, q2=0))
                       if r["ncwg"] == 2 and r["bn"] == 128}
                two = {(r["split"], c[0][3]): r["func"] for c, r in zip(cases, got) if r["q_terms"] == 2}
                assert set(two) == set(one) and not set(two.values()) & set(one.values())


def test_q_terms_at_the_listed_shapes(fp8):
    """The default (policy 1) on 132 SMs: two terms at the seeds' small shapes, one at every large default shape
    (several waves, or a wave of blocks with many tiles each)."""
    cases = [((1, 2, 128, 64), 132, 0, -1), ((1, 8, 512, 64), 132, 0, -1), ((3, 5, 777, 64), 132, 0, -1),
             ((1, 8, 1000, 64), 132, 0, -1), ((1, 3, 77, 128), 132, 0, -1), ((2, 16, 2048, 64), 132, 0, -1),
             ((4, 32, 4096, 64), 132, 0, -1), ((8, 8, 1024, 64), 132, 0, -1), ((2, 16, 2048, 128), 132, 0, -1),
             ((1, 16, 8192, 128), 132, 0, -1), ((1, 4, 4096, 64), 132, 0, -1), ((1, 16, 1024, 64), 132, 0, -1),
             ((1, 16, 1024, 128), 132, 0, -1), ((1, 32, 512, 128), 132, 0, -1), ((1, 16, 512, 128), 132, 0, -1)]
    got = [r["q_terms"] for r in fp8(cases)]
    # head dim 64: up to 8 tiles per warpgroup ((1,16,1024,64): 8); head dim 128: up to 4 ((1,16,1024,128): 8,
    # one term; (1,32,512,128): 4, unsplit; (1,16,512,128): 2 per warpgroup, split)
    assert got == [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 2, 1, 2, 2]
    assert [r["q_terms"] for r in fp8(cases, fp8=False)] == [1] * len(cases)


def test_bad_q_terms_policy_is_an_error(fp8):
    assert fp8([((1, 1, 1, 64), 132, 0, 1)], q2=3) == [{"error": "SDPA_SM90_FP8_Q2 must be 0, 1 or 2"}]


def test_sanitizer_shapes_reach_the_two_term_kernels(fp8):
    """The stress sanitizers run the fp8 tier's two-term kernels at both head dims, split and unsplit, on 132 SMs
    (H100 / H200 SXM): small (unsplit) and mission (split) at head dim 64, short_d128 and short_split_d128 at 128."""
    from driver.config import SANITIZED_SHAPES, SDPA_SHAPES
    names = ("small", "mission", "short_d128", "short_split_d128")
    assert set(names) <= set(SANITIZED_SHAPES)
    got = fp8([(SDPA_SHAPES[n], 132, 0, -1) for n in names])
    assert [(r["q_terms"], r["split"], r["bn"]) for r in got] == [(2, 1, 128), (2, 2, 128), (2, 1, 128), (2, 2, 128)]


def test_sanitizer_shapes_reach_the_head_dim_128_unsplit_kernels(fp8):
    """The stress sanitizers run, in the fp8 tier on 132 SMs, the 256-key kernel without the mask (unsplit_d128: one
    tile with a tail) and with it (san_bn256_causal_d128: 33 tiles with a tail), and the 128-key kernel unsplit with Q
    in one term (unsplit128_d128: five tiles with a tail), which unsplit_d128 reached before the 256-key rule."""
    from driver.config import SANITIZED_SHAPES, SDPA_CASES
    names = ("unsplit_d128", "san_bn256_causal_d128", "unsplit128_d128")
    assert set(names) <= set(SANITIZED_SHAPES)
    cases = [(c.q_shape[0], c.q_shape[1], c.kv_shape[1], c.q_shape[2], c.kv_shape[2], c.q_shape[3], int(c.causal))
             for c in (SDPA_CASES[n] for n in names)]
    got = fp8([(c, 132, 0, -1) for c in cases])
    assert [(r["bn"], r["split"], r["q_terms"]) for r in got] == [(256, 1, 1), (256, 1, 1), (128, 1, 1)]
    assert [r["tiles_total"] for r in got] == [132, 2244, 350] and all(r["cover"] for r in got)


def test_the_odd_split_sanitizer_shape_splits_over_an_odd_count_of_tiles(fp8):
    """split_odd_d128 runs the split configuration in both tiers on 132 SMs with five 128-key tiles, so warpgroup 0
    takes the last one and warpgroup 1 merges after it (the case racecheck flagged before the wait in consumer)."""
    from driver.config import SANITIZED_SHAPES, SDPA_SHAPES
    assert "split_odd_d128" in SANITIZED_SHAPES
    case = [(SDPA_SHAPES["split_odd_d128"], 132, 0, -1)]
    for tier in (True, False):
        (r,) = fp8(case, fp8=tier)
        assert (r["split"], r["bn"]) == (2, 128) and -(-SDPA_SHAPES["split_odd_d128"][2] // r["bn"]) % 2 == 1


# ------------------------------------------------------------------ the attention case (attn_shape.h), 2026-11-28

# (B, Hq, Hkv, Sq, Skv, D, causal): grouped-query heads (G = 4), MQA, Sq != Skv, the causal mask, the issue's chunked
# prefill and causal square prefill, decode-like single rows.
CASES = [(1, 32, 8, 512, 8192, 128, 1), (1, 32, 8, 2048, 32768, 128, 1), (4, 32, 32, 4096, 4096, 64, 1),
         (2, 16, 16, 2048, 2048, 128, 1), (1, 16, 16, 8192, 8192, 128, 1), (8, 32, 8, 1, 32768, 128, 0),
         (8, 32, 8, 1, 32768, 128, 1), (2, 8, 1, 300, 1000, 64, 1), (2, 8, 1, 300, 1000, 64, 0),
         (1, 4, 4, 7, 8192, 64, 1), (3, 12, 4, 129, 129, 128, 1), (1, 2, 2, 1000, 300, 128, 0)]


def _tiles_of_row(i: int, sq: int, skv: int, causal: bool, bn: int) -> int:
    """K/V tiles row i needs: every one, or with the bottom-right mask those holding keys j <= i + Skv - Sq."""
    keys = i + 1 + skv - sq if causal else skv
    return _cdiv(keys, bn)


def test_every_case_is_served_and_covered(fp8):
    """Every case of attn_shape.h, both tiers, every split override and warpgroup policy, 132 and 66 SMs: the units
    cover every query row once, read the K/V head bh / G and the tiles up to their last row's diagonal, and the
    persistent blocks take every unit once (the native program's "cover"); with the mask the units come heaviest
    first ("order")."""
    sizes = [(b, hq, hkv, sq, skv, d, c) for d in (64, 128) for (b, hq, hkv) in ((1, 4, 4), (2, 8, 2), (1, 6, 1))
             for sq, skv in ((1, 1), (1, 777), (7, 1000), (128, 128), (129, 300), (300, 1000), (512, 8192), (1000, 300))
             for c in (0, 1) if not (c and sq > skv)]
    for tier in (True, False):
        for plan in (0, 1):
            cases = [(s, sms, split, pol) for s in sizes for sms in (132, 66) for split in (0, 1, 2) for pol in (1, 2)]
            got = fp8(cases, plan, fp8=tier)
            bad = [(c, r) for c, r in zip(cases, got) if "error" in r or not r["cover"] or not r["order"]]
            assert not bad, bad[:3]


def test_causal_units_run_only_the_tiles_their_rows_see(fp8):
    """The K/V tiles of all units: without the mask every unit runs ceil(Skv / BN); with it each row tile runs the
    tiles of its last row (restated here from the mask's definition), so a causal square prefill runs about half.
    The key-chunk configuration (decode-shaped cases, the fp16 tier) reads each K/V head's tiles once, for all G * Sq
    rows of its query heads, mask or not (the last row of its rows sees every key)."""
    for shape in CASES:
        b, hq, hkv, sq, skv, _, causal = shape
        for tier in (True, False):
            (r,) = fp8([(shape, 132, 0, 1)], fp8=tier)
            bm, bn = r["bm"], r["bn"]
            rows_last = [min((t + 1) * bm, sq) - 1 for t in range(_cdiv(sq, bm))]
            want = b * hq * sum(_tiles_of_row(i, sq, skv, bool(causal), bn) for i in rows_last)
            if r["kv_chunks"]:
                want = b * hkv * _cdiv(skv, bn)
            assert r["tiles_total"] == want, (shape, tier, r)
    (sq_nc,) = fp8([((4, 32, 32, 4096, 4096, 64, 0), 132, 0, 1)], fp8=False)
    (sq_c,) = fp8([((4, 32, 32, 4096, 4096, 64, 1), 132, 0, 1)], fp8=False)
    assert sq_c["units"] == sq_nc["units"] and 0.5 < sq_c["tiles_total"] / sq_nc["tiles_total"] < 0.52


def _causal_block_tiles(b: int, hq: int, sq: int, skv: int, bm: int, bn: int, grid: int, snake: bool) -> list[int]:
    """K/V tiles per persistent block, restated: units heaviest first (row tile full - 1 of every head, then full - 2,
    ...), block k taking unit i * grid + k in round i, or with `snake` grid - 1 - k in odd rounds."""
    full, bh = _cdiv(sq, bm), b * hq
    weights = [_tiles_of_row(min((full - 1 - u // bh + 1) * bm, sq) - 1, sq, skv, True, bn) for u in range(full * bh)]
    sums = [0] * grid
    for u, w in enumerate(weights):
        i, k = divmod(u, grid)
        sums[grid - 1 - k if snake and i % 2 else k] += w
    return sums


def test_causal_grids_are_balanced(fp8):
    """Heaviest units first and the snake rounds: the busiest persistent block's K/V tiles are the restated schedule's,
    no more than plain rounds would give it, and within 3.2% of the mean per block at the causal square prefill shapes
    (32 or 33 units of 1..16 tiles per block at (2,16,2048,128): 34 against 33.0) but for the fp8 tier's
    three-warpgroup kernel at (2,16,2048,64) (352 units of 2..16 tiles in 2.67 rounds: 27 against 24.5, 1.10x); at the
    chunked prefill shapes every block runs at most four units (512 units) or one (128 units on 132 SMs)."""
    for shape in [(4, 32, 32, 4096, 4096, 64, 1), (2, 16, 16, 2048, 2048, 128, 1), (1, 16, 16, 8192, 8192, 128, 1),
                  (2, 16, 16, 2048, 2048, 64, 1), (8, 8, 8, 1024, 1024, 64, 1), (1, 32, 8, 2048, 32768, 128, 1),
                  (1, 32, 8, 512, 8192, 128, 1)]:
        b, hq, _, sq, skv, _, _ = shape
        for tier in (True, False):
            (r,) = fp8([(shape, 132, 0, 1)], fp8=tier)
            assert r["persistent"] and r["order"] and r["cover"], (shape, tier, r)
            snake = _causal_block_tiles(b, hq, sq, skv, r["bm"], r["bn"], r["grid"], True)
            plain = _causal_block_tiles(b, hq, sq, skv, r["bm"], r["bn"], r["grid"], False)
            assert r["tiles_max_block"] == max(snake) <= max(plain) and r["tiles_total"] == sum(snake), (shape, tier, r)
            ratio = r["tiles_max_block"] / (r["tiles_total"] / r["grid"])
            if shape[3] != skv:  # chunked prefill
                assert r["tiles_max_block"] <= (4 if r["units"] > r["grid"] else 1) * _cdiv(skv, r["bn"])
            elif r["ncwg"] == 3 and sq == 2048:
                assert 1.10 < ratio < 1.11
            else:
                assert ratio <= 1.032, (shape, tier, ratio)


def test_square_non_causal_cases_are_unchanged(fp8):
    """The square, non-causal MHA case given in full is the case given as (B, H, S, D): the same configuration."""
    shapes = SHAPES + [(2, 16, 2048, 128), (1, 16, 8192, 128), (1, 3, 77, 128)]
    full = [(_case(s), 132, 0, -1) for s in shapes]
    short = [(s, 132, 0, -1) for s in shapes]
    for tier in (True, False):
        assert [_pick(r) | {"grid": r["grid"], "q_terms": r["q_terms"], "tiles": r["tiles"]} for r in fp8(full, -1, fp8=tier)] == \
               [_pick(r) | {"grid": r["grid"], "q_terms": r["q_terms"], "tiles": r["tiles"]} for r in fp8(short, -1, fp8=tier)]


def test_causal_three_warpgroup_kernel_keeps_full_tiles(fp8):
    """The tile plan's short tiles are for units of one weight; with the mask the three-warpgroup kernel keeps full
    tiles under every plan policy (and the native check asserts nshort = 0 for every causal case)."""
    for plan in (1, 2):
        (r,) = fp8([((2, 16, 16, 2048, 2048, 64, 1), 132, 0, 1)], plan)
        assert r["ncwg"] == 3 and r["tiles"] == [11, 0] and r["cover"]


# The fp8 tier's causal square cases at head dim 64 timed with both kernels on 1x H200, cold p50 of two consumer
# warpgroups over three (experiments/2026-11-29-sdpa-fp8-causal-d64-warpgroups calls 2-3, the mean of 2 rounds;
# (8,8,1024) is (1,64,1024)'s grid): (B, H, S): two / three.
CAUSAL_D64_MEASURED = {(1, 64, 512): 0.832, (1, 64, 768): 1.042, (1, 64, 1024): 0.933, (1, 32, 1024): 0.883,
                       (1, 32, 1280): 1.050, (1, 32, 1536): 1.108, (1, 32, 2048): 1.040, (1, 16, 3072): 1.185,
                       (8, 8, 1024): 0.939, (2, 16, 2048): 1.041, (4, 32, 4096): 1.125}


def test_causal_head_dim_64_takes_the_kernel_measured_faster(fp8):
    """With the mask, policy 1 compares the two kernels' makespan model (tile_plan.cuh causal_makespan) and takes the
    kernel measured faster at every case timed; without the mask, in the fp16 tier and under policies 0 and 2 the
    choice is as before."""
    shapes = list(CAUSAL_D64_MEASURED)
    got = fp8([((b, h, h, s, s, 64, 1), 132, 0, 1) for b, h, s in shapes])
    for (b, h, s), r in zip(shapes, got):
        assert r["ncwg"] == (2 if CAUSAL_D64_MEASURED[(b, h, s)] < 1 else 3) and r["cover"] and r["causal_kernel"], (b, h, s, r)
    for (b, h, s), r in zip(shapes, fp8([((b, h, s, 64), 132, 0, 1) for b, h, s in shapes])):
        assert _pick(r) == _expected_base((b, h, s, 64), 132, 0, 1, True, 0), (b, h, s)
    for pol, n in ((0, 2), (2, 3)):
        assert {r["ncwg"] for r in fp8([((b, h, h, s, s, 64, 1), 132, 0, pol) for b, h, s in shapes])} == {n}
    assert {r["ncwg"] for r in fp8([((b, h, h, s, s, 64, 1), 132, 0, 1) for b, h, s in shapes], fp8=False)} == {2}
    # more than kMaxPlanWaves waves of three-warpgroup blocks: three, unmodelled
    (r,) = fp8([((16, 64, 64, 8192, 8192, 64, 1), 132, 0, 1)])
    assert r["ncwg"] == 3


def test_bad_cases_are_errors(fp8):
    """select_config refuses what serves() refuses: Sq > Skv with the mask, Hq not a multiple of Hkv."""
    assert "error" in fp8([((1, 4, 4, 300, 100, 64, 1), 132, 0, 1)])[0]
    assert "error" in fp8([((1, 6, 4, 100, 100, 64, 0), 132, 0, 1)])[0]


# ------------------------------------------------------------------ the kernel of the mask and the one without


def test_the_mask_picks_the_kernel(fp8):
    """Every configuration has two kernels (sdpa_sm90::CaseTraits): the causal mask's (per-unit tile counts, running
    tile count, heaviest-first snake order, per-row masks, 8 more bytes of shared memory) and the one without, which
    since 2026-11-28 is the kernel of 90347d1 but for the K/V head (bh / G) and Skv apart from Sq. select_config
    takes the first exactly for causal cases, the second for every other case (square or not, MHA, GQA or MQA),
    both tiers, every split override, warpgroup policy and Q-terms policy."""
    sizes = [(b, hq, hkv, sq, skv, d) for d in (64, 128) for (b, hq, hkv) in ((1, 8, 8), (2, 8, 2), (1, 6, 1))
             for sq, skv in ((1, 1), (7, 1000), (128, 128), (300, 1000), (777, 777), (2048, 2048), (512, 8192))]
    for tier in (True, False):
        for q2 in (0, 2):
            cases = [((*s[:5], s[5], c), sms, split, pol) for s in sizes for c in (0, 1) for sms in (132, 66)
                     for split in (0, 1, 2) for pol in (1, 2)]
            got = fp8(cases, fp8=tier, q2=q2)
            assert all("error" not in r and r["cover"] for r in got)
            assert [r["causal_kernel"] for r in got] == [bool(c[0][6]) for c in cases]
            # one entry point per (configuration, mask): the same configuration with and without it differs in
            # function and in 8 bytes of shared memory, and the non-causal entry is one for every non-causal case
            # (the key-chunk configuration's pair, decode-shaped cases: the packed rows' mask adds no shared memory)
            by_cfg: dict = {}
            for c, r in zip(cases, got):
                cfg = (c[0][5], r["bm"], r["bn"], r["split"], r["ncwg"], r["q_terms"], r["kv_chunks"] > 0)
                by_cfg.setdefault(cfg, {}).setdefault(r["causal_kernel"], set()).add((r["func"], r["smem"]))
            for cfg, kinds in by_cfg.items():
                assert all(len(v) == 1 for v in kinds.values()), (cfg, kinds)
                if len(kinds) == 2:
                    (f0, m0), (f1, m1) = next(iter(kinds[False])), next(iter(kinds[True]))
                    assert f0 != f1 and m1 == m0 + (0 if cfg[-1] else 8), (cfg, kinds)
            assert sum(len(k) == 2 for k in by_cfg.values()) >= 2


def test_square_non_causal_runs_the_kernel_without_the_mask(fp8):
    """The seven default shapes (square, non-causal MHA) take the kernel without the mask in both tiers: the same
    entry point as a GQA or Sq != Skv case of that configuration, not the causal one of the same shape."""
    shapes = [(4, 32, 4096, 64), (2, 16, 2048, 128), (1, 16, 8192, 128), (2, 16, 2048, 64), (8, 8, 1024, 64),
              (1, 8, 512, 64), (3, 5, 777, 64)]
    for tier in (True, False):
        square = fp8([(s, 132, 0, -1) for s in shapes], -1, fp8=tier)
        causal = fp8([((b, h, h, s, s, d, 1), 132, 0, -1) for b, h, s, d in shapes], -1, fp8=tier)
        assert [r["causal_kernel"] for r in square] == [False] * 7
        assert [r["causal_kernel"] for r in causal] == [True] * 7
        assert all(a["func"] != b["func"] for a, b in zip(square, causal))


def test_ablations_refuse_the_mask(fp8):
    """The ablations (diagnostics) are built without the mask only: select_config refuses --ablate with --causal
    (the runner exits 2 with this line) and serves it for every case without the mask, GQA and Sq != Skv too."""
    for mode in (1, 2):
        for tier in (True, False):
            (bad,) = fp8([((1, 8, 2, 300, 1000, 64, 1), 132, 0, 1)], fp8=tier, ablate=mode)
            assert bad == {"error": "--ablate runs the kernels without the causal mask only (a diagnostic, not built "
                                    "with it): drop --causal or --ablate"}
            ok = fp8([((1, 8, 2, 300, 1000, d, 0), 132, split, 1) for d in (64, 128) for split in (0, 1, 2)],
                     fp8=tier, ablate=mode)
            assert all(r.get("ablate") == mode and not r["causal_kernel"] and r["cover"] for r in ok), ok


def test_fast_division_is_exact(fp8):
    """sdpa_sm90::fast_div (the K/V head bh / G and the causal order's b / (B Hq) by a multiply-high, an add and a
    shift) equals integer division for every divisor up to 5000 and near powers of two up to 2^30, at small
    numerators and around multiples of the divisor near every power of two up to 2^31 - 1."""
    out = subprocess.run([str(fp8.exe), "--fast-div"], capture_output=True, text=True, timeout=60, check=True).stdout
    r = json.loads(out)
    assert r["fast_div_checked"] > 20_000_000 and r["fast_div_wrong"] == 0, r


# ------------------------------------------------------------------ the key-chunk configuration, 2026-11-29

def expected_kv(shape, sms: int) -> tuple[int, int]:
    """(chunks, tiles per chunk) of kernel.cuh kv_plan, restated: 128-key tiles; at least 2 per consumer warpgroup
    (4 per chunk) and at most D / 4 chunks (the merge's weights in the Q buffer); base = B * Hkv blocks short of the
    SMs: floor(SMs / base) chunks, else 1..4 by the fullest last wave (the fewest on a tie); no empty chunk."""
    b, _, hkv, _, skv, d, _ = shape
    tiles, base = _cdiv(skv, 128), b * hkv
    cap = max(1, min(tiles // 4, d // 4))

    def fill(blocks: int) -> float:
        return blocks / (_cdiv(blocks, sms) * sms)
    if base < sms:
        n = sms // base
    else:
        n = 1
        for k in range(2, min(4, cap) + 1):
            if fill(base * k) > fill(base * n) + 1e-9:
                n = k
    n = min(n, cap)
    ct = _cdiv(tiles, n)
    return _cdiv(tiles, ct), ct


def test_decode_shaped_cases_take_key_chunks_in_both_tiers(fp8):
    """G * Sq <= 64 query rows per K/V head, not square MHA: each tier's split configuration on the packed case (one
    block of 64 rows per K/V head, BM 64, 128-key tiles) with the keys cut into kv_plan's chunks; the grid is one block
    per (K/V head, chunk), every row and tile covered once (the native program's "cover"). A --split override, an
    ablation, square MHA and more than 64 rows keep the per-head units. (The fp8 tier since its split configuration has
    an even count of K stages at head dim 128: fp8_traits.cuh NS and its static_assert.)"""
    shapes = [(b, hq, hkv, sq, skv, d, c) for d in (64, 128) for (b, hq, hkv) in ((1, 4, 4), (8, 32, 8), (8, 32, 1),
                                                                                  (64, 32, 8), (2, 8, 2))
              for sq in (1, 4, 16) for skv in (1, 100, 777, 4096, 32768) for c in (0, 1)
              if (hq // hkv) * sq <= 64 and not (c and sq > skv) and not (hq == hkv and sq == skv and not c)]
    for tier in (False, True):
        for sms in (132, 66):
            got = fp8([(s, sms, 0, 1) for s in shapes], fp8=tier)
            for s, r in zip(shapes, got):
                chunks, _ = expected_kv(s, sms)
                assert r["cover"] and r["kv_chunks"] == chunks, (tier, s, sms, r)
                assert r["grid"] == s[0] * s[2] * chunks and r["bm"] == 64 and r["bn"] == 128 and r["split"] == 2, (s, r)
                assert r["causal_kernel"] == bool(s[6]) and not r["persistent"], (s, r)
            for split in (1, 2):
                assert all(r["kv_chunks"] == 0 for r in fp8([(s, sms, split, 1) for s in shapes], fp8=tier))
        assert all(r["kv_chunks"] == 0 for r in fp8([(s, 132, 0, 1) for s in shapes if not s[6]], fp8=tier, ablate=1))
        others = [(2, 16, 16, 2048, 2048, 128, 0), (1, 32, 8, 17, 4096, 128, 0), (1, 4, 1, 17, 4096, 64, 1),
                  (1, 8, 8, 1, 1, 64, 0)]
        assert all(r["kv_chunks"] == 0 and r["cover"] for r in fp8([(s, 132, 0, 1) for s in others], fp8=tier))


def test_key_chunks_at_the_issue_cases(fp8):
    """On 132 SMs: Sq 16 at B 8, Hq 32, Hkv 8, Skv 32K runs 64 blocks of 64 rows in 2 chunks of 128 tiles (one wave of
    128 blocks); MQA at B 8 runs 16 chunks of 16 tiles; B 64 at 4K keys one chunk (512 blocks); B 1 at 32K 16 chunks
    (the merge's limit at head dim 128 is 32; the minimum chunk of 4 tiles allows 64)."""
    want = {(8, 32, 8, 16, 32768, 128, 1): (2, 128), (8, 32, 1, 1, 32768, 128, 0): (16, 128),
            (64, 32, 8, 16, 4096, 128, 1): (1, 512), (1, 32, 8, 16, 32768, 128, 1): (16, 128)}
    got = fp8([(s, 132, 0, 1) for s in want], fp8=False)
    for (s, (chunks, grid)), r in zip(want.items(), got):
        assert (r["kv_chunks"], r["grid"]) == (chunks, grid), (s, r)
        assert r["tiles_max_block"] == _cdiv(_cdiv(s[4], 128), chunks), (s, r)


def test_auto_takes_key_chunks_from_33_rows_fp16_and_17_rows_fp8(fp8):
    """The runner's --kernel auto (kernel.cuh kv_auto_preferred): the key-chunk configuration over the decode kernel
    for decode-shaped cases of 33..64 query rows per K/V head in the fp16 tier, 17..64 in the fp8 tier. 1x H200
    (experiments/2026-11-29-sdpa-decode-wgmma, call 11, cold): fp16 at 64 rows 1.11-1.68x the decode kernel's speed,
    at 32 rows and fewer 0.73-0.94x (the producer's decode of K bounds the key chunks); fp8 (no decode) at 64 rows
    1.30-2.58x, at 32 rows 1.01-1.37x (0.87x at B 1 MQA), at 4-16 rows 0.92-1.02x."""
    cases = [((8, 32, 8, sq, 32768, 128, 0), sq * 4) for sq in (1, 4, 5, 8, 9, 12, 16)] + \
            [((8, 32, 1, 1, 32768, 128, 0), 32), ((8, 64, 8, 5, 4096, 64, 1), 40), ((2, 8, 8, 64, 8192, 128, 1), 64),
             ((2, 8, 8, 65, 8192, 128, 1), 65), ((8, 16, 1, 1, 4096, 64, 0), 16), ((8, 17, 1, 1, 4096, 64, 0), 17)]
    for tier, lo in ((False, 33), (True, 17)):
        got = fp8([(s, 132, 0, 1) for s, _ in cases], fp8=tier)
        assert [r["kv_auto"] for r in got] == [lo <= rows <= 64 for _, rows in cases], tier


def test_sanitizer_cases_reach_the_key_chunk_kernels(fp8):
    """config.SANITIZER_CASES: san_decode_rows64_d64 (the mask, head dim 64) and san_kv_chunks_d128 (no mask, a tail)
    reach both tiers' key-chunk kernels under --kernel auto on 132 SMs, with more than one chunk (the merge); the
    32-row MQA case san_decode_rows32 reaches the fp8 tier's and stays with the fp16 tier's decode kernel."""
    from driver.config import SANITIZER_CASES

    want = {"san_decode_rows64_d64": (True, 2, (True, True)), "san_kv_chunks_d128": (False, 3, (True, True)),
            "san_decode_rows32": (False, 4, (False, True))}
    for name, (causal, chunks, auto) in want.items():
        c = SANITIZER_CASES[name]
        (b, hq, sq, d), (_, hkv, skv, _) = c.q_shape, c.kv_shape
        for tier in (False, True):
            (r,) = fp8([((b, hq, hkv, sq, skv, d, int(c.causal)), 132, 0, 1)], fp8=tier)
            assert r["kv_auto"] == auto[tier], (name, tier, r)
            assert r["kv_chunks"] == chunks and r["causal_kernel"] == causal and r["cover"], (name, tier, r)


# ------------------------------------------------------------------ head dim 128, three consumer warpgroups
# (SDPA_SM90_NCWG3_D128, config.cuh; tile_plan.cuh prefers_ncwg3_d128): measured on 1x H200, cold p50, the 256-key
# kernel's time over the three-warpgroup kernel's (experiments/2026-11-29-sdpa-fp8-d128-three-warpgroups call 1).
NCWG3_D128_MEASURED = {(1, 16, 16384, 0): 1.032, (2, 32, 4096, 0): 1.028, (4, 16, 4096, 0): 1.029,
                       (1, 16, 8192, 1): 1.029, (1, 16, 8192, 0): 0.980, (2, 16, 2048, 0): 0.992, (1, 32, 1024, 0): 0.916}
_NCWG3_D128 = {"block": 512, "bm": 192, "bn": 128, "split": 1, "ncwg": 3, "q_terms": 1}


def _d128_sweep() -> list:
    shapes = [(b, h, s, 128) for (b, h) in ((1, 1), (1, 8), (2, 10), (1, 16), (1, 33), (3, 22), (4, 32))
              for s in (256, 512, 768, 1000, 1024, 2048, 4096, 8192)]
    shapes += [(1, 32, 8, 640, 768, 128, 0), (2, 16, 4, 1536, 2048, 128, 0), (1, 16, 16, 16384, 16384, 128, 1),
               (1, 32, 8, 4096, 8192, 128, 1), (2, 16, 16, 8192, 8192, 128, 1), (1, 16, 16, 1000, 8192, 128, 1)]
    return [(shape, sms, split, -1) for shape in shapes for sms in (132, 114, 66) for split in (0, 1, 2)]


def test_head_dim_128_three_warpgroups_replace_only_the_256_key_kernel(fp8, fp8_default, tmp_path_factory):
    """Policy 1 (the default) and 2 change the fp8 tier's choice only where policy 0 takes the 256-key kernel, and
    there to the three-warpgroup kernel (192 rows, 128-key tiles, Q in one term), whose units cover every row once and
    read the tiles their rows see; policy 2 everywhere there, policy 1 at some shapes and not others; the fp16 tier
    and the baseline (no cp.async: its producer needs 64 registers, at which the consumers spill) never."""
    cases = _d128_sweep()

    def strip(rs):  # (the kernel's address differs between the programs)
        return [{k: v for k, v in r.items() if k != "func"} for r in rs]
    before, after = strip(fp8(cases)), strip(fp8_default(cases))
    always = strip(_compile(tmp_path_factory, "fp8_ncwg3_d128_2", "SDPA_SM90_NCWG3_D128=2")(cases))
    took = 0
    for c, b, a, w in zip(cases, before, after, always):
        if b.get("bn") != 256:
            assert a == b and w == b, c
            continue
        assert {k: w[k] for k in _NCWG3_D128} == _NCWG3_D128 and w["cover"] and w["causal_kernel"] == b["causal_kernel"], c
        if a["ncwg"] == 3:
            took += 1
            assert {k: a[k] for k in _NCWG3_D128} == _NCWG3_D128 and a["cover"], c
        else:
            assert a == b, c
    assert 0 < took < sum(r.get("bn") == 256 for r in before)
    assert {r["ncwg"] for r in fp8_default(cases, fp8=False) if "error" not in r} == {2}
    base = _compile(tmp_path_factory, "fp8_baseline", cp_async=False)
    assert all(r.get("ncwg") != 3 or r["bm"] != 192 or r["bn"] != 128 for r in base(cases))


def test_head_dim_128_three_warpgroups_where_measured_faster(fp8_default):
    """At every case timed, the default build runs the kernel that was faster there."""
    cases = list(NCWG3_D128_MEASURED)
    got = fp8_default([((b, h, h, s, s, 128, c), 132, 0, -1) for b, h, s, c in cases])
    for case, r in zip(cases, got):
        assert (r["ncwg"] == 3) == (NCWG3_D128_MEASURED[case] > 1), (case, r)
        assert r["bn"] == (128 if r["ncwg"] == 3 else 256) and r["cover"], (case, r)


def test_sanitizer_case_reaches_the_head_dim_128_three_warpgroup_kernel(fp8_default):
    """san_ncwg3_d128 (stress): the three-warpgroup kernel on 132 SMs (grouped heads, Sq 640 against Skv 768), its
    units of three warpgroups and each head's last of one (64 rows)."""
    from driver.config import SANITIZED_SHAPES, SDPA_CASES
    assert "san_ncwg3_d128" in SANITIZED_SHAPES
    c = SDPA_CASES["san_ncwg3_d128"]
    (r,) = fp8_default([((c.q_shape[0], c.q_shape[1], c.kv_shape[1], c.q_shape[2], c.kv_shape[2], c.q_shape[3],
                          int(c.causal)), 132, 0, -1)])
    assert {k: r[k] for k in _NCWG3_D128} == _NCWG3_D128 and r["cover"]
    assert r["nc"] == [32, 0, 96]
