"""SDPA on the GPU: both variants of both precision tiers against the float64 reference, every shape and
seed; the fp8 tier's own configurations (three consumer warpgroups, tile widths by S) forced."""

from __future__ import annotations

import numpy as np
import pytest

from driver import device, thresholds
from driver.config import SDPA_SHAPES
from driver.errors import ConfigError
from driver.gates import sdpa_correctness
from driver.launch import launch
from driver.records import SdpaLine
from driver.suites import sdpa
from driver.verify import sdpa_errors
from tests.gpu.conftest import serve_lines

GATES = thresholds.load().sdpa

# Shapes beyond the named ones: both head dims, tails in S (not a multiple of the 128-key tile or the
# 64/128-row block), a single key, grids small enough for the split configuration and large enough not.
EXTRA_SHAPES = [(1, 1, 1, 64), (1, 1, 1, 128), (1, 2, 129, 64), (1, 3, 77, 128), (2, 2, 1000, 128),
                (3, 5, 777, 64), (1, 4, 300, 128)]


FP16_HOPPER, FP8_HOPPER = "wgmma_sm90", "wgmma_fp8_sm90"  # the tiers' Hopper kernels (kernel.cuh kernel_name)
TIERS = ("fp16", "fp8")


def expected_kernel(arch: str, precision: str = "fp16") -> str:
    """The kernel the runner picks by tier and architecture (--kernel auto)."""
    if precision == "fp8":
        return FP8_HOPPER
    return FP16_HOPPER if arch == "sm_90" else "mma_sync_sm80"


def skip_without_fp8_wgmma(precision: str = "fp8") -> None:
    if precision == "fp8" and device.arch_of(0) != "sm_90":
        pytest.skip(f"the fp8 tier ({FP8_HOPPER}) needs FP8 warpgroup MMA (sm_90); this GPU is {device.arch_of(0)}")


FP8 = ["--precision", "fp8", "--kernel", FP8_HOPPER]  # the fp8 tier's kernel, forced


_POOL: list = []  # the session's worker pool (tests/gpu/conftest.py `workers`), set by the autouse fixture


@pytest.fixture(autouse=True)
def _pool(workers):
    _POOL[:] = [workers]


_CASES: dict = {}  # (shape, seed) -> (input files, float64 reference): made once per session


@pytest.fixture(autouse=True)
def _cases_dir(tmp_path_factory):
    _CASES.setdefault("dir", tmp_path_factory.mktemp("sdpa_cases"))


def prepared(shape, seed):
    """The inputs and reference of (shape, seed), shared by every test, tier and variant of the session."""
    key = (tuple(shape), seed)
    if key not in _CASES:
        folder = _CASES["dir"] / f"{'x'.join(map(str, shape))}_s{seed}"
        folder.mkdir()
        _CASES[key] = sdpa.prepare_case(folder, tuple(shape), seed)
    return _CASES[key]


def run_case(exe_dir, tmp_path, impl, shape, seed, *extra):
    files, expected = prepared(shape, seed)
    out = tmp_path / f"out_{impl}.npy"
    cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out), "--iters", "3", "--warmup", "1",
           *extra]
    (line,) = serve_lines(_POOL[0], cmd, SdpaLine, what=impl, timeout_s=120)
    got = np.load(out)
    assert line.impl == impl and line.shape == list(shape)
    assert got.shape == shape and got.dtype == np.float16
    m = sdpa_errors(got, expected, bad_err=GATES.bad_err, what=impl)
    verdict = sdpa_correctness(m, GATES)
    assert verdict.passed, (verdict.reasons, m, line.kernel)
    return line, got


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape_name", list(SDPA_SHAPES))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
@pytest.mark.parametrize("precision", TIERS)
def test_variant_matches_reference(exe_dir, tmp_path, precision, impl, shape_name, seed):
    skip_without_fp8_wgmma(precision)
    shape = SDPA_SHAPES[shape_name]
    files, expected = prepared(shape, seed)
    out = tmp_path / "out.npy"
    cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out), "--iters", "3", "--warmup", "1",
           "--precision", precision]
    (line,) = serve_lines(_POOL[0], cmd, SdpaLine, what=impl, timeout_s=120)
    assert line.impl == impl and line.shape == list(shape)
    assert line.kernel == expected_kernel(device.arch_of(0), precision)
    got = np.load(out)
    assert got.shape == shape and got.dtype == np.float16
    m = sdpa_errors(got, expected, bad_err=GATES.bad_err, what=impl)
    verdict = sdpa_correctness(m, GATES)
    assert verdict.passed, (verdict.reasons, m)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("shape", EXTRA_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("precision", TIERS)
def test_both_variants_match_reference_and_each_other(exe_dir, tmp_path, precision, shape, seed):
    """The kernel this tier and GPU select, both variants, correct and bit-identical (same decode, same math)."""
    skip_without_fp8_wgmma(precision)
    base_line, base = run_case(exe_dir, tmp_path, "baseline", shape, seed, "--precision", precision)
    async_line, asyn = run_case(exe_dir, tmp_path, "cpasync", shape, seed, "--precision", precision)
    assert base_line.kernel == async_line.kernel == expected_kernel(device.arch_of(0), precision)
    assert np.array_equal(base.view(np.uint16), asyn.view(np.uint16))


@pytest.mark.parametrize("split", ["1", "2"])
@pytest.mark.parametrize("shape", [(1, 8, 512, 64), (1, 2, 1000, 128), (2, 3, 257, 64), (1, 2, 384, 128)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
@pytest.mark.parametrize("kernel", [FP16_HOPPER, FP8_HOPPER])
def test_hopper_split_and_unsplit_configs(exe_dir, tmp_path, kernel, impl, shape, split):
    """Each Hopper kernel's two block configurations forced on shapes where the grid rule would pick the other
    one, with odd and even tile counts per consumer warpgroup."""
    if device.arch_of(0) != "sm_90":
        pytest.skip(f"{kernel} runs on sm_90 only; this GPU is {device.arch_of(0)}")
    precision = "fp8" if kernel == FP8_HOPPER else "fp16"
    line, _ = run_case(exe_dir, tmp_path, impl, shape, 0, "--precision", precision, "--kernel", kernel, "--split", split)
    assert line.kernel == kernel and line.split == int(split)


@pytest.mark.parametrize("shape", [(1, 132, 250, 64), (2, 60, 1900, 64)], ids=lambda s: "x".join(map(str, s)))
def test_three_warpgroup_tile_plan_at_odd_sizes(exe_dir, tmp_path, shape):
    """fp8 tier: grids the tile plan fills with short 128-row tiles after the 192-row ones (tile_plan.cuh), each with a
    partial last tile, run by persistent blocks (min(units, SMs), each taking units grid apart): at
    (1,132,250,64) 1 + 1 per head, the short one 58 rows (one warpgroup runs, two take and hand back the tiles),
    each block a full unit then a short one; at (2,60,1900,64) 8 + 3, the last 108 rows (two). Both variants
    correct and bit-identical."""
    skip_without_fp8_wgmma()
    torch = pytest.importorskip("torch", reason="the SM count (the persistent grid) comes from torch")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lines, outs = [], []
    for impl in sdpa.VARIANTS:
        line, got = run_case(exe_dir, tmp_path, impl, shape, 0, *FP8, "--split", "0")
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
def test_head_dim_128_tile_width_by_s(exe_dir, tmp_path, shape, bn):
    """Head dim 128, fp8 tier: the keys per K/V tile select_config picks by S (192 where S padded to 192-key tiles is
    less than 1.02x S padded to 128, else 128; tests/test_sdpa_sm90_select.py restates the rule), each
    with a tail, split and unsplit, one and several units per persistent block: the line names the width,
    both variants correct and bit-identical."""
    skip_without_fp8_wgmma()
    lines, outs = [], []
    for impl in sdpa.VARIANTS:
        # --split 0: the grid rule, and the line's extra keys ("bn")
        line, got = run_case(exe_dir, tmp_path, impl, shape, 1, *FP8, "--split", "0")
        lines.append(line)
        outs.append(got)
    assert [line.bn for line in lines] == [bn, bn], lines
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


@pytest.mark.parametrize("shape", [(1, 8, 512, 64), (1, 3, 77, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_mma_sync_kernel_still_runs_when_forced(exe_dir, tmp_path, impl, shape):
    """The sm_80/sm_89 kernel is in every build; --kernel mma_sync_sm80 runs it on any GPU."""
    line, _ = run_case(exe_dir, tmp_path, impl, shape, 0, "--kernel", "mma_sync_sm80")
    assert line.kernel == "mma_sync_sm80"


def test_bad_inputs_give_one_error_and_exit_2(exe_dir, tmp_path):
    files = sdpa.write_inputs(tmp_path, (1, 2, 128, 64), 0)
    exe = str(exe_dir / "sdpa_fp8_cpasync")
    base = sdpa.file_args(files) + ["--out", str(tmp_path / "o.npy")]
    np.save(tmp_path / "k_bad.npy", np.zeros((1, 2, 64, 64), np.uint8))
    np.save(tmp_path / "q96.npy", np.zeros((1, 2, 128, 96), np.float16))
    np.save(tmp_path / "q_f32.npy", np.zeros((1, 2, 128, 64), np.float32))
    np.save(tmp_path / "q_s0.npy", np.zeros((1, 2, 0, 64), np.float16))
    cases = {
        "shape mismatch": [a if a != str(files["k"]) else str(tmp_path / "k_bad.npy") for a in base],
        "head dim 96": [a if a != str(files["q"]) else str(tmp_path / "q96.npy") for a in base],
        "q float32": [a if a != str(files["q"]) else str(tmp_path / "q_f32.npy") for a in base],
        "S = 0": [a if a != str(files["q"]) else str(tmp_path / "q_s0.npy") for a in base],
        "missing file": [a if a != str(files["v"]) else str(tmp_path / "nope.npy") for a in base],
    }
    for name, args in cases.items():
        with pytest.raises(ConfigError):
            launch([exe, *args], what=name, timeout_s=60)
