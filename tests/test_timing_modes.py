"""The two timing modes on a CPU: the --timing vocabulary, the flags each executable gets, a peer
that cannot do a mode is skipped for that mode only, a line in the wrong mode is refused, and a
gate on a mode the run did not time fails."""

from __future__ import annotations

import json
import sys

import pytest

from driver import config, gates, thresholds
from driver.errors import ConfigError, KernelFailed
from driver.options import RunOptions
from driver.records import AllreduceLine, SdpaLine
from driver.suites import allreduce, sdpa
from driver.suites.common import interleaved
from tests.conftest import run_driver

GATES = thresholds.load()


def test_timing_vocabulary():
    assert config.parse_timing("cold,hot") == ("cold", "hot")
    assert config.parse_timing("device") == ("cold",) and config.parse_timing("host") == ("hot",)
    assert config.parse_timing("hot, device,cold") == ("hot", "cold")  # aliases fold, order kept
    with pytest.raises(ConfigError, match="unknown timing mode 'warm'"):
        config.parse_timing("cold,warm")
    with pytest.raises(ConfigError, match="empty timing mode list"):
        config.parse_timing(",")


def test_default_modes_per_suite():
    opts = RunOptions()
    assert opts.modes("sdpa") == ("cold", "hot") and opts.modes("allreduce") == ("cold",)
    both = RunOptions(timing=("cold", "hot"))
    assert both.modes("allreduce") == both.modes("sdpa") == ("cold", "hot")


def test_bad_timing_on_the_command_line(results_dir):
    proc = run_driver("bench", "--timing", "warm")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == ConfigError.exit_code and len(lines) == 1, proc.stderr
    assert "unknown timing mode 'warm'" in lines[0] and "Traceback" not in proc.stderr
    assert not results_dir.exists()


def test_each_executable_gets_its_method_for_each_mode():
    assert allreduce.timing_flags("ours", "cold", 10) == ["--timing", "device"]
    assert allreduce.timing_flags("upstream", "hot", 10) == ["--timing", "host", "--batch", "10"]
    assert allreduce.timing_flags("nccl", "cold", 10) == ["--timing", "device"]
    assert allreduce.timing_flags("nccl", "hot", 10) == ["--timing", "hot", "--batch", "10"]
    opts = RunOptions(iters=50, warmup=3, batch=7)
    assert sdpa.timing_args(opts, "hot") == ["--iters", "50", "--warmup", "3", "--timing", "hot", "--batch", "7"]


def _printer(line: dict | None, *, fail: str = "") -> list[str]:
    """A stand-in executable: prints `line`, or an `error:` line and exits 3."""
    code = (f"import sys; print({fail!r}, file=sys.stderr); sys.exit(3)" if fail
            else f"print({json.dumps(json.dumps(line))})")
    return [sys.executable, "-c", code]


SDPA = {"suite": "sdpa", "shape": [1, 8, 512, 64], "iters": 10, "warmup": 1, "p50_us": 9.0, "p90_us": 9.5,
        "mean_us": 9.1, "std_us": 0.1, "min_us": 8.9, "tflops": 60.0}


def test_a_peer_that_cannot_do_a_mode_is_skipped_for_that_mode_only():
    cmds = {
        ("cpasync", "cold"): _printer({**SDPA, "impl": "cpasync", "timing": "cold"}),
        ("torch_sdpa", "cold"): _printer({**SDPA, "impl": "torch_sdpa", "timing": "cold"}),
        ("cpasync", "hot"): _printer({**SDPA, "impl": "cpasync", "timing": "hot", "batch": 10}),
        ("torch_sdpa", "hot"): _printer(None, fail="error: hot timing: CUDA graph capture failed: test"),
    }
    seen: list[tuple[str, str]] = []
    samples = interleaved(cmds, SdpaLine, rounds=2, min_rounds=2, target_spread=0.05, timeout_s=60,
                          key=lambda k, ln: (ln.impl, k[1]), on_line=lambda k, _ln: seen.append(k),
                          peers=frozenset({("torch_sdpa", "cold"), ("torch_sdpa", "hot")}))
    assert set(samples.by_key) == {("cpasync", "cold"), ("torch_sdpa", "cold"), ("cpasync", "hot")}
    assert list(samples.peer_failures) == [("torch_sdpa", "hot")]
    assert "CUDA graph capture failed" in samples.peer_failures[("torch_sdpa", "hot")]
    # Interleaved by mode: ours and the peer cold, then hot, every round; the failed peer only once.
    assert seen == [("cpasync", "cold"), ("torch_sdpa", "cold"), ("cpasync", "hot")] * 2


def test_our_failure_in_a_mode_is_not_skipped():
    cmds = {("cpasync", "hot"): _printer(None, fail="error: CUDA cudaStreamBeginCapture: test")}
    with pytest.raises(KernelFailed, match="cudaStreamBeginCapture"):
        interleaved(cmds, SdpaLine, rounds=1, min_rounds=1, target_spread=0.05, timeout_s=60,
                    key=lambda k, ln: (ln.impl, k[1]))


def test_a_line_in_another_mode_is_refused():
    line = AllreduceLine.model_validate({
        "suite": "allreduce", "impl": "nccl", "kernel_requested": "nccl", "kernel_selected": "nccl",
        "kernel_confirmed": "nccl", "dtype": "float32", "ngpus": 2, "bytes": 262144, "elements": 65536, "iters": 10,
        "warmup": 1, "timing": "host", "batch": 10, "p50_us": 40.0, "p90_us": 41.0, "min_us": 39.0, "mean_us": 40.0,
        "algbw_gbps": 6.5, "busbw_gbps": 6.5, "max_abs_err": 0.0, "wrong": 0, "checked": True})
    assert allreduce.line_key(("nccl", "hot"), line) == ("nccl", "hot", 262144)
    with pytest.raises(KernelFailed, match="asked for timing cold, the line says hot"):
        allreduce.line_key(("nccl", "cold"), line)


def test_a_gate_on_a_mode_not_timed_fails():
    ours = SdpaLine.model_validate({**SDPA, "impl": "cpasync", "timing": "hot"})
    peer = SdpaLine.model_validate({**SDPA, "impl": "torch_sdpa", "timing": "hot", "p50_us": 20.0})
    lines = {("cpasync", "hot"): ours, ("torch_sdpa", "hot"): peer}
    verdicts = gates.sdpa_speed("mission", lines, sdpa.VARIANTS, ("hot",), GATES)  # the mission gates are all cold
    assert verdicts[("cpasync", "hot")].status == "fail"
    assert "cold timing, which this run did not measure" in verdicts[("cpasync", "hot")].reasons[0]
    cold = {(i, "cold"): ln.model_copy(update={"timing": "cold"}) for (i, _m), ln in lines.items()}
    measured = gates.sdpa_speed("mission", cold, sdpa.VARIANTS, ("cold",), GATES)
    assert all("did not measure" not in r for v in measured.values() for r in v.reasons)


def test_every_gate_names_its_mode(tmp_path):
    text = thresholds.paths.thresholds_file().read_text().replace('timing = "cold"\n', "", 1)
    bad = tmp_path / "t.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match="timing: Field required"):
        thresholds.load(bad)
