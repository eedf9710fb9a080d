"""Stress stage pieces that need no GPU: sanitizer output parsing and random sizes."""

import random
from pathlib import Path

import pytest

from driver.config import ELEM_BYTES
from driver.suites.stress import sanitizer, soak

ROOT = Path(__file__).resolve().parent.parent
# compute-sanitizer memcheck on upstream comm.allreduce, 2x H200, 2026-11-22 (provenance in tests/data/captured/README.md).
UPSTREAM_MEMCHECK = ROOT / "tests" / "data" / "captured" / "upstream_memcheck_h200x2.txt"


def test_parse_sanitizer_reads_the_summary_line_only():
    assert sanitizer.parse_sanitizer(UPSTREAM_MEMCHECK.read_text()) == 323


def test_first_report_is_the_opening_lines_of_the_first_error():
    first = sanitizer.first_report(UPSTREAM_MEMCHECK.read_text())
    assert first.startswith("Invalid __global__ write of size 16 bytes | at allreduce_1stage_float32")
    assert "by thread (160,0,0) in block (0,0,0)" in first and "Host Frame" not in first
    assert len(first) <= 600
    assert sanitizer.first_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == ""


def test_first_report_of_a_racecheck_warning():
    # racecheck on the FP8 SDPA runner before 94d46f2, 1x H100, 2026-11-23 (tests/data/captured/README.md)
    out = (ROOT / "tests" / "data" / "captured" / "sdpa_racecheck_h100.txt").read_text()
    assert sanitizer.parse_sanitizer(out) == 2
    first = sanitizer.first_report(out)
    assert first.startswith("Warning: Race reported between Read access at void sdpa_sm90::load_q_e4m3")
    assert "| and Write access at void sdpa_sm90::epilogue" in first and "+0xfb0" not in first  # the first only


def test_parse_sanitizer_clean_and_missing():
    assert sanitizer.parse_sanitizer("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitizer.parse_sanitizer("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n") == 2
    assert sanitizer.parse_sanitizer("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n") == 0
    assert sanitizer.parse_sanitizer("Error: Target application returned an error\n") is None


def test_random_sizes_have_odd_tails_and_whole_elements():
    rng = random.Random(0)
    for dtype, e in ELEM_BYTES.items():
        for _ in range(20):
            sizes = soak.random_sizes(rng, dtype)
            assert all(s % e == 0 and s > 0 for s in sizes)
            assert any((s // e) % 8 for s in sizes)  # not all multiples of a 16-byte vector



def test_sanitizers_follow_the_suites_named(monkeypatch, tmp_path):
    """`stress --suite sdpa` on a 1-GPU host sanitizes the SDPA runners only: the allreduce kernels are not
    its business, so they are neither run nor reported as not measured (that failed such a run with exit 7,
    2026-11-23 on 1x H100). `--suite allreduce` on 2 GPUs sanitizes every allreduce kernel and no runner."""
    from types import SimpleNamespace

    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import stress
    from driver.thresholds import load

    ran: list[str] = []
    configs: list[str] = []
    def fake_sanitize(opts, tool, cmd, kernel, config, dev, sha):
        ran.append(kernel)
        configs.append(config)
        if "--ngpus" in cmd:
            assert config.startswith(f"{cmd[cmd.index('--ngpus') + 1]}gpu/")
        return SimpleNamespace(kernel=kernel)

    monkeypatch.setattr(stress, "sanitize", fake_sanitize)
    monkeypatch.setattr(stress.sdpa, "write_inputs", lambda folder, shape, seed: {})
    monkeypatch.setattr(stress.sdpa, "file_args", lambda files: [])
    h100 = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559)
    one_gpu = DeviceInfo(driver_version="580.159.04", gpus=[h100])
    result = stress.run(RunOptions(suites=("stress",), stress_parts=("sdpa", "sanitizers"), shapes=()),
                        tmp_path, one_gpu, load(), "0" * 40)
    assert ran and set(ran) == set(stress.sdpa.VARIANTS.values())
    assert not [r for r in result.records if r.kernel in stress.ALLREDUCE_KERNEL_NAMES]
    ran.clear()
    configs.clear()
    two_gpus = DeviceInfo(driver_version="580.159.04", gpus=[h100, h100.model_copy(update={"index": 1})])
    monkeypatch.setattr(stress, "soak_allreduce", lambda *args, **kw: "soak")
    monkeypatch.setattr(stress, "allreduce_hang", lambda *args: "watchdog")
    stress.run(RunOptions(suites=("stress",), stress_parts=("allreduce", "sanitizers"), shapes=()), tmp_path,
               two_gpus, load(), "0" * 40)
    assert set(ran) == set(stress.ALLREDUCE_KERNEL_NAMES)
    assert {c.split("/")[0] for c in configs} == {"2gpu"}
    # on 4 GPUs every kernel is sanitized at each count the soak runs (2stage_ce's 3+ GPU adds only exist at 4)
    ran.clear()
    configs.clear()
    four_gpus = DeviceInfo(driver_version="580.159.04",
                           gpus=[h100.model_copy(update={"index": i}) for i in range(4)])
    stress.run(RunOptions(suites=("stress",), stress_parts=("allreduce", "sanitizers"), shapes=()), tmp_path,
               four_gpus, load(), "0" * 40)
    assert {c.split("/")[0] for c in configs} == {"2gpu", "4gpu"}
    assert len(ran) == 2 * len(stress.SANITIZER_TOOLS) * len(stress.ALLREDUCE_KERNEL_NAMES)


@pytest.mark.parametrize("kernel, want", [("2stage_ce", ("2stage_ce",)),
                                          ("1stage_cpasync", ("1stage_cpasync_s2", "1stage_cpasync_s3",
                                                              "1stage_cpasync_s4"))])
def test_stress_kernel_soaks_and_sanitizes_only_that_kernel_and_still_runs_the_mixed_configs(monkeypatch, tmp_path,
                                                                                              kernel, want):
    """`stress --kernel K`: the per-kernel soak and the sanitizers take K alone (each stage count of the cp.async
    pipeline), the mixed configurations (every kernel cycled) still run, and the progress plan counts that."""
    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import stress
    from driver.suites.stress.soak import MIXED_CONFIGS
    from driver.thresholds import load

    soaked: list[str] = []
    sanitized: list[str] = []
    monkeypatch.setattr(stress, "sanitize", lambda opts, tool, cmd, k, config, dev, sha: sanitized.append(k) or k)
    monkeypatch.setattr(stress, "soak_allreduce", lambda opts, exe, dev, gates, sha, rng, ngpus, dtype, k, flags=None,
                        pool=None: soaked.append(k) or k)
    monkeypatch.setattr(stress, "allreduce_hang", lambda *args: "watchdog")
    h100 = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559)
    two_gpus = DeviceInfo(driver_version="580.159.04", gpus=[h100, h100.model_copy(update={"index": 1})])
    opts = RunOptions(suites=("stress",), stress_parts=("allreduce", "sanitizers"), shapes=(), kernel=kernel,
                      dtypes=("float32",))
    stress.run(opts, tmp_path, two_gpus, load(), "0" * 40)
    assert soaked == [*want, *MIXED_CONFIGS]
    assert sorted(set(sanitized)) == sorted(want)
    everything = stress.planned_steps(RunOptions(suites=("stress",), stress_parts=("allreduce",), dtypes=("float32",)),
                                      (2,), ())
    assert stress.planned_steps(RunOptions(suites=("stress",), stress_parts=("allreduce",), dtypes=("float32",),
                                           kernel=kernel), (2,), ()) < everything


def test_the_progress_plan_is_every_soak_process_soak_case_and_sanitizer_run(monkeypatch, tmp_path, capsys):
    """The done / total of stress's progress lines: planned_steps is what the run goes through, one step per
    allreduce soak process (--iters in chunks of LAUNCHES_PER_PROCESS), per SDPA soak case (every seed and
    distribution once) and per sanitizer run; the last line reads total / total."""
    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import common, stress
    from driver.thresholds import load

    def fake_sanitize(opts, tool, cmd, kernel, config, dev, sha):
        common.progress(f"sanitize {tool} {kernel}", step=True)
        return "sanitized"

    def fake_soak_allreduce(opts, exe, dev, gates, sha, rng, ngpus, dtype, kernel, flags=None, pool=None):
        for _ in range(soak.allreduce_soak_steps(opts)):
            common.progress(f"soak {kernel}", step=True)
        return "soak"

    def fake_soak_sdpa(opts, exe_dir, dev, gates, sha, impl, shape_name, shape, pool=None, tier="fp16"):
        for _ in range(soak.sdpa_soak_steps(opts)):
            common.progress(f"soak {impl}", step=True)
        return "soak"

    monkeypatch.setattr(stress, "sanitize", fake_sanitize)
    monkeypatch.setattr(stress, "soak_allreduce", fake_soak_allreduce)
    monkeypatch.setattr(stress, "soak_sdpa", fake_soak_sdpa)
    monkeypatch.setattr(stress, "allreduce_hang", lambda *args: "watchdog")
    monkeypatch.setattr(stress, "sdpa_tiers", lambda opts, exe_dir, result: ("fp16", "fp8"))
    monkeypatch.setattr(stress.sdpa, "write_inputs", lambda folder, shape, seed: {})
    monkeypatch.setattr(stress.sdpa, "file_args", lambda files: [])
    h100 = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559)
    two = DeviceInfo(driver_version="580.159.04", gpus=[h100, h100.model_copy(update={"index": 1})])
    from driver.reference.sdpa import DISTRIBUTIONS

    opts = RunOptions(suites=("stress",), stress_parts=("allreduce", "sdpa", "sanitizers"), iters=600,
                      dtypes=("float32", "bfloat16"), seeds=(0, 1), distributions=tuple(DISTRIBUTIONS))
    common.plan(0, reset=True)
    stress.run(opts, tmp_path, two, load(), "0" * 40)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "/" in ln and "] [" in ln]
    total = stress.planned_steps(opts, (2,), ("fp16", "fp8"))
    # 600 launches are 3 processes of at most 250; 7 distributions x 2 seeds are 7 cases
    assert soak.allreduce_soak_steps(opts) == 3 and soak.sdpa_soak_steps(opts) == 7
    assert len(lines) == total > 0
    assert lines[0].split("] [")[1].startswith(f"1/{total}]")
    assert lines[-1].split("] [")[1].startswith(f"{total}/{total}, ETA 0 s]")


def test_sanitizers_run_the_cases_named_with_their_mask(monkeypatch, tmp_path):
    """The default list is config.SANITIZED_SHAPES, its inference cases with their `--causal`; `--sanitizer-shapes`
    names others, as --shapes takes them (a name or the syntax)."""
    from types import SimpleNamespace

    from driver import config
    from driver.cli import _run_options, build_parser
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import stress
    from driver.thresholds import load

    seen: dict[str, list[str]] = {}

    def fake_sanitize(opts, tool, cmd, kernel, cfg, dev, sha):
        seen[cfg.split("/")[0]] = cmd
        return SimpleNamespace(kernel=kernel)

    monkeypatch.setattr(stress, "sanitize", fake_sanitize)
    monkeypatch.setattr(stress.sdpa, "write_inputs", lambda folder, shape, seed: {})
    monkeypatch.setattr(stress.sdpa, "file_args", lambda files: [])
    dev = DeviceInfo(driver_version="580.159.04", gpus=[GpuInfo(index=0, name="NVIDIA H200", memory_mib=143771)])

    def sanitized(*argv: str) -> dict[str, list[str]]:
        seen.clear()
        opts = _run_options(build_parser().parse_args(["stress", "--suite", "sdpa", "--no-profile", *argv]))
        stress.run(opts.model_copy(update={"stress_parts": ("sanitizers", "sdpa"), "shapes": ()}), tmp_path, dev,
                   load(), "0" * 40)
        return dict(seen)

    default = sanitized()
    assert list(default) == list(config.SANITIZED_SHAPES)
    assert "--causal" in default["san_gqa_causal_d128"] and "--causal" not in default["san_gqa_d64"]
    named = sanitized("--sanitizer-shapes", "san_decode_split,1x4x3x64:1x2x90x64:causal")
    assert list(named) == ["san_decode_split", "1x4x3x64:1x2x90x64:causal"]
    assert "--causal" in named["1x4x3x64:1x2x90x64:causal"] and "--causal" not in named["san_decode_split"]


def test_decode_sanitizer_cases_also_run_the_decode_kernel_forced(monkeypatch, tmp_path):
    """config.SANITIZER_FORCED_DECODE: on an sm_90 GPU --kernel auto gives 32 (fp8 tier) and 64 rows per K/V head to
    the Hopper kernel's key chunks, so those cases run a second time per tier and variant with the tier's decode
    kernel forced; every other case runs once, with auto."""
    from types import SimpleNamespace

    from driver import config
    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import stress
    from driver.thresholds import load

    runs: list[tuple[str, list[str]]] = []

    def fake_sanitize(opts, tool, cmd, kernel, cfg, dev, sha):
        runs.append((cfg, cmd))
        return SimpleNamespace(kernel=kernel)

    monkeypatch.setattr(stress, "sanitize", fake_sanitize)
    monkeypatch.setattr(stress, "sdpa_tiers", lambda opts, exe_dir, result: ("fp16", "fp8"))
    monkeypatch.setattr(stress.sdpa, "write_inputs", lambda folder, shape, seed: {})
    monkeypatch.setattr(stress.sdpa, "file_args", lambda files: [])
    dev = DeviceInfo(driver_version="580.159.04", gpus=[GpuInfo(index=0, name="NVIDIA H200", memory_mib=143771)])
    opts = RunOptions(suites=("stress",), stress_parts=("sdpa", "sanitizers"), shapes=())
    stress.run(opts, tmp_path, dev, load(), "0" * 40)
    per_tool = len(runs) // len(stress.SANITIZER_TOOLS)
    assert per_tool == (len(config.SANITIZED_SHAPES) + len(config.SANITIZER_FORCED_DECODE)) * 2 * len(stress.sdpa.VARIANTS)
    assert len(runs) == stress.planned_steps(opts, (), ("fp16", "fp8"))
    forced = {(cfg, cmd[cmd.index("--kernel") + 1]) for cfg, cmd in runs if "--kernel" in cmd}
    assert forced == {(f"{name}/{tier}/{kernel}", kernel) for name in config.SANITIZER_FORCED_DECODE
                      for tier, kernel in (("fp16", "decode_sm89"), ("fp8", "decode_fp8_sm89"))}
    assert all(f"--precision {cfg.split('/')[1]}" in " ".join(cmd) for cfg, cmd in runs)
    assert set(config.SANITIZER_FORCED_DECODE) <= set(config.SANITIZER_CASES)
