"""Probe: the fp8 tier at head dim 128 with 256-key tiles (bn256.patch.gz), against the default build: outputs
against the float64 reference at small shapes, then cold / hot p50 at the large ones, the runners alternating.

  python3 bn256_probe.py OUT_DIR NAME=RUNNER [NAME=RUNNER ...]     (the first runner is the reference build)
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments" / "2026-11-23-sdpa-hopper"))
from check_and_time import make_inputs, reference  # noqa: E402

CHECK = ["1x4x1024x128", "1x3x1000x128", "2x16x2048x128"]
TIME = ["2x16x2048x128", "1x16x8192x128"]


def run(exe, files, out, extra):
    cmd = [exe, *(a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))), "--out", str(out),
           "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout (60 s): hung"}
    if p.returncode != 0:
        return {"rc": p.returncode, "stderr": p.stderr.strip()[-300:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    bins = dict(a.split("=", 1) for a in sys.argv[2:])
    log = open(out_dir / "results.jsonl", "w")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in CHECK + TIME:
            shape = tuple(int(x) for x in spec.split("x"))
            arrays = make_inputs(shape, 0)
            q, k, v, ks, vs = arrays
            files = {n: Path(tmp) / f"{n}.npy" for n in ("q", "k", "v", "scales")}
            for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
                np.save(files[n], x)
            if spec in CHECK:
                want = reference(*arrays)
                for name, exe in bins.items():
                    line = run(exe, files, Path(tmp) / "o.npy", ["--iters", "1", "--warmup", "0"])
                    o = np.load(Path(tmp) / "o.npy").astype(np.float64) if "rc" not in line else None
                    rec = {"shape": spec, "build": name, "line": line}
                    if o is not None:
                        rec["rel_l2"] = float(np.linalg.norm(o - want) / np.linalg.norm(want))
                        rec["max_abs_rel"] = float(np.abs(o - want).max() / np.abs(want).max())
                        rec["bn"] = line.get("bn")
                    print(json.dumps({k: rec[k] for k in rec if k != "line"}), line.get("grid"), flush=True)
                    log.write(json.dumps(rec) + "\n")
                continue
            for mode in ("cold", "hot"):
                for name, exe in bins.items():
                    line = run(exe, files, Path(tmp) / "o.npy", ["--timing", mode, "--iters", "100", "--warmup", "10",
                                                                "--batch", "20"])
                    rec = {"shape": spec, "mode": mode, "build": name, "line": line}
                    print(spec, mode, name, line.get("p50_us"), line.get("tflops"), line.get("smem_bytes"), flush=True)
                    log.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
