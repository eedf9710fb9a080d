"""Stress's profile stage on a CPU: what happens without Nsight Compute, when ncu cannot follow a
run, how the overlap fraction is formed, and that the ncu table parser gives counters or one
clear error for any text.

The SDPA "runners" here are test doubles (Python scripts standing in for the CUDA executables):
they answer `--ablate` with a fixed time per mode, so the test can check the overlap arithmetic.
The fake `ncu` only sleeps (a run ncu cannot follow). Real ncu output is archived by the stress
run on a GPU host."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.options import RunOptions
from driver.records import DeviceInfo, GpuInfo
from driver.suites import sdpa
from driver.suites.stress import profile

DEV = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
SHA = "0" * 40
P50_BY_MODE = {"none": 10.0, "no_compute": 6.0, "no_loads": 8.0}

RUNNER = """#!{python}
import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
mode = args.get("--ablate", "none")
p50 = {p50!r}[mode]
print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "shape": [1, 2, 128, 64], "iters": 5, "warmup": 0,
                  "p50_us": p50, "p90_us": p50, "mean_us": p50, "std_us": 0.0, "min_us": p50, "tflops": 1.0,
                  "ablate": mode}}))
"""


def _runners(tmp_path: Path) -> Path:
    exe_dir = tmp_path / "bin"
    exe_dir.mkdir()
    for impl, exe in sdpa.VARIANTS.items():
        path = exe_dir / exe
        path.write_text(RUNNER.format(python=sys.executable, p50=P50_BY_MODE, impl=impl))
        path.chmod(0o755)
    return exe_dir


def test_without_ncu_counters_are_not_measured_and_overlap_is_still_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "find_ncu", lambda: None)
    monkeypatch.setattr(profile, "PROFILED_SHAPES", ("small",))
    exe_dir = _runners(tmp_path)
    opts = RunOptions(iters=5, warmup=0, timeout_s=30)
    records = profile.run(opts, exe_dir, exe_dir / "allreduce_bench", DEV, SHA, sdpa_variants=True,
                          allreduce=False)

    ncu = [r for r in records if r.config.startswith("ncu/")]
    overlap = [r for r in records if r.config.startswith("overlap/")]
    assert len(ncu) == len(overlap) == len(sdpa.VARIANTS)
    for r in ncu:  # never reported clean: not measured with the reason, no counters, no invented zeros
        assert r.correctness.status == "not_measured" and not r.passed
        assert r.measurement.detail.startswith("not measured: Nsight Compute (ncu) not found")
        assert r.measurement.counters == {}
        m = r.measurement
        assert (m.iterations, m.checked, m.wrong, m.max_abs_err) == (None, None, None, None)
    full, loads, math = P50_BY_MODE["none"], P50_BY_MODE["no_compute"], P50_BY_MODE["no_loads"]
    for r in overlap:
        c = r.measurement.counters
        assert (c["full_p50_us"], c["loads_only_p50_us"], c["math_only_p50_us"]) == (full, loads, math)
        assert c["overlap"] == pytest.approx((loads + math - full) / min(loads, math))
        assert r.passed and r.correctness.status == "pass"


def test_an_allreduce_run_ncu_cannot_follow_is_not_measured(tmp_path, monkeypatch):
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    fake_ncu.chmod(0o755)
    monkeypatch.setattr(profile, "ALLREDUCE_NCU_TIMEOUT_S", 1.0)
    rec = profile.ncu_allreduce(RunOptions(), str(fake_ncu), tmp_path / "allreduce_bench", DEV, SHA,
                                profile.METRICS)
    assert rec.correctness.status == "not_measured" and not rec.passed
    assert rec.measurement.detail.startswith("not measured: under ncu the run did not finish within 1 s")
    assert rec.measurement.seconds < 20  # the process tree was killed at the timeout


# The column layout `ncu --csv` prints (one row per metric); values written here by hand, not captured.
HEADER = '"ID","Process ID","Process Name","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"'


def test_ncu_table_parser_takes_the_first_matching_launch():
    section = '"Command line profiler metrics"'
    rows = [
        "==PROF== Connected to process 1",
        HEADER,
        f'"0","1","runner","spin_kernel",{section},"gpu__time_duration.sum","ns","5"',
        f'"1","1","runner","sdpa_fp8_fwd_kernel",{section},"gpu__time_duration.sum","ns","12,345"',
        f'"1","1","runner","sdpa_fp8_fwd_kernel",{section},"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","0"',
        f'"1","1","runner","sdpa_fp8_fwd_kernel",{section},"smsp__x.ratio","","n/a"',
        f'"2","1","runner","sdpa_fp8_fwd_kernel",{section},"gpu__time_duration.sum","ns","1"',
    ]
    text = "\n".join(rows)
    assert profile.parse_ncu_csv(text, "sdpa") == {
        "gpu__time_duration.sum": 12345.0,
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0.0,
    }
    with pytest.raises(profile.NcuOutputError, match="no numeric counter"):
        profile.parse_ncu_csv(text, "ar_cpasync")
    with pytest.raises(profile.NcuOutputError, match="no counter table"):
        profile.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission", "sdpa")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.text(max_size=12), max_size=9), max_size=6), st.booleans())
def test_ncu_table_parser_gives_finite_counters_or_one_clear_error(rows, with_header):
    lines = [HEADER] if with_header else []
    lines += [",".join('"' + c.replace('"', "") + '"' for c in row) for row in rows]
    try:
        values = profile.parse_ncu_csv("\n".join(lines), "")
    except profile.NcuOutputError:
        return
    assert values and all(isinstance(v, float) and math.isfinite(v) for v in values.values())


def test_known_metrics_reads_the_first_column():
    listing = "Device NVIDIA H100\nMetric Name                  Metric Description\ngpu__time_duration  Duration\n"
    assert profile.known_metrics(listing) == {"gpu__time_duration"}

