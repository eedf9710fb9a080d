"""Verify and gate stages on captured H200 output: what passes, what fails, and why."""

import json
from pathlib import Path

import numpy as np

from driver import thresholds
from driver.parse import parse_lines
from driver.records import AllreduceLine
from driver.suites import allreduce, sdpa
from driver.suites.common import ratio_verdict, spread

GATES = thresholds.load()
CAPTURED = Path(__file__).parent / "data" / "captured" / "allreduce_h200x2.jsonl"
LINES = parse_lines(CAPTURED.read_text(), AllreduceLine, what="captured")


def test_captured_allreduce_lines_pass_correctness():
    for ln in LINES:
        assert allreduce.correctness(ln, GATES).passed, ln


def test_gpu_confirmation_mismatch_fails():
    ln = next(x for x in LINES if x.impl == "ours" and x.elements > 0)
    bad = ln.model_copy(update={"kernel_confirmed": "2stage" if ln.kernel_selected != "2stage" else "1stage"})
    v = allreduce.correctness(bad, GATES)
    assert v.status == "fail" and "GPU ran" in v.reasons[0]


def test_ignored_override_and_wrong_elements_fail():
    ln = next(x for x in LINES if x.impl == "ours" and x.elements > 0 and x.kernel_selected == "1stage")
    assert not allreduce.correctness(ln.model_copy(update={"kernel_requested": "2stage"}), GATES).passed
    assert not allreduce.correctness(ln.model_copy(update={"wrong": 3}), GATES).passed


def test_ratio_verdict_reads_noise_as_inconclusive():
    assert ratio_verdict("x", ours_us=10, peer_us=12, min_ratio=1.1, noise=0.02).status == "pass"
    assert ratio_verdict("x", ours_us=10, peer_us=10.5, min_ratio=1.1, noise=0.02).status == "fail"
    assert ratio_verdict("x", ours_us=10, peer_us=11.1, min_ratio=1.1, noise=0.02).status == "inconclusive"
    assert spread([10.0, 10.2, 10.1]) < GATES.noise.target_spread < spread([10.0, 12.0])


def test_sdpa_error_metrics_and_gates():
    expected = np.linspace(-1, 1, 1000).reshape(1, 1, 10, 100)
    good = expected.astype(np.float16)
    m = sdpa.error_metrics(good, expected, GATES.sdpa)
    assert m["max_abs_err"] < 1e-3 and m["bad_frac"] == 0 and sdpa.correctness(m, GATES.sdpa).passed
    off = good.copy()
    off.flat[:20] += np.float16(0.5)  # 2% of elements far off
    assert not sdpa.correctness(sdpa.error_metrics(off, expected, GATES.sdpa), GATES.sdpa).passed
    nan = good.copy()
    nan.flat[0] = np.nan
    v = sdpa.correctness(sdpa.error_metrics(nan, expected, GATES.sdpa), GATES.sdpa)
    assert not v.passed and "NaN" in v.reasons[0]


def test_captured_lines_round_trip_through_json():
    for ln in LINES:
        assert AllreduceLine.model_validate(json.loads(ln.model_dump_json())) == ln
