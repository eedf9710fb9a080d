"""The one parser, on real captured output and on every way that output can go wrong.

A malformed line must give KernelFailed (one clear error), never a Python
traceback of another kind, and never a record that passes as valid.
"""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import KernelFailed
from driver.parse import parse_lines
from driver.records import AllreduceLine, SdpaLine

CAPTURED = Path(__file__).parent / "data" / "captured"
AR_TEXT = (CAPTURED / "allreduce_h200x2.jsonl").read_text()
SD_TEXT = (CAPTURED / "sdpa_h200.jsonl").read_text()
AR_LINE = json.loads(AR_TEXT.splitlines()[1])


def test_captured_output_parses():
    ar = parse_lines(AR_TEXT, AllreduceLine, what="allreduce")
    sd = parse_lines(SD_TEXT, SdpaLine, what="sdpa")
    assert len(ar) == len(AR_TEXT.splitlines()) and len(sd) == len(SD_TEXT.splitlines())
    assert all(r.suite == "allreduce" for r in ar) and all(r.suite == "sdpa" for r in sd)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "no result"),
        ("\n\n", "no result"),
        ('{"suite": "allreduce"', "truncated"),
        (AR_TEXT.splitlines()[0][:57], "truncated"),
        ("[1, 2, 3]", "not an object"),
        ("not json at all", "plain text"),
        (json.dumps({**AR_LINE, "p50_us": "fast"}), "string for a number"),
        (json.dumps({k: v for k, v in AR_LINE.items() if k != "wrong"}), "missing field"),
        (json.dumps({**AR_LINE, "wrongg": 0}), "extra field"),
        (json.dumps({**AR_LINE, "p50_us": -1.0}), "negative time"),
        (json.dumps({**AR_LINE, "ngpus": 64}), "impossible GPU count"),
        (json.dumps({**AR_LINE, "suite": "sdpa"}), "wrong suite"),
        (json.dumps(AR_LINE).replace('"max_abs_err": 0.0', '"max_abs_err": NaN'), "NaN"),
        (json.dumps(AR_LINE).replace('"max_abs_err": 0.0', '"max_abs_err": Infinity'), "infinity"),
        (json.dumps({**AR_LINE, "max_abs_err": 1e400}), "overflow to infinity"),
    ],
)
def test_malformed_output_is_one_clear_error(text, why):
    with pytest.raises(KernelFailed):
        parse_lines(text, AllreduceLine, what="allreduce")


def test_huge_but_finite_values_parse():
    (rec,) = parse_lines(json.dumps({**AR_LINE, "p50_us": 1e300, "bytes": 2**62}), AllreduceLine, what="x")
    assert math.isfinite(rec.p50_us)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(AR_LINE)), value=_json_values)
def test_any_field_mutation_is_valid_or_kernel_failed(field, value):
    line = json.dumps({**AR_LINE, field: value})
    try:
        (rec,) = parse_lines(line, AllreduceLine, what="fuzz")
    except KernelFailed:
        return
    dumped = rec.model_dump()
    assert all(not isinstance(v, float) or math.isfinite(v) for v in dumped.values())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_escapes_as_another_exception(text):
    try:
        parse_lines(text, SdpaLine, what="fuzz")
    except KernelFailed:
        pass


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=1, max_value=len(SD_TEXT) - 2))
def test_truncated_captured_output_never_passes_whole(cut):
    text = SD_TEXT[:cut]
    try:
        recs = parse_lines(text, SdpaLine, what="fuzz")
    except KernelFailed:
        return
    # Only a cut exactly at a line boundary can parse, and then it holds fewer records.
    assert len(recs) < len(SD_TEXT.splitlines())


# ---------------------------------------------------------------- SDPA lines: the precision tier

SD_OURS = json.loads(SD_TEXT.splitlines()[0])  # an ours line of 2026-11-22: no kernel, no tier (mma.sync era)
SD_PEER = next(json.loads(ln) for ln in SD_TEXT.splitlines() if '"torch_sdpa"' in ln)  # no tier, no words


@pytest.mark.parametrize("update, tier", [
    ({}, "fp16"),  # before the Hopper kernel: the mma.sync kernel, fp16 operands
    ({"kernel": "mma_sync_sm80"}, "fp16"),
    ({"kernel": "wgmma_sm90"}, "fp16"),  # the Hopper kernel's fp16 build, 2026-11-23
    ({"kernel": "wgmma_fp8_sm90"}, "fp8"),  # the FP8 Hopper kernel, before the tiers
    ({"kernel": "wgmma_fp8_sm90", "precision": ""}, "fp8"),  # archived records held the old default ""
])
def test_older_lines_of_ours_get_the_tier_of_their_kernel(update, tier):
    (line,) = parse_lines(json.dumps({**SD_OURS, **update}), SdpaLine, what="old line")
    assert line.precision == tier and line.arithmetic == ""


@pytest.mark.parametrize("impl, words, tier", [
    ("torch_sdpa", None, "fp16"),
    ("torch_sdpa", "q fp16, k/v e4m3 decoded to fp16 (scaled), fp16 compute", "fp16"),
    ("flash_attn", "q fp16, k/v e4m3 decoded to fp16 (scaled), fp16 compute", "fp16"),
    ("cudnn_fp8", "q e4m3 (per-tensor scale amax/448 = 0.00824), k/v e4m3, P e4m3", "fp8"),
])
def test_older_peer_lines_move_their_words_to_arithmetic(impl, words, tier):
    raw = {**SD_PEER, "impl": impl, **({"precision": words} if words is not None else {})}
    (line,) = parse_lines(json.dumps(raw), SdpaLine, what="old peer line")
    assert (line.precision, line.arithmetic) == (tier, words or "")


def test_new_lines_say_their_tier_and_it_must_be_the_kernels():
    (line,) = parse_lines(json.dumps({**SD_OURS, "kernel": "wgmma_sm90", "precision": "fp16"}), SdpaLine, what="new")
    assert line.precision == "fp16"
    (peer,) = parse_lines(json.dumps({**SD_PEER, "impl": "cudnn_fp8", "precision": "fp8", "arithmetic": "q e4m3"}),
                          SdpaLine, what="new peer")
    assert (peer.precision, peer.arithmetic) == ("fp8", "q e4m3")
    for bad, why in (
        ({**SD_OURS, "kernel": "wgmma_fp8_sm90", "precision": "fp16"}, "computes in the fp8 tier"),
        ({**SD_OURS, "kernel": "mma_sync_sm80", "precision": "fp8"}, "computes in the fp16 tier"),
        ({**SD_OURS, "kernel": "wgmma_sm90", "precision": "fp4"}, "precision"),
        ({**SD_OURS, "kernel": "wgmma_sm90", "precision": "q fp16"}, "precision"),  # words are a peer's, old only
        ({**SD_PEER, "impl": "torch_sdpa", "precision": "fp8"}, "peer torch_sdpa computes in the fp16 tier"),
        ({**SD_PEER, "impl": "cudnn_fp8", "precision": "q e4m3", "arithmetic": "q e4m3"}, "precision"),
        ({**SD_OURS, "impl": ["baseline"]}, "impl"),
    ):
        with pytest.raises(KernelFailed, match=why):
            parse_lines(json.dumps(bad), SdpaLine, what="bad")


def test_every_archived_run_loads_with_tiers_and_distributions():
    """bench_results/ and the experiments' archived runs, as they are: every SDPA record has a tier (ours: their
    kernel's, so the FP8 Hopper kernel's records are fp8) and the distribution it was checked on: `normal` for
    the records written before distributions existed (no field), its own for the newer ones."""
    import json

    from driver.records import RunArchive
    from driver.reference.sdpa import DISTRIBUTIONS

    root = Path(__file__).resolve().parent.parent
    from driver import archive

    texts = [*(archive.results_text(p) for p in archive.archived_runs(root / "bench_results")),
             *(f.read_text() for f in root.glob("experiments/*/*results*.json"))]
    assert len(texts) > 40
    seen = set()
    for text in texts:
        run = RunArchive.model_validate_json(text)
        raw = json.loads(text)["records"]
        for r, rr in zip(run.records, raw, strict=True):
            if r.suite == "sdpa":
                assert r.distribution == rr.get("distribution", "normal") and r.distribution in DISTRIBUTIONS
                assert r.precision in ("fp16", "fp8")
                seen.add((r.measurement.kernel, r.precision))
    assert ("wgmma_fp8_sm90", "fp8") in seen and ("wgmma_sm90", "fp16") in seen and (None, "fp16") in seen
