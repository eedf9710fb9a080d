"""Archive: one run folder in bench_results/, written whole or not at all, and read back.

Everything is written into `bench_results/.tmp-<run id>/` and renamed into place
at the end, so an interrupted run leaves nothing that looks like a result. What the
files say (COMPARE.md, the index) is rendered by driver/report.py.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
from pathlib import Path

from driver import paths
from driver.records import BuildMeta, RunArchive

RESULTS_FILE = "results.json"


def run_id(created_utc: str, git_sha: str, device_kind: str) -> str:
    """`<UTC time>-<sha>-<device>`; a second run archived within the same second gets `-2`, `-3`, ..."""
    stamp = dt.datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ").strftime("%Y%m%dT%H%M%SZ")
    base = f"{stamp}-{git_sha[:8]}-{device_kind}"
    taken = {p.name for p in archived_runs()}
    return next(c for c in (base if n == 1 else f"{base}-{n}" for n in itertools.count(1)) if c not in taken)


def write_run(run: RunArchive, meta: BuildMeta, thresholds_text: str, files: dict[str, bytes] | None = None) -> Path:
    """results.json, build_meta.json, the thresholds used and `files` (name -> bytes), as one folder."""
    root = paths.results_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = root / run.run_id
    tmp = root / f".tmp-{run.run_id}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        (tmp / RESULTS_FILE).write_text(run.model_dump_json(indent=1))
        (tmp / "build_meta.json").write_text(meta.model_dump_json(indent=1))
        (tmp / "thresholds.toml").write_text(thresholds_text)
        for name, data in ({} if files is None else files).items():
            (tmp / name).write_bytes(data)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load_run(folder: Path) -> RunArchive:
    return RunArchive.model_validate_json((folder / RESULTS_FILE).read_text())


def archived_runs(root: Path | None = None) -> list[Path]:
    """Run folders, oldest first: not a `.tmp-*` folder that a killed run left half-written."""
    root = root or paths.results_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / RESULTS_FILE).is_file())
