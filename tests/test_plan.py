"""`bench --plan`: the cases, our variants, the peers and every gate with whether the run measures it, printed
without a GPU, a build or a launch (exit 0). A gate no case of the run can produce is listed as such, never
dropped."""

from __future__ import annotations

import re

import pytest

from driver import build, cli, device, launch, paths, peers, plan, thresholds
from driver.errors import ConfigError
from driver.suites import sdpa
from tests.runner_doubles import H200X2

PLAN = ["bench", "--plan", "--sizes", "256K,16M"]


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Any build, launch or archive write fails the test."""
    def refuse(*_a, **_k):
        raise AssertionError("bench --plan must build, launch and write nothing")

    monkeypatch.setattr(build, "build_all", refuse)
    monkeypatch.setattr(launch, "run_process", refuse)
    monkeypatch.setattr(launch, "start_process", refuse)
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path / "bench_results"))
    return tmp_path / "bench_results"


def _gates(out: str) -> dict[str, tuple[str, str]]:
    """gate id -> (state, why) from the plan's gate lines."""
    found = {}
    for m in re.finditer(r"^  (measured|not measured|not in this run) +(\S+)(?:  \((.*)\))?$", out, re.MULTILINE):
        assert m.group(2) not in found, f"{m.group(2)} listed twice"
        found[m.group(2)] = (m.group(1), m.group(3) or "")
    return found


def test_plan_on_a_host_without_gpu_lists_every_gate_and_builds_nothing(nothing_runs, capsys):
    """The main job's plan on this CPU box: exit 0, the cases, ours and the peers, and every speed gate of
    thresholds.toml once: the 256M gate not in this run (its size), the run's others not measured for want of
    GPUs."""
    assert cli.main(PLAN) == 0
    out = capsys.readouterr().out
    assert "suite allreduce: sizes 256K, 16M; dtypes float32;" in out
    assert "suite sdpa: shapes mission (1x8x512x64)," in out and "timing cold, hot" in out
    assert "  ours: " + ", ".join(f"{impl} ({exe})" for impl, exe in sdpa.VARIANTS.items()) in out
    assert "peers: upstream, nccl" in out
    listed = _gates(out)
    universe = [g.gate for g in plan.speed_gate_universe(thresholds.load(None))]
    assert set(universe) <= set(listed)
    assert listed["allreduce/speed/ours-vs-upstream/cold/float32/2gpu/268435456B"] == (
        "not in this run", "size 256M is not in --sizes")
    assert listed["allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"][0] == "not measured"
    assert "needs 2 GPUs (this host has 0)" in \
        listed["allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"][1]
    assert "needs 1 GPU (this host has 0)" in listed["sdpa/speed/cpasync-vs-baseline/cold/mission"][1]
    assert listed["sdpa/accuracy/ours-vs-cudnn_fp8/fp8/*/*"] == ("not in this run",
                                                                "the fp8 tier is not in --precision")
    assert not nothing_runs.exists()


def test_plan_on_two_h200_says_which_gates_this_run_measures(nothing_runs, tmp_path, monkeypatch, capsys):
    """On 2x H200 without torch: a 4-GPU gate "needs 4 GPUs", a gate at a shape the run does not include (the
    mission shape written as its dimensions) and one of a tier not asked for are listed as not in this run, the
    cp.async gate is measured, a gate on a mode not timed is not measured, and [[optional]] marks what it
    covers for this device kind."""
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + """
[[allreduce.speedup]]
peer = "upstream"
timing = "cold"
bytes = 262144
ngpus = 4
min_ratio = 1.0

[[sdpa.speedup]]
impl = "cpasync"
peer = "baseline"
timing = "hot"
shape = "large"
min_ratio = 1.0

[[sdpa.speedup]]
impl = "cpasync"
peer = "baseline"
timing = "cold"
shape = "1x8x512x64"
min_ratio = 1.0

[[optional]]
gates = "sdpa/speed/best-vs-torch_sdpa/*"
hosts = ["2xH200"]
reason = "a test's reason"
""")
    code = cli.main([*PLAN, "--thresholds", str(limits), "--shapes", "mission,large", "--timing", "cold"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "host: 2xH200, 2 GPU(s), GPU 0 sm_90" in out
    assert "GPU counts 2;" in out
    listed = _gates(out)
    assert listed["allreduce/speed/ours-vs-upstream/cold/float32/4gpu/262144B"] == (
        "not measured", "needs 4 GPUs (this host has 2); fails the run")
    assert listed["allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"] == ("measured", "")
    assert listed["sdpa/speed/cpasync-vs-baseline/cold/mission"] == ("measured", "")
    assert listed["sdpa/speed/cpasync-vs-baseline/hot/large"] == (
        "not measured", "hot is not in --timing cold; fails the run")
    assert listed["sdpa/speed/best-vs-torch_sdpa/cold/odd"] == ("not in this run", "shape odd is not in --shapes")
    assert listed["sdpa/speed/cpasync-vs-baseline/cold/1x8x512x64"] == (
        "not in this run", ("shape 1x8x512x64 is not in --shapes (the run's mission is this case, but a gate "
        'matches a case by its name: write shape = "mission")'))
    state, why = listed["sdpa/speed/best-vs-torch_sdpa/cold/mission"]
    assert state == "not measured" and why.endswith("optional on 2xH200: a test's reason") and "torch" in why
    assert listed["sdpa/speed/best-vs-cudnn_fp8/cold/large_d128"] == (
        "not in this run", "shape large_d128 is not in --shapes")
    assert not nothing_runs.exists()


def test_plan_checks_its_options_like_a_run(nothing_runs, capsys):
    """Bad input is the run's own one line and exit 2, before any plan is printed."""
    assert cli.main(["bench", "--plan", "--sizes", "0"]) == ConfigError.exit_code
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("configuration error: --sizes: size 0 "), captured.err
