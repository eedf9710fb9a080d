"""The SDPA suite's ordering on a CPU: every seed of every variant is checked against the float64
reference before anything is timed, and a variant with wrong results is never timed.

The two "runners" here are test doubles (tests/runner_doubles.py, standing in for the CUDA
executables, which need a GPU): one writes the exact reference output, the other a corrupted
one. They log every invocation, so the test sees which runs asked for timed iterations. The
real runners' behaviour on GPUs is covered by tests/gpu/test_sdpa_gpu.py and the archived runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from driver import device, gates, peers
from driver.errors import KernelFailed
from driver.options import RunOptions
from driver.records import SDPA_PEER_PRECISION, DeviceInfo, GpuInfo
from driver.suites import sdpa
from driver.thresholds import load as load_thresholds
from tests.runner_doubles import ROOT, SERVE, calls, sdpa_exes


def test_a_wrong_variant_is_checked_first_and_never_timed(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    exe_dir = tmp_path / "bin"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, corrupt="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0, 1, 2), iters=20, rounds=2,
                      distributions=("normal", "large_logits_8"))
    records, _ = sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, (), "small", (1, 2, 128, 64))

    ran = calls(log)
    timed = [c for c in ran if c[c.index("--iters") + 1] != "1"]
    assert timed, "the correct variant was never timed"
    assert all("out_cpasync" not in " ".join(c) for c in timed)  # the wrong variant's output path
    # Every distribution's and seed's check-only runs come first (distributions x seeds x variants of them),
    # then the timed runs, on the normal inputs only, every one in the tier asked for.
    first_timed = ran.index(timed[0])
    assert first_timed == len(opts.distributions) * len(opts.seeds) * len(sdpa.VARIANTS)
    assert all(c[c.index("--iters") + 1] == "1" for c in ran[:first_timed])
    assert all("-normal-seed0/" in c[c.index("--q") + 1] for c in timed)
    assert all(c[c.index("--precision") + 1] == "fp16" for c in ran)
    by = {(r.impl, r.seed, r.distribution): r for r in records if r.timing != "hot"}
    for dist in opts.distributions:
        assert by[("baseline", 0, dist)].passed and by[("baseline", 0, dist)].precision == "fp16"
        assert by[("baseline", 0, dist)].round_p50_us if dist == "normal" else not by[("baseline", 0, dist)].round_p50_us
        assert by[("baseline", 1, dist)].passed and not by[("baseline", 1, dist)].round_p50_us
        assert by[("baseline", 2, dist)].passed and not by[("baseline", 2, dist)].round_p50_us
        assert by[("baseline", 1, dist)].rel_l2 < 3e-4 and by[("baseline", 1, dist)].max_abs_rel < 1e-3
    # The correct variant is timed in both default modes, each record saying its mode.
    assert sorted(r.timing for r in records if (r.impl, r.seed, r.distribution) == ("baseline", 0, "normal")) == \
        ["cold", "hot"]
    assert {c[c.index("--timing") + 1] for c in timed} == {"cold", "hot"}
    bad = by[("cpasync", 0, "normal")]
    assert not bad.passed and not bad.round_p50_us and bad.performance is None
    assert "not timed: wrong results" in bad.correctness.reasons
    assert not by[("cpasync", 1, "large_logits_8")].passed


def test_a_wrong_shaped_output_is_malformed_output_not_a_small_error(tmp_path, monkeypatch):
    """A variant that writes one head of a [B, H, S, D] output broadcasts against the reference in
    numpy; the gated metric must refuse it, not score it."""
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    exe_dir = tmp_path / "bin"
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, first_head_only="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=5, rounds=1, distributions=("normal",))
    with pytest.raises(KernelFailed, match=r"shape \(1, 1, 128, 64\), the reference \(1, 2, 128, 64\)"):
        sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, (), "small", (1, 2, 128, 64))


PEER = """import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from driver.reference import sdpa as ref
def case(argv):
    args = dict(zip(argv[::2], argv[1::2]))
    if {refuse!r}:
        print("error: cuDNN refuses FP8 SDPA for [B,H,S,D] [1, 2, 128, 64]: head dim not supported", file=sys.stderr)
        sys.exit(3)
    q, k, v = (np.load(args["--" + n]) for n in ("q", "k", "v"))
    ks, vs = np.load(args["--scales"])
    out = ref.reference(q, k, v, float(ks), float(vs))
    if {noise!r}:
        out = out + {noise!r} * np.sqrt(np.mean(out ** 2)) * np.random.default_rng(1).standard_normal(out.shape)
    else:
        out = out + 0.01
    np.save(args["--out"], out.astype(np.float16))
    print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "shape": list(q.shape), "iters": 20, "warmup": 0,
                      "samples_us": [8.9, 9.0, 9.5], "timing": args["--timing"], "precision": {tier!r},
                      "arithmetic": "q e4m3, P e4m3",
                      "peer_version": "test"}}), flush=True)
"""


def _fake_peers(tmp_path: Path, monkeypatch, refuse: tuple[str, ...] = (), noise: dict[str, float] | None = None,
                log: Path | None = None) -> None:
    """Peer doubles: the reference plus 0.01 (or, per peer in `noise`, noise of that rms relative to the
    output's), in their own tier. `log` records every command line they are given."""
    scripts = {}
    for impl in sdpa.PEERS:
        scripts[impl] = tmp_path / f"peer_{impl}.py"
        scripts[impl].write_text(PEER.format(root=str(ROOT), impl=impl, refuse=impl in refuse,
                                             noise=(noise or {}).get(impl, 0.0),
                                             tier=SDPA_PEER_PRECISION[impl]) + SERVE)
    monkeypatch.setattr(peers, "command", lambda impl, *args: [sys.executable, str(scripts[impl]), *args])


def test_peers_run_in_their_tier_in_the_same_rounds_and_their_error_is_reported_not_gated(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    exe_dir = tmp_path / "bin"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0})
    _fake_peers(tmp_path, monkeypatch, refuse=("flash_attn",))
    gates_file = tmp_path / "thresholds.toml"
    gates_file.write_text((ROOT / "thresholds.toml").read_text() + """
[[sdpa.speedup]]
impl = "best"
peer = "cudnn_fp8"
timing = "hot"
shape = "small"
min_ratio = 0.9
""")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=20, rounds=2, timing=("cold", "hot"),
                      precisions=("fp16", "fp8"), distributions=("normal", "large_logits_4"))
    records, skipped = sdpa._shape(opts, exe_dir, dev, load_thresholds(gates_file), "0" * 40, tuple(sdpa.PEERS),
                                   "small", (1, 2, 128, 64))
    by = {(r.impl, r.precision, r.distribution, r.timing): r for r in records}
    for impl, tier in (("torch_sdpa", "fp16"), ("cudnn_fp8", "fp8")):
        for mode in ("cold", "hot"):
            peer = by[(impl, tier, "normal", mode)]
            assert peer.correctness.status == "not_measured" and len(peer.round_p50_us) == 2  # no gate reads it
            assert peer.measurement.timing == mode and peer.measurement.precision == tier
            assert "reported, not gated" in peer.correctness.reasons[0]
            assert "arithmetic: q e4m3, P e4m3" in peer.correctness.reasons
            assert peer.max_abs_err == pytest.approx(0.01, abs=2e-3) and peer.rel_l2 > 0
            b, h, n, d = peer.measurement.shape  # TF/s: the driver's, from the p50 of the samples (9.0 us)
            assert peer.measurement.tflops == pytest.approx(4 * b * h * n * n * d / 9.0e-6 / 1e12)
            assert peer.tensor_frac == pytest.approx(peer.measurement.tflops / (989.0 if tier == "fp16" else 1979.0))
        # checked on the other distribution too, from the same inputs, not timed there
        other = by[(impl, tier, "large_logits_4", None)]
        assert not other.round_p50_us and other.rel_l2 > 0 and other.max_abs_rel > 0
    # ours in both tiers, each tier's runs asked for it; timed on the normal inputs only
    for impl in sdpa.VARIANTS:
        for tier in ("fp16", "fp8"):
            assert by[(impl, tier, "normal", "cold")].measurement.kernel == \
                {"fp16": "wgmma_sm90", "fp8": "wgmma_fp8_sm90"}[tier]
            assert by[(impl, tier, "large_logits_4", None)].passed
            hot = by[(impl, tier, "normal", "hot")]  # the double's samples: p50 10 us
            b, h, n, d = hot.measurement.shape
            assert hot.measurement.tflops == pytest.approx(4 * b * h * n * n * d / 10.0e-6 / 1e12)
            assert hot.tensor_frac == pytest.approx(hot.measurement.tflops / (989.0 if tier == "fp16" else 1979.0))
            assert by[(impl, tier, "large_logits_4", None)].tensor_frac is None  # not timed
    ran = calls(log)
    assert {c[c.index("--precision") + 1] for c in ran} == {"fp16", "fp8"}
    # The refusing peer is dropped with its own words; ours and the others still ran.
    assert not any(impl == "flash_attn" for impl, *_ in by)
    reasons = sorted(s.reason for s in skipped if s.impl == "flash_attn")
    assert len(reasons) == 1 and reasons[0].startswith("small cold: ")  # its check failed: never timed
    assert "exited 3: error: cuDNN refuses FP8 SDPA" in reasons[0] and "head dim not supported" in reasons[0]
    # The cuDNN gate is judged against the peer's p50 in its mode and tier (ours 10.0 us vs cuDNN 9.0 us:
    # 0.90x); the peers' own records are no gates (their error is reported, not gated).
    results, judged = gates.evaluate(records, skipped, opts, load_thresholds(gates_file), dev.kind)
    gate = next(g for g in results if g.gate == "sdpa/speed/best-vs-cudnn_fp8/hot/small")
    assert any("hot p50 vs cudnn_fp8: 0.90x" in r for r in gate.reasons), gate
    assert not any(g.gate.startswith(("sdpa/correct/torch_sdpa", "sdpa/correct/cudnn_fp8")) for g in results)
    best = next(r for r in judged if r.performance and r.timing == "hot" and r.impl in sdpa.VARIANTS)
    assert any("hot p50 vs cudnn_fp8" in r for r in best.performance.reasons) and best.precision == "fp8"
    # ours (exact up to the fp16 output) against the peers (0.01 off): every accuracy gate passes
    acc = {g.gate: g for g in results if g.gate.startswith("sdpa/accuracy/")}
    assert set(acc) == {f"sdpa/accuracy/ours-vs-{p}/{t}/{d}/small" for p, t in (("torch_sdpa", "fp16"),
                        ("cudnn_fp8", "fp8")) for d in opts.distributions}
    assert all(g.status == "pass" for g in acc.values()), acc


def test_peers_missing_and_the_hopper_kernel_not_offered_say_why(monkeypatch):
    monkeypatch.setattr(peers, "_found", lambda module: module in ("torch", "cudnn"))
    assert peers.missing("torch_sdpa", "sm_90") is None
    assert peers.missing("cudnn_fp8", "sm_89") == "cudnn_fp8 needs sm_90 or newer; this GPU is sm_89"
    monkeypatch.setattr(peers, "_found", lambda module: module == "torch")
    assert "nvidia-cudnn-frontend (pyproject.toml's peers group" in peers.missing("cudnn_fp8", "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)
    assert peers.missing("cudnn_fp8", "sm_90") == "torch is not installed on this host"
    assert sdpa.hopper_not_offered("sm_90", "sm_90") is None
    why = sdpa.hopper_not_offered("sm_89", "sm_89")
    assert "need an sm_90 GPU" in why and "this GPU is sm_89" in why and "mma_sync_sm80" in why
    assert "this build is for sm_89" in sdpa.hopper_not_offered("sm_90", "sm_89")
    # the fp8 tier exists only as FP8 warpgroup MMA; the fp16 tier everywhere
    assert sdpa.fp8_not_offered("sm_90", "sm_90") is None
    assert "needs an sm_90 GPU" in sdpa.fp8_not_offered("sm_89", "sm_89")
    assert "this build is for sm_89" in sdpa.fp8_not_offered("sm_90", "sm_89")
    assert [sdpa.expected_kernel(t, "sm_90", "sm_90") for t in ("fp16", "fp8")] == ["wgmma_sm90", "wgmma_fp8_sm90"]
    assert [sdpa.expected_kernel(t, "sm_89", "sm_89") for t in ("fp16", "fp8")] == ["mma_sync_sm80", None]


def test_q_terms_reaches_our_fp8_runs_only(tmp_path, monkeypatch):
    """bench --q-terms 1: every fp8 run of ours (checks and timing) is asked for one E4M3 term of Q; the fp16
    runs are not asked at all (the runner refuses --q-terms with that tier); the default asks nothing."""
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    for q_terms in ("1", "auto"):
        exe_dir = tmp_path / q_terms
        log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0})
        opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=20, rounds=2,
                          precisions=("fp16", "fp8"), distributions=("normal",), q_terms=q_terms)
        sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, (), "small", (1, 2, 128, 64))
        ran = calls(log)
        fp8 = [c for c in ran if c[c.index("--precision") + 1] == "fp8"]
        fp16 = [c for c in ran if c[c.index("--precision") + 1] == "fp16"]
        assert fp8 and fp16 and any(c[c.index("--iters") + 1] != "1" for c in fp8)  # checked and timed
        if q_terms == "1":
            assert all(c[c.index("--q-terms") + 1] == "1" for c in fp8)
        assert not any("--q-terms" in c for c in fp16 + (fp8 if q_terms == "auto" else []))
