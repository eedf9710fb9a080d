"""Verify and gate stages on captured H200 output: what passes, what fails, and why."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from driver import thresholds, verify
from driver.errors import KernelFailed
from driver.gates import allreduce_correctness, ratio_verdict, sdpa_correctness
from driver.parse import parse_lines
from driver.records import AllreduceLine
from driver.suites.common import spread
from driver.verify import allreduce_errors, sdpa_errors

GATES = thresholds.load()
CAPTURED = Path(__file__).parent / "data" / "captured" / "allreduce_h200x2.jsonl"
LINES = parse_lines(CAPTURED.read_text(), AllreduceLine, what="captured")


def test_captured_allreduce_lines_pass_correctness():
    for ln in LINES:
        assert allreduce_correctness(ln, GATES).passed, ln


def test_gpu_confirmation_mismatch_fails():
    ln = next(x for x in LINES if x.impl == "ours" and x.elements > 0)
    bad = ln.model_copy(update={"kernel_confirmed": "2stage" if ln.kernel_selected != "2stage" else "1stage"})
    v = allreduce_correctness(bad, GATES)
    assert v.status == "fail" and "GPU ran" in v.reasons[0]


def test_ignored_override_and_wrong_elements_fail():
    ln = next(x for x in LINES if x.impl == "ours" and x.elements > 0 and x.kernel_selected == "1stage")
    assert not allreduce_correctness(ln.model_copy(update={"kernel_requested": "2stage"}), GATES).passed
    assert not allreduce_correctness(ln.model_copy(update={"wrong": 3}), GATES).passed


def test_ratio_verdict_reads_noise_as_inconclusive():
    assert ratio_verdict("x", ours_us=10, peer_us=12, min_ratio=1.1, noise=0.02).status == "pass"
    assert ratio_verdict("x", ours_us=10, peer_us=10.5, min_ratio=1.1, noise=0.02).status == "fail"
    assert ratio_verdict("x", ours_us=10, peer_us=11.1, min_ratio=1.1, noise=0.02).status == "inconclusive"
    assert spread([10.0, 10.2, 10.1]) < GATES.noise.target_spread < spread([10.0, 12.0])


def test_sdpa_error_metrics_and_gates():
    expected = np.linspace(-1, 1, 1000).reshape(1, 1, 10, 100)
    good = expected.astype(np.float16)
    m = sdpa_errors(good, expected, bad_err=GATES.sdpa.bad_err)
    assert m.max_abs_err < 1e-3 and m.bad_frac == 0 and sdpa_correctness(m, GATES.sdpa, "fp16", "normal").passed
    off = good.copy()
    off.flat[:20] += np.float16(0.5)  # 2% of elements far off
    for tier in ("fp16", "fp8"):
        assert not sdpa_correctness(sdpa_errors(off, expected, bad_err=GATES.sdpa.bad_err), GATES.sdpa, tier,
                                    "normal").passed
    nan = good.copy()
    nan.flat[0] = np.nan
    m = sdpa_errors(nan, expected, bad_err=GATES.sdpa.bad_err)
    assert m.max_abs_err is None and m.rel_l2 is None and m.max_abs_rel is None and m.nonfinite == 1
    for dist in ("normal", "large_logits_8"):
        v = sdpa_correctness(m, GATES.sdpa, "fp8", dist)
        assert not v.passed and "NaN" in v.reasons[0]


def test_sdpa_gate_catches_a_uniform_drift_under_max_abs_err():
    """An output scaled by 15% (what a row sum summed in the FP8 tensor core's accumulator did: rel_l2 0.154,
    experiments/2026-11-23-sdpa-fp8-profile) stays inside max_abs_err and bad_err when |ref| < 0.35, but is
    over the fp8 tier's bound on normal inputs (0.0751); 3% passes the fp8 tier and fails the fp16 tier's."""
    expected = np.linspace(-0.35, 0.35, 1000).reshape(1, 1, 10, 100)
    m = sdpa_errors((expected * 1.15).astype(np.float16), expected, bad_err=GATES.sdpa.bad_err)
    assert m.max_abs_err < GATES.sdpa.max_abs_err and m.bad_frac == 0
    assert m.rel_l2 == pytest.approx(0.15, rel=0.02) and m.max_abs_rel == pytest.approx(0.15, rel=0.02)
    v = sdpa_correctness(m, GATES.sdpa, "fp8", "normal")
    bound = GATES.sdpa.bound("fp8", "normal").max_rel_l2
    assert not v.passed and v.reasons == [f"rel_l2 {m.rel_l2:.3g} > {bound:g} (fp8 tier, normal inputs)"]
    m = sdpa_errors((expected * 1.03).astype(np.float16), expected, bad_err=GATES.sdpa.bad_err)
    assert sdpa_correctness(m, GATES.sdpa, "fp8", "normal").passed
    v = sdpa_correctness(m, GATES.sdpa, "fp16", "normal")
    assert not v.passed and len(v.reasons) == 2 and v.reasons[1].startswith("max_abs_rel 0.03") and v.reasons[1].endswith("> 0.00176 (fp16 tier, normal inputs)")


def test_sdpa_absolute_gates_hold_on_normal_inputs_of_the_fp16_tier_only():
    """max_abs_err 0.06 was set for N(0, 1) inputs and the fp16 tier: V with std 100 (large_v) has outputs of that
    scale, where an error of 0.1 is 1e-3 of the output; the relative bounds judge it there, and in the fp8 tier."""
    expected = np.linspace(-100, 100, 1000).reshape(1, 1, 10, 100)
    out = (expected + 0.1).astype(np.float16)
    m = sdpa_errors(out, expected, bad_err=GATES.sdpa.bad_err_for("fp8", "large_v", 100.0))
    assert m.max_abs_err > GATES.sdpa.max_abs_err and m.bad_frac == 0
    assert sdpa_correctness(m, GATES.sdpa, "fp8", "large_v").passed
    assert sdpa_correctness(m, GATES.sdpa, "fp8", "normal").passed  # the same numbers: the fp8 tier's own bound
    v = sdpa_correctness(m, GATES.sdpa, "fp16", "normal")  # the seeds' tier on the seeds' inputs: 0.06 binds
    assert not v.passed and v.reasons[0] == f"max_abs_err {m.max_abs_err:.4g} > {GATES.sdpa.max_abs_err}"
    assert not sdpa_correctness(m, GATES.sdpa, "fp16", "large_v").passed  # 1e-3 of the scale: over the fp16 bound


def test_sdpa_error_values():
    ref = np.zeros((1, 1, 4, 4))
    m = sdpa_errors(np.zeros((1, 1, 4, 4), dtype=np.float16), ref, bad_err=0.06)
    assert (m.max_abs_err, m.bad_frac, m.rel_l2, m.nonfinite) == (0.0, 0.0, 0.0, 0)
    ref = np.ones((1, 1, 2, 2))
    out = np.ones((1, 1, 2, 2), dtype=np.float16)
    out[0, 0, 0, 0] = 1.5
    m = sdpa_errors(out, ref, bad_err=0.06)
    assert m.max_abs_err == pytest.approx(0.5) and m.bad_frac == pytest.approx(0.25)
    assert m.rel_l2 == pytest.approx(0.5 / 2.0)
    out[0, 0, 1, 1] = np.inf
    m = sdpa_errors(out, ref, bad_err=0.06)
    assert m.max_abs_err is None and m.bad_frac == pytest.approx(0.5) and m.rel_l2 is None
    assert not math.isnan(m.bad_frac)


def _whole_array_errors(out: np.ndarray, expected: np.ndarray, bad_err: float) -> dict:
    """The metrics by whole-array numpy, their definitions written out (what sdpa_errors computed before it went
    block by block)."""
    got = out.astype(np.float64)
    finite = np.isfinite(got)
    err = np.where(finite, np.abs(got - expected), np.inf)
    nonfinite = int(got.size - np.count_nonzero(finite))
    clean = not nonfinite
    return {"max_abs_err": float(err.max()) if clean else None, "bad_elements": int(np.count_nonzero(err > bad_err)),
            "rel_l2": float(np.linalg.norm(got - expected) / np.linalg.norm(expected)) if clean else None,
            "max_abs_rel": float(err.max() / np.abs(expected).max()) if clean else None, "nonfinite": nonfinite}


@pytest.mark.parametrize("elements", [1, 1000, verify.ERROR_BLOCK_ELEMS, verify.ERROR_BLOCK_ELEMS + 1,
                                      3 * verify.ERROR_BLOCK_ELEMS + 77])
def test_sdpa_errors_block_by_block_are_the_whole_array_metrics(elements):
    """Counts and maxima exact whatever the blocks; rel_l2 to float64 rounding (the norms' sums in another order)."""
    rng = np.random.default_rng(elements)
    expected = rng.standard_normal((1, 1, elements, 1)) * 3.0
    out = (expected + rng.standard_normal(expected.shape) * 0.02).astype(np.float16)
    for special in (None, np.nan, np.inf):
        o = out.copy()
        if special is not None:
            o.flat[rng.integers(elements)] = special
        got = sdpa_errors(o, expected, bad_err=0.03).model_dump()
        want = _whole_array_errors(o, expected, 0.03)
        rel, want_rel = got.pop("rel_l2"), want.pop("rel_l2")
        assert {k: got[k] for k in want} == want
        assert got["bad_frac"] == want["bad_elements"] / elements and got["elements"] == elements
        assert (rel is None) == (want_rel is None) and (rel is None or rel == pytest.approx(want_rel, rel=1e-13))
    assert verify.abs_max(expected) == float(np.abs(expected).max()) and verify.abs_max(np.zeros(0)) == 0.0


def test_sdpa_errors_refuse_a_wrong_shape_or_dtype():
    """A wrong-shaped output must not broadcast against the reference into a small error."""
    ref = np.ones((1, 2, 8, 64))
    with pytest.raises(KernelFailed, match="shape"):
        sdpa_errors(np.ones((1, 1, 8, 64), dtype=np.float16), ref, bad_err=0.06)  # broadcasts in numpy
    with pytest.raises(KernelFailed, match="shape"):
        sdpa_errors(np.ones((2, 8, 64), dtype=np.float16), ref, bad_err=0.06)
    with pytest.raises(KernelFailed, match="float32"):
        sdpa_errors(np.ones((1, 2, 8, 64), dtype=np.float32), ref, bad_err=0.06)


def test_allreduce_errors_check_what_the_line_reports():
    ln = next(x for x in LINES if x.impl == "ours" and x.elements > 0)
    assert allreduce_errors([ln], dtype=ln.dtype, ngpus=ln.ngpus).max_abs_err == ln.max_abs_err
    with pytest.raises(KernelFailed, match="not bfloat16"):
        allreduce_errors([ln], dtype="bfloat16", ngpus=ln.ngpus)
    with pytest.raises(KernelFailed, match="do not make"):
        allreduce_errors([ln.model_copy(update={"elements": ln.elements - 1})], dtype=ln.dtype, ngpus=ln.ngpus)
    nonfinite = ln.model_copy(update={"max_abs_err": None})
    assert allreduce_errors([ln, nonfinite], dtype=ln.dtype, ngpus=ln.ngpus).max_abs_err is None


def test_captured_lines_round_trip_through_json():
    for ln in LINES:
        assert AllreduceLine.model_validate(json.loads(ln.model_dump_json())) == ln
