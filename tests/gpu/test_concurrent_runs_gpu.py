"""Two bench runs at once on one GPU, one results folder: both archived whole, each under its own run id (issue
46: two runs of one commit on one device that finished in the same second shared a run id, and the second lost
its results to `OSError: [Errno 39] Directory not empty`). The forced collision of one run id is a CPU test
(tests/test_archive_read.py); this one is the real thing end to end: two `python -m driver bench` processes
started together, each with its workers and peers on the same GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from driver import archive, report
from tests.conftest import ROOT

BENCH = ["bench", "--suite", "sdpa", "--shapes", "small", "--precision", "fp16", "--seeds", "0",
         "--distributions", "normal", "--rounds", "1", "--no-build"]
TIMEOUT_S = 900


def _archived(stderr: str) -> Path:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("archived: ")]
    assert len(lines) == 1, stderr[-3000:]
    return Path(lines[0].removeprefix("archived: "))


def test_two_bench_runs_at_once_archive_both_whole(exe_dir, tmp_path: Path):
    results = tmp_path / "bench_results"
    env = {**os.environ, "BENCH_RESULTS_DIR": str(results)}
    procs = [subprocess.Popen([sys.executable, "-m", "driver", *BENCH], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outs):
        # Correct results either way; a speed gate may fail or read inconclusive with another run on the GPU.
        assert p.returncode in (0, 8), f"exit {p.returncode}: {err[-3000:]}"
        assert "Traceback" not in err
    folders = [_archived(err) for _out, err in outs]
    assert folders[0] != folders[1]
    assert sorted(archive.archived_runs(results)) == sorted(folders)
    for folder in folders:
        run = archive.try_load_run(folder)
        assert not isinstance(run, archive.Unreadable), run.line()
        assert run.run_id == folder.name and run.records
        assert f"# Run {folder.name}" in (folder / report.COMPARE_FILE).read_text()
        assert {archive.BUILD_META_FILE, "thresholds.toml", archive.RESULTS_FILE} <= {p.name for p in folder.iterdir()}
    assert not [p.name for p in results.iterdir() if p.name.startswith(".tmp-")]
    index = (results / "README.md").read_text()
    assert all(f"[{f.name}]({f.name}/COMPARE.md)" in index for f in folders)
