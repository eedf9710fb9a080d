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
