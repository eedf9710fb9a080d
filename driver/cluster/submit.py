"""Submit: plan the task matrix from Slurm's partitions, build and bundle once, submit one job array.

One task per partition x GPU type x GPU count x suite. A job array has one resource
request, so it is submitted held with the first task's partition and GPUs, every other
task gets its own with `scontrol update`, and the array is released. Before anything is
built, `sbatch --test-only` asks Slurm whether it would take each distinct request, so a
request it refuses costs seconds, not a build.
"""

from __future__ import annotations

import math
import shlex
import shutil
import sys
from pathlib import Path

from driver import bundle
from driver.cluster import gpus, slurm
from driver.config import SUPPORTED_NGPUS
from driver.errors import ConfigError
from driver.host import git_state, utc_now
from driver.options import SubmitOptions
from driver.records import ClusterTask, Submission

SUBMISSION_FILE = "submission.json"

JOB_SCRIPT = """#!/usr/bin/env bash
# One task of submission {submission_id}: Slurm runs this once per array index.
# Written by `python -m driver submit`; the bundle, logs and run folders live beside it.
set -uo pipefail
sub={folder}
i="${{SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task}}"
case "$i" in
{cases}
  *) echo "error: submission {submission_id} has no task $i" >&2; exit 2 ;;
esac
mkdir -p "$sub/results/task-$i" "$sub/status"
export BENCH_RESULTS_DIR="$sub/results/task-$i"
export PYTHON={node_python}
echo "[task $i] $(hostname) partition=${{SLURM_JOB_PARTITION:-?}} gpus=${{CUDA_VISIBLE_DEVICES:-unset}} start $(date -u +%FT%TZ)"
echo "[task $i] ./bundle/run ${{args[*]}}"
"$sub/bundle/run" "${{args[@]}}"
rc=$?
echo "$rc" > "$sub/status/.task-$i.exit" && mv -f "$sub/status/.task-$i.exit" "$sub/status/task-$i.exit"
echo "[task $i] exit $rc end $(date -u +%FT%TZ)"
exit "$rc"
"""


def plan(opts: SubmitOptions) -> list[ClusterTask]:
    """The tasks, from what Slurm says each partition's nodes hold; ConfigError for anything unknown."""
    slurm.require("sbatch", "sinfo", "scontrol", "scancel")
    per_part = slurm.partition_gpus(opts.partitions)
    tasks: list[ClusterTask] = []
    for suite in opts.suites:
        for part in opts.partitions:
            for gpu_type, per_node in sorted(per_part[part].items()):
                arch = gpus.arch_of(gpu_type)
                for n in opts.gpus or (per_node,):
                    args = [suite, *opts.driver_args]
                    if n in SUPPORTED_NGPUS and not any(a.split("=")[0] == "--ngpus" for a in opts.driver_args):
                        args += ["--ngpus", str(n)]  # the allreduce measures the count this task holds
                    tasks.append(ClusterTask(index=len(tasks), suite=suite, partition=part, gpu_type=gpu_type,
                                             arch=arch, gpus=n, driver_args=args))
    return tasks


def _time_min(opts: SubmitOptions) -> int:
    return max(1, math.ceil(opts.time_limit_s / 60))


def _request(partition: str, gres: str, opts: SubmitOptions) -> list[str]:
    return [f"--partition={partition}", f"--gres={gres}", "--nodes=1", f"--time={_time_min(opts)}", *opts.sbatch_args]


def preflight(tasks: list[ClusterTask], opts: SubmitOptions) -> None:
    """`sbatch --test-only` for every distinct request: Slurm's own refusal, before anything is built."""
    for partition, gres in dict.fromkeys((t.partition, t.gres) for t in tasks):
        slurm.preflight([*_request(partition, gres, opts), "--job-name=driver-preflight", "--wrap=true"],
                        f"{gres} on partition {partition} for {_time_min(opts)} min")


def _new_folder(shared: Path, sha: str) -> tuple[str, Path]:
    shared.mkdir(parents=True, exist_ok=True)
    base = f"{utc_now().replace('-', '').replace(':', '')}-{sha[:8]}"
    for n in range(1, 100):
        sid = base if n == 1 else f"{base}-{n}"
        try:
            (shared / sid).mkdir()
            return sid, shared / sid
        except FileExistsError:
            continue
    raise ConfigError(f"cannot make a new submission folder in {shared}")


def job_script(submission_id: str, folder: Path, tasks: list[ClusterTask], node_python: str) -> str:
    cases = "\n".join(f"  {t.index}) args=({shlex.join(t.driver_args)}) ;;" for t in tasks)
    return JOB_SCRIPT.format(submission_id=submission_id, folder=shlex.quote(str(folder)), cases=cases,
                             node_python=shlex.quote(node_python))


def submit(opts: SubmitOptions, tasks: list[ClusterTask], argv: list[str]) -> Submission:
    """Bundle once for every arch the tasks need, write the job script, submit the array, release it."""
    sha, dirty = git_state()
    archs = sorted({t.arch for t in tasks})
    submission_id, folder = _new_folder(opts.shared_dir.resolve(), sha)
    job_id = ""
    try:
        print(f"submit: building and bundling for {', '.join(archs)} into {folder / 'bundle'}", file=sys.stderr)
        bundle.make(folder / "bundle", tuple(archs), opts.pythons)
        for sub in ("logs", "results", "status"):
            (folder / sub).mkdir()
        script = folder / "job.sh"
        script.write_text(job_script(submission_id, folder, tasks, opts.node_python))
        script.chmod(0o755)
        first = tasks[0]
        job_id = slurm.submit([f"--array=0-{len(tasks) - 1}", "--hold", f"--job-name=driver-{submission_id}",
                               *_request(first.partition, first.gres, opts),
                               f"--output={folder / 'logs' / 'task-%a.log'}", f"--chdir={folder}", str(script)])
        record = Submission(submission_id=submission_id, created_utc=utc_now(), command=argv, git_sha=sha,
                            git_dirty=dirty, folder=str(folder), job_id=job_id, time_limit_min=_time_min(opts),
                            archs=archs, tasks=tasks)
        (folder / SUBMISSION_FILE).write_text(record.model_dump_json(indent=1))
        for t in tasks[1:]:
            if (t.partition, t.gres) != (first.partition, first.gres):
                slurm.update_task(job_id, t.index, partition=t.partition, gres=t.gres)
        slurm.release(job_id)
    except BaseException:
        # Refused, failed or interrupted before the array was released: nothing of it may run or stay.
        if job_id:
            slurm.cancel(job_id)
            print(f"submit: cancelled job array {job_id} (scancel) before it was released", file=sys.stderr)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return record


def load(folder: Path) -> Submission:
    path = folder / SUBMISSION_FILE
    if not path.is_file():
        raise ConfigError(f"{folder} is not a submission folder (no {SUBMISSION_FILE})",
                          "give the folder `driver submit` printed")
    return Submission.model_validate_json(path.read_text())
