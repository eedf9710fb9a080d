"""Bad input gives one clear line, its own exit code, and writes nothing to bench_results/."""

import os
import re
from pathlib import Path

import pytest

from driver import toolchain
from driver.errors import ConfigError, ToolchainMissing
from tests.conftest import ROOT, run_driver


def _path_without(*tools: str) -> str:
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if not any(Path(d, t).exists() for t in tools)]
    return os.pathsep.join(keep)


def _assert_one_clear_line(proc, exit_code: int, *needles: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[build]")]
    assert proc.returncode == exit_code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["bench", "--sizes", "256Q"], "malformed size '256Q'"),
        (["bench", "--sizes", "-1"], "malformed size '-1'"),
        (["bench", "--arch", "sm_999"], "unknown GPU architecture 'sm_999'"),
        (["build", "--arch", "sm_999"], "unknown GPU architecture 'sm_999'"),
        (["bench", "--kernel", "3stage"], "unknown kernel '3stage'"),
        (["build", "--targets", "gemm"], "unknown build target 'gemm'"),
        (["stress", "--shapes", "1x8x512x96"], "unsupported head dim 96"),
        (["bench", "--iters", "ten"], "malformed --iters 'ten'"),
        (["bench", "--bogus-flag"], "unrecognized arguments"),
        (["bench", "--precision", "fp4"], "unknown precision tier 'fp4' (choose from fp16, fp8)"),
        (["bench", "--precision", ""], "empty precision tier list (choose from fp16, fp8)"),
        (["stress", "--precision", "fp16,bf16"], "unknown precision tier 'bf16'"),
        (["bench", "--distributions", "gaussian"],
         ("unknown input distribution 'gaussian' (choose from normal, large_logits_4, large_logits_8, "
          "outlier_channels, sink, tiny, large_v)")),
        (["stress", "--distributions", ""], "empty input distribution list"),
        (["bench", "--q-terms", "3", "--precision", "fp8"], "unknown --q-terms '3' (give one of auto, 1, 2"),
        (["bench", "--q-terms", "1"], "--q-terms 1 applies to the fp8 tier, and --precision fp16 leaves it out"),
        (["stress", "--q-terms", "1"], "unrecognized arguments: --q-terms 1"),
        (["bench", "--distributions", "large_logits_8"], "leaves out normal"),
    ],
)
def test_bad_configuration(args, needle, results_dir):
    proc = run_driver(*args)
    _assert_one_clear_line(proc, ConfigError.exit_code, "configuration error", needle)
    assert not results_dir.exists() or not any(results_dir.iterdir())


def test_misspelt_thresholds_field(tmp_path, results_dir):
    bad = tmp_path / "thresholds.toml"
    bad.write_text((ROOT / "thresholds.toml").read_text().replace("max_bad_frac", "max_bad_fraction"))
    proc = run_driver("bench", "--thresholds", str(bad))
    _assert_one_clear_line(proc, ConfigError.exit_code, "max_bad_fraction", "Extra inputs are not permitted")
    assert not results_dir.exists()


def test_missing_nvcc(results_dir):
    env = {"PATH": _path_without("nvcc"), "CUDA_HOME": "/nonexistent/cuda"}
    for args in (["build", "--targets", "sdpa"], ["bench", "--suite", "sdpa"]):
        proc = run_driver(*args, env=env)
        _assert_one_clear_line(proc, ToolchainMissing.exit_code, "nvcc not found", "nvidia-cuda-nvcc")
    assert not results_dir.exists()


def test_missing_mojo(results_dir):
    env = {"PATH": _path_without("mojo"), "DRIVER_TOOLCHAIN_VENV": "/nonexistent/venv", "MOJO": ""}
    for args in (["build", "--targets", "allreduce"], ["bench", "--suite", "allreduce"]):
        proc = run_driver(*args, env=env)
        _assert_one_clear_line(proc, ToolchainMissing.exit_code, "mojo not found", f"mojo=={toolchain.pins()['mojo']}")
    assert not results_dir.exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--timing", "wall"], "--timing takes device or host"),
        (["--lanes", "9"], "--lanes must be 1, 2, 3 or 4"),
        (["--mem-pressure", "99"], "--mem-pressure takes a percentage of free GPU memory, 0..95"),
        (["--alternate", "1", "--kernel", "2stage"], "--alternate 1 cycles every kernel; it takes no --kernel"),
        (["--impl", "upstream"], "upstream_bench: upstream"),
        (["--ngpus", "3"], "unsupported --ngpus 3"),
        (["--sizes", "6", "--dtype", "float32"], "size 6 bytes is not a multiple of the 4-byte float32 element"),
        (["--sizes", "8K,8", "--debug-corrupt-element", "2"], "--debug-corrupt-element 2 is not an element of size 8"),
        (["--debug-corrupt-element", "3", "--check", "0"], "--debug-corrupt-element needs a checked launch"),
    ],
)
@pytest.mark.mojo
def test_allreduce_executable_refuses_bad_flags_before_touching_a_gpu(args, needle):
    """The executable validates its whole command line first, so this runs on a CPU-only machine."""
    import subprocess

    from driver import paths

    exe = paths.build_dir() / "sm_90" / "allreduce_bench"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch sm_90` (nox -s test does)")
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert proc.stdout == ""


@pytest.mark.nvcc
@pytest.mark.parametrize("split", ["2", "4"])
def test_sdpa_runner_refuses_an_uneven_split_before_touching_a_gpu(tmp_path, split):
    """S = 300: 10 tiles of 32 over 4 groups, 5 of 64 over 2. Racecheck reported hazards for
    exactly these uneven splits of the mma_sync kernel on H200, so the runner refuses them (the
    heuristic avoids them). The sm_90 binary picks the Hopper kernel by default, hence --kernel."""
    import subprocess

    from driver import paths
    from driver.suites import sdpa

    exe = paths.build_dir() / "sm_90" / "sdpa_fp8_cpasync"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch sm_90` (nox -s test does)")
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    cmd = [str(exe), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy"), "--split", split,
           "--kernel", "mma_sync_sm80"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "divide evenly over the groups" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("arch", "args", "message"),
    [
        ("sm_90", ["--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "4"],
         "--split for wgmma_fp8_sm90 must be 0, 1 or 2"),
        ("sm_90", ["--kernel", "wgmma_sm90", "--split", "4"], "--split for wgmma_sm90 must be 0, 1 or 2"),
        ("sm_90", ["--precision", "fp8", "--split", "4"], "--split for wgmma_fp8_sm90 must be 0, 1 or 2"),
        ("sm_90", ["--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--warps", "4"],
         "--warps applies to the mma_sync_sm80 kernel only"),
        ("sm_90", ["--kernel", "wgmma_sm90", "--warps", "4"], "--warps applies to the mma_sync_sm80 kernel only"),
        ("sm_90", ["--kernel", "hopper"],
         "--kernel must be auto, wgmma_sm90, wgmma_fp8_sm90, mma_sync_sm80, decode_sm89 or decode_fp8_sm89"),
        ("sm_90", ["--kernel", "wgmma_fp8_sm90"], "wgmma_fp8_sm90 is the fp8 tier's kernel; this case asks for --precision fp16"),
        ("sm_90", ["--precision", "fp8", "--kernel", "wgmma_sm90"], "wgmma_sm90 is the fp16 tier's kernel"),
        ("sm_90", ["--precision", "fp8", "--kernel", "mma_sync_sm80"], "mma_sync_sm80 computes in fp16"),
        ("sm_90", ["--precision", "fp4"], "--precision must be fp16 or fp8, got 'fp4'"),
        ("sm_90", ["--precision", ""], "--precision must be fp16 or fp8, got ''"),
        ("sm_90", ["--precision", "fp8", "--q-terms", "3"], "--q-terms must be auto, 1 or 2, got '3'"),
        ("sm_90", ["--precision", "fp8", "--q-terms", ""], "--q-terms must be auto, 1 or 2, got ''"),
        ("sm_90", ["--q-terms", "2"], "--q-terms applies to the fp8 tier only (--precision fp8)"),
        ("sm_89", ["--q-terms", "1"], "--q-terms applies to the fp8 tier only (--precision fp8)"),
        ("sm_89", ["--kernel", "wgmma_sm90"], "the wgmma_sm90 kernel is not in this build"),
        ("sm_89", ["--precision", "fp8", "--kernel", "wgmma_fp8_sm90"], "the wgmma_fp8_sm90 kernel is not in this build"),
        # the decode kernel (kernels_cuda/sdpa_decode/), in every build
        ("sm_90", ["--kernel", "decode_fp8_sm89"],
         "decode_fp8_sm89 is the fp8 tier's decode kernel; this case asks for --precision fp16"),
        ("sm_89", ["--precision", "fp8", "--kernel", "decode_sm89"],
         "decode_sm89 is the fp16 tier's decode kernel; this case asks for --precision fp8"),
        ("sm_89", ["--kernel", "decode_sm89", "--warps", "4"], "--warps applies to the mma_sync_sm80 kernel only"),
        ("sm_90", ["--kernel", "decode_sm89", "--ablate", "no_loads"], "--ablate: the decode kernel has no ablation modes"),
        ("sm_89", ["--precision", "fp8", "--kernel", "decode_fp8_sm89", "--q-terms", "2"],
         "--q-terms 2: the decode kernel's fp8 tier takes Q as one E4M3 term"),
    ],
)
@pytest.mark.nvcc
def test_sdpa_runner_kernel_choice_errors_before_touching_a_gpu(tmp_path, arch, args, message):
    """Which kernel runs is chosen by architecture; forcing one that cannot run is a bad-input error."""
    import subprocess

    from driver import paths
    from driver.suites import sdpa

    exe = paths.build_dir() / arch / "sdpa_fp8_cpasync"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch {arch} --targets sdpa` (nox -s test does)")
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    proc = subprocess.run([str(exe), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy"), *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # one clear error line
    assert line.startswith("error: ") and message in line
    assert proc.stdout == ""


@pytest.mark.nvcc
def test_sdpa_runner_fp8_tier_without_fp8_wgmma_is_exit_5(tmp_path):
    """The sm_89 build has no FP8 warpgroup MMA: --precision fp8 is 'not available here' (exit 5, which the
    driver records as a skipped tier), before any GPU is touched, one line."""
    import subprocess

    from driver import paths
    from driver.suites import sdpa

    exe = paths.build_dir() / "sm_89" / "sdpa_fp8_cpasync"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch sm_89 --targets sdpa` (nox -s test does)")
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    proc = subprocess.run([str(exe), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy"), "--precision", "fp8"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 5, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the fp8 tier needs FP8 warpgroup MMA")
    assert proc.stdout == ""


@pytest.mark.nvcc
@pytest.mark.parametrize("bits, what", [(0x7E00, "NaN"), (0xFC00, "Inf")])
def test_sdpa_runner_refuses_nonfinite_q_before_touching_a_gpu(tmp_path, bits, what):
    import subprocess

    import numpy as np

    from driver import paths
    from driver.suites import sdpa

    exe = paths.build_dir() / "sm_90" / "sdpa_fp8_cpasync"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch sm_90` (nox -s test does)")
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    q_path = sdpa.file_args(files)[1]
    q = np.load(q_path)
    q.view(np.uint16).reshape(-1)[1234] = bits
    np.save(q_path, q)
    proc = subprocess.run([str(exe), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == f"error: q holds {what} at flat index 1234 (shape (1, 2, 300, 64)); inputs must be finite"


@pytest.mark.parametrize("shape, needle", [("1x8x0x64", "S = 0"), ("1x8x512x96", "unsupported head dim 96"),
                                           ("0x8x512x64", "zero dimension")])
def test_bad_sdpa_shape_is_one_line_before_anything_builds(shape, needle, results_dir):
    proc = run_driver("bench", "--suite", "sdpa", "--shapes", shape)
    _assert_one_clear_line(proc, ConfigError.exit_code, "configuration error", needle)
    assert not results_dir.exists()


@pytest.mark.parametrize(
    "content, needle",
    [
        (bytes(range(256)) * 4, "is not UTF-8 text"),  # a binary file (every byte value, NUL included)
        ("version = 1\n# caf\u00e9\n".encode("latin-1"), "is not UTF-8 text"),  # text in another encoding
        (b"version = 1\x00\n", "is not valid TOML"),  # valid UTF-8, but a control character TOML forbids
    ],
)
def test_thresholds_not_text(tmp_path, results_dir, content, needle):
    bad = tmp_path / "thresholds.toml"
    bad.write_bytes(content)
    for args in (["bench", "--thresholds", str(bad)], ["build", "--thresholds", str(bad)]):
        proc = run_driver(*args)
        _assert_one_clear_line(proc, ConfigError.exit_code, "configuration error", needle)
    assert not results_dir.exists()


@pytest.mark.mojo
def test_the_mojo_pin_comes_from_pyproject_only(tmp_path, monkeypatch):
    """Change the pin in a copy of pyproject.toml: the installed mojo no longer satisfies it, and the
    error names the new pin (toolchain.py holds no copy of it)."""
    pyproject = tmp_path / "pyproject.toml"
    text = (ROOT / "pyproject.toml").read_text()
    pinned = toolchain.pins()["mojo"]
    pyproject.write_text(text.replace(f'"mojo=={pinned}"', '"mojo==0.0.1"'))
    monkeypatch.setattr(toolchain.paths, "pyproject_file", lambda: pyproject)
    toolchain.pins.cache_clear()
    toolchain.find_mojo.cache_clear()
    try:
        with pytest.raises(ToolchainMissing, match=f"found mojo {re.escape(pinned)} .* pinned to mojo 0.0.1"):
            toolchain.find_mojo()
    finally:
        toolchain.pins.cache_clear()
        toolchain.find_mojo.cache_clear()


def test_sweep_write_from_a_bundle_is_refused_with_the_way_to_merge(monkeypatch, capsys, results_dir):
    """A bundle has no kernels_mojo/ to write into: `sweep --write` there is refused before any build or launch,
    and the hint is the merge that keeps the other GPU counts' windows (copying the run's own
    dispatch_windows.json over the tree's would drop them)."""
    from driver import cli, paths

    monkeypatch.setattr(paths, "is_bundle", lambda: True)
    assert cli.main(["sweep", "--ngpus", "4", "--write"]) == ConfigError.exit_code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no source tree" in err[0]
    assert "sweep --from bench_results/<run> --write" in err[0]
    assert not results_dir.exists() or not any(results_dir.iterdir())
