"""link_frac: every allreduce record's share of the run's measured link ceiling, in COMPARE.md and on the
algbw plot; and the torch-driven peers' shared JSON line, which the one parser must accept."""

import argparse
import json
from pathlib import Path

import pytest
from test_archive import _run

from driver import plots, report
from driver.parse import parse_lines
from driver.peers import torch_allreduce
from driver.records import AllreduceLine, ArchivedRecord, Verdict
from driver.suites.allreduce import LINK_CEILING, link_frac

CAPTURED = Path(__file__).parent / "data" / "captured" / "allreduce_h200x2.jsonl"


def _line(**update) -> AllreduceLine:
    first = parse_lines(CAPTURED.read_text(), AllreduceLine, what="captured")[0]
    return first.model_copy(update=update)


def test_link_frac_is_algbw_over_the_measured_ceiling():
    ln = _line(algbw_gbps=300.0)
    assert link_frac(ln, {LINK_CEILING: 400.0}) == pytest.approx(0.75)
    assert link_frac(ln, {}) is None  # no ceiling measured in this run: no fraction is invented
    assert link_frac(_line(timed=False, algbw_gbps=0.0), {LINK_CEILING: 400.0}) is None


def test_compare_md_shows_link_frac_for_allreduce_only():
    run = _run()
    ceiling = 387.0
    records = [r.model_copy(update={"link_frac": link_frac(r.measurement, {LINK_CEILING: ceiling})}) for r in run.records]
    run = run.model_copy(update={"records": records, "ceilings_gbps": {LINK_CEILING: ceiling}})
    md = report.compare_markdown(run)
    assert "| metric | link_frac | correct |" in md
    r = records[0]
    assert f"| {r.measurement.algbw_gbps:.1f} GB/s | {r.measurement.algbw_gbps / ceiling:.2f} |" in md
    assert f"link ceiling {LINK_CEILING}: 387.0 GB/s" in md


def test_algbw_plot_carries_the_link_frac_axis():
    pytest.importorskip("matplotlib")
    run = _run().model_copy(update={"ceilings_gbps": {LINK_CEILING: 387.0}})
    pngs = plots.render(run)
    assert pngs["allreduce_algbw.png"].startswith(b"\x89PNG")


@pytest.mark.parametrize("impl", ["nccl", "torch_symm_oneshot", "torch_symm_twoshot"])
@pytest.mark.parametrize("mode, method", [("cold", "device"), ("hot", "graph"), ("host", "host")])
def test_torch_peers_print_the_executables_line(impl, mode, method):
    ns = argparse.Namespace(dtype="bfloat16", ngpus=2, iters=3, warmup=1, batch=4, timing=mode, check=1)
    d = torch_allreduce.line(ns, impl, 16 << 20, 8 << 20, [60.0, 50.0, 55.0],
                             torch_allreduce.merge_checks([torch_allreduce.NOT_CHECKED] * 2))
    (ln,) = parse_lines(json.dumps(d), AllreduceLine, what=impl)
    assert ln.impl == impl and ln.kernel_confirmed == impl and ln.p50_us == 55.0 and ln.min_us == 50.0
    assert ln.algbw_gbps == pytest.approx((16 << 20) / 55e-6 / 1e9)
    assert ln.timing == method and ln.batch == (1 if mode == "cold" else 4)


def test_every_torch_peer_is_registered_and_launched_with_its_impl():
    from driver import peers, registry
    from driver.suites import allreduce

    # Every timed Python peer of the family (the link ceiling is measured, never timed against ours).
    assert peers.of_suite("allreduce") == tuple(n for n, p in registry.ALLREDUCE.peers.items() if p.module and p.timed)
    assert "p2p_copy" not in peers.of_suite("allreduce") and "torch_symm_twoshot" in allreduce.TORCH_PEERS
    cmd = peers.command("torch_symm_twoshot", "--sizes", "1M")
    assert cmd[1:] == ["-m", "driver.peers.symm_allreduce", "--impl", "torch_symm_twoshot", "--sizes", "1M"]
    assert allreduce.timing_flags("torch_symm_oneshot", "hot", 10) == ["--timing", "hot", "--batch", "10"]
    assert allreduce.timing_flags("torch_symm_oneshot", "cold", 10) == ["--timing", "device"]


def test_symm_peer_names_are_the_records_impls():
    from driver import registry
    from driver.peers import symm_allreduce

    symm = {n for n, p in registry.ALLREDUCE.peers.items() if p.module == symm_allreduce.__name__}
    assert set(symm_allreduce.OPS) == symm
    assert symm <= set(AllreduceLine.model_json_schema()["properties"]["impl"]["enum"])


def test_a_record_without_link_frac_still_loads():
    """Runs archived before link_frac existed load with None."""
    r = _run().records[0]
    data = json.loads(r.model_dump_json())
    data.pop("link_frac")
    assert ArchivedRecord.model_validate(data).link_frac is None
    assert Verdict(status="pass").passed


def test_a_worker_failure_is_reported_by_its_exception_line():
    tb = ("-- Process 0 terminated with the following error:\nTraceback (most recent call last):\n  File \"x.py\"\n"
          "TypeError: has_multicast_support(): incompatible function arguments. The following argument types are "
          "supported:\n    1. (arg0: DeviceType, arg1: int) -> bool\n\nInvoked with: <handle>\n")
    msg = torch_allreduce.worker_error(tb)
    assert msg.startswith("TypeError: has_multicast_support(): incompatible function arguments")
    assert torch_allreduce.worker_error("") == "(no message)"
