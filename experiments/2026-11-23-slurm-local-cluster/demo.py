"""Start the tests' one-node Slurm (tests/slurm_local.py), submit a real bench array, watch, collect.

    python experiments/2026-11-23-slurm-local-cluster/demo.py   (as root, with slurm-wlm and munge installed)
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests import slurm_local  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="slurm-demo-"))
cluster = slurm_local.LocalSlurm(work / "slurm")
env = {**os.environ, "SLURM_CONF": str(cluster.conf), "BENCH_RESULTS_DIR": str(work / "bench_results")}
py = f"{sys.version_info[0]}.{sys.version_info[1]}"


def show(cmd):
    print(f"$ {' '.join(cmd)}", flush=True)
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    print(res.stdout + res.stderr + f"(exit {res.returncode})\n", flush=True)
    return res


try:
    cluster.start()
    show(["sinfo", "-o", "%P %G %N %T"])
    show([sys.executable, "-m", "driver", "submit", "--partitions", "h100", "--gpus", "1,2", "--python", py,
          "--node-python", sys.executable, "--poll", "2", "--shared", str(work / "shared"), "--", "--suite", "sdpa"])
    (folder,) = (work / "shared").iterdir()
    show(["scontrol", "show", "job", "-o", (folder / "submission.json").read_text().split('"job_id": "')[1].split('"')[0]])
    # Stand-ins for what GPU nodes write: two real archived runs (1x H100, 2x H200) put into the task folders,
    # then collected again, to show the move, the index and the cross-device table.
    for i, run in enumerate(("20261122T131144Z-89d7f9d3-1xH100", "20261122T132333Z-4c661c0a-2xH200")):
        shutil.copytree(ROOT / "bench_results" / run, folder / "results" / f"task-{i}" / run)
    show([sys.executable, "-m", "driver", "collect", str(folder), "--poll", "2"])
    show(["ls", str(work / "bench_results"), str(work / "bench_results" / "cluster")])
finally:
    cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
