"""The SDPA precision tiers on a CPU: where the fp8 tier cannot run it is a skip with the reason and nothing
else changes; a runner that refuses a tier anyway (exit 5) is the same skip; the accuracy gates judge ours
against the strongest peer of each tier (fp16: rel_l2 <= 2x torch SDPA's, fp8: <= cuDNN FP8's) on every
shape and distribution, and a peer that did not run leaves them not measured, which blocks unless
thresholds.toml makes it optional for the host.

Runners and peers are test doubles (tests/runner_doubles.py, the PEER double of tests/test_sdpa_suite.py):
they write the float64 reference plus noise of a set rms, so the errors, and what the gates make of them,
are known in advance. Nothing here is a measurement of a kernel."""

from __future__ import annotations

from driver import device, gates, peers
from driver.errors import WrongResults
from driver.options import RunOptions
from driver.records import DeviceInfo, GpuInfo, Skip
from driver.suites import sdpa
from driver.suites.stress import soak
from driver.thresholds import load as load_thresholds
from tests.runner_doubles import calls, sdpa_exes
from tests.test_sdpa_suite import _fake_peers

SMALL = ("small", (1, 2, 128, 64))
H100 = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559)])
L40S = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="NVIDIA L40S", memory_mib=46068)])
LIMITS = load_thresholds(None)


def _opts(**kw) -> RunOptions:
    base = {"shapes": (SMALL,), "seeds": (0,), "iters": 5, "rounds": 1, "timing": ("cold",),
            "distributions": ("normal",)}
    return RunOptions(suites=("sdpa",), **{**base, **kw})


def _host(monkeypatch, dev: DeviceInfo, arch: str) -> None:
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(device, "arch_of", lambda index=0: arch)


def test_fp8_without_fp8_warpgroup_mma_is_a_skip_and_nothing_else_changes(tmp_path, monkeypatch):
    """An sm_89 GPU and build, --precision fp16,fp8: no fp8 case is launched, the tier is one skip naming why,
    the fp16 tier runs as it does alone; the fp8 tier's gates are not measured, optional on an L40S
    (thresholds.toml [[optional]]) and blocking on an H100."""
    _host(monkeypatch, L40S, "sm_89")
    monkeypatch.setattr(peers, "missing", lambda impl, arch=None: "not on this test host")
    exe_dir = tmp_path / "sm_89"  # run() reads the build's arch from the folder's name
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 9.0})
    both = sdpa.run(_opts(precisions=("fp16", "fp8")), exe_dir, L40S, LIMITS, "0" * 40)
    assert all(c[c.index("--precision") + 1] == "fp16" for c in calls(log))
    (fp8_skip,) = [s for s in both.skipped if s.impl == "ours/fp8"]
    assert "needs an sm_90 GPU" in fp8_skip.reason and "this GPU is sm_89" in fp8_skip.reason
    assert {r.precision for r in both.records} == {"fp16"}
    alone = sdpa.run(_opts(precisions=("fp16",)), exe_dir, L40S, LIMITS, "0" * 40)
    assert [(r.impl, r.config, r.timing, r.passed) for r in both.records] == \
        [(r.impl, r.config, r.timing, r.passed) for r in alone.records]
    opts = _opts(precisions=("fp16", "fp8"))
    results, _ = gates.evaluate(both.records, both.skipped, opts, LIMITS, L40S.kind)
    acc = next(g for g in results if g.gate == "sdpa/accuracy/ours-vs-cudnn_fp8/fp8/normal/small")
    assert acc.status == "not_measured" and acc.optional and fp8_skip.reason in acc.reasons
    results, _ = gates.evaluate(both.records, both.skipped, opts, LIMITS, H100.kind)
    acc = next(g for g in results if g.gate == "sdpa/accuracy/ours-vs-cudnn_fp8/fp8/normal/small")
    assert acc.status == "not_measured" and acc.blocking


def test_a_runner_that_refuses_the_tier_is_the_same_skip(tmp_path, monkeypatch):
    """The driver took this GPU for one with FP8 warpgroup MMA, the runner says otherwise (exit 5, its worker
    keeps serving): the fp8 tier is a skip with the runner's words, asked once, and the fp16 tier runs."""
    _host(monkeypatch, H100, "sm_90")
    monkeypatch.setattr(peers, "missing", lambda impl, arch=None: "not on this test host")
    exe_dir = tmp_path / "sm_90"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 9.0}, refuse=("fp8",))
    opts = _opts(precisions=("fp16", "fp8"), shapes=(SMALL, ("mission", (1, 8, 512, 64))))
    result = sdpa.run(opts, exe_dir, H100, LIMITS, "0" * 40)
    fp8_calls = [c for c in calls(log) if c[c.index("--precision") + 1] == "fp8"]
    assert len(fp8_calls) == 1  # the first refusal stands for the run
    (skip,) = [s for s in result.skipped if s.impl == "ours/fp8"]
    assert skip.reason.startswith("the runner refused the fp8 tier: ") and "no FP8 warpgroup MMA" in skip.reason
    assert {r.precision for r in result.records} == {"fp16"}
    assert {r.config.split("/")[0] for r in result.records if r.round_p50_us} == {"small", "mission"}


def _tiers_run(tmp_path, monkeypatch, ours: dict[str, float], theirs: dict[str, float]):
    """Ours (per tier) and the peers (per peer) write the reference plus noise of that rms relative to the
    output's: their rel_l2 is about that (fp16 rounding of the output adds ~1.5e-4)."""
    _host(monkeypatch, H100, "sm_90")
    exe_dir = tmp_path / "sm_90"
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 9.0}, noise=ours)
    _fake_peers(tmp_path, monkeypatch, refuse=("flash_attn",), noise=theirs)
    opts = _opts(precisions=("fp16", "fp8"), distributions=("normal", "large_logits_8"))
    records, skipped = sdpa._shape(opts, exe_dir, H100, LIMITS, "0" * 40, tuple(sdpa.PEERS), *SMALL)
    results, _ = gates.evaluate(records, skipped, opts, LIMITS, H100.kind)
    return records, {g.gate: g for g in results}


def test_fp16_over_twice_torch_fails_and_fp8_over_cudnn_fails(tmp_path, monkeypatch):
    """Ours within each tier's own bound on every record (fp16 ~5.4e-4 < 5.86e-4, fp8 ~0.05 < 0.0751), yet
    fp16 at ~2.6x torch SDPA's error (~2.1e-4: its output's fp16 rounding) and fp8 above cuDNN FP8's: both
    accuracy gates fail, on every distribution, and the run exits 7."""
    records, by = _tiers_run(tmp_path, monkeypatch, ours={"fp16": 5e-4, "fp8": 0.05},
                             theirs={"torch_sdpa": 1e-5, "cudnn_fp8": 0.03})
    assert all(r.passed for r in records if r.impl in sdpa.VARIANTS)
    for dist in ("normal", "large_logits_8"):
        fp16 = by[f"sdpa/accuracy/ours-vs-torch_sdpa/fp16/{dist}/small"]
        assert fp16.status == "fail" and fp16.kind == "correctness"
        assert [r.split()[0] for r in fp16.reasons] == ["baseline", "cpasync"], fp16.reasons
        assert all(" vs torch_sdpa 0.000" in r and "(> 2x, worst of the seeds)" in r for r in fp16.reasons), fp16.reasons
        fp8 = by[f"sdpa/accuracy/ours-vs-cudnn_fp8/fp8/{dist}/small"]
        assert fp8.status == "fail" and all("vs cudnn_fp8 0.029" in r and "(> 1x, worst" in r for r in fp8.reasons), fp8.reasons
    err = gates.exit_decision(list(by.values()), tmp_path)
    assert isinstance(err, WrongResults) and "sdpa/accuracy/" in err.message


def test_within_the_peer_of_the_tier_passes(tmp_path, monkeypatch):
    _records, by = _tiers_run(tmp_path, monkeypatch, ours={"fp16": 2e-4, "fp8": 0.03},
                              theirs={"torch_sdpa": 2e-4, "cudnn_fp8": 0.045})
    acc = {g: r for g, r in by.items() if g.startswith("sdpa/accuracy/")}
    assert len(acc) == 4 and all(r.status == "pass" for r in acc.values()), acc


def test_a_missing_peer_fails_the_accuracy_gate_unless_optional_here():
    """No torch on the host: the fp16 accuracy gate is not measured, says why, and blocks; an [[optional]]
    entry for this device kind lets it go unmeasured there only."""
    skipped = [Skip(suite="sdpa", impl="torch_sdpa", reason="torch is not installed on this host")]
    opts = _opts(precisions=("fp16",))
    results, _ = gates.evaluate([], skipped, opts, LIMITS, H100.kind)
    (g,) = [g for g in results if g.gate.startswith("sdpa/accuracy/")]
    assert g.gate == "sdpa/accuracy/ours-vs-torch_sdpa/fp16/normal/small" and g.blocking
    assert "torch is not installed on this host" in g.reasons
    from driver.thresholds import OptionalGate

    lenient = LIMITS.model_copy(update={"optional": [OptionalGate(gates="sdpa/accuracy/*-vs-torch_sdpa/*",
                                                                  hosts=["1xH100"], reason="no torch here")]})
    results, _ = gates.evaluate([], skipped, opts, lenient, H100.kind)
    assert all(not g.blocking for g in results if g.gate.startswith("sdpa/accuracy/"))
    results, _ = gates.evaluate([], skipped, opts, lenient, "2xH200")
    assert any(g.blocking for g in results if g.gate.startswith("sdpa/accuracy/"))


def test_the_stress_soak_feeds_every_distribution_and_every_seed(tmp_path, monkeypatch):
    """Seeds and distributions in turn: max(len) cases cover both lists; each case asks for the tier and
    is checked within that tier's bounds for its distribution."""
    assert soak.soak_cases((0, 1, 2), ("normal", "sink"), 3) == [(0, "normal"), (1, "sink"), (2, "normal")]
    cases = soak.soak_cases((0, 1, 2), tuple("abcdefg"), 9)
    assert {s for s, _ in cases[:7]} == {0, 1, 2} and [d for _, d in cases[:7]] == list("abcdefg")
    assert cases[7:] == [(1 + 1009, "a"), (2 + 1009, "b")]  # past the first round: fresh seeds
    exe_dir = tmp_path / "sm_90"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 9.0}, noise={"fp8": 0.05})
    opts = RunOptions(suites=("stress",), seeds=(0, 1), iters=6, distributions=("normal", "large_logits_8", "tiny"))
    rec = soak.soak_sdpa(opts, exe_dir, H100, LIMITS, "0" * 40, "cpasync", *SMALL, precision="fp8")
    ran = [c for c in calls(log) if "--soak" in c]
    assert [c[c.index("--precision") + 1] for c in ran] == ["fp8"] * 3 and [c[c.index("--soak") + 1] for c in ran] == \
        ["2"] * 3
    assert rec.config == "small/fp8" and rec.passed, rec.correctness.reasons
    assert "0/normal, 1/large_logits_8, 0/tiny" in rec.measurement.detail
    # An error of 1% of the output is over the fp16 tier's bound: each case fails, naming its distribution and seed
    noisy = tmp_path / "noisy"
    sdpa_exes(noisy, p50={"baseline": 10.0, "cpasync": 9.0}, noise={"fp16": 0.01})
    bad = soak.soak_sdpa(opts, noisy, H100, LIMITS, "0" * 40, "cpasync", *SMALL, precision="fp16")
    assert not bad.passed and any(r.startswith("large_logits_8 seed 1: rel_l2 0.00") and
                                  r.endswith("> 0.000586 (fp16 tier, large_logits_8 inputs)")
                                  for r in bad.correctness.reasons), bad.correctness.reasons


def test_one_reference_per_input_for_every_tier_and_peer(tmp_path, monkeypatch):
    """Two tiers, two peers, two distributions, two seeds: the float64 reference is made once per (shape, seed,
    distribution), on the background thread, and every implementation is checked against that one; the
    timing runs on the first seed's normal inputs only."""
    made: list[tuple] = []
    real = sdpa.ref.reference

    def counting(q, *args, **kw):
        made.append((q.shape, float(q.astype("float64").std())))
        return real(q, *args, **kw)

    monkeypatch.setattr(sdpa.ref, "reference", counting)
    _host(monkeypatch, H100, "sm_90")
    exe_dir = tmp_path / "sm_90"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 9.0})
    _fake_peers(tmp_path, monkeypatch, refuse=("flash_attn",))
    opts = _opts(precisions=("fp16", "fp8"), distributions=("normal", "large_logits_4"), seeds=(0, 1))
    records, _ = sdpa._shape(opts, exe_dir, H100, LIMITS, "0" * 40, tuple(sdpa.PEERS), *SMALL)
    assert len(made) == 4 and len(set(made)) == 4  # 2 seeds x 2 distributions, each once
    checked = {(r.impl, r.precision, r.distribution, r.seed) for r in records}
    ran = sdpa.peers_of(tuple(p for p in sdpa.PEERS if p != "flash_attn"), opts.precisions)  # flash_attn refused
    assert len(checked) == (len(sdpa.VARIANTS) * 2 + len(ran)) * 2 * 2  # (ours x tiers + the peers) x dists x seeds
    timed_inputs = {c[c.index("--q") + 1] for c in calls(log) if "--timing" in c and c[c.index("--iters") + 1] != "1"}
    assert len(timed_inputs) == 1 and "-normal-seed0/" in timed_inputs.pop()
