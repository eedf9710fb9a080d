"""Known limits: the newest archived gate states, split per gate, and the table they write (docs/LIMITS.md)."""

import functools
import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from driver import archive, cli, limits, paths, thresholds
from driver.limits import Freshness
from driver.records import ArchivedRecord, DeviceInfo, GpuInfo, RunArchive, SdpaLine, Verdict
from driver.suites import sdpa
from tests.conftest import ROOT, run_driver

REPO_RUNS = archive.archived_runs(ROOT / "bench_results")
GATES = thresholds.load()
NOISE = GATES.noise.min_rel_noise


@functools.cache
def _loaded(folder: Path) -> RunArchive:
    """An archived run read once for the whole module (a run folder's archive is gzip'd JSON: slow to replay)."""
    return archive.load_run(folder)


H200X2 = DeviceInfo(driver_version="580.159.04",
                    gpus=[GpuInfo(index=i, name="NVIDIA H200", memory_mib=143771) for i in range(2)])


def _sdpa_run(created: str, reasons: list[str], status: str) -> RunArchive:
    """One gated SDPA record; the reasons are written the way the gate stage writes them."""
    line = SdpaLine(suite="sdpa", impl="cpasync", shape=[1, 8, 512, 64], iters=100, warmup=10, p50_us=9.4,
                    p90_us=9.6, mean_us=9.4, std_us=0.1, min_us=9.3, tflops=10.0)
    rec = ArchivedRecord(suite="sdpa", impl="cpasync", kernel="sdpa_fp8_cpasync", config="mission/seed0",
                         device=H200X2.kind, git_sha="b" * 40, seed=0, passed=True,
                         correctness=Verdict(status="pass"), performance=Verdict(status=status, reasons=reasons),
                         measurement=line, round_p50_us=[9.4])
    return RunArchive(run_id=archive.run_id(created, "b" * 40, H200X2.kind), created_utc=created,
                      command=["python", "-m", "driver", "bench"], git_sha="b" * 40, git_dirty=False,
                      device=H200X2, host=_loaded(REPO_RUNS[-1]).host, records=[rec])


def _store(root: Path, run: RunArchive, noise: float = 0.02) -> Path:
    folder = root / run.run_id
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(run.model_dump_json())  # a run of before 2026-11-26 21:00: plain JSON
    (folder / "thresholds.toml").write_text(f"[noise]\nmin_rel_noise = {noise}\n")
    return folder


def test_a_record_with_two_gates_gives_two_states():
    run = _sdpa_run("2026-11-22T13:23:33Z", [
        "p50 vs baseline: 1.05x (ours 9.41 us, peer 9.86 us, floor 1.10x)",
        "p50 vs torch_sdpa: 1.33x (ours 9.41 us, peer 12.51 us, floor 1.00x)"], "fail")
    by_peer = {s.peer: s for s in limits.gate_states(run, noise=0.02)}
    assert by_peer["baseline"].status == "fail" and by_peer["torch_sdpa"].status == "pass"
    assert by_peer["baseline"].config == "mission"  # the seed is not part of the gate
    assert by_peer["baseline"].short_by == pytest.approx(1 - 1.05 / 1.10)
    assert by_peer["torch_sdpa"].short_by is None


def test_the_noise_band_of_the_run_decides_inconclusive():
    run = _sdpa_run("2026-11-22T13:23:33Z", ["p50 vs baseline: 1.08x (ours 9.10 us, peer 9.83 us, floor 1.10x)"],
                    "inconclusive")
    assert [s.status for s in limits.gate_states(run, noise=0.02)] == ["inconclusive"]
    assert [s.status for s in limits.gate_states(run, noise=0.01)] == ["fail"]


def test_the_noise_band_is_read_from_the_runs_own_thresholds_compressed_or_not(tmp_path):
    """A run archived since 2026-11-29 keeps thresholds.toml.gz, an older one thresholds.toml; a folder with neither,
    or a damaged one, takes the default."""
    plain, packed, damaged, none = (tmp_path / n for n in ("plain", "packed", "damaged", "none"))
    for folder in (plain, packed, damaged, none):
        folder.mkdir()
    (plain / "thresholds.toml").write_text("[noise]\nmin_rel_noise = 0.03\n")
    (packed / archive.THRESHOLDS_FILE).write_bytes(gzip.compress(b"[noise]\nmin_rel_noise = 0.04\n"))
    (damaged / archive.THRESHOLDS_FILE).write_bytes(gzip.compress(b"[noise]\nmin_rel_noise = 0.04\n")[:12])
    assert [limits._noise(f, 0.02) for f in (plain, packed, damaged, none)] == [0.03, 0.04, 0.02, 0.02]


def test_newest_run_wins_per_gate_and_unmeasured_peers_are_kept(tmp_path):
    old = _sdpa_run("2026-11-22T10:00:00Z", ["p50 vs baseline: 1.02x (ours 9.60 us, peer 9.79 us, floor 1.10x)",
                                             "torch_sdpa not measured (cold)", "torch is not installed on this host"], "fail")
    new = _sdpa_run("2026-11-22T12:00:00Z", ["p50 vs baseline: 1.20x (ours 8.20 us, peer 9.84 us, floor 1.10x)"],
                    "pass")
    folders = sorted([_store(tmp_path, new), _store(tmp_path, old)])
    states = {s.peer: s for s in limits.newest(folders, default_noise=0.02)}
    assert states["baseline"].status == "pass" and states["baseline"].run_id == new.run_id
    assert states["torch_sdpa"].status == "not_measured" and states["torch_sdpa"].run_id == old.run_id
    table = limits.markdown(list(states.values()))
    assert "| 2xH200 | sdpa mission cold: cpasync (sdpa_fp8_cpasync) vs torch_sdpa | - | - | - | peer not measured |" in table
    assert f"[{old.run_id}](../bench_results/{old.run_id}/COMPARE.md), 2026-11-22 10:00 UTC, bbbbbbbb" in table
    assert "Met in their newest run: 2xH200 sdpa mission cold cpasync vs baseline 1.20x (floor 1.10x" in table


def test_write_readme_replaces_only_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Known limits\n\n{limits.BEGIN}\nold table\n{limits.END}\n\nafter\n")
    assert limits.write_table("new table\n", readme)
    assert readme.read_text() == f"# x\n\n## Known limits\n\n{limits.BEGIN}\nnew table\n{limits.END}\n\nafter\n"
    assert limits.section(readme) == "new table\n"
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    assert not limits.write_table("new table\n", plain)
    assert plain.read_text() == "no markers\n"


def test_every_archived_gate_reason_is_understood():
    """A change to how the gate stage words its reasons must show up here, not as rows silently missing."""
    patterns = (limits._RATIO, limits._ZERO, limits._MISSING, limits._UNTIMED, limits._UNTRUSTED, limits._NOTE,
                limits._OTHER_GATE)
    for folder in REPO_RUNS:
        for r in _loaded(folder).records:
            for reason in (r.performance.reasons if r.performance else []):
                assert any(p.match(reason) for p in patterns), f"{folder.name}: {reason!r}"


def test_split_states_agree_with_the_archived_verdicts():
    """Where a record had one gate, the state recomputed from its reason is the status the gate archived."""
    checked = 0
    for folder in REPO_RUNS:
        archived = _loaded(folder)
        for r in archived.records:
            if r.performance and len(r.performance.reasons) == 1 and limits._RATIO.match(r.performance.reasons[0]):
                run = archived.model_copy(update={"records": [r]})
                (state,) = limits.gate_states(run, limits._noise(folder, NOISE))
                assert state.status == r.performance.status, f"{folder.name} {r.config}"
                checked += 1
    assert checked >= 5


@functools.cache
def _newest_table() -> str:
    """The known-limits table of the checkout's archived runs, computed once (it reads every run)."""
    return limits.markdown(limits.newest(REPO_RUNS, NOISE, GATES))


def test_readme_known_limits_are_the_newest_archived_states():
    if problem := limits.History().problem:  # the committed table was written where the runs' commits are known
        pytest.skip(f"which runs are stale cannot be told here: {problem}")
    assert limits.section() == _newest_table(), (
        "docs/LIMITS.md's known limits are not the newest archived gate states: run `python -m driver index`")


def test_limits_cli_prints_the_table():
    out = run_driver("limits")
    assert out.returncode == 0 and out.stdout == _newest_table()


def test_limits_write_refuses_a_readme_without_markers(tmp_path, monkeypatch, capsys):
    plain = tmp_path / "README.md"
    plain.write_text("no markers\n")
    monkeypatch.setattr(limits, "TABLE_FILE", plain)
    monkeypatch.setattr(archive, "try_load_run", lambda folder: pytest.fail(f"read {folder} before the markers"))
    assert cli.main(["limits", "--write"]) == 2
    assert "has no limits markers" in capsys.readouterr().err
    assert plain.read_text() == "no markers\n"


def test_gate_states_carry_the_timing_mode():
    """Reasons since thresholds v2 name the mode; a gate on a mode the run did not time is its own state."""
    run = _sdpa_run("2026-11-23T06:34:21Z", [
        "cold p50 vs torch_sdpa: 1.33x (ours 9.98 us, peer 13.28 us, floor 1.00x)",
        "peer baseline not measured (hot)",
        "gate vs torch_sdpa is on hot timing, which this run did not measure (--timing cold)"], "fail")
    states = {(s.peer, s.timing): s for s in limits.gate_states(run, noise=0.02)}
    assert states[("torch_sdpa", "cold")].status == "pass"
    assert states[("baseline", "hot")].status == "not_measured"
    assert states[("torch_sdpa", "hot")].status == "untimed"
    table = limits.markdown(list(states.values()))
    assert "| 2xH200 | sdpa mission hot: cpasync (sdpa_fp8_cpasync) vs torch_sdpa | - | - | - | mode not timed |" in table
    old = _sdpa_run("2026-11-22T13:23:33Z", ["p50 vs baseline: 1.05x (ours 9.41 us, peer 9.86 us, floor 1.10x)"], "fail")
    (legacy,) = limits.gate_states(old, noise=0.02)
    assert legacy.timing == "cold"  # read from the record: an event pair per launch


def test_only_gates_thresholds_still_holds_are_known_limits():
    """A state of a gate measured in another mode than today's gate names (an older host-batched run)
    is not a known limit of today's gates."""
    run = _sdpa_run("2026-11-23T06:34:21Z", [
        "cold p50 vs baseline: 1.05x (ours 9.41 us, peer 9.86 us, floor 1.10x)",
        "hot p50 vs baseline: 1.05x (ours 5.93 us, peer 6.23 us, floor 1.10x)"], "fail")
    states = {s.timing: s for s in limits.gate_states(run, noise=0.02)}
    assert limits.is_current(states["cold"], GATES)  # thresholds.toml gates cpasync vs baseline on cold
    assert not limits.is_current(states["hot"], GATES)


FP8_RUN = ROOT / "bench_results" / "20261123T085011Z-8fe71009-1xH100"
FP16_RUN = ROOT / "bench_results" / "20261123T072724Z-0d838fe7-1xH100"


def test_a_gate_added_after_a_run_is_judged_on_its_records():
    """That run (1x H100, 2026-11-23, the Hopper kernel's fp16 build, wgmma_sm90) was gated before the per-shape
    torch gates existed: its archived verdicts hold none for batch8. Today's gate is judged on its timed records,
    the bench's rule."""
    run = archive.load_run(FP16_RUN)
    stored = {s.key for s in limits.gate_states(run, NOISE)}
    assert ("1xH100", "sdpa", "batch8", "torch_sdpa", "cold") not in stored
    today = {s.key: s for s in limits.rejudged(run, GATES)}
    batch8 = today[("1xH100", "sdpa", "batch8", "torch_sdpa", "cold")]
    assert (batch8.status, batch8.impl, batch8.ratio, batch8.ours_us, batch8.peer_us) == (
        "fail", "cpasync", 0.82, 57.06, 47.02)
    assert today[("1xH100", "sdpa", "mission", "torch_sdpa", "hot")].status == "pass"
    states = {s.key: s for s in limits.newest([FP16_RUN], NOISE, GATES)}
    assert states[batch8.key] == batch8.model_copy(update={"known": states[batch8.key].known})
    assert states[batch8.key].state == "KNOWN"  # today's thresholds.toml marks batch8 cold known


def test_a_run_of_another_tier_does_not_measure_a_gate_added_after_it():
    """The torch gates are in the fp16 tier (torch's). A run that timed only our FP8 kernel (1x H100, 2026-11-23,
    before the tiers: its lines name wgmma_fp8_sm90) holds no fp16 timing, so today's batch8 gate is not judged
    on it; its own archived verdicts (against torch, from before the tiers) stay as they were."""
    run = archive.load_run(FP8_RUN)
    assert {r.precision for r in run.records if r.impl in sdpa.VARIANTS} == {"fp8"}
    stored = {s.key for s in limits.gate_states(run, NOISE)}
    today = {s.key for s in limits.rejudged(run, GATES)}
    assert ("1xH100", "sdpa", "batch8", "torch_sdpa", "cold") not in stored | today
    assert ("1xH100", "sdpa", "mission", "torch_sdpa", "cold") in stored


def test_a_best_gate_is_one_gate_whichever_variant_it_judged(tmp_path):
    """`best` judged the baseline in an old run and cpasync in a newer one: the newer state replaces the
    older, it does not stand beside it as a second limit."""
    def state(impl: str, ratio: float, created: str) -> limits.GateState:
        return limits.GateState(device="1xH100", suite="sdpa", config="large", impl=impl, kernel=f"sdpa_fp8_{impl}",
                                peer="torch_sdpa", timing="cold", status="fail", ratio=ratio, floor=1.0, ours_us=1.0, peer_us=ratio,
                                run_id=created, created_utc=created, git_sha="0" * 40)

    old = state("baseline", 0.60, "2026-11-22T13:11:44Z")
    new = state("cpasync", 0.91, "2026-11-23T08:50:11Z")
    assert old.key == new.key
    assert limits.markdown([new]).count("| 1xH100 |") == 1


# Stale rows: a run that predates the kernel sources or the dispatch windows HEAD builds. These build a real git
# repository with files where the build table (driver/targets.py) looks for each suite's sources.
SDPA_SRC = "kernels_cuda/sdpa_fp8/runner.cu"
MOJO_SRC = "kernels_mojo/bin/allreduce_bench.mojo"
WINDOWS = "kernels_mojo/dispatch_windows.json"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the checkout around tmp_path
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    return root


def test_the_sources_are_the_build_tables(tmp_path):
    """The files each suite's rows depend on are its targets' source globs (the files below are among them, as
    Target.sources finds them), the windows file on its own."""
    for rel in (SDPA_SRC, MOJO_SRC):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")

    def found(globs: tuple[str, ...]) -> set[str]:
        return {p.relative_to(tmp_path).as_posix() for g in globs for p in tmp_path.glob(g)}

    sdpa, = limits.sources_of("sdpa")
    assert sdpa.label == "SDPA kernel sources" and found(sdpa.globs) == {SDPA_SRC}
    kernels, windows = limits.sources_of("allreduce")
    assert kernels.label == "allreduce kernel sources" and found(kernels.globs) == {MOJO_SRC}
    assert windows == limits.Sources("dispatch windows", (WINDOWS,)) and WINDOWS not in kernels.globs


def test_a_run_older_than_the_kernel_or_the_windows_at_head_is_stale(repo):
    run = _commit(repo, {SDPA_SRC: "v1", MOJO_SRC: "v1", WINDOWS: "{}"}, "kernels")
    _commit(repo, {"kernels_cuda/sdpa_fp8/README.md": "notes"}, "not a source: no run goes stale")
    assert limits.History(repo).freshness("sdpa", run) == Freshness("current")
    assert limits.History(repo).freshness("allreduce", run) == Freshness("current")

    _commit(repo, {WINDOWS: '{"defines": {}}'}, "new windows")
    history = limits.History(repo)
    assert history.freshness("allreduce", run) == Freshness("stale", f"the dispatch windows changed since {run[:8]}")
    assert history.freshness("sdpa", run) == Freshness("current")

    new = _commit(repo, {SDPA_SRC: "v2", MOJO_SRC: "v2"}, "both kernels")
    history = limits.History(repo)
    assert history.freshness("sdpa", run) == Freshness("stale", f"the SDPA kernel sources changed since {run[:8]}")
    assert history.freshness("allreduce", run) == Freshness(
        "stale", f"the allreduce kernel sources and the dispatch windows changed since {run[:8]}")
    assert history.freshness("sdpa", new) == history.freshness("allreduce", new) == Freshness("current")

    # A run on a branch that never got the change predates it too.
    _git(repo, "checkout", "-q", "-b", "side", run)
    side = _commit(repo, {"notes.txt": "side"}, "side branch")
    _git(repo, "checkout", "-q", "-")
    assert limits.History(repo).freshness("sdpa", side).status == "stale"

    # Uncommitted changes count, a new untracked header too: the table written before a commit is the one
    # the commit expects.
    (repo / "kernels_cuda/sdpa_fp8_sm90/new.cuh").parent.mkdir(parents=True)
    (repo / "kernels_cuda/sdpa_fp8_sm90/new.cuh").write_text("x")
    assert limits.History(repo).freshness("sdpa", new).status == "stale"
    (repo / "kernels_cuda/sdpa_fp8_sm90/new.cuh").unlink()
    assert limits.History(repo).freshness("sdpa", new) == Freshness("current")
    (repo / SDPA_SRC).write_text("v3")
    assert limits.History(repo).freshness("sdpa", new) == Freshness("stale", f"the SDPA kernel sources changed since {new[:8]}")
    assert limits.History(repo).freshness("allreduce", new) == Freshness("current")
    # A commit this history does not hold (a bundle's run, a rewritten branch) is stale, never guessed current.
    assert limits.History(repo).freshness("sdpa", "0123abcd") == Freshness("stale", "commit 0123abcd not in this history")


def test_stale_rows_say_so_in_the_table(repo):
    run = _commit(repo, {SDPA_SRC: "v1", MOJO_SRC: "v1", WINDOWS: "{}"}, "kernels")
    _commit(repo, {SDPA_SRC: "v2"}, "sdpa kernel")
    fail = limits.GateState(device="1xH100", suite="sdpa", config="large", impl="cpasync", kernel="sdpa_fp8_cpasync",
                            peer="torch_sdpa", status="fail", ratio=0.9, floor=1.0, ours_us=1.0, peer_us=0.9,
                            run_id="r1", created_utc="2026-11-23T08:50:11Z", git_sha=run)
    met = fail.model_copy(update={"config": "mission", "status": "pass", "ratio": 1.3})
    ar = fail.model_copy(update={"suite": "allreduce", "config": "float32/2gpu/262144B", "impl": "ours",
                                 "kernel": "1stage_push", "peer": "nccl"})
    table = limits.markdown([fail, met, ar], limits.History(repo))
    assert f"| fail | [r1](../bench_results/r1/COMPARE.md), 2026-11-23 08:50 UTC, {run[:8]} | stale: the SDPA kernel " \
           f"sources changed since {run[:8]} |" in table
    assert table.count("| current |") == 1  # the allreduce row: its sources did not change
    assert f"(floor 1.00x, 2026-11-23, {run[:8]}; stale)" in table
    assert f"Of those, stale: the SDPA kernel sources changed since {run[:8]}." in table


def test_without_git_history_the_table_says_so_instead_of_guessing(repo, tmp_path, monkeypatch):
    run = _commit(repo, {SDPA_SRC: "v1"}, "kernels")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert limits.History(plain).freshness("sdpa", run) == Freshness(
        "not_known", "this folder is not a git checkout with commits")
    (plain / paths.BUNDLE_MARKER.name).write_text("{}")
    assert limits.History(plain).freshness("sdpa", run) == Freshness("not_known", "a bundle carries no git history")
    _commit(repo, {SDPA_SRC: "v2"}, "sdpa kernel")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    assert limits.History(shallow).freshness("sdpa", run).why.startswith("this is a shallow clone")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert limits.History(repo).freshness("sdpa", run) == Freshness("not_known", "git is not installed here")


def _large_run(created: str, reasons: list[str], status: str) -> RunArchive:
    run = _sdpa_run(created, reasons, status)
    rec = run.records[0].model_copy(update={"config": "large/seed0"})
    return run.model_copy(update={"records": [rec]})


def test_known_gates_stay_rows_marked_known_and_a_passing_one_reads_xpass(tmp_path):
    """Today's thresholds.toml marks `large` cold against torch known: a run where it fell short lists it KNOWN with
    the mark beside the table; a newer run where it passed lists it XPASS, a row, never in the met line."""
    old = _large_run("2026-11-27T10:00:00Z",
                     ["cold p50 vs torch_sdpa: 0.96x (ours 84.02 us, peer 81.07 us, floor 1.00x)"], "known")
    old_folder = _store(tmp_path, old)
    (state,) = limits.newest([old_folder], NOISE, GATES)
    assert (state.status, state.state) == ("fail", "KNOWN") and "fp16 tier behind torch SDPA" in state.known
    table = limits.markdown([state])
    assert ("| 2xH200 | sdpa large cold: cpasync (sdpa_fp8_cpasync) vs torch_sdpa | 0.96x (84.02 vs 81.07 us) | "
            "1.00x | 4% | KNOWN |") in table
    assert "KNOWN, XPASS and (known): gates marked `known` in `thresholds.toml`" in table
    new = _large_run("2026-11-28T10:00:00Z",
                     ["cold p50 vs torch_sdpa: 1.05x (ours 77.00 us, peer 80.85 us, floor 1.00x)"], "xpass")
    (state,) = limits.newest([old_folder, _store(tmp_path, new)], NOISE, GATES)
    assert state.state == "XPASS"
    table = limits.markdown([state])
    assert "| 1.05x (77.00 vs 80.85 us) | 1.00x | - | XPASS |" in table and "Met in their newest run" not in table


def test_a_ratio_the_gate_did_not_trust_reads_inconclusive_in_the_table():
    """Another process on the GPU (or ours outlasting the hold) left the gate inconclusive; the table, which re-reads
    the ratio, says inconclusive too, not the fail the ratio alone would give."""
    run = _sdpa_run("2026-11-28T10:00:00Z", [
        "cold p50 vs torch_sdpa: 0.90x (ours 10.00 us, peer 9.00 us, floor 1.00x)",
        ("timed while another process used the GPU (GPU0: 4 other process(es), NVML before or after the case): neither "
        "pass nor fail; re-run with the GPUs to itself")], "inconclusive")
    (state,) = limits.gate_states(run, noise=0.02)
    assert state.status == "inconclusive"
    run = _sdpa_run("2026-11-28T10:00:00Z", [
        "cold p50 vs baseline: 0.90x (ours 10.00 us, peer 9.00 us, floor 1.10x)",
        "cold p50 vs torch_sdpa: 0.90x (ours 10.00 us, peer 9.00 us, floor 1.00x)",
        ("torch_sdpa timing not trusted: 60 of 100 samples outlasted the stream hold (host enqueue time inside the "
        "interval); re-run with fewer launches per sample or a longer hold")], "inconclusive")
    states = {s.peer: s.status for s in limits.gate_states(run, noise=0.02)}
    assert states == {"baseline": "fail", "torch_sdpa": "inconclusive"}


def test_a_gate_whose_floor_changed_is_judged_against_todays_floor():
    """The 2x H200 run of a7f2c552 archived the 256 KiB NCCL gate against its old 4.0x floor (fail at 1.70x); today's
    floor is 1.5x, so the table reads it as met."""
    folder = ROOT / "bench_results" / "20261127T034042Z-a7f2c552-2xH200"
    (stored,) = [s for s in limits.gate_states(archive.load_run(folder), NOISE) if s.peer == "nccl"]
    assert (stored.status, stored.floor, stored.ratio) == ("fail", 4.0, 1.70)
    (today,) = [s for s in limits.newest([folder], NOISE, GATES) if s.peer == "nccl"]
    assert (today.status, today.floor, today.ratio) == ("pass", 1.5, 1.70)


def test_a_change_to_comments_only_leaves_a_run_current(repo):
    """The kernels' comments carry experiment notes and measurements; rewriting them changes no kernel, so a run
    stays current (and says why); any change a compiler sees, in a literal too, or in a non-C source, is stale."""
    code = '// the kernel\nint f(int x) {\n    return x + 1;  /* one */\n}\nconst char* s = "a // b";\n'
    run = _commit(repo, {SDPA_SRC: code, MOJO_SRC: "# note\nfn f(): pass\n"}, "kernels")
    _commit(repo, {SDPA_SRC: code.replace("// the kernel", "// the kernel, measured 2026-11-29\n//\n\n")
                   .replace("/* one */", "/* one,\n   two lines now */").replace("    return", "\treturn")},
            "comments and blank lines")
    history = limits.History(repo)
    assert history.freshness("sdpa", run) == Freshness("current", f"only comments changed since {run[:8]}")
    assert "current (only comments changed since" in history.freshness("sdpa", run).cell()
    (repo / SDPA_SRC).write_text(code + "// an uncommitted note\n")
    assert limits.History(repo).freshness("sdpa", run).status == "current"
    (repo / SDPA_SRC).write_text(code.replace('"a // b"', '"a // c"'))  # inside a literal: code
    assert limits.History(repo).freshness("sdpa", run).status == "stale"
    (repo / SDPA_SRC).write_text(code.replace("x + 1", "x + 2"))
    assert limits.History(repo).freshness("sdpa", run).status == "stale"
    (repo / SDPA_SRC).write_text(code)
    assert limits.History(repo).freshness("sdpa", run) == Freshness("current")
    _commit(repo, {MOJO_SRC: "# another note\nfn f(): pass\n"}, "a Mojo comment: not read, so a change")
    assert limits.History(repo).freshness("allreduce", run).status == "stale"
    (repo / "kernels_cuda/sdpa_fp8_sm90/new.cuh").parent.mkdir(parents=True)
    (repo / "kernels_cuda/sdpa_fp8_sm90/new.cuh").write_text("// only a comment\n")  # a new file: a change
    assert limits.History(repo).freshness("sdpa", run).status == "stale"
