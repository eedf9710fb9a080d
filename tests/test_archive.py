"""Archive stage: run folders appear whole or not at all; compare reads them back."""

import gzip
from pathlib import Path

import pytest

from driver import archive, compare, report, thresholds
from driver.errors import ConfigError, PerfGateFailed
from driver.gates import allreduce_correctness
from driver.host import host_info, utc_now
from driver.parse import parse_lines
from driver.records import AllreduceLine, ArchivedRecord, BuildMeta, DeviceInfo, GpuInfo, RunArchive, Toolchain

CAPTURED = Path(__file__).parent / "data" / "captured" / "allreduce_h200x2.jsonl"
GATES = thresholds.load()
# The 2x H200 host as KINDS.md records it (2026-10-29): 143771 MiB each, driver 580.159.04.
H200X2 = DeviceInfo(driver_version="580.159.04",
                    gpus=[GpuInfo(index=i, name="NVIDIA H200", memory_mib=143771) for i in range(2)])


def _run(scale: float = 1.0, sha: str = "a" * 40) -> RunArchive:
    lines = parse_lines(CAPTURED.read_text(), AllreduceLine, what="captured")
    records = []
    for ln in lines[:12]:
        ln = ln.model_copy(update={"p50_us": ln.p50_us * scale, "p90_us": ln.p90_us * scale})
        v = allreduce_correctness(ln, GATES)
        records.append(ArchivedRecord(suite="allreduce", impl=ln.impl, kernel=ln.kernel_confirmed,
                                      config=f"{ln.dtype}/{ln.ngpus}gpu/{ln.bytes}B", device=H200X2.kind,
                                      git_sha=sha, passed=v.passed, correctness=v, measurement=ln,
                                      round_p50_us=[ln.p50_us]))
    now = utc_now()
    return RunArchive(run_id=archive.run_id(now, sha, H200X2.kind) + f"-{scale}", created_utc=now,
                      command=["python", "-m", "driver", "bench"], git_sha=sha, git_dirty=False, device=H200X2,
                      host=host_info(), records=records)


def _meta() -> BuildMeta:
    return BuildMeta(created_utc=utc_now(), git_sha="a" * 40, git_dirty=False, toolchain=Toolchain(python="x"),
                     host=host_info(), archs=["sm_90"], targets=[])


def test_write_run_is_whole_and_indexed(results_dir):
    run, meta = _run(), _meta()
    folder = report.publish(run, meta, "version = 1\n", {"plot.png": b"\x89PNG"})
    assert sorted(p.name for p in folder.iterdir()) == [
        "COMPARE.md", "build_meta.json.gz", "plot.png", "results.json.gz", "thresholds.toml.gz"]
    assert archive.thresholds_text(folder) == "version = 1\n"
    assert archive.load_run(folder) == run
    assert BuildMeta.model_validate_json(gzip.decompress((folder / archive.BUILD_META_FILE).read_bytes())) == meta
    assert run.run_id in (results_dir / "README.md").read_text()
    compare_md = (folder / "COMPARE.md").read_text()
    assert "![plot.png](plot.png)" in compare_md
    assert "| float32/2gpu/" in compare_md and "| ours |" in compare_md
    assert not list(results_dir.glob(".tmp-*"))


def test_interrupted_write_leaves_nothing(results_dir):
    class Interrupted(dict):
        def items(self):
            yield "plot.png", b"\x89PNG"
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        archive.write_run(_run(), _meta(), "version = 1\n", Interrupted())
    assert [p.name for p in results_dir.iterdir()] == []


def test_a_half_written_folder_of_a_killed_run_is_no_run(results_dir):
    """A run killed harder than KeyboardInterrupt (SIGKILL, power) can leave `.tmp-<id>/` with its
    results.json.gz already written: index, compare and known limits must not read it as a run."""
    folder = report.publish(_run(), _meta(), "version = 1\n", {})
    leftover = results_dir / f".tmp-{folder.name}-killed"
    leftover.mkdir()
    (leftover / "results.json.gz").write_bytes((folder / "results.json.gz").read_bytes())
    assert archive.archived_runs(results_dir) == [folder]


def test_compare_flags_a_slowdown_past_the_noise(results_dir, capsys):
    old = report.publish(_run(1.0), _meta(), "")
    same = report.publish(_run(1.01, sha="b" * 40), _meta(), "")
    slow = report.publish(_run(1.3, sha="c" * 40), _meta(), "")
    assert compare.main([str(old), str(same)]) == 0
    assert "REGRESSION" not in capsys.readouterr().out
    with pytest.raises(PerfGateFailed):
        compare.main([old.name, slow.name])
    assert "REGRESSION" in capsys.readouterr().out
    with pytest.raises(PerfGateFailed):  # default pair: the newest two on one device kind
        compare.main([])


def test_reading_of_a_difference():
    assert [report.reading(x) for x in (1.0, 1.049, 0.96, 1.07, 0.92, 1.2, 0.5)] == [
        "negligible", "negligible", "negligible", "noticeable", "noticeable", "significant", "significant"]


def test_side_by_side_table_on_a_real_run():
    run = archive.load_run(Path(__file__).parent.parent / "bench_results" / "20261122T120247Z-293dd159-2xH200")
    md = report.compare_markdown(run)
    assert "| allreduce float32/2gpu/262144B | ours | nccl |" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| sdpa mission | cpasync | baseline |"))
    # That run's allreduce lines were host-batched (hot), its SDPA lines cold: the row has a cold reading only.
    assert "| 12.13 / 12.56 | 1.04x (+3.6%) | negligible | tie |" in row and row.endswith("| - | - | - | - |")


def test_records_without_timings_are_shown_as_not_timed_and_never_compared(results_dir, capsys):
    """A checked-only record (wrong results, or a seed past the first) carries no round p50s: the
    tables say "not timed" instead of a one-launch time, and compare skips it."""
    run = _run(1.0)
    untimed = run.model_copy(update={"records": [r.model_copy(update={"round_p50_us": []}) for r in run.records]})
    text = report.compare_markdown(untimed)
    assert "not timed" in text
    assert "| ours | nccl |" not in text
    old = report.publish(untimed, _meta(), "")
    new = report.publish(_run(5.0, sha="d" * 40).model_copy(update={"records": untimed.records}), _meta(), "")
    with pytest.raises(ConfigError, match="no timed config in common"):  # nothing timed: nothing to compare
        compare.main([str(old), str(new)])
    # One config timed in both, the others 5x slower but untimed in the newer run: only the first is compared.
    slow = _run(5.0, sha="e" * 40).records
    both = report.publish(run.model_copy(update={"run_id": run.run_id + "-b"}), _meta(), "")
    mixed = report.publish(_run(1.0, sha="f" * 40).model_copy(update={"records": [
        run.records[0], *(r.model_copy(update={"round_p50_us": []}) for r in slow[1:])]}), _meta(), "")
    assert compare.main([str(both), str(mixed)]) == 0
    table = capsys.readouterr().out
    assert "REGRESSION" not in table and len([ln for ln in table.splitlines() if ln.startswith("| allreduce")]) == 1


def test_profile_counters_get_their_own_tables_on_a_real_stress_run():
    """The profile stage's counters are laid out as columns (one table per kind of record), with
    the not-covered allreduce ncu attempt shown as such, never as numbers."""
    run = archive.load_run(Path(__file__).parent.parent / "bench_results" / "20261122T150723Z-49c2cb74-2xH200")
    md = report.compare_markdown(run)
    lines = md.splitlines()
    ncu_head = lines[lines.index("### profile: ncu") + 2]
    assert "bank conflicts shared st" in ncu_head and "stall long scoreboard" in ncu_head
    cp_large = next(ln for ln in lines if ln.startswith("| sdpa_fp8_cpasync | ncu/large |"))
    # 11 counters, all numeric, for the cp.async kernel on the large shape (278528 cp.async instructions).
    cells = [c.strip() for c in cp_large.strip("|").split("|")][2:-1]
    assert len(cells) == 11 and all(c.replace(".", "").isdigit() for c in cells) and "278528" in cells
    ar = next(ln for ln in lines if ln.startswith("| 1stage_cpasync_s3 | ncu/2gpu/8K |"))
    assert "not covered" in ar and ar.count("| - ") == 11
    assert "### profile: overlap" in lines and "### profile: prefetch" in lines
