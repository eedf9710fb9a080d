"""What COMPARE.md shows of the SDPA tiers: the accuracy table (rows: input distribution; columns: ours in each
tier and each peer in its own; cells: rel_l2 / max_abs_rel, the worst over shapes and seeds), tensor_frac, and
the side-by-side rows per tier; and the tensor-peak table tensor_frac is read against.

The records rendered here are constructed for rendering only: their error and timing numbers are set by this
test, not measured by any kernel or peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver import config, report
from driver.host import host_info, utc_now
from driver.records import ArchivedRecord, RunArchive, SdpaLine, Verdict
from driver.suites import sdpa
from tests.runner_doubles import H200X2

CAPTURED = Path(__file__).parent / "data" / "captured" / "sdpa_h200.jsonl"
LINE = json.loads(CAPTURED.read_text().splitlines()[0])
KERNEL = {"fp16": "wgmma_sm90", "fp8": "wgmma_fp8_sm90"}


def _rec(impl: str, tier: str, dist: str, shape: str, seed: int, rel: float, worst: float, *,
         p50: float | None = None, mode: str | None = None) -> ArchivedRecord:
    """A constructed record (for rendering only): ours or a peer, in a tier, on a distribution."""
    peer = impl not in sdpa.VARIANTS
    line = SdpaLine.model_validate({**LINE, "impl": impl, "precision": tier, "timing": mode or "cold",
                                    **({} if peer else {"kernel": KERNEL[tier]}),
                                    **({"p50_us": p50, "p90_us": p50 * 1.01, "tflops": 500.0} if p50 else {})})
    verdict = Verdict(status="not_measured" if peer else "pass")
    return ArchivedRecord(suite="sdpa", impl=impl, kernel=impl if peer else f"sdpa_fp8_{impl}",
                          config=f"{shape}/seed{seed}", device=H200X2.kind, git_sha="0" * 40, seed=seed,
                          distribution=dist, passed=not peer, correctness=verdict, measurement=line,
                          rel_l2=rel, max_abs_rel=worst, round_p50_us=[p50] if p50 else [], timing=mode,
                          tensor_frac=500.0 / 989.0 if p50 and tier == "fp16" else 500.0 / 1979.0 if p50 else None)


def _run(records: list[ArchivedRecord]) -> RunArchive:
    now = utc_now()
    return RunArchive(run_id="constructed", created_utc=now, command=["python", "-m", "driver", "bench"],
                      git_sha="0" * 40, git_dirty=False, device=H200X2, host=host_info(), records=records)


RECORDS = [
    # ours, fp16: worst rel_l2 on normal at large seed 1, worst element at mission seed 2
    _rec("cpasync", "fp16", "normal", "mission", 0, 2.5e-4, 3.0e-4, p50=10.0, mode="cold"),
    _rec("cpasync", "fp16", "normal", "mission", 2, 2.6e-4, 9.0e-4),
    _rec("cpasync", "fp16", "normal", "large", 1, 2.9e-4, 4.0e-4),
    _rec("cpasync", "fp16", "large_logits_8", "mission", 0, 2.2e-4, 4.1e-4),
    _rec("baseline", "fp16", "normal", "mission", 0, 2.5e-4, 3.0e-4, p50=12.0, mode="cold"),
    _rec("torch_sdpa", "fp16", "normal", "mission", 0, 4.7e-4, 6.0e-4, p50=11.0, mode="cold"),
    _rec("torch_sdpa", "fp16", "large_logits_8", "mission", 0, 4.0e-4, 7.0e-4),
    _rec("cpasync", "fp8", "normal", "mission", 0, 3.5e-2, 4.0e-2, p50=6.0, mode="cold"),
    _rec("cpasync", "fp8", "large_logits_8", "mission", 0, 1.8e-1, 8.6e-1),
    _rec("cudnn_fp8", "fp8", "normal", "mission", 0, 4.5e-2, 5.0e-2, p50=7.0, mode="cold"),
]


def _cells(md: str, first: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_accuracy_table_has_a_row_per_distribution_and_a_column_per_implementation_and_tier():
    md = report.compare_markdown(_run(RECORDS))
    table = md[md.index("## SDPA accuracy"):]
    assert _cells(table, "distribution") == ["distribution", "baseline fp16", "cpasync fp16", "torch_sdpa fp16",
                                            "cpasync fp8", "cudnn_fp8 fp8"]
    # worst over shapes and seeds, rel_l2 and worst element each on its own
    assert _cells(table, "normal") == ["normal", "2.50e-04 / 3.00e-04", "2.90e-04 / 9.00e-04", "4.70e-04 / 6.00e-04",
                                       "3.50e-02 / 4.00e-02", "4.50e-02 / 5.00e-02"]
    assert _cells(table, "large_logits_8") == ["large_logits_8", "-", "2.20e-04 / 4.10e-04", "4.00e-04 / 7.00e-04",
                                               "1.80e-01 / 8.60e-01", "-"]


def test_a_non_finite_output_shows_as_such():
    bad = RECORDS[2].model_copy(update={"rel_l2": None, "max_abs_rel": None, "nonfinite": True})
    md = report.compare_markdown(_run([*RECORDS[:2], bad]))
    assert _cells(md[md.index("## SDPA accuracy"):], "normal")[1] == "NaN/inf"


def test_the_speed_table_shows_tensor_frac_and_the_tier_and_leaves_passed_checks_to_the_accuracy_table():
    md = report.compare_markdown(_run(RECORDS))
    sdpa = md[md.index("## sdpa"):md.index("## SDPA accuracy")]
    assert ("| metric | tensor_frac | hbm_frac | precision | distribution | rel_l2 | max_abs_rel | correct | gate |"
            in sdpa)
    row = _cells(sdpa, "mission/seed0 | cpasync | sdpa_fp8_cpasync | cold (events)")
    assert row[7:13] == ["0.51", "-", "fp16", "normal", "2.50e-04", "3.00e-04"]  # 500 TFLOP/s of 989; not memory-bound
    fp8 = [ln for ln in sdpa.splitlines() if "| fp8 |" in ln and "| cpasync |" in ln]
    assert len(fp8) == 1 and "| 0.25 | - | fp8 |" in fp8[0]  # 500 of 1979
    assert "5 more SDPA record(s), checked only" in sdpa  # the untimed checks that passed, and the peers'


def test_the_speed_table_says_how_many_e4m3_terms_q_took_in_the_fp8_tier():
    """The fp8 tier's numerics depend on the launch (two Q terms in short launches by default): the precision
    cell says which ran, from the runner line's q_terms; lines without it (the fp16 tier, older runs) show the tier."""
    two, one = (RECORDS[7].model_copy(update={"measurement": RECORDS[7].measurement.model_copy(update={"q_terms": n}),
                                              "config": f"{shape}/seed0"})
                for n, shape in ((2, "mission"), (1, "large")))
    sdpa = report.compare_markdown(_run([*RECORDS[:7], two, one]))
    sdpa = sdpa[sdpa.index("## sdpa"):sdpa.index("## SDPA accuracy")]
    assert _cells(sdpa, "mission/seed0 | cpasync | sdpa_fp8_cpasync | cold (events)")[9] == "fp16"
    assert [ln for ln in sdpa.splitlines() if ln.startswith("| mission/seed0 | cpasync |") and "fp8 (Q: 2 terms)" in ln]
    assert [ln for ln in sdpa.splitlines() if ln.startswith("| large/seed0 | cpasync |") and "fp8 (Q: 1 term)" in ln]


def test_the_side_by_side_table_names_the_tier_when_the_run_timed_two():
    md = report.compare_markdown(_run(RECORDS))
    rows = [ln for ln in md.splitlines() if ln.startswith("| sdpa mission |")]
    pairs = {tuple(_cells(ln, "sdpa mission")[1:3]) for ln in rows}
    assert ("cpasync fp16", "torch_sdpa fp16") in pairs and ("cpasync fp8", "cudnn_fp8 fp8") in pairs
    assert ("cpasync fp8", "cpasync fp16") in pairs  # what the tier costs or gains, the same variant
    assert ("cpasync fp8", "torch_sdpa fp16") not in pairs and ("cpasync fp16", "cudnn_fp8 fp8") not in pairs
    one_tier = report.compare_markdown(_run([r for r in RECORDS if r.precision == "fp16"]))
    assert "| sdpa mission | cpasync | torch_sdpa |" in one_tier  # a one-tier run reads as before the tiers


@pytest.mark.parametrize("kind, name, tier, peak", [
    ("1xH100", "NVIDIA H100 80GB HBM3", "fp16", 989.0),
    ("2xH200", "NVIDIA H200", "fp8", 1979.0),
    ("1xH100", "NVIDIA H100 PCIe", "fp16", None),  # another board with the same model word: not the SXM peak
    ("1xH100", "NVIDIA H100 NVL", "fp8", None),
    ("1xL40S", "NVIDIA L40S", "fp16", None),  # not in the table: no fraction is invented
])
def test_the_tensor_peak_table(kind, name, tier, peak):
    assert config.tensor_peak_tflops(kind, name, tier) == peak


def test_compare_pairs_records_of_the_same_tier_only():
    """Two runs, each timing cpasync in both tiers (constructed records): the fp8 number is compared with the
    fp8 number, never with the fp16 one of the same variant and shape."""
    from driver import compare

    def timed(fp16_us: float, fp8_us: float) -> RunArchive:
        return _run([_rec("cpasync", "fp16", "normal", "mission", 0, 2e-4, 3e-4, p50=fp16_us, mode="cold"),
                     _rec("cpasync", "fp8", "normal", "mission", 0, 3e-2, 4e-2, p50=fp8_us, mode="cold")])

    rows, regressions = compare.compare(timed(10.0, 6.0), timed(10.1, 12.0), 0.02)
    assert regressions == 1
    by_tier = {r.split("|")[2].strip(): r for r in rows[2:]}
    assert set(by_tier) == {"cpasync (fp16)", "cpasync (fp8)"}
    assert "| 6.00 | 12.00 | +100.0% |" in by_tier["cpasync (fp8)"] and "REGRESSION" in by_tier["cpasync (fp8)"]
    assert "| 10.00 | 10.10 |" in by_tier["cpasync (fp16)"] and "within noise" in by_tier["cpasync (fp16)"]


def test_compare_md_opens_with_the_summary_per_suite_and_lists_the_gates_after_it():
    """Ours (the fastest variant) against the fastest peer per config, tier and mode, before anything else."""
    md = report.compare_markdown(_run(RECORDS))
    sections = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert sections[0].startswith("## Summary: sdpa")
    summary = md[md.index("## Summary: sdpa"):md.index(sections[1])]
    assert "| config | mode | ours p50 us | fastest peer p50 us | ratio | verdict |" in summary
    assert _cells(summary, "mission fp16")[:5] == ["mission fp16", "cold", "10.00 (cpasync)", "11.00 (torch_sdpa)",
                                                   "1.10x"]
    assert _cells(summary, "mission fp16")[5].startswith("ours faster")
    assert _cells(summary, "mission fp8") == ["mission fp8", "cold", "6.00 (cpasync)", "7.00 (cudnn_fp8)",
                                              "1.17x", "ours faster (significant)"]
