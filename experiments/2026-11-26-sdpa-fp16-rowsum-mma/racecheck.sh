# racecheck of the SDPA runners at split shapes with odd and even K/V tile counts: the runner of 23eb8e9 (head) and the bundle's
python3 - "$@" <<'PY'
import subprocess, sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, "experiments/2026-11-23-sdpa-hopper")
from check_and_time import make_inputs
exes = sys.argv[1:]
for spec in ("1x4x300x128", "1x4x600x128", "1x4x400x128", "1x4x300x64"):
    shape = tuple(int(x) for x in spec.split("x")); arr = make_inputs(shape, 0); d = Path(tempfile.mkdtemp())
    q, k, v, ks, vs = arr
    for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))): np.save(d / f"{n}.npy", x)
    for exe in exes:
        for prec in ("fp16", "fp8"):
            cmd = [exe] + [a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(d / f"{n}.npy"))] + ["--out", str(d / "o.npy"), "--precision", prec, "--iters", "1", "--warmup", "0"]
            line = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            split = '"split":' + line.split('"split":')[1].split(",")[0] if '"split":' in line else "?"
            p = subprocess.run(["compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "99"] + cmd, capture_output=True, text=True)
            out = (p.stdout + p.stderr).splitlines()
            print(spec, exe, prec, split, [l for l in out if "SUMMARY" in l], flush=True)
            if p.returncode == 99:
                print("\n".join(out[:4]))
PY
