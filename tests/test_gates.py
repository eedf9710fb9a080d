"""The gate stage: absence is a state (never a pass), stress records hold only measured values,
optional gates are spelled in thresholds.toml and validated, and the run's headline shows every
gate's state, failed and not measured first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from driver import archive, gates, report, thresholds
from driver.errors import ConfigError, PerfGateFailed, WrongResults
from driver.options import RunOptions
from driver.suites.stress import sanitizer, watchdog
from tests.runner_doubles import H200X2, allreduce_exe
from tests.test_pipeline import host  # noqa: F401  (the pipeline's doubles: two H200s, no torch)

LIMITS = thresholds.load()
RUNS = Path(__file__).parent.parent / "bench_results"  # archived runs, read as they are
SHA = "0" * 40
STRESS = RunOptions(suites=("stress",))


def _no_sanitizer_record(monkeypatch):
    monkeypatch.setattr(sanitizer.shutil, "which", lambda name: None)
    return sanitizer.sanitize(STRESS, "memcheck", ["sdpa_fp8_cpasync"], "sdpa_fp8_cpasync", "small", H200X2, SHA)


def test_a_sanitizer_that_is_not_there_is_not_measured_and_holds_no_numbers(monkeypatch):
    rec = _no_sanitizer_record(monkeypatch)
    assert rec.correctness.status == "not_measured" and not rec.passed  # it used to pass ("not covered")
    m = rec.measurement
    assert (m.iterations, m.checked, m.wrong, m.max_abs_err, m.hazards) == (None, None, None, None, None)
    assert rec.max_abs_err is None and "compute-sanitizer not on PATH" in rec.correctness.reasons[0]


def test_an_unmeasured_stress_gate_fails_the_run_unless_optional_for_the_host(monkeypatch, tmp_path):
    rec = _no_sanitizer_record(monkeypatch)
    results, _ = gates.evaluate([rec], [], STRESS, LIMITS, H200X2.kind)
    (g,) = results
    assert g.gate == "stress/sanitizer/sdpa_fp8_cpasync/memcheck/small" and g.blocking
    err = gates.exit_decision(results, tmp_path)
    assert isinstance(err, WrongResults)
    assert "1 correctness gate(s) not measured, e.g. stress/sanitizer/" in err.message
    lenient = LIMITS.model_copy(update={"optional": [thresholds.OptionalGate(
        gates="stress/sanitizer/*", hosts=["2xH200"], reason="no compute-sanitizer on this host")]})
    results, _ = gates.evaluate([rec], [], STRESS, lenient, H200X2.kind)
    assert results[0].optional and gates.exit_decision(results, tmp_path) is None
    results, _ = gates.evaluate([rec], [], STRESS, lenient, "1xH100")  # another host: still required
    assert isinstance(gates.exit_decision(results, tmp_path), WrongResults)


def test_the_watchdog_reports_what_its_recovery_run_measured(tmp_path, monkeypatch):
    """The recovery run after the hang found 3 wrong elements: the record says 3 and its error,
    not the constants 0 and 0.0 it used to write."""
    exe = allreduce_exe(tmp_path, "allreduce_bench", impl="ours", p50=5.0, wrong=3, err=0.25)
    monkeypatch.setattr(watchdog, "WATCHDOG_TIMEOUT_S", 1.0)
    rec = watchdog.allreduce_hang(RunOptions(timeout_s=30), exe, H200X2, LIMITS, SHA)
    m = rec.measurement
    assert m.hang and (m.wrong, m.max_abs_err, m.checked) == (3, 0.25, 1)
    assert rec.correctness.status == "fail"
    assert any("3 wrong elements" in r for r in rec.correctness.reasons)


def test_a_watchdog_whose_gpus_did_not_recover_measured_nothing(tmp_path, monkeypatch):
    exe = tmp_path / "allreduce_bench"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n"
                   "time.sleep(600) if '--debug-hang-rank' in sys.argv else sys.exit(3)\n")
    exe.chmod(0o755)
    monkeypatch.setattr(watchdog, "WATCHDOG_TIMEOUT_S", 1.0)
    rec = watchdog.allreduce_hang(RunOptions(timeout_s=30), exe, H200X2, LIMITS, SHA)
    m = rec.measurement
    assert (m.iterations, m.checked, m.wrong, m.max_abs_err) == (None, None, None, None)
    assert rec.correctness.status == "fail" and "did not recover" in rec.correctness.reasons[0]


def test_the_stress_table_prints_unmeasured_fields_as_absent(monkeypatch):
    rec = _no_sanitizer_record(monkeypatch)
    run = archive.load_run(RUNS / "20261122T150723Z-49c2cb74-2xH200")
    run = run.model_copy(update={"records": [rec], "gates": gates.evaluate([rec], [], STRESS, LIMITS, "2xH200")[0]})
    row = next(ln for ln in report.compare_markdown(run).splitlines() if ln.startswith("| sanitizer |"))
    assert "| - | - | - | - | - |" in row and "| 0 |" not in row and "0.0" not in row


def test_the_index_headline_leads_with_the_failed_gate():
    """An archived 2x H200 bench run (schema 1) whose cp.async gate failed and whose upstream peer
    dropped out at 16 MiB: its headline used to read "N/M correct; ...", hiding both."""
    run = archive.load_run(RUNS / "20261122T120247Z-293dd159-2xH200")
    line = report.headline(run)
    assert line.startswith("1 FAIL (e.g. sdpa/speed/cpasync/mission/seed0: p50 vs baseline: 1.04x")
    assert line.index("FAIL") < line.index("NOT MEASURED") < line.index("pass")
    assert "allreduce/speed/ours/float32/2gpu/16777216B: peer upstream not measured" in line


def test_the_speed_gates_a_run_asks_for_follow_its_options():
    asked = {g.gate for g in gates.speed_gates(RunOptions(sizes_bytes=(256 << 10,), shapes=()), LIMITS)}
    assert asked == {"allreduce/speed/ours-vs-nccl/cold/float32/2gpu/262144B",
                     "allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"}
    assert gates.speed_gates(RunOptions(suites=("sdpa",), shapes=(("mission", (1, 8, 512, 64)),)), LIMITS)
    assert not gates.speed_gates(RunOptions(dtypes=("bfloat16",), shapes=()), LIMITS)


def test_a_failure_blocks_even_where_absence_is_optional(tmp_path):
    lenient = LIMITS.model_copy(update={"optional": [thresholds.OptionalGate(gates="*/speed/*", hosts=["*"],
                                                                              reason="any")]})
    failed = gates.GateResult(gate="allreduce/speed/ours-vs-nccl/x", kind="speed", status="fail", reasons=["0.5x"])
    assert lenient.optional_reason(failed.gate, "2xH200") == "any"
    assert isinstance(gates.exit_decision([failed], tmp_path), PerfGateFailed)


@pytest.mark.parametrize("entry, needle", [
    ('gates = "allreduce/speedup/*"\nhosts = ["*"]\nreason = "x"', "names no gate"),
    ('gates = "gemm/speed/*"\nhosts = ["*"]\nreason = "x"', "names no gate"),
    ('gates = "sdpa/speed/*"\nhosts = ["2 x H200"]\nreason = "x"', "not a device kind pattern"),
    ('gates = "sdpa/speed/*"\nhosts = []\nreason = "x"', "hosts"),
    ('gates = "sdpa/speed/*"\nhosts = ["*"]', "reason"),
    ('gates = "sdpa/speed/*"\nhost = ["*"]\nreason = "x"', "host"),
])
def test_optional_entries_are_validated(tmp_path, entry, needle):
    bad = tmp_path / "t.toml"
    bad.write_text(thresholds.paths.thresholds_file().read_text() + f"\n[[optional]]\n{entry}\n")
    with pytest.raises(ConfigError, match=needle):
        thresholds.load(bad)


def test_the_repo_thresholds_excuse_only_the_allreduce_ncu_attempt():
    """ncu cannot follow the cross-GPU barrier; nothing else may go unmeasured on a multi-GPU host by default."""
    assert LIMITS.optional_reason("stress/profile/1stage_cpasync_s3/ncu/2gpu/8K", "2xH200")
    for gate in ("stress/profile/sdpa_fp8_cpasync/ncu/mission", "stress/sanitizer/sdpa_fp8_baseline/memcheck/small",
                 "allreduce/speed/ours-vs-nccl/cold/float32/2gpu/262144B", "sdpa/speed/best-vs-torch_sdpa/cold/mission"):
        for kind in ("2xH200", "4xH100", "8xH200"):
            assert LIMITS.optional_reason(gate, kind) is None


def test_a_host_of_one_gpu_may_leave_the_allreduce_gates_unmeasured_and_nothing_else():
    """The main job on 1x H200 (2026-11-28, 20261128T110540Z-a3f9c917-1xH200) exited 8 for the three 2-GPU gates
    its one GPU cannot measure. On such a host the allreduce gates may go unmeasured (the suite skips itself), the
    SDPA and stress gates may not; a failed allreduce gate would still fail anywhere."""
    for gate in ("allreduce/speed/ours-vs-nccl/cold/float32/2gpu/262144B", "allreduce/correct/ours/float32/2gpu/262144B"):
        assert "at least 2 GPUs" in LIMITS.optional_reason(gate, "1xH200")
        assert LIMITS.optional_reason(gate, "2xH200") is None
    for gate in ("sdpa/speed/best-vs-torch_sdpa/cold/mission", "stress/soak/1stage/float32/2gpu"):
        assert LIMITS.optional_reason(gate, "1xH100") is None


def test_a_p50_whose_samples_outlasted_the_hold_decides_no_gate():
    """Records of the 2x H200 acceptance run (2026-11-23, b3ccd16e): at 256 KiB fp32 ours beat upstream 1.30x
    and passed. Had most of our samples been enqueued after the stream hold ended (host launch time inside the
    event pair), the same ratio must not pass or fail a gate: inconclusive, with the count in the reason."""
    run = archive.load_run(Path(__file__).resolve().parents[1] / "bench_results" / "20261123T073635Z-b3ccd16e-2xH200")
    opts = RunOptions(suites=("allreduce",), sizes_bytes=(256 << 10,), timing=("cold",), ngpus=(2,))
    gate_id = "allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B"
    results, _ = gates.evaluate(run.records, run.skipped, opts, LIMITS, "2xH200")
    assert {g.gate: g.status for g in results}[gate_id] == "pass"
    tainted = []
    for r in run.records:
        if (r.impl, r.config, r.timing_mode) == ("ours", "float32/2gpu/262144B", "cold"):
            iters = r.measurement.iters
            r = r.model_copy(update={"measurement": r.measurement.model_copy(update={"hold_overruns": iters})})
        tainted.append(r)
    results, _ = gates.evaluate(tainted, run.skipped, opts, LIMITS, "2xH200")
    (g,) = [g for g in results if g.gate == gate_id]
    assert g.status == "inconclusive"
    assert any("timing not trusted" in why and "outlasted the stream hold" in why for why in g.reasons)
    assert any(why.startswith("cold p50 vs upstream: 1.30x") for why in g.reasons)


# ---------------------------------------------------------------- known shortfalls (issue 46), shared GPUs, fp8 bound

H200_RUN = RUNS / "20261127T034042Z-a7f2c552-2xH200"  # the newest 2x H200 bench: both suites, every peer


def _judge(run, limits, records=None):
    from driver import limits as known_limits  # the options an archived run answers (limits._options_of)

    opts = known_limits._options_of(run)
    return gates.evaluate(records or run.records, run.skipped, opts, limits, run.device.kind)


def _unmarked(limits):
    return limits.model_copy(update={"sdpa": limits.sdpa.model_copy(update={"speedup": [
        g.model_copy(update={"known": None}) for g in limits.sdpa.speedup]})})


def _marked(limits, shape: str, mode: str, why: str = "test mark"):
    return limits.model_copy(update={"sdpa": limits.sdpa.model_copy(update={"speedup": [
        g.model_copy(update={"known": why}) if (g.shape, g.timing, g.peer) == (shape, mode, "torch_sdpa") else g
        for g in limits.sdpa.speedup]})})


def test_known_shortfalls_read_known_and_the_archived_release_gate_exits_0(tmp_path):
    """The 2x H200 bench of a7f2c552 under today's thresholds: the fp16 tier's large-shape gates against torch fall
    short as thresholds.toml marks them (KNOWN, with the mark in the reasons) and the 256 KiB NCCL gate passes its
    measured floor, so nothing fails the run and the last line says how many are KNOWN. Without the marks the same
    records exit 8, as every run did before."""
    results, _ = _judge(archive.load_run(H200_RUN), LIMITS)
    states = {g.gate: g for g in results}
    large = states["sdpa/speed/best-vs-torch_sdpa/cold/large_d128"]
    assert large.status == "known" and not large.blocking
    assert large.reasons[0].startswith("cold p50 vs torch_sdpa: 0.93x")
    assert large.reasons[1].startswith(f"{gates.KNOWN_NOTE}: fp16 tier behind torch SDPA")
    assert states["allreduce/speed/ours-vs-nccl/cold/float32/2gpu/262144B"].status == "pass"  # 1.70x >= 1.5x
    assert not [g for g in results if g.status in ("fail", "xpass", "not_measured")]
    assert gates.exit_decision(results, tmp_path) is None
    assert gates.exit_decision(results, tmp_path, strict=True) is None
    line = gates.exit_line(results)
    assert "6 speed gate(s) KNOWN (marked known in thresholds.toml; reported, not failing the run)" in line
    results, _ = _judge(archive.load_run(H200_RUN), _unmarked(LIMITS))
    err = gates.exit_decision(results, tmp_path)
    assert isinstance(err, PerfGateFailed) and "6 speed gate(s) failed" in err.message
    md = report.compare_markdown(archive.load_run(H200_RUN).model_copy(update={"gates": _judge(
        archive.load_run(H200_RUN), LIMITS)[0]}))
    table = md[md.index("## Gates"):]
    assert "| KNOWN | sdpa/speed/best-vs-torch_sdpa/cold/large_d128 | speed | cold p50 vs torch_sdpa: 0.93x" in table
    assert "KNOWN: a speed gate thresholds.toml marks `known`" in table
    assert table.index("| KNOWN |") < table.index("| inconclusive |") < table.index("| pass |")


def test_a_known_gate_that_passes_is_xpass_and_fails_the_run_only_under_strict(tmp_path):
    """mission cold passed 1.28x against torch: marked known, it reads XPASS. Without --strict the run still exits 0
    and the last line says so; with --strict it exits 8 naming the gate, so that the mark comes off."""
    marked = _marked(LIMITS, "mission", "cold", "pretend shortfall")
    results, _ = _judge(archive.load_run(H200_RUN), marked)
    (g,) = [g for g in results if g.gate == "sdpa/speed/best-vs-torch_sdpa/cold/mission"]
    assert g.status == "xpass" and not g.blocking
    assert g.reasons[0].startswith("cold p50 vs torch_sdpa: 1.28x") and g.reasons[1].startswith(gates.XPASS_NOTE)
    assert gates.exit_decision(results, tmp_path) is None
    line = gates.exit_line(results)
    assert ("1 speed gate(s) XPASS (passed although marked known: remove the mark; reported, not failing the run "
            "without --strict), e.g. sdpa/speed/best-vs-torch_sdpa/cold/mission") in line
    err = gates.exit_decision(results, tmp_path, strict=True)
    assert isinstance(err, PerfGateFailed) and err.exit_code == 8
    assert err.one_line().startswith("performance gate failed: 1 speed gate(s) XPASS (passed although marked known; "
                                     "--strict), e.g. sdpa/speed/best-vs-torch_sdpa/cold/mission: cold p50 vs")
    assert "6 speed gate(s) KNOWN" in err.message
    assert report.headline(archive.load_run(H200_RUN).model_copy(update={"gates": results})).count("XPASS (e.g. ")


def test_a_known_gate_inside_the_noise_stays_inconclusive():
    """long_d128 hot read 0.99x on 2x H200, inside the 2% band: marked known, it neither fails nor passes."""
    results, _ = _judge(archive.load_run(H200_RUN), LIMITS)
    (g,) = [g for g in results if g.gate == "sdpa/speed/best-vs-torch_sdpa/hot/long_d128"]
    assert g.status == "inconclusive" and g.reasons[0].startswith("hot p50 vs torch_sdpa: 0.99x")
    assert g.reasons[1].startswith(gates.KNOWN_NOTE)


def test_a_case_timed_beside_another_process_decides_no_speed_gate():
    """The same records, with NVML having seen 4 other processes on GPU0 before the SDPA large_d128 case: every speed
    gate resting on it reads inconclusive with the reason (the ratio kept), COMPARE.md lists the case, and the
    gates on other cases keep their verdicts."""
    run = archive.load_run(H200_RUN)
    busy = [g.model_copy(update={"other_processes": 4}) if g.index == 0 else g for g in run.device.gpus]
    records = [r.model_copy(update={"telemetry_before": busy, "flags": ["GPU0: 4 other process(es) on the GPU"]})
               if r.suite == "sdpa" and r.config.startswith("large_d128/") else r for r in run.records]
    results, attached = _judge(run, LIMITS, records)
    states = {g.gate: g for g in results}
    for mode in ("cold", "hot"):
        g = states[f"sdpa/speed/best-vs-torch_sdpa/{mode}/large_d128"]
        assert g.status == "inconclusive", g
        assert any(r.startswith(f"{mode} p50 vs torch_sdpa: 0.9") for r in g.reasons)
        assert any(r.startswith(f"{gates.SHARED_GPU_NOTE} (GPU0: 4 other process(es)") for r in g.reasons)
    assert states["sdpa/speed/best-vs-torch_sdpa/cold/large"].status == "known"  # another case: untouched
    md = report.compare_markdown(run.model_copy(update={"records": attached, "gates": results}))
    shared = md[md.index("## Timed on a shared GPU"):]
    assert "| large_d128/seed0 | cpasync | cold | GPU0: 4 other process(es) on the GPU |" in shared
    assert "## Timed on a shared GPU" not in report.compare_markdown(run)


def _fp8_records(rel_scale: float):
    """Our fp8 record at (4,64,100,128) on normal inputs through the suite's own error path (suites/sdpa.tier_errors,
    gates.sdpa_correctness): an output whose worst element is off by 0.07015, the rest by noise of rms `rel_scale` of
    the output's; and cuDNN FP8's record of the same case at rel_l2 0.046 (its error on normal inputs)."""
    import json

    import numpy as np

    from driver.records import ArchivedRecord, SdpaLine, Verdict
    from driver.suites import sdpa

    rng = np.random.default_rng(0)
    out = (0.3 * rng.standard_normal((4, 64, 100, 128))).astype(np.float16)
    got = out.astype(np.float64)
    err = np.clip(rel_scale * 0.3 * rng.standard_normal(got.shape), -0.05, 0.05)
    err.flat[12345] = 0.07015
    errs = sdpa.tier_errors(out, got - err, LIMITS.sdpa, "fp8", "normal", "test output")
    verdict = gates.sdpa_correctness(errs, LIMITS.sdpa, "fp8", "normal")
    line = json.loads((Path(__file__).parent / "data" / "captured" / "sdpa_h200.jsonl").read_text().splitlines()[0])
    recs = []
    for impl, kernel, v, rel in (("cpasync", "wgmma_fp8_sm90", verdict, errs.rel_l2),
                                 ("cudnn_fp8", None, Verdict(status="not_measured"), 0.046)):
        ln = SdpaLine.model_validate({**line, "impl": impl, "precision": "fp8", "shape": [4, 64, 100, 128],
                                      **({"kernel": kernel} if kernel else {})})
        recs.append(ArchivedRecord(suite="sdpa", impl=impl, kernel=kernel or impl, config="4x64x100x128/seed0",
                                   device="1xH100", git_sha=SHA, seed=0, distribution="normal",
                                   passed=v.passed, correctness=v, measurement=ln, rel_l2=rel,
                                   max_abs_err=errs.max_abs_err, max_abs_rel=errs.max_abs_rel))
    return errs, recs


def test_the_fp8_tier_is_bound_by_its_own_bound_and_cudnn_not_the_fp16_tiers_absolute_0_06(tmp_path):
    """issue 46: `--precision fp8` at (4,64,100,128) on normal inputs failed with max_abs_err 0.07015 > 0.06, the
    seeds' fp16 contract. Within the fp8 tier's bound (rel_l2 <= 0.0751, worst element <= 0.225 max|O|) and
    cuDNN FP8's error it passes; with rel_l2 over the bound it fails (exit 7)."""
    opts = RunOptions(suites=("sdpa",), precisions=("fp8",), distributions=("normal",), timing=("cold",),
                      shapes=(("4x64x100x128", (4, 64, 100, 128)),))
    errs, recs = _fp8_records(0.035)
    assert errs.max_abs_err == pytest.approx(0.07015) and errs.max_abs_err > LIMITS.sdpa.max_abs_err
    assert errs.rel_l2 < LIMITS.sdpa.bound("fp8", "normal").max_rel_l2
    results, _ = gates.evaluate(recs, [], opts, LIMITS, "1xH100")
    states = {g.gate: g for g in results}
    assert states["sdpa/correct/cpasync/fp8/normal/4x64x100x128/seed0"].status == "pass"
    assert states["sdpa/accuracy/ours-vs-cudnn_fp8/fp8/normal/4x64x100x128"].status == "pass"
    assert gates.exit_decision(results, tmp_path) is None
    # the same worst element in the fp16 tier: the seeds' 0.06 binds there
    assert f"max_abs_err {errs.max_abs_err:.4g} > 0.06" in gates.sdpa_correctness(
        errs, LIMITS.sdpa, "fp16", "normal").reasons
    errs, recs = _fp8_records(0.09)
    assert errs.rel_l2 > LIMITS.sdpa.bound("fp8", "normal").max_rel_l2
    results, _ = gates.evaluate(recs, [], opts, LIMITS, "1xH100")
    (g,) = [g for g in results if g.gate == "sdpa/correct/cpasync/fp8/normal/4x64x100x128/seed0"]
    assert g.status == "fail" and g.reasons[0].startswith("rel_l2 0.08") and "(fp8 tier, normal inputs)" in g.reasons[0]
    assert isinstance(gates.exit_decision(results, tmp_path), WrongResults)


KNOWN = 'known = "slow since today, run X"\n'


@pytest.mark.parametrize("anchor, insert, needles", [
    ('peer = "cudnn_fp8"\nmax_ratio = 1.0\n', KNOWN,
     ['[[sdpa.accuracy]] #2 (precision = "fp8", peer = "cudnn_fp8", max_ratio = 1.0): known on accuracy gates']),
    ("max_bad_frac = 0.01\n", KNOWN, ["[sdpa]: known on correctness gates"]),
    ("max_wrong = 0\n", KNOWN, ["[allreduce]: known on correctness gates"]),
    ("max_smem_bytes_per_block = 65536\n", KNOWN, ["[build]: known on static gates"]),
    ('max_rel_l2 = 5.86e-4\n', KNOWN, ['[[sdpa.bounds]] #1 (precision = "fp16"', "known on accuracy bounds"]),
    ("target_spread = 0.05\n", KNOWN, ["[noise]: known names no gate"]),
    ('gates = "stress/profile/1stage_cpasync_s*/ncu/*"\n', KNOWN,
     ['[[optional]] #2 (gates = "stress/profile/1stage_cpasync_s*/ncu/*"', "known names no gate"]),
    ("min_ratio = 1.10\n", 'known = ""\n',
     ['[[sdpa.speedup]] #1 (impl = "cpasync", peer = "baseline", timing = "cold", shape = "mission"',
      "known is empty"]),
    ("bytes = 262144\nmin_ratio = 1.0\n", 'known = "  "\n', ['[[allreduce.speedup]] #2 (peer = "upstream"',
                                                           "known is empty"]),
])
def test_a_known_mark_anywhere_but_on_a_speed_gate_or_empty_is_refused_naming_the_gate(tmp_path, anchor, insert,
                                                                                       needles):
    text = thresholds.paths.thresholds_file().read_text()
    assert text.count(anchor) == 1, anchor
    bad = tmp_path / "t.toml"
    bad.write_text(text.replace(anchor, anchor + insert))
    with pytest.raises(ConfigError) as err:
        thresholds.load(bad)
    line = err.value.one_line()
    assert line.startswith(f"configuration error: thresholds file {bad}: ") and "\n" not in line
    for needle in needles:
        assert needle in line


def test_a_known_mark_at_the_top_level_names_no_gate_and_bench_stops_in_one_line(tmp_path, results_dir):
    from tests.conftest import run_driver

    bad = tmp_path / "t.toml"
    bad.write_text(KNOWN + thresholds.paths.thresholds_file().read_text())
    proc = run_driver("bench", "--thresholds", str(bad), "--no-build", timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "the top level: known names no gate" in lines[0]
    assert not results_dir.exists()


def test_the_known_marks_of_the_repo_are_on_speed_gates_and_name_their_runs():
    marked = [g for g in LIMITS.sdpa.speedup + LIMITS.allreduce.speedup if g.known]
    assert marked and all(g.peer == "torch_sdpa" for g in marked)
    for g in marked:
        assert any(run.name in g.known for run in RUNS.iterdir() if run.is_dir()), g
    (nccl,) = [g for g in LIMITS.allreduce.speedup if g.peer == "nccl"]
    assert nccl.min_ratio == 1.5 and not nccl.known


def test_strict_fails_a_bench_run_on_an_xpass_and_only_then(host, results_dir, tmp_path, capsys):  # noqa: F811
    """Through `python -m driver bench` with the runner doubles (ours 5 us, upstream 8 us: 1.6x): the 256 KiB upstream
    gate marked known passes, so XPASS: exit 0 and the last line says so; `--strict` exits 8 on it. With its floor
    at 2.0x it falls short as marked: KNOWN, exit 0 under --strict too, and COMPARE.md says KNOWN."""
    from driver import cli, paths
    from tests.test_pipeline import BENCH, LENIENT

    text = paths.thresholds_file().read_text() + LENIENT
    anchor = "bytes = 262144\nmin_ratio = 1.0\n"
    marked = tmp_path / "marked.toml"
    marked.write_text(text.replace(anchor, anchor + 'known = "test: slow since today"\n'))
    args = [*BENCH, "--suite", "allreduce", "--sizes", "256K", "--thresholds", str(marked)]
    assert cli.main(args) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("gates: ") and ("1 speed gate(s) XPASS (passed although marked known: remove the mark; "
                                           "reported, not failing the run without --strict)") in last
    assert cli.main([*args, "--strict"]) == PerfGateFailed.exit_code
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("performance gate failed: 1 speed gate(s) XPASS (passed although marked known; --strict), "
                           "e.g. allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B: "
                           "cold p50 vs upstream: 1.60x")
    short = tmp_path / "short.toml"
    short.write_text(text.replace(anchor, "bytes = 262144\nmin_ratio = 2.0\nknown = \"test: 1.6x, not 2x\"\n"))
    assert cli.main([*BENCH, "--suite", "allreduce", "--sizes", "256K", "--thresholds", str(short), "--strict"]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "1 speed gate(s) KNOWN (marked known in thresholds.toml; reported, not failing the run), e.g. " \
           "allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B" in last
    newest = archive.archived_runs(results_dir)[-1]
    assert "| KNOWN | allreduce/speed/ours-vs-upstream/cold/float32/2gpu/262144B | speed | cold p50 vs upstream: " \
           "1.60x" in (newest / "COMPARE.md").read_text()
