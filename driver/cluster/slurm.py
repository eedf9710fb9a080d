"""Slurm's commands, run in one place: sinfo, sbatch, scontrol, scancel and sacct.

Every call goes through `slurm()`: the command found on PATH or ToolchainMissing, a
timeout (the controller may hang), the output captured through `launch.run_process`,
and one line naming what Slurm said when it refuses. The parsers for what those
commands print live beside them.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence

from driver.errors import ClusterFailed, ConfigError, ToolchainMissing
from driver.launch import ProcessResult, run_process
from driver.records import TaskState

SLURM_TIMEOUT_S = 60.0
# Slurm's states in which a job (array task) will never run again.
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})


def slurm(cmd: Sequence[str], *, timeout_s: float = SLURM_TIMEOUT_S) -> ProcessResult:
    """Run one Slurm command; its exit status is the caller's to read."""
    require(cmd[0])
    res = run_process([shutil.which(cmd[0]) or cmd[0], *cmd[1:]], timeout_s=timeout_s)
    if res.timed_out:
        raise ClusterFailed(f"{' '.join(cmd[:2])} did not answer within {timeout_s:.0f} s",
                            "is slurmctld up? `scontrol ping` says")
    return res


def require(*names: str) -> None:
    """ToolchainMissing for the first Slurm command not on PATH, before anything is built or written."""
    for name in names:
        if shutil.which(name) is None:
            raise ToolchainMissing(f"{name} not found on PATH: this host cannot submit to Slurm",
                                   "run from a host with the Slurm client commands (Debian: slurm-client)")


def said(res: ProcessResult) -> str:
    """What a Slurm command printed about its failure, in one line, without its own `sbatch: error:` prefix."""
    lines = [ln.strip() for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
    lines = [re.sub(r"^\w+: error: ", "", ln) for ln in lines]
    # sbatch --test-only prints the decisive line last ("allocation failure: ..."); others print it alone.
    return lines[-1] if lines else f"exit status {res.returncode}, no output"


def _checked(cmd: Sequence[str], what: str) -> str:
    res = slurm(cmd)
    if res.returncode != 0:
        raise ClusterFailed(f"{what}: {said(res)}", f"command: {' '.join(cmd)}")
    return res.stdout


# ---------------------------------------------------------------- partitions and their GPUs


def _split_gres(text: str) -> list[str]:
    """`gpu:h100:4(S:0-1),nvme:1` -> ['gpu:h100:4', 'nvme:1'] (commas inside parentheses stay)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [re.sub(r"\(.*\)$", "", i.strip()) for i in items if i.strip() and i.strip() != "(null)"]


def parse_gpu_gres(gres: str) -> list[tuple[str | None, int]]:
    """The GPUs in a node's GRES string: `gpu:h100:8` -> [('h100', 8)]; `gpu:8` -> [(None, 8)]."""
    out: list[tuple[str | None, int]] = []
    for item in _split_gres(gres):
        fields = item.split(":")
        if fields[0] != "gpu":
            continue
        count = fields[-1] if fields[-1].isdigit() else "1"
        gpu_type = fields[1] if len(fields) == 3 or (len(fields) == 2 and not fields[1].isdigit()) else None
        out.append((gpu_type, int(count)))
    return out


def parse_sinfo_nodes(text: str) -> dict[str, list[tuple[str, str]]]:
    """`sinfo -h -a -N -o '%R|%G|%N'` -> {partition: [(node, gres), ...]}."""
    parts: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 3:
            raise ClusterFailed(f"sinfo printed a line this driver cannot read: {line.strip()!r}")
        part, gres, node = fields
        parts.setdefault(part, []).append((node, gres))
    return parts


def partition_gpus(partitions: Sequence[str]) -> dict[str, dict[str, int]]:
    """{partition: {GRES GPU type: GPUs on every node of that type}}, read from Slurm itself.

    An unknown partition, one without GPUs, or one whose GPUs have no type is a ConfigError.
    """
    nodes = parse_sinfo_nodes(_checked(["sinfo", "-h", "-a", "-N", "-o", "%R|%G|%N"], "sinfo failed"))
    out: dict[str, dict[str, int]] = {}
    for part in partitions:
        if part not in nodes:
            raise ConfigError(f"unknown partition {part!r}", f"this cluster has: {', '.join(sorted(nodes)) or 'none'}")
        per_type: dict[str, int] = {}
        for node, gres in nodes[part]:
            gpus = parse_gpu_gres(gres)
            if any(t is None for t, _ in gpus):
                raise ConfigError(f"partition {part!r}: node {node} declares its GPUs without a type ({gres})",
                                  "the GPU kind is read from the GRES type (gpu:h100:8); ask for typed GRES")
            for gpu_type, count in gpus:
                per_type[gpu_type] = min(per_type.get(gpu_type, count), count)  # type: ignore[index]
        if not per_type:
            raise ConfigError(f"partition {part!r} has no GPUs (GRES of its nodes: "
                              f"{', '.join(sorted({g for _, g in nodes[part]}))})")
        out[part] = per_type
    return out


# ---------------------------------------------------------------- submitting


def preflight(args: Sequence[str], what: str) -> None:
    """`sbatch --test-only`: would Slurm take this request? ConfigError with Slurm's words if not."""
    res = slurm(["sbatch", "--test-only", *args])
    if res.returncode != 0:
        raise ConfigError(f"Slurm refuses {what}: {said(res)}")


def submit(args: Sequence[str]) -> str:
    """`sbatch --parsable ARGS` -> the job id. ConfigError with Slurm's words when it refuses."""
    res = slurm(["sbatch", "--parsable", *args])
    job_id = res.stdout.strip().split(";")[0]
    if res.returncode != 0 or not job_id.isdigit():
        raise ConfigError(f"Slurm refused the job array: {said(res)}")
    return job_id


def update_task(job_id: str, index: int, *, partition: str, gres: str) -> None:
    """Give one held array task its own partition and GPU request (`scontrol update`)."""
    res = slurm(["scontrol", "update", f"JobId={job_id}_{index}", f"Partition={partition}", f"Gres={gres}"])
    if res.returncode != 0:
        raise ConfigError(f"Slurm refused task {index} ({partition}, {gres}): {said(res)}")


def release(job_id: str) -> None:
    _checked(["scontrol", "release", job_id], f"scontrol release {job_id} failed")


def cancel(job_id: str) -> str:
    """scancel the whole array; '' on success, else what scancel said."""
    res = slurm(["scancel", job_id])
    return "" if res.returncode == 0 else said(res)


# ---------------------------------------------------------------- task states


def expand_indices(spec: str) -> list[int]:
    """A job array index spec as Slurm prints it: `3`, `0-2`, `1,3-5`, `0-15%4`, `0-10:2`."""
    out: list[int] = []
    for part in spec.split("%")[0].strip("[]").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            raise ClusterFailed(f"cannot read the array index list {spec!r}")
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        out.extend(range(lo, hi + 1, step))
    return out


def _seconds(text: str) -> int:
    """`1-02:03:04`, `02:03:04`, `03:04` -> seconds (Slurm's elapsed-time formats)."""
    days, _, clock = text.rpartition("-")
    nums = [int(x) for x in clock.split(":") if x.isdigit()]
    secs = 0
    for n in nums:
        secs = secs * 60 + n
    return secs + int(days or 0) * 86400


def _exit(text: str) -> tuple[int | None, int | None]:
    """`5:0` -> (5, None); `0:9` -> (0, 9) (exit status : signal)."""
    m = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not m:
        return None, None
    return int(m.group(1)), (int(m.group(2)) or None)


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", line))


def parse_scontrol_jobs(text: str) -> dict[int, TaskState]:
    """`scontrol show job -o ARRAY_ID` -> {task index: state}; a pending range fans out to its indices."""
    out: dict[int, TaskState] = {}
    for line in text.splitlines():
        f = _fields(line)
        if "ArrayTaskId" not in f or "JobState" not in f:
            continue
        code, sig = _exit(f.get("ExitCode", ""))
        state = f["JobState"]
        for i in expand_indices(f["ArrayTaskId"]):
            out[i] = TaskState(index=i, state=state, reason="" if f.get("Reason") == "None" else f.get("Reason", ""),
                               exit_code=code if state in TERMINAL_STATES else None, signal=sig,
                               elapsed_s=_seconds(f.get("RunTime", "0")),
                               node="" if f.get("NodeList") == "(null)" else f.get("NodeList", ""), source="scontrol")
    return out


def parse_sacct(text: str) -> dict[int, TaskState]:
    """`sacct -X -n -P -o JobID,State,ExitCode,ElapsedRaw,NodeList` -> {task index: state}."""
    out: dict[int, TaskState] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5 or "_" not in fields[0]:
            continue
        job, state, exit_text, elapsed, node = fields
        code, sig = _exit(exit_text)
        state = state.split()[0] if state.strip() else "UNKNOWN"  # "CANCELLED by 0"
        for i in expand_indices(job.split("_", 1)[1]):
            out[i] = TaskState(index=i, state=state, exit_code=code if state in TERMINAL_STATES else None,
                               signal=sig, elapsed_s=int(elapsed) if elapsed.isdigit() else 0,
                               node="" if node in ("None assigned", "") else node, source="sacct")
    return out


def task_states(job_id: str) -> dict[int, TaskState]:
    """Every task of the array Slurm still knows: the controller first (while the job is in its memory,
    MinJobAge, 300 s by default), then the accounting database where one is kept. {} when neither knows it."""
    res = slurm(["scontrol", "show", "job", "-o", job_id])
    if res.returncode == 0:
        return parse_scontrol_jobs(res.stdout)
    if "Invalid job id" not in said(res):
        raise ClusterFailed(f"scontrol show job {job_id}: {said(res)}")
    if shutil.which("sacct") is None:
        return {}
    res = slurm(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode,ElapsedRaw,NodeList"])
    return parse_sacct(res.stdout) if res.returncode == 0 else {}  # accounting disabled: sacct says so and exits 1
