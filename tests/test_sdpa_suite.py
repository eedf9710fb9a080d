"""The SDPA suite's ordering on a CPU: every variant is checked against the float64 reference
before anything is timed, and a variant with wrong results is never timed.

The two "runners" here are test doubles (small Python scripts standing in for the CUDA
executables, which need a GPU): one writes the exact reference output, the other a corrupted
one. They log every invocation, so the test sees which runs asked for timed iterations. The
real runners' behaviour on GPUs is covered by tests/gpu/test_sdpa_gpu.py and the archived runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from driver import device
from driver.options import RunOptions
from driver.records import DeviceInfo, GpuInfo
from driver.suites import sdpa
from driver.thresholds import load as load_thresholds
from tests.conftest import ROOT

RUNNER = """#!{python}
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from driver.reference import sdpa as ref
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
q, k, v = (np.load(args["--" + n]) for n in ("q", "k", "v"))
ks, vs = np.load(args["--scales"])
out = ref.reference(q, k, v, float(ks), float(vs)).astype(np.float16)
if {corrupt}:
    out = out + np.float16(1.0)
np.save(args["--out"], out)
iters = int(args.get("--iters", "500"))
print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "shape": list(q.shape), "iters": iters, "warmup": 0,
                  "p50_us": 10.0, "p90_us": 11.0, "mean_us": 10.2, "std_us": 0.3, "min_us": 9.8, "tflops": 1.0,
                  "timing": args.get("--timing", "cold")}}))
"""


def _fake_runners(tmp_path: Path, wrong: str) -> tuple[Path, Path]:
    exe_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    exe_dir.mkdir()
    for impl, exe in sdpa.VARIANTS.items():
        path = exe_dir / exe
        path.write_text(RUNNER.format(python=sys.executable, root=str(ROOT), log=str(log), impl=impl,
                                      corrupt=impl == wrong))
        path.chmod(0o755)
    return exe_dir, log


def test_a_wrong_variant_is_checked_first_and_never_timed(tmp_path, monkeypatch):
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="test GPU", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    exe_dir, log = _fake_runners(tmp_path, wrong="cpasync")
    opts = RunOptions(shapes=(("small", (1, 2, 128, 64)),), seeds=(0, 1), iters=20, rounds=2)
    records, _ = sdpa._shape(opts, exe_dir, dev, load_thresholds(None), "0" * 40, False, "small", (1, 2, 128, 64))

    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    timed = [c for c in calls if c[c.index("--iters") + 1] != "1"]
    assert timed, "the correct variant was never timed"
    assert all("out_cpasync" not in " ".join(c) for c in timed)  # the wrong variant's output path
    # Every seed's check-only runs come first, and nothing else runs for seed 1.
    assert calls.index(timed[0]) >= 2
    by = {(r.impl, r.seed): r for r in records}
    assert by[("baseline", 0)].passed and by[("baseline", 0)].round_p50_us
    assert by[("baseline", 1)].passed and not by[("baseline", 1)].round_p50_us
    # The correct variant is timed in both default modes, each record saying its mode.
    assert sorted(r.timing for r in records if (r.impl, r.seed) == ("baseline", 0)) == ["cold", "hot"]
    assert {c[c.index("--timing") + 1] for c in timed} == {"cold", "hot"}
    bad = by[("cpasync", 0)]
    assert not bad.passed and not bad.round_p50_us and bad.performance is None
    assert "not timed: wrong results" in bad.correctness.reasons
