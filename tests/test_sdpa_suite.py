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
from driver.records import DeviceInfo, GpuInfo
from driver.suites import sdpa
from driver.thresholds import load as load_thresholds
from tests.runner_doubles import ROOT, SERVE, calls, sdpa_exes


def test_a_wrong_variant_is_checked_first_and_never_timed(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    exe_dir = tmp_path / "bin"
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, corrupt="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0, 1, 2), iters=20, rounds=2)
    records, _ = sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, (), "small", (1, 2, 128, 64))

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
    exe_dir = tmp_path / "bin"
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0}, first_head_only="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=5, rounds=1)
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
    np.save(args["--out"], (ref.reference(q, k, v, float(ks), float(vs)) + 0.01).astype(np.float16))
    print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "shape": list(q.shape), "iters": 20, "warmup": 0,
                      "p50_us": 9.0, "p90_us": 9.5, "mean_us": 9.1, "std_us": 0.1, "min_us": 8.9, "tflops": 1.0,
                      "timing": args["--timing"], "precision": "q e4m3, P e4m3", "peer_version": "test"}}), flush=True)
"""


def _fake_peers(tmp_path: Path, monkeypatch, refuse: tuple[str, ...] = ()) -> None:
    scripts = {}
    for impl in sdpa.PEERS:
        scripts[impl] = tmp_path / f"peer_{impl}.py"
        scripts[impl].write_text(PEER.format(root=str(ROOT), impl=impl, refuse=impl in refuse) + SERVE)
    monkeypatch.setattr(peers, "command", lambda impl, *args: [sys.executable, str(scripts[impl]), *args])


def test_peers_run_in_the_same_rounds_and_their_error_is_reported_not_gated(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    exe_dir = tmp_path / "bin"
    sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 10.0})
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
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0,), iters=20, rounds=2, timing=("cold", "hot"))
    records, skipped = sdpa._shape(opts, exe_dir, dev, load_thresholds(gates_file), "0" * 40, tuple(sdpa.PEERS),
                                   "small", (1, 2, 128, 64))
    by = {(r.impl, r.timing): r for r in records}
    for impl, mode in ((i, m) for i in ("torch_sdpa", "cudnn_fp8") for m in ("cold", "hot")):
        peer = by[(impl, mode)]
        assert peer.correctness.status == "not_measured" and len(peer.round_p50_us) == 2  # no gate reads it
        assert peer.measurement.timing == mode
        assert "reported, not gated" in peer.correctness.reasons[0]
        assert "precision: q e4m3, P e4m3" in peer.correctness.reasons
        assert peer.max_abs_err == pytest.approx(0.01, abs=2e-3) and peer.rel_l2 > 0
    # The refusing peer is dropped with its own words; ours and the others still ran.
    assert not any(impl == "flash_attn" for impl, _ in by)
    reasons = sorted(s.reason for s in skipped if s.impl == "flash_attn")
    assert len(reasons) == 2 and reasons[0].startswith("small cold: ") and reasons[1].startswith("small hot: ")
    for reason in reasons:
        assert "exited 3: error: cuDNN refuses FP8 SDPA" in reason and "head dim not supported" in reason
    # The cuDNN gate is judged against the peer's p50 in its mode (ours 10.0 us vs cuDNN 9.0 us: 0.90x);
    # the peers' own records are no gates (their error is reported, not gated).
    results, judged = gates.evaluate(records, skipped, opts, load_thresholds(gates_file), dev.kind)
    gate = next(g for g in results if g.gate == "sdpa/speed/best-vs-cudnn_fp8/hot/small")
    assert any("hot p50 vs cudnn_fp8: 0.90x" in r for r in gate.reasons), gate
    assert not any(g.gate.startswith(("sdpa/correct/torch_sdpa", "sdpa/correct/cudnn_fp8")) for g in results)
    best = next(r for r in judged if r.performance and r.timing == "hot" and r.impl in sdpa.VARIANTS)
    assert any("hot p50 vs cudnn_fp8" in r for r in best.performance.reasons)


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
    assert "needs an sm_90 GPU" in why and "this GPU is sm_89" in why and "mma_sync_sm80" in why
    assert "this build is for sm_89" in sdpa.hopper_not_offered("sm_90", "sm_89")
