"""thresholds.toml's SDPA bounds: one per precision tier and input distribution, each the number its written
derivation gives, the logit std it uses measured from the inputs it is for, and a numpy model of each tier's
roundings inside every bound.

The model here is arithmetic, not a kernel: the float64 reference's own softmax with the tier's roundings put
in (fp16: P and O rounded to fp16; fp8: Q scaled per row and rounded to E4M3, P scaled by 2^8 and rounded to
E4M3, O to fp16), as docs/SDPA.md describes the tiers. A bound the ideal arithmetic of its tier breaks would
be wrong; how the kernels do against the bounds is measured on a GPU (tests/gpu/test_sdpa_gpu.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from driver import config, thresholds
from driver.errors import ConfigError
from driver.reference import sdpa as ref
from driver.verify import sdpa_errors

LIMITS = thresholds.load()
RHO = (2 / math.sqrt(12)) * math.sqrt(3 / (8 * math.log(2)))  # rms relative error of one rounding, in units of u
U = {"fp16": 2.0 ** -11, "fp8": 2.0 ** -4}
MODEL_SHAPES = ((1, 2, 128, 64), (1, 2, 128, 128))


def expected_rms(precision: str, logit_std: float | None) -> float:
    """E of thresholds.toml: fp16 two fp16 roundings (P, O); fp8 P's rounding and Q's, moving each score by
    rho u8 x logit_std."""
    if precision == "fp16":
        return math.sqrt(2) * RHO * U["fp16"]
    return RHO * U["fp8"] * math.sqrt(1 + logit_std ** 2)


def _3(x: float) -> float:
    return float(f"{x:.3g}")


def test_every_tier_has_one_bound_per_distribution():
    for tier in config.PRECISIONS:
        for dist in ref.DISTRIBUTIONS:
            assert LIMITS.sdpa.bound(tier, dist).precision == tier
    assert {(a.precision, a.peer, a.max_ratio) for a in LIMITS.sdpa.accuracy} == {("fp16", "torch_sdpa", 2.0),
                                                                                  ("fp8", "cudnn_fp8", 1.0)}


@pytest.mark.parametrize("bound", LIMITS.sdpa.bounds, ids=lambda b: f"{b.precision}-{'+'.join(b.distributions)}")
def test_each_bound_is_its_derivation(bound):
    """rel_l2 <= min(1, 2E), max_abs_rel <= min(2, 6E), to the three digits the file writes."""
    if bound.precision == "fp8":
        assert bound.logit_std is not None
    e = expected_rms(bound.precision, bound.logit_std)
    assert bound.max_rel_l2 == _3(min(1.0, 2 * e))
    assert bound.max_abs_rel == _3(min(2.0, 6 * e))


def _logit_rms(distribution: str) -> float:
    """The rms of Q.K^T / sqrt(D) over every (query, key) pair, the largest over the small shapes (where the
    sink's one key weighs most) and the mission shape, seeds 0-2."""
    out = 0.0
    for shape in (*MODEL_SHAPES, config.SDPA_SHAPES["mission"]):
        for seed in (0, 1, 2):
            q, k_u8, _v, k_scale, _vs = ref.make_inputs(shape, seed, distribution)
            k = ref.decode_e4m3_sim(k_u8) * k_scale
            s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) / math.sqrt(shape[3])
            out = max(out, math.sqrt(float(np.mean(s * s))))
    return out


@pytest.mark.parametrize("distribution", list(ref.DISTRIBUTIONS))
def test_the_logit_std_of_each_fp8_bound_is_that_of_its_inputs(distribution):
    """Neither below what the inputs have (the bound would be too tight) nor inflated past 10% (too loose)."""
    b = LIMITS.sdpa.bound("fp8", distribution)
    measured = _logit_rms(distribution)
    assert 0.95 <= b.logit_std / measured <= 1.1, (b.logit_std, measured)


def _e4m3(x: np.ndarray) -> np.ndarray:
    return ref.decode_e4m3_sim(ref.encode_e4m3_sim(x))


def tier_model(q, k_u8, v_u8, k_scale, v_scale, precision: str, stale_log2: float = 0.0) -> np.ndarray:
    """The reference's softmax(Q K^T / sqrt(D)) V with the tier's roundings, as an fp16 output.  stale_log2 (fp16
    tier): each row's reference max that far (log2 units) below its true max, so that P reaches 2^stale_log2 before
    its rounding (the decode kernel's conditional rescale)."""
    _b, _h, _s, d = q.shape
    k = ref.decode_e4m3_sim(k_u8) * k_scale
    v = ref.decode_e4m3_sim(v_u8) * v_scale
    qf = q.astype(np.float64)
    if precision == "fp8":
        amax = np.abs(qf).max(axis=-1, keepdims=True)
        scale = np.where(amax > 0, 448.0 / np.where(amax > 0, amax, 1.0), 1.0)
        qf = _e4m3(qf * scale) / scale
    s = np.einsum("bhqd,bhkd->bhqk", qf, k) / math.sqrt(d)
    p = np.exp(s - s.max(axis=-1, keepdims=True)) * 2.0 ** stale_log2  # (a whole offset: an exact power of two)
    l_sum = p.sum(axis=-1, keepdims=True)  # over the values before their rounding, in both tiers
    p = _e4m3(256.0 * p) / 256.0 if precision == "fp8" else p.astype(np.float16).astype(np.float64)
    return (np.einsum("bhqk,bhkd->bhqd", p, v) / l_sum).astype(np.float16)


@pytest.mark.parametrize("distribution", list(ref.DISTRIBUTIONS))
@pytest.mark.parametrize("precision", config.PRECISIONS)
def test_the_tier_arithmetic_stays_inside_its_bounds(precision, distribution):
    bound = LIMITS.sdpa.bound(precision, distribution)
    worst_rel = worst_abs = 0.0
    for shape in MODEL_SHAPES:
        for seed in (0, 1, 2):
            arrays = ref.make_inputs(shape, seed, distribution)
            m = sdpa_errors(tier_model(*arrays, precision), ref.reference(*arrays), bad_err=LIMITS.sdpa.bad_err)
            worst_rel, worst_abs = max(worst_rel, m.rel_l2), max(worst_abs, m.max_abs_rel)
    assert worst_rel <= bound.max_rel_l2 and worst_abs <= bound.max_abs_rel, (worst_rel, worst_abs, bound)
    # where the first order describes the arithmetic (every fp16 case, fp8 on N(0, 1) scores), E is its size
    if precision == "fp16" or distribution in ("normal", "large_v"):
        e = expected_rms(precision, bound.logit_std)
        assert 0.5 * e <= worst_rel <= 1.2 * e, (worst_rel, e)


@pytest.mark.parametrize("distribution", list(ref.DISTRIBUTIONS))
@pytest.mark.parametrize("stale_log2", [3.7, 7.3, 8.0])
def test_the_fp16_tier_with_a_stale_max_stays_inside_its_bounds(stale_log2, distribution):
    """The decode kernel's conditional rescale (kernels_cuda/sdpa_decode/README.md): a row's reference max may trail
    its true max by up to 8 (log2 units) between rescales, so P = 2^(s - m) reaches 2^8 before fp16 rounds it.
    - A whole offset scales every P by a power of two: the same fp16 roundings, bit for bit, where no P falls below
      fp16's normal range (N(0, 1) logits over 128 keys); below it, the offset lifts P into the normal range.
    - A fractional offset rounds the largest weight too, which the fresh max keeps exactly 1: where a few keys take
      the weight (large logits, sink, outlier channels) the error rises from 0.74-0.79 E toward E and past it (the
      derivation's every-weight-rounded case; up to 1.5 E in this model, worst of 6), inside the bound's 2 E."""
    bound = LIMITS.sdpa.bound("fp16", distribution)
    worst_rel = worst_abs = 0.0
    for shape in MODEL_SHAPES:
        for seed in (0, 1, 2):
            arrays = ref.make_inputs(shape, seed, distribution)
            exact = ref.reference(*arrays)
            m = sdpa_errors(tier_model(*arrays, "fp16", stale_log2), exact, bad_err=LIMITS.sdpa.bad_err)
            if stale_log2 == int(stale_log2) and distribution in ("normal", "large_v"):  # no P below 2^-14 there
                assert np.array_equal(tier_model(*arrays, "fp16", stale_log2), tier_model(*arrays, "fp16"))
            worst_rel, worst_abs = max(worst_rel, m.rel_l2), max(worst_abs, m.max_abs_rel)
    assert worst_rel <= bound.max_rel_l2 and worst_abs <= bound.max_abs_rel, (worst_rel, worst_abs, bound)


def _without(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[:i] + text[text.index(end, i):]


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.replace('distributions = ["tiny"]', 'distributions = ["tiny", "normal"]'),
     "2 entries for precision 'fp8' on distribution 'normal'"),
    (lambda t: t.replace('distributions = ["sink"]', 'distributions = ["sinks"]'), "unknown distribution(s) sinks"),
    (lambda t: t.replace('precision = "fp8"\npeer = "cudnn_fp8"', 'precision = "fp16"\npeer = "cudnn_fp8"'),
     "cudnn_fp8 computes in the fp8 tier"),
    (lambda t: t.replace('impl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshape = "mission"',
                         'impl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshape = "mission"\nprecision = "fp8"'),
     "torch_sdpa is timed in the fp16 tier"),
])
def test_a_bound_table_that_does_not_fit_the_tiers_is_refused(tmp_path, edit, needle):
    text = thresholds.paths.thresholds_file().read_text()
    bad = tmp_path / "thresholds.toml"
    bad.write_text(edit(text))
    assert bad.read_text() != text
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        thresholds.load(bad)


def test_a_missing_bound_is_refused(tmp_path):
    text = thresholds.paths.thresholds_file().read_text()
    start = text.index('[[sdpa.bounds]]\nprecision = "fp8"\ndistributions = ["tiny"]')
    bad = tmp_path / "thresholds.toml"
    bad.write_text(text[:start] + text[text.index("[[sdpa.bounds]]", start + 1):])
    with pytest.raises(ConfigError, match="0 entries for precision 'fp8' on distribution 'tiny'"):
        thresholds.load(bad)


def test_an_element_is_bad_only_past_the_worst_element_bound_with_the_subnormal_floor():
    """bad_err_for (the soak's and the checks' per-element threshold) is the max_abs_rel gate's own bound at the
    output's scale, subnormal floor included: an exact output of amax ~1.4e-5 rounded to fp16 alone errs by up to
    2^-25 per element, more than the tier's max_abs_rel x amax, and is not wrong; an element 2x past it is."""
    rng = np.random.default_rng(1)
    exact = rng.standard_normal(1 << 16) * 3e-6
    stored = exact.astype(np.float16)
    gates = thresholds.load().sdpa
    amax = float(np.abs(exact).max())
    bound = gates.bound("fp16", "tiny")
    assert float(np.abs(stored - exact).max()) > bound.max_abs_rel * amax  # without the floor: elements "bad"
    bad_err = gates.bad_err_for("fp16", "tiny", amax)
    assert bad_err == pytest.approx(bound.max_abs_rel * amax + thresholds.FP16_SUBNORMAL_HALF_SPACING)
    assert sdpa_errors(stored, exact, bad_err=bad_err).bad_frac == 0
    off = stored.copy()
    off[7] = np.float16(exact[7] + 4 * bad_err)  # past it after fp16's rounding too
    assert sdpa_errors(off, exact, bad_err=bad_err).bad_frac == pytest.approx(1 / off.size)
    assert gates.bad_err_for("fp16", "normal", amax) == gates.bad_err  # the seeds' absolute gate where it binds


def test_the_fp16_output_floor_is_the_rounding_of_subnormal_outputs():
    """At tiny output scales the fp16 storage of O errs by the fixed subnormal spacing, not by rho u16 of O: an exact
    output of rms 2.8e-5 (decode over 128K keys of V with std 0.01) rounded to fp16 alone scores rel_l2 at the
    floor's E_sub (1.72e-8 / rms), and the bound at that scale (SdpaBound.at_scale) holds it with the tier's own E
    on top; at normal scales the floor moves nothing measurable; a real error at tiny scale still fails."""
    from driver.gates import sdpa_correctness

    rng = np.random.default_rng(0)
    exact = rng.standard_normal(1 << 18) * 2.8e-5
    stored = exact.astype(np.float16)
    e = sdpa_errors(stored, exact, bad_err=1.0)
    e_sub = thresholds.FP16_SUBNORMAL_RMS / e.ref_rms
    assert e.rel_l2 == pytest.approx(e_sub, rel=0.05)  # the rounding alone is the floor
    gates = thresholds.load().sdpa
    bound = gates.bound("fp16", "tiny")
    rel, worst = bound.at_scale(e.ref_rms, e.ref_amax)
    assert rel == pytest.approx(2 * math.hypot(bound.max_rel_l2 / 2, e_sub))
    assert worst == pytest.approx(bound.max_abs_rel + thresholds.FP16_SUBNORMAL_HALF_SPACING / e.ref_amax)
    assert e.max_abs_rel < worst
    assert e.rel_l2 < bound.max_rel_l2 * 1.2 < rel  # past the entry's own number, inside the bound at this scale
    assert sdpa_correctness(e, gates, "fp16", "tiny").passed
    normal = sdpa_errors(rng.standard_normal(1 << 12).astype(np.float16), rng.standard_normal(1 << 12), bad_err=9.0)
    assert bound.at_scale(normal.ref_rms, normal.ref_amax)[0] == pytest.approx(bound.max_rel_l2, rel=1e-6)
    wrong = sdpa_errors((exact * 1.002).astype(np.float16), exact, bad_err=1.0)  # 2e-3 off everywhere
    verdict = sdpa_correctness(wrong, gates, "fp16", "tiny")
    assert not verdict.passed and "subnormal floor" in verdict.reasons[0]
