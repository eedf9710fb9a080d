"""Dispatch-window crossovers, on per-kernel timings measured on 2x H200.

The timings are the `tim_1stage`, `tim_2stage` and `tim_cpasync_s{2,3,4}` lines of
tests/data/captured/allreduce_run2_kernels_h200x2.jsonl (2026-11-22, nvidia-h200-x2, each
kernel forced, fp32, sizes 256K..256M; provenance in tests/data/captured/README.md).
"""

import json
from pathlib import Path

import pytest

from driver.errors import ConfigError
from driver.suites import sweep
from driver.targets import DISPATCH_WINDOWS_FILE as DISPATCH_FILE

RUN2 = Path(__file__).resolve().parent / "data" / "captured" / "allreduce_run2_kernels_h200x2.jsonl"
TAGS = {"tim_1stage": "1stage", "tim_2stage": "2stage", **{f"tim_cpasync_s{s}": f"1stage_cpasync_s{s}" for s in (2, 3, 4)}}


def _measured() -> sweep.Table:
    table: sweep.Table = {}
    for line in RUN2.read_text().splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if d.get("tag") in TAGS:
                table.setdefault((d["ngpus"], d["dtype"], d["bytes"]), {})[TAGS[d["tag"]]] = d["p50_us"]
    return table


def test_crossovers_on_measured_timings():
    table = _measured()
    assert len(table) == 6 and all(len(row) == 5 for row in table.values())
    defines = sweep.crossovers(table, noise=0.02)
    limit = defines["AR_1STAGE_MAX_BYTES_2GPU"]
    for (_, _, size), row in table.items():
        if size <= limit:  # 1stage kept only where it is within the noise of 2stage
            assert row["1stage"] <= row["2stage"] * 1.02
    lo, hi = defines["AR_CPASYNC_MIN_BYTES_2GPU"], defines["AR_CPASYNC_MAX_BYTES_2GPU"]
    for (_, _, size), row in table.items():
        best_cp = min(v for k, v in row.items() if "cpasync" in k)
        if lo <= size <= hi:
            assert best_cp < min(row["1stage"], row["2stage"]) * 0.98


def test_crossover_rules_on_edges():
    def row(one, two, cp):
        return {"1stage": one, "2stage": two, "1stage_cpasync_s2": cp, "1stage_cpasync_s3": cp + 1,
                "1stage_cpasync_s4": cp + 2}

    table = {(2, "float32", 8192): row(5, 9, 6), (2, "float32", 16384): row(6, 9, 4),
             (2, "float32", 32768): row(9, 8, 4), (2, "float32", 65536): row(12, 9, 11)}
    d = sweep.crossovers(table, noise=0.02)
    assert d["AR_1STAGE_MAX_BYTES_2GPU"] == 16384
    assert (d["AR_CPASYNC_MIN_BYTES_2GPU"], d["AR_CPASYNC_MAX_BYTES_2GPU"], d["AR_CPASYNC_STAGES_2GPU"]) == (16384, 32768, 2)
    none = sweep.crossovers({(2, "float32", 8192): row(5, 9, 6)}, noise=0.02)
    assert none["AR_CPASYNC_MIN_BYTES_2GPU"] > none["AR_CPASYNC_MAX_BYTES_2GPU"]  # empty window
    md = sweep.markdown(table, d, "note")
    assert "-DAR_1STAGE_MAX_BYTES_2GPU=16384" in md and "| 16K |" in md


def test_push_window_starts_at_the_smallest_size_and_ends_at_the_first_loss():
    def row(one, push):
        return {"1stage": one, "2stage": one + 5, "1stage_push": push, "1stage_cpasync_s2": one + 1,
                "1stage_cpasync_s3": one + 1, "1stage_cpasync_s4": one + 1}

    sizes = (8192, 16384, 32768, 65536)
    wins_then_loses = {(2, d, s): row(10, p) for d in ("float32", "bfloat16") for s, p in zip(sizes, (7, 8, 9.9, 8))}
    d = sweep.crossovers(wins_then_loses, noise=0.02)
    # 9.9 vs 10 is inside the 2% noise, but push is still the faster of the two: the window it won at 8K-16K
    # keeps 32K rather than handing it to the slower 1stage, and goes on to 64K.
    assert d["AR_PUSH_MAX_BYTES_2GPU"] == 65536
    # Slower than the fallback at 32K (10.1 vs 10): the window ends at 16K even though push wins again at 64K.
    slower = {(2, dt, s): row(10, p) for dt in ("float32", "bfloat16") for s, p in zip(sizes, (7, 8, 10.1, 8))}
    assert sweep.crossovers(slower, noise=0.02)["AR_PUSH_MAX_BYTES_2GPU"] == 16384
    # Faster than 1stage but beaten by another kernel by more than the noise: the window ends there too.
    beaten = {k: dict(v) for k, v in wins_then_loses.items()}
    for dt in ("float32", "bfloat16"):
        beaten[(2, dt, 32768)]["1stage_cpasync_s2"] = 9.0
    assert sweep.crossovers(beaten, noise=0.02)["AR_PUSH_MAX_BYTES_2GPU"] == 16384
    one_dtype_loses = dict(wins_then_loses) | {(2, "bfloat16", 8192): row(10, 11)}
    assert sweep.crossovers(one_dtype_loses, noise=0.02)["AR_PUSH_MAX_BYTES_2GPU"] == 0
    no_push = {k: {n: t for n, t in v.items() if n != "1stage_push"} for k, v in wins_then_loses.items()}
    assert not any(k.startswith("AR_PUSH_MAX_BYTES") for k in sweep.crossovers(no_push, noise=0.02))


def test_new_kernel_windows_need_a_win_over_every_kernel_in_every_dtype():
    def row(one, push2, flag, bulk=50.0):
        return {"1stage": one, "2stage": one + 5, "1stage_push": one + 20, "2stage_push": push2, "1stage_pushflag": flag,
                "1stage_bulk": bulk, "1stage_cpasync_s2": one + 1, "1stage_cpasync_s3": one + 1,
                "1stage_cpasync_s4": one + 1}

    mib = 1 << 20
    sizes = (mib, 4 * mib, 16 * mib, 64 * mib, 512 * mib)
    # 2stage_push wins from 4M to 64M (and at 512M); 1stage_pushflag wins only at 512M, past its scratch limit.
    t = {(2, d, s): row(50.0, p, f) for d in ("float32", "bfloat16")
         for s, p, f in zip(sizes, (55.0, 40.0, 41.0, 42.0, 45.0), (60.0, 60.0, 60.0, 60.0, 30.0))}
    d = sweep.crossovers(t, noise=0.02)
    assert (d["AR_2STAGE_PUSH_MIN_BYTES_2GPU"], d["AR_2STAGE_PUSH_MAX_BYTES_2GPU"]) == (4 * mib, 64 * mib)
    assert d["AR_PUSHFLAG_MIN_BYTES_2GPU"] > d["AR_PUSHFLAG_MAX_BYTES_2GPU"]  # never past AR_PUSH_REGION_MAX_BYTES
    assert d["AR_BULK_MIN_BYTES_2GPU"] > d["AR_BULK_MAX_BYTES_2GPU"]
    # a win in one dtype only is no win
    t[(2, "bfloat16", 16 * mib)]["2stage_push"] = 60.0
    d = sweep.crossovers(t, noise=0.02)
    assert (d["AR_2STAGE_PUSH_MIN_BYTES_2GPU"], d["AR_2STAGE_PUSH_MAX_BYTES_2GPU"]) == (4 * mib, 4 * mib)
    # the cp.async window must beat the new kernels too
    t2 = {(2, "float32", mib): row(50.0, 40.0, 60.0) | {"1stage_cpasync_s2": 45.0}}
    assert sweep.crossovers(t2, noise=0.02)["AR_CPASYNC_MIN_BYTES_2GPU"] == 1
    md = sweep.markdown(t, d, "note")
    assert "2stage_push ratio" in md and "| 4M |" in md


SWEEP_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261123T084522Z-431897db-2xH200"


def test_windows_are_re_derived_from_an_archived_sweep_without_a_gpu():
    # The device-timed sweep of 2026-11-23 (2x H200, fp32/bf16/fp16, 8 KiB..256 MiB), as archived. Its own
    # dispatch_windows.json was written by the rule before the push window could keep a size it stayed
    # fastest at: 1 MiB (push 11.46/11.68/11.68 us vs 1stage 11.81 in all three dtypes) went to 1stage.
    saved = json.loads((SWEEP_RUN / "dispatch_windows.json").read_text())
    assert saved["defines"]["AR_PUSH_MAX_BYTES"] == 512 * 1024
    derived, md = sweep.from_run(SWEEP_RUN)
    assert derived["defines"]["AR_PUSH_MAX_BYTES_2GPU"] == 1 << 20
    assert derived["defines"]["AR_1STAGE_MAX_BYTES_2GPU"] == 256 << 20
    # 1stage_pushflag is the fastest from 32 MiB up but never by the 5% margin in every dtype (bf16 at
    # 256 MiB: 766.56 vs 805.76 us is 4.9%): no window
    assert derived["defines"]["AR_PUSHFLAG_MIN_BYTES_2GPU"] > derived["defines"]["AR_PUSHFLAG_MAX_BYTES_2GPU"]
    assert derived["gpu_counts"]["2"]["margin"] == saved["margin"] and "| 256M |" in md
    assert list(derived["gpu_counts"]) == ["2"] and all(k.endswith("_2GPU") for k in derived["defines"])


# The sweep of the same kind after 1stage_pushflag got its launch bounds (fefa9a2, 2026-11-23 10:35 UTC).
PUSHFLAG_SWEEP_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261123T103555Z-fefa9a24-2xH200"
# The 2-GPU sweep with 2stage_ce (4x H200, GPUs 0-1, 2026-11-26 13:37 UTC, 032cd1e, fp32/bf16/fp16, 2 rounds).
CE_SWEEP_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261126T133751Z-032cd1e8-4xH200"
# The 2-GPU sweep after 1stage's grid stopped outgrowing its data (AR_1STAGE_VECS_PER_THREAD; 4x H200, GPUs 0-1,
# 2026-11-26 23:56 UTC, dde28d4, fp32/bf16/fp16, 2 rounds).
CURRENT_SWEEP_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261126T235637Z-dde28d4b-4xH200"


def test_the_pushflag_sweep_still_gives_its_windows():
    windows, _md = sweep.from_run(PUSHFLAG_SWEEP_RUN)
    derived = windows["defines"]
    # pushflag wins 64-256 MiB by more than 5% in every dtype (256 MiB 752.6 vs 806.5 us) and keeps 32 MiB, where
    # it is still the fastest in every dtype (fp32 105.31 vs 1stage 108.16 us), inside the noise; push to 1 MiB
    assert (derived["AR_PUSHFLAG_MIN_BYTES_2GPU"], derived["AR_PUSHFLAG_MAX_BYTES_2GPU"]) == (32 << 20, 256 << 20)
    assert derived["AR_PUSH_MAX_BYTES_2GPU"] == 1 << 20
    assert "AR_2STAGE_CE_MIN_BYTES_2GPU" not in derived  # that sweep did not time 2stage_ce: no window for it


def test_the_ce_sweep_still_gives_its_windows():
    windows, _md = sweep.from_run(CE_SWEEP_RUN)
    derived = windows["defines"]
    # 2stage_ce is the fastest at 128 and 256 MiB in every dtype and beats 1stage by 9-13% (fp32 256 MiB 716.10
    # vs 810.62 us), but pushflag only by 2.9-5.1% (752.86): under the rule before _wins neither had a window
    # and 1stage, slower than both, served 32-256 MiB. pushflag is the fastest at 32 and 64 MiB (64 MiB fp32
    # 197.57 vs 2stage_ce 202.94 and 1stage 208.38 us), a clear win over 1stage at 64 MiB only; it keeps 32 MiB
    assert (derived["AR_2STAGE_CE_MIN_BYTES_2GPU"], derived["AR_2STAGE_CE_MAX_BYTES_2GPU"]) == (128 << 20, 256 << 20)
    assert (derived["AR_PUSHFLAG_MIN_BYTES_2GPU"], derived["AR_PUSHFLAG_MAX_BYTES_2GPU"]) == (32 << 20, 64 << 20)
    assert derived["AR_PUSH_MAX_BYTES_2GPU"] == 1 << 20


def test_the_committed_windows_are_what_the_newest_sweep_justifies():
    windows, _md = sweep.from_run(CURRENT_SWEEP_RUN)
    derived = windows["defines"]
    # With 128 blocks at 1 MiB (was 216) 1stage is the faster at 1 MiB in bf16 (11.36 vs push 11.55 us) and fp16,
    # and push only by 0.3% in fp32: push's window ends at 512 KiB (push 7.42 vs 1stage 9.79 us there). The
    # windows above 1 MiB are those of the sweep before (CE_SWEEP_RUN).
    assert derived["AR_PUSH_MAX_BYTES_2GPU"] == 512 << 10
    assert (derived["AR_2STAGE_CE_MIN_BYTES_2GPU"], derived["AR_2STAGE_CE_MAX_BYTES_2GPU"]) == (128 << 20, 256 << 20)
    assert (derived["AR_PUSHFLAG_MIN_BYTES_2GPU"], derived["AR_PUSHFLAG_MAX_BYTES_2GPU"]) == (32 << 20, 64 << 20)
    # what the source tree builds with on 2 GPUs is exactly what that run justifies
    committed = json.loads(DISPATCH_FILE.read_text())["defines"]
    assert sweep.for_count(committed, 2) == sweep.for_count(derived, 2)
    assert json.loads(DISPATCH_FILE.read_text())["gpu_counts"]["2"]["git_sha"].startswith("dde28d4")
    # and `sweep --from` that run `--write` changes no GPU count's windows
    merged = sweep.merge_windows(json.loads(DISPATCH_FILE.read_text()), windows)["defines"]
    for ngpus in (2, 4, 8):
        assert sweep.for_count(merged, ngpus) == sweep.for_count(committed, ngpus), ngpus


def test_two_windowed_kernels_that_both_beat_the_rest_split_the_sizes_by_speed():
    def row(flag, ce):
        return {"1stage": 100.0, "2stage": 101.0, "1stage_push": 150.0, "2stage_push": 110.0, "1stage_pushflag": flag,
                "1stage_bulk": 100.0, "2stage_ce": ce, "1stage_cpasync_s2": 101.0, "1stage_cpasync_s3": 101.0,
                "1stage_cpasync_s4": 101.0}

    mib = 1 << 20
    sizes = (32 * mib, 64 * mib, 128 * mib, 256 * mib)
    # pushflag: 3% faster than 1stage at 32M (holds), 6% and the fastest at 64M (wins); 2stage_ce the fastest and
    # 10-12% faster than 1stage at 128M and 256M (wins), but only 3-5% faster than pushflag there
    times = ((97.0, 104.0), (94.0, 96.0), (93.0, 90.0), (93.0, 88.0))
    t = {(2, d, s): row(f, c) for d in ("float32", "bfloat16") for s, (f, c) in zip(sizes, times)}
    d = sweep.crossovers(t, noise=0.05)
    assert (d["AR_PUSHFLAG_MIN_BYTES_2GPU"], d["AR_PUSHFLAG_MAX_BYTES_2GPU"]) == (32 * mib, 64 * mib)
    # 2stage_ce holds at 64M (within 5% of pushflag) but pushflag won that size: it stops there
    assert (d["AR_2STAGE_CE_MIN_BYTES_2GPU"], d["AR_2STAGE_CE_MAX_BYTES_2GPU"]) == (128 * mib, 256 * mib)
    # a kernel without a window of its own kind within the noise still takes the size from both
    for s in sizes[2:]:
        t[(2, "bfloat16", s)]["1stage"] = 91.0
    d = sweep.crossovers(t, noise=0.05)
    assert d["AR_2STAGE_CE_MIN_BYTES_2GPU"] > d["AR_2STAGE_CE_MAX_BYTES_2GPU"]


# The first 4-GPU sweep (4x H200, 2026-11-26 11:58 UTC, b95bee8, fp32/bf16/fp16, 8 KiB..256 MiB), before 2stage_ce.
SWEEP_4GPU_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261126T115813Z-b95bee81-4xH200"
# The 4-GPU sweep with 2stage_ce (4x H200, 2026-11-26 14:42 UTC, 72822f7, fp32/bf16/fp16, 8 KiB..256 MiB, 2 rounds).
SWEEP_4GPU_CE_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261126T144219Z-72822f79-4xH200"


def test_the_first_4gpu_sweep_gives_push_then_2stage_push():
    windows, md = sweep.from_run(SWEEP_4GPU_RUN)
    derived = windows["defines"]
    assert list(windows["gpu_counts"]) == ["4"] and windows["gpu_counts"]["4"]["measured_on"] == "4xH200"
    # push wins 8K-512K by more than 5% in every dtype; 2stage_push wins 2M-32M by more than 5% and stays the
    # fastest at 1M (fp32 15.36 vs 2stage 16.13 us) and 64M-256M (fp32 256 MiB 1202.85 vs 2stage 1228.10),
    # within the noise: those sizes are its, not the slower 2stage's
    assert derived["AR_PUSH_MAX_BYTES_4GPU"] == 512 << 10
    assert (derived["AR_2STAGE_PUSH_MIN_BYTES_4GPU"], derived["AR_2STAGE_PUSH_MAX_BYTES_4GPU"]) == (1 << 20, 256 << 20)
    assert derived["AR_CPASYNC_MIN_BYTES_4GPU"] > derived["AR_CPASYNC_MAX_BYTES_4GPU"]
    assert "## float16 x4" in md and "| 256M |" in md


def test_the_4gpu_sweep_with_the_first_2stage_ce_gives_it_256m_only():
    windows, md = sweep.from_run(SWEEP_4GPU_CE_RUN)
    derived = windows["defines"]
    assert list(windows["gpu_counts"]) == ["4"] and windows["gpu_counts"]["4"]["measured_on"] == "4xH200"
    # 2stage_ce is the fastest at 256 MiB in every dtype (fp32 p50 1138.8 us against 2stage_push 1185.5) and
    # 7.6% ahead of 2stage (1233.3); below it 2stage_push keeps 1M-128M (2stage_ce 15-65% slower there)
    assert derived["AR_PUSH_MAX_BYTES_4GPU"] == 512 << 10
    assert (derived["AR_2STAGE_CE_MIN_BYTES_4GPU"], derived["AR_2STAGE_CE_MAX_BYTES_4GPU"]) == (256 << 20, 256 << 20)
    assert (derived["AR_2STAGE_PUSH_MIN_BYTES_4GPU"], derived["AR_2STAGE_PUSH_MAX_BYTES_4GPU"]) == (1 << 20, 128 << 20)
    assert "## float16 x4" in md and "| 256M |" in md


# The 4-GPU sweep after 2stage_ce's incremental adds (4x H200, 2026-11-26 22:25 UTC, eaaa3b9, fp32/bf16/fp16,
# 8 KiB..256 MiB, 2 rounds).
SWEEP_4GPU_CE_INC_RUN = Path(__file__).resolve().parents[1] / "bench_results" / "20261126T222543Z-eaaa3b97-4xH200"


def test_the_committed_4gpu_windows_are_what_the_4gpu_sweep_with_incremental_2stage_ce_justifies():
    windows, md = sweep.from_run(SWEEP_4GPU_CE_INC_RUN)
    derived = windows["defines"]
    assert list(windows["gpu_counts"]) == ["4"] and windows["gpu_counts"]["4"]["measured_on"] == "4xH200"
    # 2stage_ce is the fastest at 128 MiB (fp32 p50 585.2 us against 2stage_push 599.3) and 256 MiB (1111.8
    # against 1194.0) in every dtype; at 64 MiB 2stage_push wins (305.3 against 324.8 fp32)
    assert (derived["AR_2STAGE_CE_MIN_BYTES_4GPU"], derived["AR_2STAGE_CE_MAX_BYTES_4GPU"]) == (128 << 20, 256 << 20)
    assert (derived["AR_2STAGE_PUSH_MIN_BYTES_4GPU"], derived["AR_2STAGE_PUSH_MAX_BYTES_4GPU"]) == (1 << 20, 128 << 20)
    assert derived["AR_PUSH_MAX_BYTES_4GPU"] == 512 << 10
    assert "## float32 x4" in md and "| 128M |" in md
    committed = json.loads(DISPATCH_FILE.read_text())
    assert sweep.for_count(committed["defines"], 4) == sweep.for_count(derived, 4)
    assert committed["gpu_counts"]["4"]["git_sha"].startswith("eaaa3b9")


def test_a_window_grows_over_neighbours_it_holds_and_stops_where_it_does_not():
    def row(two, push2, other=99.0):
        return {"1stage": two + 10, "2stage": two, "1stage_push": 99.0, "2stage_push": push2, "1stage_pushflag": other,
                "1stage_bulk": 99.0, "1stage_cpasync_s2": 99.0, "1stage_cpasync_s3": 99.0, "1stage_cpasync_s4": 99.0}

    sizes = [1 << p for p in range(20, 26)]
    # 2stage_push: 1% faster than 2stage (holds), then two clear wins, then 1% faster (holds), then slower
    # than 2stage (does not hold), then a clear win again, not adjacent to the first run
    times = [(100, 99), (100, 80), (100, 80), (100, 99), (100, 101), (100, 80)]
    t = {(4, d, s): row(two, p2) for d in ("float32", "bfloat16") for s, (two, p2) in zip(sizes, times)}
    d = sweep.crossovers(t, noise=0.05)
    assert (d["AR_2STAGE_PUSH_MIN_BYTES_4GPU"], d["AR_2STAGE_PUSH_MAX_BYTES_4GPU"]) == (sizes[0], sizes[3])
    # another kernel within the noise at a neighbour does not stop it; one faster by more than the noise does
    t[(4, "bfloat16", sizes[0])]["1stage_pushflag"] = 97.0
    assert sweep.crossovers(t, noise=0.05)["AR_2STAGE_PUSH_MIN_BYTES_4GPU"] == sizes[0]
    t[(4, "bfloat16", sizes[0])]["1stage_pushflag"] = 90.0
    assert sweep.crossovers(t, noise=0.05)["AR_2STAGE_PUSH_MIN_BYTES_4GPU"] == sizes[1]


def test_a_folder_that_is_not_a_sweep_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a sweep run"):
        sweep.from_run(Path(__file__).resolve().parents[1] / "bench_results" / "20261123T073635Z-b3ccd16e-2xH200")


def _row(one: float, two: float, push: float, flag: float = 99.0, cp: float = 99.0) -> dict[str, float]:
    """Every kernel the sweep times; 2stage_push and 1stage_bulk never win."""
    return {"1stage": one, "2stage": two, "1stage_push": push, "2stage_push": 99.0, "1stage_pushflag": flag,
            "1stage_bulk": 99.0, "1stage_cpasync_s2": cp + 1, "1stage_cpasync_s3": cp + 2, "1stage_cpasync_s4": cp}


KIB = 1024
SIZES = (8 * KIB, 64 * KIB, 512 * KIB, 4096 * KIB)
DTYPES = ("float32", "bfloat16", "float16")
# 2 GPUs: push wins to 64K, 1stage to 4M (2stage never), pushflag at 4M. 4 GPUs: push only at 8K, cp.async (s4)
# at 64K, 2stage from 512K.
TWO = {(2, d, s): r for d in DTYPES for s, r in zip(SIZES, (_row(10, 12, 6), _row(11, 13, 7), _row(14, 16, 15),
                                                           _row(30, 33, 40, flag=20)))}
FOUR = {(4, d, s): r for d in DTYPES for s, r in zip(SIZES, (_row(10, 12, 7), _row(11, 12, 13, cp=8),
                                                            _row(18, 14, 30), _row(60, 40, 90)))}


def test_every_window_is_per_gpu_count_from_that_counts_rows():
    d = sweep.crossovers(TWO | FOUR, noise=0.05)
    assert all(sweep.count_of(k) in (2, 4) for k in d)  # nothing shared
    two, four = sweep.for_count(d, 2), sweep.for_count(d, 4)
    assert (two["AR_PUSH_MAX_BYTES"], four["AR_PUSH_MAX_BYTES"]) == (64 * KIB, 8 * KIB)
    assert (two["AR_1STAGE_MAX_BYTES"], four["AR_1STAGE_MAX_BYTES"]) == (4096 * KIB, 64 * KIB)
    assert (two["AR_PUSHFLAG_MIN_BYTES"], two["AR_PUSHFLAG_MAX_BYTES"]) == (4096 * KIB, 4096 * KIB)
    assert four["AR_PUSHFLAG_MIN_BYTES"] > four["AR_PUSHFLAG_MAX_BYTES"]
    assert two["AR_CPASYNC_MIN_BYTES"] > two["AR_CPASYNC_MAX_BYTES"] and "AR_CPASYNC_STAGES" not in two
    assert (four["AR_CPASYNC_MIN_BYTES"], four["AR_CPASYNC_MAX_BYTES"], four["AR_CPASYNC_STAGES"]) == (
        64 * KIB, 64 * KIB, 4)
    # a count's windows do not depend on what else the sweep measured
    assert sweep.crossovers(FOUR, noise=0.05) == {k: v for k, v in d.items() if k.endswith("_4GPU")}
    assert sweep.crossovers(TWO, noise=0.05) == {k: v for k, v in d.items() if k.endswith("_2GPU")}
    md = sweep.markdown(TWO | FOUR, d, "note")
    two_md, four_md = md.split("### 2 GPUs")[1].split("### 4 GPUs")
    assert "| 1stage_push | up to 64K |" in two_md and "| 1stage_pushflag | 4M-4M |" in two_md
    assert "| 1stage_push | up to 8K |" in four_md and "| 1stage_cpasync_s4 | 64K-64K |" in four_md
    assert "-DAR_PUSH_MAX_BYTES_4GPU=8192" in four_md and "_2GPU" not in four_md


PROV4 = sweep.Provenance(measured_on="4xH200", git_sha="4" * 40, margin=0.05, sizes_bytes=list(SIZES), note="x4")


def test_a_4gpu_sweep_write_keeps_every_other_counts_windows(tmp_path, monkeypatch):
    committed_text = DISPATCH_FILE.read_text()
    committed = json.loads(committed_text)
    windows = tmp_path / "dispatch_windows.json"
    windows.write_text(committed_text)
    monkeypatch.setattr(sweep, "DISPATCH_WINDOWS_FILE", windows)
    four = sweep.crossovers(FOUR, noise=0.05)
    sweep.write_windows(sweep.windows_data(four, {4: PROV4}))
    merged = json.loads(windows.read_text())
    d = merged["defines"]
    # the 2-GPU defines and the shared ones (what 8 GPUs dispatch on) are the committed ones, value for value
    assert {k: v for k, v in d.items() if sweep.count_of(k) != 4} == {
        k: v for k, v in committed["defines"].items() if sweep.count_of(k) != 4}
    assert {k: v for k, v in d.items() if sweep.count_of(k) == 4} == four
    for ngpus in (2, 8):
        assert sweep.for_count(d, ngpus) == sweep.for_count(committed["defines"], ngpus)
    assert sweep.for_count(d, 4)["AR_PUSH_MAX_BYTES"] == 8 * KIB  # its own push window wins over the shared 1 MiB
    # where each count's windows came from: the committed file's sweeps for 2 GPUs and the shared defines
    _, counts, shared = sweep.read_windows(committed)
    assert merged["gpu_counts"]["4"] == PROV4.model_dump()
    assert merged["gpu_counts"]["2"] == counts[2].model_dump() and merged.get("shared") == (
        shared.model_dump() if shared else None)
    # a later 2-GPU sweep replaces the 2-GPU defines (a stale stage count included) and keeps the 4-GPU ones
    stale = dict(d, AR_CPASYNC_STAGES_2GPU=2)
    windows.write_text(sweep.windows_json(sweep.windows_data(stale, {2: PROV4, 4: PROV4})))
    prov2 = PROV4.model_copy(update={"measured_on": "2xH200"})
    sweep.write_windows(sweep.windows_data(sweep.crossovers(TWO, noise=0.05), {2: prov2}))
    again = json.loads(windows.read_text())
    assert {k: v for k, v in again["defines"].items() if sweep.count_of(k) == 2} == sweep.crossovers(TWO, noise=0.05)
    assert {k: v for k, v in again["defines"].items() if sweep.count_of(k) == 4} == four
    assert again["gpu_counts"]["2"]["measured_on"] == "2xH200" and again["gpu_counts"]["4"] == PROV4.model_dump()
    assert "shared" not in again  # no shared define left in that file


def test_sweep_from_a_run_write_merges(tmp_path, monkeypatch, capsys):
    from driver import cli

    windows = tmp_path / "dispatch_windows.json"
    four = sweep.crossovers(FOUR, noise=0.05)
    windows.write_text(sweep.windows_json(sweep.merge_windows(json.loads(DISPATCH_FILE.read_text()),
                                                               sweep.windows_data(four, {4: PROV4}))))
    monkeypatch.setattr(sweep, "DISPATCH_WINDOWS_FILE", windows)
    assert cli.main(["sweep", "--from", str(CURRENT_SWEEP_RUN), "--write"]) == 0
    assert "### 2 GPUs" in capsys.readouterr().out
    d = json.loads(windows.read_text())["defines"]
    assert {k: v for k, v in d.items() if sweep.count_of(k) == 4} == four  # the 4-GPU windows survive
    derived = sweep.from_run(CURRENT_SWEEP_RUN)[0]["defines"]
    assert {k: v for k, v in d.items() if sweep.count_of(k) == 2} == derived


def test_a_windows_file_from_before_the_per_count_windows_is_read():
    # that sweep's file: one sweep's measured_on, git_sha, margin, ... at the top, shared push and cp.async windows
    legacy = json.loads((PUSHFLAG_SWEEP_RUN / "dispatch_windows.json").read_text())
    defines, counts, shared = sweep.read_windows(legacy)
    assert "AR_PUSH_MAX_BYTES" in defines and "AR_1STAGE_MAX_BYTES_2GPU" in defines
    assert set(counts) == {2} and shared is not None and shared == counts[2]
    assert shared.measured_on == "2xH200" and shared.margin == 0.05 and shared.git_sha.startswith("fefa9a24")
    merged = sweep.merge_windows(legacy, sweep.windows_data(sweep.crossovers(FOUR, 0.05), {4: PROV4}))
    assert set(merged["gpu_counts"]) == {"2", "4"} and merged["shared"] == shared.model_dump()
    assert sweep.count_of("AR_PUSH_MAX_BYTES") is None and sweep.count_of("AR_PUSH_MAX_BYTES_8GPU") == 8


def test_sweep_sizes_stop_at_the_push_region(tmp_path, monkeypatch):
    """The sweep forces 1stage_push at every size and the executable has no push region above 256 MiB: the
    default sizes end there, and a larger --sizes is refused before anything launches."""
    from driver.config import format_size
    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo

    assert max(sweep.DEFAULT_SIZES) == sweep.PUSH_REGION_MAX_BYTES and min(sweep.DEFAULT_SIZES) == 8 << 10
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=i, name="NVIDIA H200", memory_mib=1) for i in range(2)])
    monkeypatch.setattr(sweep, "measure_ceiling", lambda opts: pytest.fail("launched before refusing"))
    opts = RunOptions(sizes_bytes=(1 << 20, 512 << 20), sizes_given=True)
    with pytest.raises(ConfigError, match=format_size(512 << 20)):
        sweep._run(opts, tmp_path, dev, None, "0" * 40, pool=None)
