"""The whole pipeline on a CPU, through `python -m driver`'s own entry point, with runner doubles
(tests/runner_doubles.py) in place of the GPU executables and a two-H200 device in place of NVML.

What is checked is the driver's part: which suites run, which gates a run asks for, that a gate
whose peer was not measured fails the run unless thresholds.toml makes it optional for the host,
that the sweep writes the dispatch windows only when asked, and what the archive says."""

from __future__ import annotations

import json

import pytest

from driver import archive, cli, device, paths, peers
from driver.errors import ConfigError, NoGPU, WrongResults
from driver.suites import sweep
from tests.conftest import gpu_skip_reason, run_driver
from tests.runner_doubles import H200X2, allreduce_exe, calls, fake_build, sdpa_exes

NO_TORCH = "torch is not installed on this host"
# Ours faster than upstream by 1.6x (gates: 1.0x at 256K, 1.1x at 16M); cp.async 1.25x the baseline (gate 1.10x).
OURS_US, UPSTREAM_US = 5.0, 8.0
SDPA_US = {"baseline": 10.0, "cpasync": 8.0}


@pytest.fixture
def host(tmp_path, monkeypatch, results_dir):
    """Doubles for every executable a bench run launches, two H200s, and no torch (so no NCCL or
    PyTorch peer): the exe folder."""
    exe_dir = fake_build(tmp_path, monkeypatch)
    allreduce_exe(exe_dir, "allreduce_bench", impl="ours", p50=OURS_US)
    allreduce_exe(exe_dir, "upstream_bench", impl="upstream", p50=UPSTREAM_US)
    sdpa_exes(exe_dir, p50=SDPA_US)
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)  # no torch: no NCCL, PyTorch or cuDNN peer
    return exe_dir


BENCH = ["bench", "--no-build", "--arch", "sm_90", "--iters", "5", "--warmup", "0", "--rounds", "1",
         "--shapes", "mission"]


def _only_run(results_dir):
    (folder,) = archive.archived_runs(results_dir)
    return folder, archive.load_run(folder)


def test_suite_list_runs_every_suite_named(host, results_dir, capsys):
    """`--suite allreduce,sdpa` runs both (it used to run the first only)."""
    cli.main([*BENCH, "--suite", "allreduce,sdpa"])
    _, run = _only_run(results_dir)
    assert {r.suite for r in run.records} == {"allreduce", "sdpa"}
    ran = calls(host / "calls.jsonl")
    assert any("--sizes" in c for c in ran) and any("--q" in c for c in ran)


def test_a_missing_peer_fails_its_gates(host, results_dir, capsys):
    """Without torch, the NCCL and PyTorch gates are not measured: the fp16 tier's accuracy gates against torch
    SDPA (one per distribution checked) give exit 7 naming them, the speed gates are not measured either, and
    the run is archived with every gate's state, failed and not measured first."""
    code = cli.main([*BENCH, "--suite", "all"])
    err = capsys.readouterr().err
    assert code == WrongResults.exit_code, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("wrong results: 3 correctness gate(s) not measured, e.g. "
                           "sdpa/accuracy/ours-vs-torch_sdpa/fp16/normal/mission: ")
    assert NO_TORCH in line
    folder, run = _only_run(results_dir)
    states = {g.gate: (g.status, g.optional) for g in run.gates}
    for dist in ("normal", "large_logits_4", "large_logits_8"):
        assert states[f"sdpa/accuracy/ours-vs-torch_sdpa/fp16/{dist}/mission"] == ("not_measured", False)
    assert not any("cudnn_fp8" in g for g in states)  # the fp8 tier was not asked for: nor its gates
    assert states["allreduce/speed/ours-vs-nccl/cold/float32/2gpu/262144B"] == ("not_measured", False)
    assert states["sdpa/speed/best-vs-torch_sdpa/cold/mission"] == ("not_measured", False)
    assert states["sdpa/speed/best-vs-torch_sdpa/hot/mission"] == ("not_measured", False)
    assert states["allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"] == ("pass", False)
    assert states["sdpa/speed/cpasync-vs-baseline/cold/mission"] == ("pass", False)
    compare_md = (folder / "COMPARE.md").read_text()
    assert compare_md.index("## Summary: allreduce") < compare_md.index("## Gates")  # the summary first, then gates
    assert "no peer timed" in compare_md[compare_md.index("## Summary: sdpa"):compare_md.index("## Gates")]
    table = compare_md[compare_md.index("## Gates"):]
    assert table.index("| NOT MEASURED | allreduce/speed/ours-vs-nccl") < table.index("| pass |")
    index = (results_dir / "README.md").read_text()
    assert ("6 NOT MEASURED (e.g. sdpa/accuracy/ours-vs-torch_sdpa/fp16/normal/mission: torch_sdpa not checked on "
            f"normal inputs at mission; {NO_TORCH}") in index


def test_a_peer_marked_optional_for_this_host_may_be_missing(host, results_dir, tmp_path, monkeypatch, capsys):
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + """
[[optional]]
gates = "*/speed/*-vs-nccl/*"
hosts = ["2xH200"]
reason = "this host has no torch"

[[optional]]
gates = "sdpa/speed/*-vs-torch_sdpa/*"
hosts = ["2xH*"]
reason = "this host has no torch"

[[optional]]
gates = "sdpa/accuracy/*-vs-torch_sdpa/*"
hosts = ["2xH*"]
reason = "this host has no torch"
""")
    assert cli.main([*BENCH, "--suite", "all", "--thresholds", str(limits)]) == 0, capsys.readouterr().err
    _, run = _only_run(results_dir)
    nccl = next(g for g in run.gates if "vs-nccl" in g.gate)
    assert (nccl.status, nccl.optional) == ("not_measured", True)
    assert "optional here: this host has no torch" in nccl.reasons
    # The same file on another device kind does not make them optional.
    other = H200X2.model_copy(update={"gpus": H200X2.gpus * 2})  # 4xH200
    monkeypatch.setattr(device, "probe", lambda: other)
    assert cli.main([*BENCH, "--suite", "sdpa", "--thresholds", str(limits)]) == WrongResults.exit_code


def test_sweep_writes_the_windows_only_when_asked(host, results_dir, tmp_path, monkeypatch, capsys):
    windows = tmp_path / "dispatch_windows.json"
    monkeypatch.setattr(sweep, "DISPATCH_WINDOWS_FILE", windows)
    real = paths.ROOT / "kernels_mojo" / "dispatch_windows.json"
    before = real.read_bytes()
    args = ["sweep", "--no-build", "--arch", "sm_90", "--sizes", "8K,16K", "--iters", "2", "--rounds", "1"]
    assert cli.main(args) == 0, capsys.readouterr().err
    # progress: one step per kernel per round, so with one round and one dtype the last reads 9/9
    kernels = len(sweep.ALLREDUCE_KERNEL_NAMES)
    steps = [ln for ln in capsys.readouterr().err.splitlines() if "] [" in ln and " sweep " in ln]
    assert len(steps) == kernels and f"[{kernels}/{kernels}, ETA " in steps[-1]
    assert not windows.exists() and real.read_bytes() == before
    (folder,) = archive.archived_runs(results_dir)
    assert json.loads((folder / "dispatch_windows.json").read_text())["defines"]
    assert cli.main([*args, "--write"]) == 0, capsys.readouterr().err
    assert json.loads(windows.read_text())["defines"] == json.loads((folder / "dispatch_windows.json").read_text())[
        "defines"]
    assert real.read_bytes() == before


@pytest.mark.parametrize("cmd", ["bench", "stress"])
def test_sweep_windows_is_no_longer_a_bench_or_stress_flag(cmd, results_dir):
    with pytest.raises(ConfigError, match="unrecognized arguments: --sweep-windows"):
        cli.build_parser().parse_args([cmd, "--sweep-windows"])


@pytest.mark.nvcc
@pytest.mark.mojo
@pytest.mark.skipif(gpu_skip_reason() is None, reason="this host has a GPU: the stress run would really run")
def test_stress_without_a_gpu_names_what_was_not_measured(results_dir):
    """The release gate on a CPU box: builds (cached), then exits 5 saying every stress gate is not measured."""
    proc = run_driver("stress")
    assert proc.returncode == 5, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("no GPU: ") and "not measured: every stress gate (allreduce, sdpa, sanitizers, profile)" in last
    assert not results_dir.exists() or not any(results_dir.iterdir())


LENIENT = """
[[optional]]
gates = "*/speed/*-vs-nccl/*"
hosts = ["2xH200"]
reason = "this host has no torch"
"""


def test_a_wrong_peer_is_recorded_and_shown_but_never_fails_our_run(host, results_dir, tmp_path, capsys):
    """Upstream's ranks disagree (as upstream fp32 did on 4x H200, 2026-11-26): its record is wrong with the
    reason and first element, COMPARE.md lists it, the speed gate against it says so, and bench exits 0."""
    mismatch = {"rank": 2, "element": 1234, "value": 0.5000001, "rank0_value": 0.5}
    allreduce_exe(host, "upstream_bench", impl="upstream", p50=UPSTREAM_US, wrong=7,
                  extra={"out_of_bound": 0, "rank_mismatch": 7, "rank_mismatch_first": mismatch})
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + LENIENT)
    code = cli.main([*BENCH, "--suite", "allreduce", "--thresholds", str(limits)])
    assert code == 0, capsys.readouterr().err
    folder, run = _only_run(results_dir)
    (up,) = [r for r in run.records if r.impl == "upstream" and r.config == "float32/2gpu/262144B"]
    assert up.correctness.status == "fail" and not up.passed and up.round_p50_us  # wrong, and timed anyway
    why = "rank agreement: 7 element(s) differ from rank 0's bits (first: rank 2 element 1234: 0.5000001 vs rank 0's 0.5)"
    assert up.correctness.reasons == [why]
    assert not any(g.gate.startswith("allreduce/correct/upstream") for g in run.gates)
    speed = next(g for g in run.gates if g.gate.startswith("allreduce/speed/ours-vs-upstream"))
    assert speed.status == "pass" and "upstream's own result was wrong (recorded, not gated)" in speed.reasons[-1]
    compare_md = (folder / "COMPARE.md").read_text()
    assert "## Peers with wrong results (recorded, not gated)" in compare_md
    assert "| float32/2gpu/262144B | upstream | cold | rank agreement: 7 element(s)" in compare_md


def test_ours_wrong_fails_the_run_with_the_property_named(host, results_dir, tmp_path, capsys):
    first = {"rank": 1, "element": 1234, "value": 0.34, "reference": 0.31, "bound": 0.0076}
    allreduce_exe(host, "allreduce_bench", impl="ours", p50=OURS_US, wrong=1,
                  extra={"out_of_bound": 1, "out_of_bound_first": first, "rank_mismatch": 0, "timed": False})
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + LENIENT)
    code = cli.main([*BENCH, "--suite", "allreduce", "--thresholds", str(limits)])
    err = capsys.readouterr().err
    assert code == WrongResults.exit_code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("wrong results: ") and "allreduce/correct/ours/float32/2gpu/" in last
    assert "bound: 1 element(s) outside |out - s| <= gamma_1 * sum|x_r| (first: rank 1 element 1234" in last


def test_more_gpus_than_present_is_one_line_naming_the_gpus_before_any_launch(host, results_dir, capsys):
    code = cli.main([*BENCH, "--suite", "allreduce", "--ngpus", "2,4"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("[")]
    assert code == NoGPU.exit_code and len(lines) == 1, lines
    assert lines[0].startswith("no GPU: --ngpus 4 asked for, but this host has 2 GPU(s): GPU0 NVIDIA H200, "
                               "GPU1 NVIDIA H200") and "use --ngpus 2" in lines[0]
    assert calls(host / "calls.jsonl") == []  # nothing launched
    assert not results_dir.exists() or not any(results_dir.iterdir())


@pytest.mark.parametrize("ngpus", ["2", "4", "8"])
def test_a_size_of_no_whole_elements_is_refused_before_any_launch(host, results_dir, ngpus, capsys):
    code = cli.main([*BENCH, "--suite", "allreduce", "--sizes", "256K,6", "--dtype", "float32,bfloat16",
                     "--ngpus", ngpus])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == ConfigError.exit_code and len(lines) == 1
    assert "size 6 is not a multiple of the 4-byte float32 element" in lines[0]
    assert calls(host / "calls.jsonl") == []
