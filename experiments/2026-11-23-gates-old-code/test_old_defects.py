"""The new tests' assertions, ported to the old API (2c7277c), to show each fails there."""
import json
from pathlib import Path

import numpy as np
import pytest

from driver import archive, cli, config, device, paths, thresholds
from driver.options import RunOptions
from driver.records import RunArchive, Verdict
from driver.suites import sdpa, stress, profile
from tests.conftest import run_driver
from tests.runner_doubles import H200X2, allreduce_exe, calls, fake_build, sdpa_exes

LIMITS = thresholds.load()
CAPTURED = Path(__file__).parent / "data" / "captured"
BENCH = ["bench", "--no-build", "--arch", "sm_90", "--iters", "5", "--warmup", "0", "--rounds", "1", "--shapes", "mission"]


@pytest.fixture
def host(tmp_path, monkeypatch, results_dir):
    exe_dir = fake_build(tmp_path, monkeypatch)
    allreduce_exe(exe_dir, "allreduce_bench", impl="ours", p50=5.0)
    allreduce_exe(exe_dir, "upstream_bench", impl="upstream", p50=8.0)
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 8.0})
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    return exe_dir


def test_d1_not_covered_sanitizer_must_not_pass(monkeypatch):
    monkeypatch.setattr(stress.shutil, "which", lambda name: None)
    rec = stress.sanitize(RunOptions(), "memcheck", ["x"], "sdpa_fp8_cpasync", "small", H200X2, "0" * 40)
    assert not rec.passed


def test_d1_profile_without_ncu_must_not_pass(monkeypatch):
    monkeypatch.setattr(profile, "find_ncu", lambda: None)
    rec = profile.ncu_allreduce(RunOptions(), None, Path("x"), H200X2, "0" * 40, profile.METRICS)
    assert not rec.passed


def test_d1_combine_must_not_let_pass_hide_absence():
    assert Verdict.combine([Verdict(status="pass"), Verdict(status="skip")]).status != "pass"


def test_d2_missing_peer_must_fail_the_run(host, capsys):
    assert cli.main([*BENCH, "--suite", "all"]) == 8


def test_d2_headline_must_show_the_failed_gate():
    run = RunArchive.model_validate_json((CAPTURED / "results_2xH200_bench_256K_16M.json").read_text())
    assert archive._headline(run).startswith("1 FAIL")


def test_d3_watchdog_must_report_its_recovery_run(tmp_path, monkeypatch):
    exe = allreduce_exe(tmp_path, "allreduce_bench", impl="ours", p50=5.0, wrong=3, err=0.25)
    monkeypatch.setattr(stress, "WATCHDOG_TIMEOUT_S", 1.0)
    rec = stress.watchdog(RunOptions(timeout_s=30), exe, H200X2, "0" * 40)
    assert (rec.measurement.wrong, rec.measurement.max_abs_err) == (3, 0.25)


def test_d3_sanitizer_record_must_not_write_zeros(monkeypatch):
    monkeypatch.setattr(stress.shutil, "which", lambda name: None)
    rec = stress.sanitize(RunOptions(), "memcheck", ["x"], "sdpa_fp8_cpasync", "small", H200X2, "0" * 40)
    assert rec.measurement.max_abs_err is None and rec.measurement.wrong is None


def test_d4_gated_metric_must_refuse_a_wrong_shape():
    ref = np.ones((1, 2, 8, 64))
    with pytest.raises(Exception, match="shape"):
        sdpa.error_metrics(np.ones((1, 1, 8, 64), dtype=np.float16), ref, LIMITS.sdpa)


def test_d5_suite_list_must_run_both(host, results_dir):
    cli.main([*BENCH, "--suite", "allreduce,sdpa"])
    (folder,) = archive.archived_runs(results_dir)
    assert {r.suite for r in archive.load_run(folder).records} == {"allreduce", "sdpa"}


def test_d5_stress_sweep_windows_must_be_refused():
    with pytest.raises(Exception, match="unrecognized arguments"):
        cli.build_parser().parse_args(["stress", "--sweep-windows"])


def test_d6_every_seed_checked_before_anything_timed(tmp_path, monkeypatch):
    from driver.records import DeviceInfo, GpuInfo
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    exe_dir = tmp_path / "bin"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, corrupt="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0, 1, 2), iters=20, rounds=2)
    sdpa._shape(opts, exe_dir, dev, LIMITS, "0" * 40, False, "small", (1, 2, 128, 64))
    ran = calls(log)
    timed = [c for c in ran if c[c.index("--iters") + 1] != "1"]
    assert ran.index(timed[0]) == 6


def test_d6_stress_without_gpu_names_not_measured(results_dir):
    proc = run_driver("stress")
    assert proc.returncode != 0 and "not measured" in proc.stderr.strip().splitlines()[-1]
