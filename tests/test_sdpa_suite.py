"""The SDPA suite's ordering on a CPU: every seed of every variant is checked against the float64
reference before anything is timed, and a variant with wrong results is never timed.

The two "runners" here are test doubles (tests/runner_doubles.py, standing in for the CUDA
executables, which need a GPU): one writes the exact reference output, the other a corrupted
one. They log every invocation, so the test sees which runs asked for timed iterations. The
real runners' behaviour on GPUs is covered by tests/gpu/test_sdpa_gpu.py and the archived runs."""

from __future__ import annotations

import pytest

from driver import device, peers
from driver.errors import KernelFailed
from driver.options import RunOptions
from driver.records import DeviceInfo, GpuInfo
from driver.suites import sdpa
from driver.thresholds import load as load_thresholds
from tests.runner_doubles import calls, sdpa_exes


def test_a_wrong_variant_is_checked_first_and_never_timed(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(peers, "missing", lambda name: "torch is not installed on this host")
    exe_dir = tmp_path / "bin"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, corrupt="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0, 1, 2), iters=20, rounds=2)
    records, _ = sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, "small", (1, 2, 128, 64))

    ran = calls(log)
    timed = [c for c in ran if c[c.index("--iters") + 1] != "1"]
    assert timed, "the correct variant was never timed"
    assert all("out_cpasync" not in " ".join(c) for c in timed)  # the wrong variant's output path
    # Every seed's check-only runs come first (seeds x variants of them), then the timed runs.
    first_timed = ran.index(timed[0])
    assert first_timed == len(opts.seeds) * len(sdpa.VARIANTS)
    assert all(c[c.index("--iters") + 1] == "1" for c in ran[:first_timed])
    by = {(r.impl, r.seed): r for r in records}
    assert by[("baseline", 0)].passed and by[("baseline", 0)].round_p50_us
    assert by[("baseline", 1)].passed and not by[("baseline", 1)].round_p50_us
    assert by[("baseline", 2)].passed and not by[("baseline", 2)].round_p50_us
    # The correct variant is timed in both default modes, each record saying its mode.
    assert sorted(r.timing for r in records if (r.impl, r.seed) == ("baseline", 0)) == ["cold", "hot"]
    assert {c[c.index("--timing") + 1] for c in timed} == {"cold", "hot"}
    bad = by[("cpasync", 0)]
    assert not bad.passed and not bad.round_p50_us and bad.performance is None
    assert "not timed: wrong results" in bad.correctness.reasons


def test_a_wrong_shaped_output_is_malformed_output_not_a_small_error(tmp_path, monkeypatch):
    """A variant that writes one head of a [B, H, S, D] output broadcasts against the reference in
    numpy; the gated metric must refuse it, not score it."""
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(peers, "missing", lambda name: "torch is not installed on this host")
    exe_dir = tmp_path / "bin"
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, first_head_only="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=5, rounds=1)
    with pytest.raises(KernelFailed, match=r"shape \(1, 1, 128, 64\), the reference \(1, 2, 128, 64\)"):
        sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, "small", (1, 2, 128, 64))
