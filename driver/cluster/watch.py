"""Watch: every array task's Slurm state until all have ended; Ctrl-C cancels the array.

One line per change (state, node, elapsed) and the counts, so the display reads the same
in a terminal and in a CI log. Slurm is asked first; a task it has forgotten (past the
controller's MinJobAge, and no accounting database) is read from the exit status the job
script leaves in status/, and only then counted as lost.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from driver.cluster import slurm
from driver.errors import Interrupted
from driver.records import Submission, TaskState

UNKNOWN = "UNKNOWN"  # Slurm no longer knows the task and it left no exit status
GRACE_S = 30.0  # how long a just-submitted array may be missing from Slurm's answers


def _from_status_file(folder: Path, index: int) -> TaskState | None:
    path = folder / "status" / f"task-{index}.exit"
    try:
        code = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return TaskState(index=index, state="COMPLETED" if code == 0 else "FAILED", exit_code=code, source="task")


def current_states(sub: Submission, *, lost_ok: bool) -> dict[int, TaskState]:
    """Every task's state; a task neither Slurm nor its status file knows is PENDING, or UNKNOWN once
    `lost_ok` (the array has had time to appear in Slurm)."""
    known = slurm.task_states(sub.job_id)
    out: dict[int, TaskState] = {}
    for t in sub.tasks:
        st = known.get(t.index) or _from_status_file(Path(sub.folder), t.index)
        if st is None:
            st = TaskState(index=t.index, state=UNKNOWN if lost_ok else "PENDING",
                           reason="Slurm no longer knows this task and it left no exit status" if lost_ok else "")
        out[t.index] = st
    return out


def ended(st: TaskState) -> bool:
    return st.state in slurm.TERMINAL_STATES or st.state == UNKNOWN


def succeeded(st: TaskState) -> bool:
    return st.state == "COMPLETED" and st.exit_code == 0


def _clock(seconds: int) -> str:
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def summary(sub: Submission, states: dict[int, TaskState]) -> str:
    counts = {"pending": 0, "running": 0, "done": 0, "failed": 0}
    for st in states.values():
        key = "done" if succeeded(st) else "failed" if ended(st) else "running" if st.state in (
            "RUNNING", "COMPLETING", "CONFIGURING") else "pending"
        counts[key] += 1
    return f"job {sub.job_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(sub.tasks)}"


def task_line(sub: Submission, st: TaskState) -> str:
    t = sub.tasks[st.index]
    where = f" on {st.node}" if st.node else ""
    why = f" ({st.reason})" if st.reason and st.reason not in ("None", "NonZeroExitCode") else ""
    code = f" exit {st.exit_code}" if st.exit_code is not None and ended(st) else ""
    return f"  task {st.index} {t.label}: {st.state}{code}{why}{where}, {_clock(st.elapsed_s)}"


def watch(sub: Submission, poll_s: float, out: TextIO = sys.stdout) -> dict[int, TaskState]:
    """Poll until every task has ended and return their last states; Ctrl-C scancels the array."""
    start = time.monotonic()
    shown: dict[int, tuple[str, str, str]] = {}
    last_print = 0.0
    try:
        while True:
            now = time.monotonic()
            states = current_states(sub, lost_ok=now - start > GRACE_S)
            changed = [st for st in states.values() if shown.get(st.index) != (st.state, st.reason, st.node)]
            if changed or now - last_print >= 60:
                print(f"[watch {_clock(int(now - start))}] {summary(sub, states)}", file=out, flush=True)
                for st in changed:
                    print(task_line(sub, st), file=out, flush=True)
                    shown[st.index] = (st.state, st.reason, st.node)
                last_print = now
            if all(ended(st) for st in states.values()):
                return states
            time.sleep(poll_s)
    except KeyboardInterrupt:
        said = slurm.cancel(sub.job_id)
        what = f"cancelled job array {sub.job_id} (scancel)" if not said else \
            f"scancel {sub.job_id} failed ({said}); cancel it by hand"
        raise Interrupted(f"{what}; nothing was collected",
                          f"logs and any finished run folders stay in {sub.folder}; "
                          f"`python -m driver collect {sub.folder}` collects them") from None
