"""Collect: finished run folders moved whole into bench_results/, the index, the cross-device table.

A run folder is taken only when its name is final (the archive renames its `.tmp-<id>-*` onto it
last) and its results.json.gz reads as a RunArchive named like the folder. Its name is claimed in
bench_results/ (an empty folder, as the archive claims one), it is copied to a `.tmp-<id>-*` of its own
and renamed onto the claim, so bench_results/ never holds part of one, even when the shared filesystem
is another device. Every task that did not complete with
exit 0 is reported with its Slurm state, exit code and the tail of its log, and the command
fails: with the driver's own exit code when every failed task exited with the same one
(all "no GPU" is exit 5), else as a cluster failure. What the report says is rendered by
driver/report.py (`cluster_markdown`, `cross_device`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TextIO

from driver import archive, paths, report
from driver.cluster import watch
from driver.errors import ALL_ERRORS, ClusterFailed, ConfigError, DriverError
from driver.host import utc_now
from driver.records import ClusterReport, RunArchive, Submission, TaskOutcome, TaskState

LOG_TAIL_LINES = 15
REPORT_DIR = "cluster"  # bench_results/cluster/<submission id>/
DRIVER_EXITS: dict[int, type[DriverError]] = {cls.exit_code: cls for cls in ALL_ERRORS}


def finished_runs(task_dir: Path) -> list[Path]:
    """Run folders a task finished writing: final names only (never `.tmp-*`), with results.json.gz (or an older
    run's results.json)."""
    if not task_dir.is_dir():
        return []
    return sorted(p for p in task_dir.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and archive.results_path(p) is not None)


def move_run(src: Path, root: Path) -> RunArchive:
    """Copy one run folder into `root` under a temporary name, rename it into place, then drop the source.

    Raises ClusterFailed, leaving `root` as it was, when the folder does not read as a run or a different
    run of the same id is already there. A folder collected before (the same records) is not copied twice.
    """
    run = archive.try_load_run(src)  # a run that reads is named like its folder
    if isinstance(run, archive.Unreadable):
        raise ClusterFailed(f"{src} is not a readable run folder: {run.reason}")
    dest = root / src.name
    root.mkdir(parents=True, exist_ok=True)
    try:
        dest.mkdir()  # the name claimed, as archive.write_run claims it: nothing else can take it now
    except FileExistsError:
        there = archive.try_load_run(dest)
        if there != run:
            what = f"a run that does not read ({there.reason})" if isinstance(there, archive.Unreadable) else \
                "a different run of the same id"
            raise ClusterFailed(f"{dest} already holds {what}; {src} is left where it is") from None
        shutil.rmtree(src)
        return run
    archive.fill_claim(root, dest, lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))
    shutil.rmtree(src)
    return run


def _move_failed(src: Path, root: Path, sub: Submission, exc: OSError) -> ConfigError:
    """One line for a move that failed on the way: move_run left either the whole run in `root` (only the
    source could not be removed) or none of it, and says which."""
    again = f"fix that and run `python -m driver collect {sub.folder}` again"
    if archive.results_path(root / src.name) is not None:
        return ConfigError(f"collected {src.name} into {root}, but could not remove {src}: {archive.os_reason(exc)}",
                           again)
    return ConfigError(f"cannot collect {src.name} into {root}: {archive.os_reason(exc)}; nothing of it was moved, "
                       f"it stays in {src.parent}", f"{archive.RESULTS_HINT}; {again}")


def log_tail(sub: Submission, index: int, lines: int = LOG_TAIL_LINES) -> list[str]:
    path = Path(sub.folder) / "logs" / f"task-{index}.log"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return [f"(no log at {path}: the task never started)"]
    return text.rstrip("\n").splitlines()[-lines:] or ["(empty log)"]


def problem(sub: Submission, st: TaskState) -> str | None:
    """None for a task that completed with exit 0, else its end in words."""
    if watch.succeeded(st):
        return None
    text = st.state
    if st.state == "TIMEOUT":
        text += f" after {st.elapsed_s} s (limit {sub.time_limit_min} min: submit --timeout)"
    if st.exit_code is not None and (st.state == "FAILED" or st.exit_code):
        cls = DRIVER_EXITS.get(st.exit_code)
        text += f", exit {st.exit_code}" + (f" ({cls.label})" if cls else "")
    if st.signal:
        text += f", signal {st.signal}"
    if st.reason and st.reason not in ("NonZeroExitCode", "None"):
        text += f" ({st.reason})"
    return text


def _verdict(outcomes: list[TaskOutcome]) -> DriverError | None:
    failed = [o for o in outcomes if o.problem]
    if not failed:
        return None
    what = "; ".join(f"task {o.task.index} {o.task.label}: {o.problem}" for o in failed[:3])
    head = f"{len(failed)} of {len(outcomes)} task(s) did not complete: {what}"
    codes = {o.state.exit_code for o in failed}
    if len(codes) == 1 and all(o.state.state == "FAILED" for o in failed):
        cls = DRIVER_EXITS.get(codes.pop() or 0)
        if cls is not None:
            return cls(head, "states, exit codes and log tails above")
    return ClusterFailed(head, "states, exit codes and log tails above")


def _write_report(cluster: ClusterReport, text: str, *, replace: bool = True) -> tuple[Path, bool]:
    """bench_results/cluster/<submission id>/ (cluster.json, CLUSTER.md), whole or not at all. Returns the
    folder and whether it was written: with replace=False an earlier collect's report there is kept."""
    root = paths.results_dir() / REPORT_DIR
    final = root / cluster.submission.submission_id
    if not replace and (final / "CLUSTER.md").is_file():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{cluster.submission.submission_id}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        (tmp / "cluster.json").write_text(cluster.model_dump_json(indent=1))
        (tmp / "CLUSTER.md").write_text(text)
        shutil.rmtree(final, ignore_errors=True)  # collected again after a re-run of collect: the newer report
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, True


def collect(sub: Submission, states: dict[int, TaskState], out: TextIO = sys.stdout) -> ClusterReport:
    """Move every finished run folder into bench_results/, refresh the index, print and archive the
    report (also when no task archived a run folder, unless an earlier collect of this submission archived
    one); raise the failure's class when any task did not complete with exit 0. A results folder that
    cannot be written is a ConfigError, before anything moves (or, failing later, with no run half-moved)."""
    root = paths.results_dir()
    archive.check_writable(root)
    outcomes: list[TaskOutcome] = []
    runs: list[RunArchive] = []
    for t in sub.tasks:
        st = states[t.index]
        moved, trouble = [], problem(sub, st)
        for folder in finished_runs(Path(sub.folder) / "results" / f"task-{t.index}"):
            try:
                run = move_run(folder, root)
            except ClusterFailed as exc:
                trouble = "; ".join(filter(None, [trouble, exc.message]))
                continue
            except OSError as exc:
                raise _move_failed(folder, root, sub, exc) from None
            runs.append(run)
            moved.append(run.run_id)
        if trouble is None and not moved:
            trouble = "completed with exit 0 but archived no run folder"
        outcomes.append(TaskOutcome(task=t, state=st, collected=moved, problem=trouble,
                                    log_tail=log_tail(sub, t.index) if trouble else []))
    cluster = ClusterReport(collected_utc=utc_now(), submission=sub, outcomes=outcomes)
    text = report.cluster_markdown(cluster, runs)
    print(text, file=out)
    with archive.writing(f"the {'index and the ' if runs else ''}cluster report into {root}"):
        if runs:
            report.update_index(root)
        # Archived when nothing was collected too (what failed, and the log tails), but never over the report
        # of an earlier collect of the same submission: a second collect finds the run folders already moved.
        folder, written = _write_report(cluster, text, replace=bool(runs))
    where = f"report: {folder / 'CLUSTER.md'}" if written else f"the earlier report stays: {folder / 'CLUSTER.md'}"
    if runs:
        print(f"collected {len(runs)} run folder(s) into {root}; {where}", file=sys.stderr)
    else:
        print(f"collected nothing: no task archived a run folder; {where}; logs in {Path(sub.folder) / 'logs'}",
              file=sys.stderr)
    verdict = _verdict(outcomes)
    if verdict is not None:
        raise verdict
    return cluster
