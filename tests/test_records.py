"""Records are contracts: frozen, no extra fields, and the published schemas match them."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from driver.records import SCHEMA_MODELS, Verdict, published_schema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "bench_results" / "schema"


@pytest.mark.parametrize("name", sorted(SCHEMA_MODELS))
def test_published_schema_matches_the_model(name):
    published = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert published == published_schema(name), "run `python -m driver schema` and commit"
    assert next(iter(published)) == "$comment" and "do not edit" in published["$comment"]
    assert {k: v for k, v in published.items() if k != "$comment"} == SCHEMA_MODELS[name].model_json_schema()


def test_records_are_frozen_and_strict():
    v = Verdict(status="pass")
    with pytest.raises(ValidationError):
        v.status = "fail"
    with pytest.raises(ValidationError):
        Verdict(status="pass", reason=["typo"])
    with pytest.raises(ValidationError):
        Verdict(status="maybe")


def test_verdict_combine_never_lets_a_pass_hide_what_was_not_measured():
    p, f, i, n = (Verdict(status=x, reasons=[x]) for x in ("pass", "fail", "inconclusive", "not_measured"))
    assert Verdict.combine([p, i, f, n]).status == "fail"
    assert Verdict.combine([p, i, n]).status == "not_measured"
    assert Verdict.combine([p, n]).status == "not_measured"  # schema 1 said "pass" here: absence passed
    assert Verdict.combine([p, i]).status == "inconclusive"
    assert Verdict.combine([p]).status == "pass"
    assert Verdict.combine([p, n]).reasons == ["pass", "not_measured"]


def test_schema_1_skip_reads_back_as_not_measured():
    assert Verdict.model_validate({"status": "skip", "reasons": ["peer nccl not measured"]}).status == "not_measured"
