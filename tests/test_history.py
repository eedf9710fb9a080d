"""`python -m driver history`, the index's history section and `bench`'s end line: every archived run's p50 per
device kind and config in commit order, steps beyond the noise flagged at their commit, unreadable run folders
skipped and named. Small synthetic archives written through the real archive.write_run, from one real run."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from driver import archive, cli, device, history, paths, peers, report
from driver.host import host_info, utc_now
from driver.records import BuildMeta, RunArchive, Toolchain
from tests.runner_doubles import H200X2, allreduce_exe, fake_build

REAL = paths.ROOT / "bench_results"
BASE = archive.load_run(REAL / "20261122T120247Z-293dd159-2xH200")  # 10 timed records, allreduce and SDPA
# Three commits of this repository's history, oldest first.
SHAS = subprocess.run(["git", "rev-list", "--topo-order", "--reverse", "HEAD"], cwd=paths.ROOT, capture_output=True,
                      text=True, check=True).stdout.split()[-40::15]
CFG = "float32/2gpu/16777216B"  # ours, hot, 59.72 us in BASE


def _meta() -> BuildMeta:
    return BuildMeta(created_utc=utc_now(), git_sha="a" * 40, git_dirty=False, toolchain=Toolchain(python="x"),
                     host=host_info(), archs=["sm_90"], targets=[])


def _write(sha: str, created: str, scale: float = 1.0) -> Path:
    """BASE at commit `sha`, archived at `created`, ours at CFG `scale` times as slow (p90 too)."""
    records = []
    for r in BASE.records:
        if r.impl == "ours" and r.config == CFG:
            m = r.measurement
            r = r.model_copy(update={"measurement": m.model_copy(update={"p50_us": m.p50_us * scale,
                                                                          "p90_us": m.p90_us * scale})})
        records.append(r.model_copy(update={"git_sha": sha}))
    stamp = created.replace("-", "").replace(":", "")
    run = BASE.model_copy(update={"run_id": f"{stamp}-{sha[:8]}-2xH200", "created_utc": created, "git_sha": sha,
                                  "records": records})
    return archive.write_run(RunArchive.model_validate(run.model_dump()), _meta(), "")


@pytest.fixture
def three_runs(results_dir) -> list[Path]:
    """The newest commit's run archived first: commit order is not time order. Ours at CFG: 1.0x, 1.01x, 1.3x."""
    return [_write(SHAS[2], "2026-11-20T10:00:00Z", 1.3), _write(SHAS[0], "2026-11-21T10:00:00Z", 1.0),
            _write(SHAS[1], "2026-11-22T10:00:00Z", 1.01)]


def _row(text: str, impl: str, timing: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(f"| {CFG} | {impl} |") and f"| {timing}" in ln)


def test_history_lists_every_run_in_commit_order_and_flags_the_step_at_its_commit(three_runs, capsys):
    assert cli.main(["history", "--device", "2xH200", "--suite", "allreduce"]) == 0
    out = capsys.readouterr().out
    row = _row(out, "ours", "hot")
    p50 = next(r for r in BASE.records if r.impl == "ours" and r.config == CFG).measurement.p50_us
    assert f"| 3 | {p50:.2f} {p50 * 1.01:.2f} {p50 * 1.3:.2f} |" in row  # commit order, not archive order
    assert row.endswith(f"| +28.7% at {SHAS[2][:8]} |")  # 1.3 / 1.01: beyond the noise, at the newest commit
    assert _row(out, "nccl", "hot").endswith("| - |")  # unchanged: no step
    assert "## sdpa" not in out and "2 config(s)" not in out


def test_history_filters_and_writes_one_png_per_suite(three_runs, tmp_path, capsys):
    out_dir = tmp_path / "plots"
    assert cli.main(["history", "--config", "16777216B", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "## allreduce on 2xH200" in out and "262144B" not in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["2xH200-allreduce.png"]
    assert (out_dir / "2xH200-allreduce.png").read_bytes().startswith(b"\x89PNG")


def test_the_index_has_a_history_section_with_its_plots(three_runs, results_dir):
    report.update_index(results_dir)
    text = (results_dir / "README.md").read_text()
    section = text[text.index("## History"):]
    assert "### allreduce on 2xH200" in section and "### sdpa on 2xH200" in section
    assert "![allreduce on 2xH200](history/2xH200-allreduce.png)" in section
    assert (results_dir / "history" / "2xH200-allreduce.png").read_bytes().startswith(b"\x89PNG")
    row = _row(section, "ours", "hot")
    assert f"({SHAS[2][:8]}) |" in row and "| +30.0% | +28.7% (slower) |" in row and f"+28.7% at {SHAS[2][:8]}" in row
    assert "in their newest run 1 slower and 0 faster" in section
    assert archive.archived_runs(results_dir) == sorted(three_runs)  # history/ is no run folder


def test_a_run_whose_commit_is_not_in_the_history_keeps_its_place_in_time(results_dir):
    """A bundle's run from a commit this checkout never had comes after the run archived before it."""
    runs = [history.TimedRun(f"r{i}", sha, f"2026-11-2{i}T00:00:00Z", "2xH200", ()) for i, sha in
            enumerate([SHAS[1], "f" * 40, SHAS[0]])]
    order = history.commit_order(runs, {sha: i for i, sha in enumerate(SHAS)})
    assert [r.run_id for r in order] == ["r2", "r0", "r1"]


def test_unreadable_run_folders_are_skipped_and_named(three_runs, results_dir, capsys):
    good = (three_runs[1] / archive.RESULTS_FILE).read_bytes()
    bad = {"truncated": good[: len(good) // 2], "latin1": gzip.compress("{\"run_id\": \"caf\xe9\"}".encode("latin-1")),
           "model": gzip.compress(b'{"run_id": "x", "records": 3}')}
    for name, data in bad.items():
        (results_dir / name).mkdir()
        (results_dir / name / archive.RESULTS_FILE).write_bytes(data)
    assert cli.main(["history", "--device", "2xH200"]) == 0
    captured = capsys.readouterr()
    assert _row(captured.out, "ours", "hot").startswith(f"| {CFG} | ours |")
    assert "Skipped 3 run folder(s) whose records cannot be read:" in captured.out
    for name in bad:
        assert f"- {name}: " in captured.out and f"history: skipped {name}: " in captured.err
    assert "- model: " in captured.out and "is not a run record" in captured.out
    assert "Traceback" not in captured.err
    report.update_index(results_dir)  # the index's history section names them too
    assert "- truncated: " in (results_dir / "README.md").read_text()


@pytest.mark.parametrize(("args", "says"), [
    (["--device", "8xB200"], "no archived run with a timed config on device 8xB200 in "),
    (["--suite", "gemm"], "unknown history suite 'gemm'"),
    (["--config", "nosuchconfig"], "no archived timing for config containing 'nosuchconfig'"),
    (["--out", ""], "empty --out"),
])
def test_history_bad_input_is_one_line_and_exit_2(three_runs, capsys, args, says):
    assert cli.main(["history", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


def test_history_of_an_empty_results_folder_is_one_line(results_dir, capsys):
    assert cli.main(["history", "--device", "2xH200"]) == 2
    assert "no archived run with a timed config on device 2xH200" in capsys.readouterr().err


def test_bench_ends_with_the_moves_since_the_previous_run(tmp_path, monkeypatch, results_dir, capsys):
    """Two bench runs through the real pipeline (runner doubles): the second, ours 3x slower, ends with one line
    counting the configs that moved and naming the worst."""
    exe_dir = fake_build(tmp_path, monkeypatch)
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)
    argv = ["bench", "--no-build", "--arch", "sm_90", "--iters", "5", "--warmup", "0", "--rounds", "1",
            "--suite", "allreduce"]
    for p50 in (5.0, 15.0):
        allreduce_exe(exe_dir, "allreduce_bench", impl="ours", p50=p50)
        allreduce_exe(exe_dir, "upstream_bench", impl="upstream", p50=8.0)
        cli.main(argv)
        err = capsys.readouterr().err.splitlines()
        line = next(ln for ln in err if ln.startswith("history: "))
        assert err.index(line) == next(i for i, ln in enumerate(err) if ln.startswith("archived: ")) + 1
        if p50 == 5.0:
            assert line == "history: since the previous run: no config of this run was archived before on 2xH200"
    assert line.startswith("history: since the previous run of each config on 2xH200: 2 slower, 0 faster beyond the "
                           "noise, 2 within it; worst: allreduce ours float32/2gpu/")
    assert "+200.0% (5.00 -> 15.00 us, since " in line


def test_history_over_the_real_archive_shows_an_archived_p50(capsys):
    """The real bench_results/: one archived run's p50 of one config is in its row."""
    run = archive.load_run(REAL / "20261127T034042Z-a7f2c552-2xH200")
    rec = next(r for r in run.records if r.impl == "ours" and r.config == "float32/2gpu/262144B" and r.round_p50_us)
    assert cli.main(["history", "--device", "2xH200", "--suite", "allreduce", "--config", "float32/2gpu/262144B"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith(f"| float32/2gpu/262144B | ours | {rec.kernel} | cold"))
    assert f" {rec.measurement.p50_us:.2f} " in row
