"""The CPU dry run of the SDPA suite (tests/sdpa_dry_run.py) keeps working: the suite's own code end to end with the
doubles, every record passing, the phases it reports named."""

from __future__ import annotations

from tests.sdpa_dry_run import MODEL, dry_run


def test_the_dry_run_runs_the_suite_and_names_its_phases(tmp_path, monkeypatch):
    fast = {k: v * 0.01 for k, v in MODEL.items() if k != "launch_flops_per_s"}
    shapes = [("tiny", (1, 2, 64, 64)), ("bigger", (1, 4, 512, 64))]
    monkeypatch.setattr("driver.suites.sdpa.CPU_INPUTS_MAX_VALUES", 1 << 16)  # tiny on the CPU, bigger on the worker
    wall, phases_s, records = dry_run(tmp_path, shapes, monkeypatch.setattr, fast, seeds=(0, 1),
                                      distributions=("normal", "large_logits_8"), rounds=2)
    assert records == 2 * 2 * 2 * 3 + 2 * 3  # shapes x seeds x distributions x impls, and the second timed mode
    assert {"checks", "timing", "reference (wait)", "checks (wait)", "inputs (background)"} <= set(phases_s)
    assert 0 < wall < 120
