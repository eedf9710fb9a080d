"""Probe: compute-sanitizer on the fp16 three-warpgroup runner; outputs against the float64 reference."""
import subprocess, sys, tempfile
from pathlib import Path
import numpy as np
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments" / "2026-11-23-sdpa-hopper"))
from check_and_time import make_inputs, reference
exe = sys.argv[1]
tools = sys.argv[2].split(",")
for spec in sys.argv[3].split(","):
    shape = tuple(int(x) for x in spec.split("x"))
    arr = make_inputs(shape, 0)
    d = Path(tempfile.mkdtemp())
    q, k, v, ks, vs = arr
    for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
        np.save(d / f"{n}.npy", x)
    cmd = [exe] + [a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(d / f"{n}.npy"))] + [
        "--out", str(d / "o.npy"), "--precision", "fp16", "--iters", "1", "--warmup", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    o = np.load(d / "o.npy").astype(np.float64); w = reference(*arr)
    print(spec, "run rc", p.returncode, p.stdout.strip().splitlines()[-1][:300] if p.stdout.strip() else p.stderr[-300:])
    print(spec, "rel_l2", np.linalg.norm(o - w) / np.linalg.norm(w), "max_abs_rel", np.abs(o - w).max() / np.abs(w).max(), flush=True)
    for t in tools:
        p = subprocess.run(["compute-sanitizer", "--tool", t, "--error-exitcode", "99"] + cmd, capture_output=True, text=True)
        out = (p.stdout + p.stderr).splitlines()
        summ = [l for l in out if "SUMMARY" in l]
        first = [l for l in out if l.startswith("=========") and ("Race" in l or "Invalid" in l or "error" in l.lower())][:6]
        print(spec, t, "rc", p.returncode, summ, first, flush=True)
