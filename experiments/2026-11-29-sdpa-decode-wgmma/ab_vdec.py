"""(Prepared, not run yet.) The fp16 tier's key-chunk kernel with V decoded by the consumer warpgroups
(SDPA_SM90_KV_VDEC=1, branch kvvdec: the producer decodes K only) against main's, where the producer decodes both:
  1. outputs byte for byte (the same fp16 V in the same layout, the same arithmetic), and both against the reference
     run of main's runner being finite;
  2. a 4-stream soak of 300 launches (every launch bit-identical);
  3. cold and hot p50, the two runners alternating, 2 rounds, --iters 50.
Runners in bin/ (xz): main (main's default cpasync build), vdec (branch kvvdec, -DSDPA_SM90_KV_VDEC=1).  Inputs as
soak_probe.py (seed 0: Q ~ N(0,1) fp16, K and V random E4M3 codes below 16 in magnitude, scale 1/64).
  python3 ab_vdec.py   (results under $OUT/vdec.jsonl)
(As run, its unpack, make and cases were written out here; they are ../ab_kit.py's since, the same code and inputs.)"""
import json, os, pathlib, subprocess, time, sys
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/vdec_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/vdec"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "vdec.jsonl", "w")
T0, BUDGET_S = time.time(), float(os.environ.get("AB_BUDGET_S", "200"))
CASES = dict(ab_kit.ROWS64_CASES)  # 64 rows per K/V head (the key chunks under --kernel auto)


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)


def unpack(stem):
    return ab_kit.unpack(TMP, stem)


def make(name, qs, kvs):
    return ab_kit.code_inputs(TMP / name, qs, kvs)


def run(exe, f, causal, extra, out, timeout=60):
    cmd = [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out", str(out),
           "--precision", "fp16", "--kernel", "wgmma_sm90", "--split", "0", *(["--causal"] if causal else []), *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
    return {"rc": p.returncode, "line": line, "stderr": p.stderr[-300:]}


exes = {k: unpack(k) for k in ("main", "vdec")}
files = {n: make(n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    outs = {}
    for k, exe in exes.items():
        r = run(exe, files[name], causal, ["--iters", "1", "--warmup", "0"], TMP / f"o_{k}.npy")
        outs[k] = np.load(TMP / f"o_{k}.npy") if r["rc"] == 0 else None
        log({"step": "check", "case": name, "runner": k, "rc": r["rc"], "kv_chunks": r.get("line", {}).get("kv_chunks"),
             "stderr": r.get("stderr", "")[-200:]})
    a, b = outs["main"], outs["vdec"]
    log({"step": "bitcmp", "case": name, "identical": bool(a is not None and b is not None and np.array_equal(
        a.view(np.uint16), b.view(np.uint16))), "finite": bool(a is not None and np.isfinite(a.astype(np.float32)).all())})
for name in ("decode_b8_32k_sq16", "b8_sq16_4k"):
    r = run(exes["vdec"], files[name], CASES[name][2], ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"],
            TMP / "o_s.npy", timeout=90)
    log({"step": "soak", "case": name, "rc": r["rc"], "mismatched": r.get("line", {}).get("soak_mismatched_elements"),
         "stderr": r.get("stderr", "")[-200:]})
for rnd in range(2):
    for name, (_, _, causal) in CASES.items():
        for mode in ("cold", "hot"):
            for k in (("main", "vdec") if rnd % 2 == 0 else ("vdec", "main")):
                if time.time() - T0 > BUDGET_S:
                    log({"step": "time", "skipped": "budget"}); RES.close(); raise SystemExit(0)
                r = run(exes[k], files[name], causal, ["--iters", "50", "--warmup", "10", "--timing", mode], TMP / "o_t.npy")
                s = sorted(r.get("line", {}).get("samples_us") or [float("nan")])
                log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                     "p50_us": s[len(s) // 2]})
RES.close()
