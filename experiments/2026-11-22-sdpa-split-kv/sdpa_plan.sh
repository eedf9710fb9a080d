#!/usr/bin/env bash
# SDPA FP8 diagnostic plan (kernels_cuda/sdpa_fp8, 2026-11-22 at 89d7f9d): old vs split-KV configs x ablations, both variants.
#
#   bash experiments/2026-11-22-sdpa-split-kv/sdpa_plan.sh [BIN_DIR]   # BIN_DIR default: <repo>/build/sm_90
#
# Needs: BIN_DIR/sdpa_fp8_baseline, BIN_DIR/sdpa_fp8_cpasync (built from this checkout), python3 with
# numpy.  Inputs and the float64 reference from experiments/2026-11-23-sdpa-hopper/check_and_time.py (the
# driver's generator in numpy, the same bits; until issue 31 this loaded driver/reference/sdpa.py by path).
# The error metrics are those of driver/reference/sdpa.py's compare at 89d7f9d, written out below.
# Prints one JSON line per run on stdout (also appended to $OUT/sdpa_plan.jsonl when $OUT is set):
#   {"plan":"main"|"check"|"sanitize", "case":..., "variant":..., "config":..., "ablate":..., "rc":...,
#    "line":{runner JSON line}, "max_abs_err":.., "bad_frac":.., "rel_l2":.., "pass":..}   (errors: "error")
# and a final {"plan":"summary", ...} line.  Never stops at a failing run.  Stays inside a time budget
# (SDPA_PLAN_BUDGET_S, default 80 s): what does not fit is reported as skipped.
#
# Phases: 1. main: mission (1,8,512,64) and large (2,16,2048,64), seed 0, --iters 300 --warmup 20:
#            configs old (--split 1), s2 (--split 2), s4 (--split 4) x ablate none/no_compute/no_loads
#            x {baseline, cpasync} (interleaved), plus "auto" (--split 0: what the heuristic picks);
#            ablate none is checked against the float64 reference.
#         2. check: tails and D=128 with every config, --iters 5 (correctness only).
#         3. sanitize: compute-sanitizer racecheck/synccheck on the split configs, if time is left.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/build/sm_90}"
export PYTHONUNBUFFERED=1
exec python3 - "$ROOT" "$BIN" <<'PY'
import json, math, os, shutil, subprocess, sys, tempfile, time, traceback

import numpy as np

T0 = time.time()
ROOT, BIN = sys.argv[1], sys.argv[2]
BUDGET = float(os.environ.get("SDPA_PLAN_BUDGET_S", "80"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "2026-11-23-sdpa-hopper"))
from check_and_time import make_inputs, reference  # numpy only


def compare(out_f16, ref):
    """max_abs_err (inf if any output is not finite), bad_frac (|err| > 0.06), rel_l2 (inf if any is not finite)."""
    out = np.asarray(out_f16).astype(np.float64)
    err = np.where(np.isfinite(out), np.abs(out - ref), np.inf)
    rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref)) if np.isfinite(out).all() else math.inf
    return {"max_abs_err": float(err.max()), "bad_frac": float(np.mean(err > 0.06)), "rel_l2": rel}


OUTF = None
if os.environ.get("OUT"):
    try:
        OUTF = open(os.path.join(os.environ["OUT"], "sdpa_plan.jsonl"), "a")
    except OSError:
        OUTF = None
TMP = tempfile.mkdtemp(prefix="sdpa_plan_")
EXES = {"baseline": os.path.join(BIN, "sdpa_fp8_baseline"), "cpasync": os.path.join(BIN, "sdpa_fp8_cpasync")}
CONFIGS = {"old": "1", "s2": "2", "s4": "4", "auto": "0"}
MAX_ABS, BAD_FRAC = 0.06, 0.01        # thresholds.toml [sdpa]
RESULTS = []


def emit(d):
    d["t_s"] = round(time.time() - T0, 2)
    s = json.dumps(d)
    print(s, flush=True)
    if OUTF:
        OUTF.write(s + "\n")
        OUTF.flush()
    RESULTS.append(d)


def left():
    return BUDGET - (time.time() - T0)


_case = {}


def case(shape, seed=0, with_ref=True):
    """Inputs written as the driver's SDPA suite writes them (q, k, v, scales .npy); reference from the same arrays."""
    key = (tuple(shape), seed)
    if key in _case and (_case[key][1] is not None or not with_ref):
        return _case[key]
    d = os.path.join(TMP, "x".join(map(str, shape)) + f"_s{seed}")
    os.makedirs(d, exist_ok=True)
    q, k, v, ks, vs = make_inputs(shape, seed)
    files = {n: os.path.join(d, f"{n}.npy") for n in ("q", "k", "v", "scales")}
    np.save(files["q"], q)
    np.save(files["k"], k)
    np.save(files["v"], v)
    np.save(files["scales"], np.array([ks, vs], dtype=np.float32))
    expected = reference(q, k, v, ks, vs) if with_ref else None
    _case.clear()
    _case[key] = (files, expected)
    return _case[key]


def run(plan, case_name, shape, variant, config, ablate, iters, warmup, check, prefix=(), timeout=30.0):
    rec = {"plan": plan, "case": case_name, "shape": list(shape), "variant": variant, "config": config,
           "ablate": ablate}
    if left() < 2:
        rec["skipped"] = "time budget"
        emit(rec)
        return None
    try:
        files, expected = case(shape, 0, with_ref=check)
        out = os.path.join(os.path.dirname(files["q"]), f"out_{variant}.npy")
        if os.path.exists(out):
            os.remove(out)
        cmd = [*prefix, EXES[variant], "--q", files["q"], "--k", files["k"], "--v", files["v"],
               "--scales", files["scales"], "--out", out, "--iters", str(iters), "--warmup", str(warmup),
               "--split", CONFIGS[config], "--ablate", ablate]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(2.0, min(timeout, left())))
        rec["rc"] = p.returncode
        if p.returncode != 0:
            rec["error"] = (p.stderr.strip() + "\n" + p.stdout.strip()).strip()[-1500:]
            emit(rec)
            return None
        if prefix:  # sanitizer: its summary is on stdout/stderr, the runner line is the JSON line
            rec["sanitizer"] = [l for l in (p.stdout + p.stderr).splitlines() if "SUMMARY" in l][-1:]
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        rec["line"] = json.loads(lines[-1]) if lines else None
        if check and expected is not None:
            m = compare(np.load(out), expected)
            rec.update(m)
            rec["pass"] = bool(np.isfinite(m["max_abs_err"]) and m["max_abs_err"] <= MAX_ABS and m["bad_frac"] <= BAD_FRAC)
        emit(rec)
        return rec
    except subprocess.TimeoutExpired:
        rec["error"] = "timeout"
    except Exception as e:  # never stop the plan
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["trace"] = traceback.format_exc()[-800:]
    emit(rec)
    return None


emit({"plan": "start", "bin": BIN, "exes": {k: os.path.exists(v) for k, v in EXES.items()}, "budget_s": BUDGET})

# ---- 1. main: timing + ablations -----------------------------------------------------------------
MAIN = [("mission", (1, 8, 512, 64)), ("large", (2, 16, 2048, 64))]
for name, shape in MAIN:
    for config in ("old", "s2", "s4"):
        for ablate in ("none", "no_compute", "no_loads"):
            for variant in ("baseline", "cpasync"):
                run("main", name, shape, variant, config, ablate, 300, 20, check=(ablate == "none"))
    for variant in ("baseline", "cpasync"):
        run("main", name, shape, variant, "auto", "none", 300, 20, check=True)

# ---- 2. check: tails, small S, D = 128 -----------------------------------------------------------
CHECK = [("S1", (1, 2, 1, 64)), ("S100", (1, 3, 100, 64)), ("S257", (2, 2, 257, 64)), ("S777", (1, 4, 777, 64)),
         ("D128", (1, 4, 300, 128))]
for name, shape in CHECK:
    configs = ("auto", "old") if shape[3] == 128 else ("auto", "old", "s2", "s4")
    for config in configs:
        for variant in ("baseline", "cpasync"):
            run("check", name, shape, variant, config, "none", 5, 1, check=True, timeout=20)

# ---- 3. sanitize (named barriers, merge buffer) ---------------------------------------------------
cs = shutil.which("compute-sanitizer") or next(
    (p for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer")
     if os.path.exists(p)), None)
if cs:
    for tool in ("racecheck", "synccheck"):
        for variant, config in (("cpasync", "s4"), ("baseline", "s2"), ("cpasync", "s2"), ("baseline", "s4")):
            if left() < 15:
                emit({"plan": "sanitize", "skipped": "time budget", "tool": tool, "variant": variant, "config": config})
                continue
            run("sanitize:" + tool, "S300", (1, 2, 300, 64), variant, config, "none", 1, 0, check=True,
                prefix=(cs, "--tool", tool, "--error-exitcode", "9"), timeout=min(25.0, left() - 3))
else:
    emit({"plan": "sanitize", "skipped": "compute-sanitizer not found"})

# ---- summary ----------------------------------------------------------------------------------------
summary = {"plan": "summary", "p50_us": {}, "cpasync_gain_vs_baseline": {}, "failed_checks": [], "errors": []}
for r in RESULTS:
    if r.get("error"):
        summary["errors"].append({k: r.get(k) for k in ("plan", "case", "variant", "config", "ablate", "error")})
    if r.get("pass") is False:
        summary["failed_checks"].append({k: r.get(k) for k in ("plan", "case", "variant", "config", "max_abs_err", "bad_frac")})
    if r.get("plan") == "main" and r.get("line"):
        key = f'{r["case"]}/{r["config"]}/{r["ablate"]}'
        summary["p50_us"].setdefault(key, {})[r["variant"]] = r["line"]["p50_us"]
        if r["config"] == "auto":
            summary["p50_us"][key]["picked_split"] = r["line"].get("split")
for key, d in summary["p50_us"].items():
    if "baseline" in d and "cpasync" in d and d["cpasync"] > 0:
        summary["cpasync_gain_vs_baseline"][key] = round(d["baseline"] / d["cpasync"] - 1.0, 4)
best = {}
for key, d in summary["p50_us"].items():
    shape_name, config, ablate = key.split("/")
    if ablate == "none":
        for v in ("baseline", "cpasync"):
            if v in d and (shape_name not in best or d[v] < best[shape_name][2]):
                best[shape_name] = (config, v, d[v])
summary["best"] = {k: {"config": c, "variant": v, "p50_us": p} for k, (c, v, p) in best.items()}
summary["elapsed_s"] = round(time.time() - T0, 1)
emit(summary)
shutil.rmtree(TMP, ignore_errors=True)
PY
