"""Cluster runs through Slurm: the parsers, the collector, and real job arrays on a local Slurm.

The tests marked `slurm` start munged, slurmctld and slurmd on this machine (tests/slurm_local.py)
and skip with the reason where Slurm is not installed or this is not root; CI installs it
(.ci/install-slurm). Their tasks run the bundle on a node without GPUs, so every bench task
ends with the driver's "no GPU" exit 5, and the collector must say so.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver import archive, report
from driver.cluster import collect, gpus, slurm, watch
from driver.errors import ClusterFailed, ConfigError, NoGPU, ToolchainMissing
from driver.records import ClusterTask, Submission, TaskState
from tests import slurm_local
from tests.conftest import ROOT, run_driver

DATA = Path(__file__).parent / "data" / "slurm"
# Real runs archived on lent GPU hosts: SDPA mission and large on 1x H100 and on 2x H200.
H100_RUN = ROOT / "bench_results" / "20261122T131144Z-89d7f9d3-1xH100"
H200_RUN = ROOT / "bench_results" / "20261122T132333Z-4c661c0a-2xH200"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """stderr without the progress lines (plan:, submit:, [build] ...)."""
    return [ln for ln in proc.stderr.splitlines()
            if ln.strip() and not ln.startswith(("plan:", "submit:", "submitted:", "[build]", "build:"))]


def _assert_one_clear_line(proc, exit_code: int, *needles: str) -> None:
    lines = _error_lines(proc)
    assert proc.returncode == exit_code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _empty(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


def _only_the_report(results_dir: Path, submission_id: str) -> str:
    """No run folder and no index in bench_results/, only the cluster report of a collect that moved
    nothing; returns its CLUSTER.md."""
    assert [p.name for p in results_dir.iterdir()] == ["cluster"]
    report_dir = results_dir / "cluster" / submission_id
    assert [p.name for p in (results_dir / "cluster").iterdir()] == [submission_id]
    assert sorted(p.name for p in report_dir.iterdir()) == ["CLUSTER.md", "cluster.json"]
    return (report_dir / "CLUSTER.md").read_text()


# ---------------------------------------------------------------- GPU table and Slurm's output


def test_gpu_table_maps_only_to_built_archs():
    from driver.config import SUPPORTED_ARCHS

    assert {k.arch for k in gpus.GPU_KINDS.values()} <= set(SUPPORTED_ARCHS)
    assert gpus.arch_of("h100") == gpus.arch_of("H200") == "sm_90"
    assert gpus.arch_of("nvidia_h100_80gb_hbm3") == "sm_90"  # the type AutoDetect=nvml gives
    assert gpus.arch_of("a100-sxm4-80gb") == "sm_80"
    assert gpus.arch_of("l40s") == "sm_89"
    for unknown in ("mystery", "a10", "h1000", ""):
        with pytest.raises(ConfigError, match="unknown GPU type"):
            gpus.arch_of(unknown)


def test_gres_strings():
    assert slurm.parse_gpu_gres("gpu:h100:2") == [("h100", 2)]
    assert slurm.parse_gpu_gres("gpu:h100:8(S:0-1)") == [("h100", 8)]
    assert slurm.parse_gpu_gres("gpu:a100:4(S:0,1),nvme:1") == [("a100", 4)]
    assert slurm.parse_gpu_gres("gpu:8") == [(None, 8)]
    assert slurm.parse_gpu_gres("(null)") == []


def test_array_index_specs():
    assert slurm.expand_indices("3") == [3]
    assert slurm.expand_indices("3-4%1") == [3, 4]
    assert slurm.expand_indices("1,3-5") == [1, 3, 4, 5]
    assert slurm.expand_indices("[0-6:3]") == [0, 3, 6]
    with pytest.raises(ClusterFailed):
        slurm.expand_indices("x")


def test_scontrol_output_of_a_real_array():
    running = slurm.parse_scontrol_jobs((DATA / "scontrol_show_job_running.txt").read_text())
    assert {i: (s.state, s.exit_code) for i, s in running.items()} == {
        0: ("COMPLETED", 0), 1: ("FAILED", 5), 2: ("RUNNING", None), 3: ("PENDING", None), 4: ("PENDING", None)}
    assert running[2].node == "n1" and running[2].elapsed_s == 5
    assert running[3].reason == "JobArrayTaskLimit"
    cancelled = slurm.parse_scontrol_jobs((DATA / "scontrol_show_job_cancelled.txt").read_text())
    assert (cancelled[2].state, cancelled[2].exit_code, cancelled[2].signal) == ("CANCELLED", 0, 15)
    assert all(watch.ended(s) for s in cancelled.values())
    assert [watch.succeeded(s) for s in cancelled.values()].count(True) == 1


# ---------------------------------------------------------------- collecting run folders


def _submission(tmp_path: Path, n: int = 2) -> Submission:
    tasks = [ClusterTask(index=i, suite="bench", partition="h100", gpu_type="h100", arch="sm_90", gpus=i + 1,
                         driver_args=["bench"]) for i in range(n)]
    for sub in ("logs", "results", "status"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return Submission(submission_id="20261123T000000Z-test", created_utc="2026-11-23T00:00:00Z",
                      command=["python", "-m", "driver", "submit"], git_sha="0" * 40, git_dirty=False,
                      folder=str(tmp_path), job_id="1", time_limit_min=60, archs=["sm_90"], tasks=tasks)


def _place(run: Path, sub: Submission, index: int) -> Path:
    dest = Path(sub.folder) / "results" / f"task-{index}" / run.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run, dest)
    return dest


def test_move_run_is_whole_or_nothing(tmp_path, results_dir, monkeypatch):
    sub = _submission(tmp_path / "shared")
    src = _place(H100_RUN, sub, 0)
    partial = src.with_name(f".tmp-{src.name}x")  # what a task killed mid-archive leaves
    shutil.copytree(src, partial)
    assert collect.finished_runs(src.parent) == [src]

    real_copy = shutil.copytree

    def copy_then_fail(a, b, **kw):
        real_copy(a, b, **kw)
        raise OSError("disk full")

    monkeypatch.setattr(collect.shutil, "copytree", copy_then_fail)
    with pytest.raises(OSError):
        collect.move_run(src, results_dir)
    assert _empty(results_dir) and src.is_dir()  # nothing half-collected, the source kept
    monkeypatch.setattr(collect.shutil, "copytree", real_copy)

    run = collect.move_run(src, results_dir)
    assert run.run_id == H100_RUN.name and not src.exists()
    assert sorted(p.name for p in results_dir.iterdir()) == [H100_RUN.name]
    assert sorted(p.name for p in (results_dir / H100_RUN.name).iterdir()) == sorted(p.name for p in H100_RUN.iterdir())


def test_a_broken_run_folder_is_reported_not_collected(tmp_path, results_dir):
    sub = _submission(tmp_path / "shared", n=1)
    src = _place(H100_RUN, sub, 0)
    (src / "results.json.gz").write_bytes(b"\x1f\x8b\x08\x00truncated")
    (Path(sub.folder) / "logs" / "task-0.log").write_text("line 1\nno GPU: NVML cannot start\n")
    states = {0: TaskState(index=0, state="COMPLETED", exit_code=0)}
    with pytest.raises(ClusterFailed, match="not a readable run folder"):
        collect.collect(sub, states)
    assert "not a readable run folder" in _only_the_report(results_dir, sub.submission_id)
    assert src.is_dir()


def test_cross_device_table_of_real_runs():
    runs = [archive.load_run(H100_RUN), archive.load_run(H200_RUN)]
    table = "\n".join(report.cross_device(runs))
    assert "| suite | config | impl | mode | 1xH100 | 2xH200 | slowest / fastest |" in table
    # archived before the timing modes: an event pair per launch, i.e. cold
    row = next(ln for ln in table.splitlines() if ln.startswith("| sdpa | mission/seed0 | cpasync | cold |"))
    h100, h200 = (r.records for r in runs)
    p50 = {k: next(x.measurement.p50_us for x in recs if x.config == "mission/seed0" and x.impl == "cpasync")
           for k, recs in (("h100", h100), ("h200", h200))}
    assert f"| {p50['h100']:.2f} | {p50['h200']:.2f} |" in row
    assert f"{max(p50.values()) / min(p50.values()):.2f}x" in row


def test_failed_tasks_decide_the_exit_code(tmp_path, results_dir):
    sub = _submission(tmp_path / "shared")
    no_gpu = {i: TaskState(index=i, state="FAILED", exit_code=5, node="n1") for i in range(2)}
    with pytest.raises(NoGPU, match="2 of 2 task"):
        collect.collect(sub, no_gpu)
    assert "## Task 1 h100/2xh100/bench: FAILED, exit 5 (no GPU)" in _only_the_report(results_dir, sub.submission_id)
    mixed = {0: no_gpu[0], 1: TaskState(index=1, state="TIMEOUT", exit_code=0, signal=15, elapsed_s=3600)}
    with pytest.raises(ClusterFailed, match="TIMEOUT after 3600 s .limit 60 min: submit --timeout., signal 15"):
        collect.collect(sub, mixed)
    assert "TIMEOUT" not in _only_the_report(results_dir, sub.submission_id)  # the first collect's report stays


def test_the_report_is_archived_when_nothing_was_collected(tmp_path, results_dir, capsys):
    """CLUSTER.md lands in bench_results/cluster/<submission>/ with or without run folders; a later collect
    that moves runs replaces it, one that moves nothing (they were moved before) keeps it."""
    sub = _submission(tmp_path / "shared", n=1)
    report_md = results_dir / "cluster" / sub.submission_id / "CLUSTER.md"
    failed = {0: TaskState(index=0, state="FAILED", exit_code=5, node="n1")}
    printed = io.StringIO()
    with pytest.raises(NoGPU):
        collect.collect(sub, failed, out=printed)
    assert report_md.read_text() == printed.getvalue().removesuffix("\n")  # what was printed is what was archived
    assert f"collected nothing: no task archived a run folder; report: {report_md}" in capsys.readouterr().err

    _place(H100_RUN, sub, 0)
    done = {0: TaskState(index=0, state="COMPLETED", exit_code=0, node="n1")}
    collect.collect(sub, done)
    assert f"[{H100_RUN.name}](../../{H100_RUN.name}/COMPARE.md)" in report_md.read_text()
    assert f"report: {report_md}" in capsys.readouterr().err

    kept = report_md.read_text()
    with pytest.raises(ClusterFailed, match="archived no run folder"):
        collect.collect(sub, done)
    assert report_md.read_text() == kept
    assert f"the earlier report stays: {report_md}" in capsys.readouterr().err


# ---------------------------------------------------------------- bad input, no Slurm needed


def test_no_sbatch_on_path(tmp_path, results_dir):
    empty = tmp_path / "bin"
    empty.mkdir()
    shared = tmp_path / "shared"
    proc = run_driver("submit", "--partitions", "h100", "--shared", str(shared), env={"PATH": str(empty)})
    _assert_one_clear_line(proc, ToolchainMissing.exit_code, "sbatch not found on PATH")
    assert _empty(results_dir) and _empty(shared)


@pytest.mark.parametrize("args, needle", [
    (["--partitions", "h100", "--suite", "soak"], "unknown cluster suite 'soak'"),
    (["--suite", "bench"], "the following arguments are required: --partitions"),
    (["--partitions", "h100,"], "malformed partition list"),
    (["--partitions", "h100", "--gpus", "two"], "malformed --gpus 'two'"),
    (["--partitions", "h100", "--", "--sizes", "12Q"], "malformed size '12Q'"),
    (["--partitions", "h100", "--suite", "stress", "--minutes", "-3"], "malformed --minutes '-3'"),
])
def test_bad_submit_arguments(args, needle, tmp_path, results_dir):
    proc = run_driver("submit", "--shared", str(tmp_path / "shared"), *args)
    _assert_one_clear_line(proc, ConfigError.exit_code, needle)
    assert _empty(results_dir) and _empty(tmp_path / "shared")


# ---------------------------------------------------------------- a real Slurm on this machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm_local.skip_reason()
    if reason:
        pytest.skip(reason)
    local = slurm_local.LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        local.start()
    except (slurm_local.SlurmStartFailed, OSError, subprocess.TimeoutExpired) as exc:
        local.stop()
        pytest.skip(f"a local Slurm does not start on this machine: {exc}")
    yield local
    local.stop()


def _submit(cluster, shared: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_driver("submit", "--shared", str(shared), "--python", PY, "--node-python", sys.executable,
                      "--poll", "1", *args, env={"SLURM_CONF": str(cluster.conf)}, timeout=timeout)


@pytest.mark.parametrize("args, needle", [
    (["--partitions", "nope"], "unknown partition 'nope' (this cluster has: h100, odd)"),
    (["--partitions", "h100,odd"], "unknown GPU type 'mystery'"),
    (["--partitions", "h100", "--gpus", "4"], "Slurm refuses gpu:h100:4 on partition h100"),
])
@pytest.mark.slurm
def test_refused_before_anything_is_built(cluster, args, needle, tmp_path, results_dir):
    proc = _submit(cluster, tmp_path / "shared", *args)
    _assert_one_clear_line(proc, ConfigError.exit_code, needle)
    assert _empty(results_dir) and _empty(tmp_path / "shared")


@pytest.mark.slurm
@pytest.mark.nvcc
@pytest.mark.mojo  # it builds and bundles before the real sbatch refuses
def test_an_array_slurm_refuses_leaves_nothing(cluster, tmp_path, results_dir):
    """MaxArraySize=3: sbatch --test-only takes each request, the real sbatch refuses a 4-task array."""
    shared = tmp_path / "shared"
    proc = _submit(cluster, shared, "--partitions", "h100", "--suite", "bench,stress", "--gpus", "1,2")
    _assert_one_clear_line(proc, ConfigError.exit_code, "Slurm refused the job array")
    assert "submit: building and bundling" in proc.stderr  # it got as far as the real sbatch
    assert _empty(results_dir) and _empty(shared)
    assert cluster.run("squeue", "-h").stdout.strip() == ""


def _task_fields(cluster, job_id: str) -> dict[int, dict[str, str]]:
    out = {}
    for line in cluster.run("scontrol", "show", "job", "-o", job_id).stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        out[int(fields["ArrayTaskId"])] = fields
    return out


@pytest.mark.slurm
@pytest.mark.nvcc
@pytest.mark.mojo
def test_array_on_a_gpu_less_node_ends_in_no_gpu(cluster, tmp_path, results_dir):
    """Two tasks (1 and 2 GPUs: the second gets its own request), each running the bundle's bench,
    which finds no GPU and exits 5; the collector reports both with Slurm's state and the log."""
    shared = tmp_path / "shared"
    proc = _submit(cluster, shared, "--partitions", "h100", "--gpus", "1,2", "--", "--suite", "sdpa")
    assert proc.returncode == NoGPU.exit_code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    last = _error_lines(proc)[-1]
    assert last.startswith("no GPU: 2 of 2 task(s) did not complete"), proc.stderr
    assert "| 0 | h100 | 1x h100 (sm_90) | bench | n1 | FAILED | 5 |" in proc.stdout
    assert "| 1 | h100 | 2x h100 (sm_90) | bench | n1 | FAILED | 5 |" in proc.stdout
    assert "## Task 1 h100/2xh100/bench: FAILED, exit 5 (no GPU)" in proc.stdout
    assert "no GPU: NVML cannot start" in proc.stdout  # the task log's tail
    assert "[watch" in proc.stdout and "FAILED exit 5" in proc.stdout

    (folder,) = shared.iterdir()
    sub = Submission.model_validate_json((folder / "submission.json").read_text())
    assert "## Task 1 h100/2xh100/bench: FAILED, exit 5 (no GPU)" in _only_the_report(results_dir, sub.submission_id)
    fields = _task_fields(cluster, sub.job_id)
    assert {i: (f["JobState"], f["ExitCode"]) for i, f in fields.items()} == {0: ("FAILED", "5:0"), 1: ("FAILED", "5:0")}
    assert fields[0]["TresPerNode"] == "gres:gpu:h100:1" and fields[1]["TresPerNode"] == "gres:gpu:h100:2"
    assert [t.driver_args for t in sub.tasks] == [["bench", "--suite", "sdpa"], ["bench", "--suite", "sdpa", "--ngpus", "2"]]

    # Collect again, the way a GPU node's run folders come back: two real archived runs (1x H100, 2x H200)
    # stand in the tasks' result folders. They are moved whole, indexed, compared side by side, and the
    # tasks' own failure still decides the exit code.
    for i, run in enumerate((H100_RUN, H200_RUN)):
        _place(run, sub, i)
    again = run_driver("collect", str(folder), "--poll", "1", env={"SLURM_CONF": str(cluster.conf)}, timeout=120)
    assert again.returncode == NoGPU.exit_code, again.stderr
    assert sorted(p.name for p in results_dir.iterdir()) == sorted(
        [H100_RUN.name, H200_RUN.name, "README.md", "cluster"])
    assert H100_RUN.name in (results_dir / "README.md").read_text()
    report = json.loads((results_dir / "cluster" / sub.submission_id / "cluster.json").read_text())
    assert [o["collected"] for o in report["outcomes"]] == [[H100_RUN.name], [H200_RUN.name]]
    text = (results_dir / "cluster" / sub.submission_id / "CLUSTER.md").read_text()
    assert "| sdpa | mission/seed0 | cpasync | cold |" in text and "| 1xH100 | 2xH200 |" in text
    assert not list((folder / "results").glob("task-*/2026*"))  # moved, not copied


@pytest.mark.slurm
@pytest.mark.nvcc
@pytest.mark.mojo
def test_ctrl_c_cancels_the_array(cluster, tmp_path, results_dir):
    """A job holding both GPUs keeps the array pending; SIGINT to the watching submit scancels it."""
    blocker = cluster.run("sbatch", "--parsable", "-p", "h100", "--gres=gpu:h100:2", "--time=10",
                          f"--output={tmp_path / 'blocker.log'}", "--wrap", "sleep 300")
    assert blocker.returncode == 0, blocker.stderr
    shared = tmp_path / "shared"
    env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
    proc = subprocess.Popen([sys.executable, "-m", "driver", "submit", "--shared", str(shared), "--python", PY,
                             "--node-python", sys.executable, "--poll", "1", "--partitions", "h100", "--gpus", "2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(shared.glob("*/submission.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        time.sleep(3)  # the watch has polled at least once
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.run("scancel", blocker.stdout.strip())
    assert proc.returncode == 130, err
    assert "[watch" in out and "PENDING" in out
    lines = _error_lines(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert len(lines) == 1 and lines[0].startswith("interrupted: cancelled job array"), err
    (sub_file,) = shared.glob("*/submission.json")
    job_id = json.loads(sub_file.read_text())["job_id"]
    assert f"cancelled job array {job_id} (scancel)" in lines[0]
    assert {f["JobState"] for f in _task_fields(cluster, job_id).values()} == {"CANCELLED"}
    assert _empty(results_dir)
