"""SDPA on the GPU: both variants in both precision tiers against the float64 reference, every shape and seed
on normal inputs, every input distribution on the smaller shapes; the runners' precision contract (the line
names the tier and the kernel, a tier the GPU lacks is exit 5, bad input exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from driver import device, thresholds
from driver.config import PRECISIONS, SDPA_SHAPES
from driver.errors import ConfigError, TierNotOffered
from driver.gates import sdpa_correctness
from driver.launch import launch
from driver.records import SdpaLine
from driver.reference.sdpa import DISTRIBUTIONS
from driver.suites import sdpa
from tests.gpu.conftest import hopper_only, serve_lines

GATES = thresholds.load().sdpa

# Shapes beyond the named ones: both head dims, tails in S (not a multiple of the 128-key tile or the
# 64/128-row block), a single key, grids small enough for the split configuration and large enough not.
EXTRA_SHAPES = [(1, 1, 1, 64), (1, 1, 1, 128), (1, 2, 129, 64), (1, 3, 77, 128), (2, 2, 1000, 128),
                (3, 5, 777, 64), (1, 4, 300, 128)]
# Every input distribution is checked on these (seed 0): both head dims, split and unsplit, tails in S.
DISTRIBUTION_SHAPES = ("small", "mission", "tail", "odd", "unsplit3_d64", "unsplit_d128")


def kernel_for(precision: str, exe_dir) -> str:
    """The kernel the runner picks for a tier here (--kernel auto); the test skips where the tier does not run."""
    kernel = sdpa.expected_kernel(precision, device.arch_of(0), exe_dir.name)
    if kernel is None:
        pytest.skip(sdpa.fp8_not_offered(device.arch_of(0), exe_dir.name))
    return kernel


_POOL: list = []  # the session's worker pool (tests/gpu/conftest.py `workers`), set by the autouse fixture
_CASES: dict = {}  # (shape, seed, distribution) -> (input files, float64 reference): each made once a session


@pytest.fixture(autouse=True)
def _pool(workers):
    _POOL[:] = [workers]


@pytest.fixture(scope="session")
def cases(tmp_path_factory):
    def get(shape, seed, distribution="normal"):
        key = (tuple(shape), seed, distribution)
        if key not in _CASES:
            folder = tmp_path_factory.mktemp("sdpa-case")
            _CASES[key] = sdpa.prepare_case(folder, shape, seed, distribution)
        return _CASES[key]
    return get


def run_case(exe_dir, tmp_path, cases, impl, shape, seed, *extra, precision="fp16", distribution="normal"):
    files, expected = cases(shape, seed, distribution)
    out = tmp_path / f"out_{impl}.npy"
    cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out), "--iters", "3", "--warmup", "1",
           "--precision", precision, *extra]
    (line,) = serve_lines(_POOL[0], cmd, SdpaLine, what=f"{impl} {precision}", timeout_s=120)
    got = np.load(out)
    assert line.impl == impl and line.shape == list(shape) and line.precision == precision
    assert got.shape == shape and got.dtype == np.float16
    m = sdpa.tier_errors(got, expected, GATES, precision, distribution, impl)
    verdict = sdpa_correctness(m, GATES, precision, distribution)
    assert verdict.passed, (verdict.reasons, m, line.kernel)
    return line, got


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape_name", list(SDPA_SHAPES))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_variant_matches_reference(exe_dir, tmp_path, cases, impl, shape_name, seed, precision):
    kernel = kernel_for(precision, exe_dir)
    line, _ = run_case(exe_dir, tmp_path, cases, impl, SDPA_SHAPES[shape_name], seed, precision=precision)
    assert line.kernel == kernel


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize("shape_name", DISTRIBUTION_SHAPES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_distribution_within_the_tier_bounds(exe_dir, tmp_path, cases, precision, shape_name, distribution):
    """Both variants on every input distribution, within the tier's bounds for it (thresholds.toml
    [[sdpa.bounds]]), and bit-identical to each other (same decode, same math)."""
    kernel = kernel_for(precision, exe_dir)
    shape = SDPA_SHAPES[shape_name]
    base_line, base = run_case(exe_dir, tmp_path, cases, "baseline", shape, 0, precision=precision,
                               distribution=distribution)
    async_line, asyn = run_case(exe_dir, tmp_path, cases, "cpasync", shape, 0, precision=precision,
                                distribution=distribution)
    assert base_line.kernel == async_line.kernel == kernel
    assert np.array_equal(base.view(np.uint16), asyn.view(np.uint16))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shape", EXTRA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_both_variants_match_reference_and_each_other(exe_dir, tmp_path, cases, shape, seed, precision):
    """The kernel this GPU's arch selects for the tier, both variants, correct and bit-identical (same decode,
    same math)."""
    kernel = kernel_for(precision, exe_dir)
    base_line, base = run_case(exe_dir, tmp_path, cases, "baseline", shape, seed, precision=precision)
    async_line, asyn = run_case(exe_dir, tmp_path, cases, "cpasync", shape, seed, precision=precision)
    assert base_line.kernel == async_line.kernel == kernel
    assert np.array_equal(base.view(np.uint16), asyn.view(np.uint16))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("split", ["1", "2"])
@pytest.mark.parametrize("shape", [(1, 8, 512, 64), (1, 2, 1000, 128), (2, 3, 257, 64), (1, 2, 384, 128)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_hopper_split_and_unsplit_configs(exe_dir, tmp_path, cases, impl, shape, split, precision):
    """The Hopper kernel of each tier: its two block configurations forced on shapes where the grid rule would
    pick the other one, with odd and even tile counts per consumer warpgroup."""
    kernel = hopper_only(precision, exe_dir)
    line, _ = run_case(exe_dir, tmp_path, cases, impl, shape, 0, "--kernel", kernel, "--split", split,
                       precision=precision)
    assert line.kernel == kernel and line.split == int(split)


@pytest.mark.parametrize("shape", [(1, 132, 250, 64), (2, 60, 1900, 64)], ids=lambda s: "x".join(map(str, s)))
def test_three_warpgroup_tile_plan_at_odd_sizes(exe_dir, tmp_path, cases, shape):
    """Grids the tile plan fills with short 128-row tiles after the 192-row ones (tile_plan.cuh), each with a
    partial last tile, run by persistent blocks (min(units, SMs), each taking units grid apart): at
    (1,132,250,64) 1 + 1 per head, the short one 58 rows (one warpgroup runs, two take and hand back the tiles),
    each block a full unit then a short one; at (2,60,1900,64) 8 + 3, the last 108 rows (two). Both variants
    correct and bit-identical. The FP8 kernel's plan (the fp8 tier)."""
    kernel = hopper_only("fp8", exe_dir)
    torch = pytest.importorskip("torch", reason="the SM count (the persistent grid) comes from torch")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lines, outs = [], []
    for impl in sdpa.VARIANTS:
        line, got = run_case(exe_dir, tmp_path, cases, impl, shape, 0, "--kernel", kernel, "--split", "0",
                             precision="fp8")
        lines.append(line)
        outs.append(got)
    for line in lines:
        assert line.block == [512, 1, 1] and line.tiles is not None, line
        assert line.grid[0] == min((line.tiles[0] + line.tiles[1]) * shape[0] * shape[1], sms)
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
    if lines[0].tiles[1] == 0:  # the plan depends on the SM count (132 on H100 SXM and H200)
        pytest.skip(f"this GPU's SM count gives no short tiles at {shape} (tiles {lines[0].tiles}); checked as full tiles")


@pytest.mark.parametrize("shape,bn", [((1, 4, 300, 128), 192), ((2, 2, 1000, 128), 128), ((1, 44, 380, 128), 192),
                                      ((1, 24, 2000, 128), 128), ((1, 2, 8000, 128), 192)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else f"bn{s}")
def test_head_dim_128_tile_width_by_s(exe_dir, tmp_path, cases, shape, bn):
    """Head dim 128: the keys per K/V tile select_config picks by S (192 where S padded to 192-key tiles is
    less than 1.02x S padded to 128, else 128; tests/test_sdpa_sm90_select.py restates the rule), each
    with a tail, split and unsplit, one and several units per persistent block: the line names the width,
    both variants correct and bit-identical. The FP8 kernel's rule (the fp8 tier)."""
    kernel = hopper_only("fp8", exe_dir)
    lines, outs = [], []
    for impl in sdpa.VARIANTS:
        # --split 0: the grid rule, and the line's extra keys ("bn")
        line, got = run_case(exe_dir, tmp_path, cases, impl, shape, 1, "--kernel", kernel, "--split", "0",
                             precision="fp8")
        lines.append(line)
        outs.append(got)
    assert [line.bn for line in lines] == [bn, bn], lines
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


@pytest.mark.parametrize("shape", [(1, 8, 512, 64), (1, 3, 77, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_mma_sync_kernel_still_runs_when_forced(exe_dir, tmp_path, cases, impl, shape):
    """The sm_80/sm_89 kernel (the fp16 tier) is in every build; --kernel mma_sync_sm80 runs it on any GPU."""
    line, _ = run_case(exe_dir, tmp_path, cases, impl, shape, 0, "--kernel", "mma_sync_sm80", precision="fp16")
    assert line.kernel == "mma_sync_sm80"


def test_fp8_where_there_is_no_fp8_warpgroup_mma_exits_5(exe_dir, tmp_path):
    """The runner contract's backstop: asked for the fp8 tier on a GPU or build without FP8 warpgroup MMA, the
    runner refuses with exit 5 and a line saying why (the driver decides this before it launches: the tier is
    a skip there, tests/test_sdpa_tiers.py)."""
    if sdpa.fp8_not_offered(device.arch_of(0), exe_dir.name) is None:
        pytest.skip(f"this GPU ({device.arch_of(0)}) and build ({exe_dir.name}) have FP8 warpgroup MMA")
    files = sdpa.write_inputs(tmp_path, (1, 2, 128, 64), 0)
    cmd = [str(exe_dir / "sdpa_fp8_cpasync"), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy"),
           "--precision", "fp8"]
    with pytest.raises(TierNotOffered):
        launch(cmd, what="fp8 without FP8 warpgroup MMA", timeout_s=60)


def test_bad_inputs_give_one_error_and_exit_2(exe_dir, tmp_path):
    files = sdpa.write_inputs(tmp_path, (1, 2, 128, 64), 0)
    exe = str(exe_dir / "sdpa_fp8_cpasync")
    base = sdpa.file_args(files) + ["--out", str(tmp_path / "o.npy")]
    np.save(tmp_path / "k_bad.npy", np.zeros((1, 2, 64, 64), np.uint8))
    np.save(tmp_path / "q96.npy", np.zeros((1, 2, 128, 96), np.float16))
    np.save(tmp_path / "q_f32.npy", np.zeros((1, 2, 128, 64), np.float32))
    np.save(tmp_path / "q_s0.npy", np.zeros((1, 2, 0, 64), np.float16))
    q_nan, q_inf = np.load(files["q"]), np.load(files["q"])
    q_nan.flat[5], q_inf.flat[7] = np.nan, np.inf
    np.save(tmp_path / "q_nan.npy", q_nan)
    np.save(tmp_path / "q_inf.npy", q_inf)
    for name, scales in (("zero", [0.0, 1.0]), ("negative", [1.0, -1.0]), ("nan", [np.nan, 1.0]),
                         ("inf", [1.0, np.inf])):
        np.save(tmp_path / f"scales_{name}.npy", np.array(scales, dtype=np.float32))

    def swap(name: str, path) -> list[str]:
        return [a if a != str(files[name]) else str(path) for a in base]

    cases = {
        "shape mismatch": swap("k", tmp_path / "k_bad.npy"),
        "head dim 96": swap("q", tmp_path / "q96.npy"),
        "q float32": swap("q", tmp_path / "q_f32.npy"),
        "S = 0": swap("q", tmp_path / "q_s0.npy"),
        "missing file": swap("v", tmp_path / "nope.npy"),
        "Q holds NaN": swap("q", tmp_path / "q_nan.npy"),
        "Q holds infinity": swap("q", tmp_path / "q_inf.npy"),
        **{f"scale {name}": swap("scales", tmp_path / f"scales_{name}.npy") for name in ("zero", "negative", "nan", "inf")},
        "precision fp4": [*base, "--precision", "fp4"],
        "precision empty": [*base, "--precision", ""],
    }
    for name, args in cases.items():
        with pytest.raises(ConfigError):
            launch([exe, *args], what=name, timeout_s=60)


def test_fp8_q_terms_auto_one_and_two(exe_dir, tmp_path, cases):
    """--q-terms (the fp8 tier's Q as one or two E4M3 terms, SDPA_SM90_FP8_Q2): at the seeds' small shape, a short
    launch on any GPU, auto takes two terms and says so, 1 and 2 force them, 2 is auto's output bit for bit, and on
    large logits the second term at least halves the error (Q's rounding is most of it there: the tier's error
    model, docs/SDPA.md; measured 0.19 -> 0.008)."""
    kernel = hopper_only("fp8", exe_dir)
    shape, dist = (1, 2, 128, 64), "large_logits_8"
    _, expected = cases(shape, 0, dist)
    runs = {}
    for terms in ("auto", "1", "2"):
        line, got = run_case(exe_dir, tmp_path, cases, "cpasync", shape, 0, "--kernel", kernel, "--q-terms", terms,
                             precision="fp8", distribution=dist)
        runs[terms] = (line, got)
    assert [runs[t][0].q_terms for t in ("auto", "1", "2")] == [2, 1, 2]
    assert np.array_equal(runs["auto"][1].view(np.uint16), runs["2"][1].view(np.uint16))
    rel = {t: float(np.linalg.norm(runs[t][1].astype(np.float64) - expected) / np.linalg.norm(expected)) for t in runs}
    assert rel["2"] <= rel["1"] / 2, rel


def test_fp8_q_terms_two_where_the_kernel_has_one_is_exit_2(exe_dir, tmp_path):
    """--q-terms 2 at a shape whose kernel has no second term (192-key tiles at head dim 128, S = 300): one error
    line naming the kernel, exit 2; --q-terms with the fp16 tier is exit 2 before any launch."""
    hopper_only("fp8", exe_dir)
    files = sdpa.write_inputs(tmp_path, (1, 4, 300, 128), 0)
    base = [str(exe_dir / "sdpa_fp8_cpasync"), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy")]
    with pytest.raises(ConfigError, match="192-key-tile kernel"):
        launch([*base, "--precision", "fp8", "--q-terms", "2"], what="--q-terms 2 at 192-key tiles", timeout_s=60)
    with pytest.raises(ConfigError, match="applies to the fp8 tier only"):
        launch([*base, "--q-terms", "2"], what="--q-terms with the fp16 tier", timeout_s=60)


def test_a_served_runner_reuses_inputs_only_while_the_files_are_unchanged(exe_dir, tmp_path, cases):
    """The --serve worker keeps the last case's inputs on the GPU (runner.cu InputCache): the same files again give
    the same bits; the same paths rewritten with another seed's inputs (same shapes) give that seed's output, right
    against its own reference, not the cached one's."""
    import shutil

    shape = (1, 4, 300, 64)
    folder = tmp_path / "in"
    folder.mkdir()
    files0, expected0 = cases(shape, 0)
    files1, expected1 = cases(shape, 1)
    paths = {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    exe = str(exe_dir / sdpa.VARIANTS["cpasync"])

    def run(name: str) -> np.ndarray:
        out = tmp_path / f"{name}.npy"
        cmd = [exe, *sdpa.file_args(paths), "--out", str(out), "--iters", "2", "--warmup", "0"]
        serve_lines(_POOL[0], cmd, SdpaLine, what=f"served {name}", timeout_s=120)
        return np.load(out)

    def errors(got, expected):
        return sdpa.tier_errors(got, expected, GATES, "fp16", "normal", "cpasync")

    for n, path in paths.items():
        shutil.copy(files0[n], path)
    a, b = run("first"), run("again")
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    assert sdpa_correctness(errors(a, expected0), GATES, "fp16", "normal").passed
    for n in ("q", "k"):  # two of the four files rewritten in place, sizes unchanged
        paths[n].write_bytes(files1[n].read_bytes())
    c = run("rewritten")
    # q and k of seed 1 with v and scales of seed 0: neither reference; the output must differ from the cached run
    assert not np.array_equal(c.view(np.uint16), a.view(np.uint16))
    for n in ("v", "scales"):
        paths[n].write_bytes(files1[n].read_bytes())
    d = run("seed1")
    assert sdpa_correctness(errors(d, expected1), GATES, "fp16", "normal").passed
