"""Records are contracts: frozen, no extra fields, and the published schemas match them."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from driver.records import SCHEMA_MODELS, Verdict

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "bench_results" / "schema"


@pytest.mark.parametrize("name", sorted(SCHEMA_MODELS))
def test_published_schema_matches_the_model(name):
    published = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert published == SCHEMA_MODELS[name].model_json_schema(), "run `python -m driver schema` and commit"


def test_records_are_frozen_and_strict():
    v = Verdict(status="pass")
    with pytest.raises(ValidationError):
        v.status = "fail"
    with pytest.raises(ValidationError):
        Verdict(status="pass", reason=["typo"])
    with pytest.raises(ValidationError):
        Verdict(status="maybe")


def test_verdict_combine_orders_fail_first_and_ignores_skips():
    p, f, i, s = (Verdict(status=x, reasons=[x]) for x in ("pass", "fail", "inconclusive", "skip"))
    assert Verdict.combine([p, i, f]).status == "fail"
    assert Verdict.combine([p, i, s]).status == "inconclusive"
    assert Verdict.combine([p, s]).status == "pass"
    assert Verdict.combine([s]).status == "skip"
