"""The key-chunk kernels (both tiers, --kernel wgmma_sm90 / wgmma_fp8_sm90, cpasync) with K and V prefetched into L2
ahead of the copy engine's stages (SDPA_SM90_KV_PREFETCH_AHEAD = 4, 8: branch kvpf) against main's (none):
  1. outputs byte for byte against main's runner, finite;
  2. a 4-stream soak of 300 launches per prefetching runner (every launch bit-identical), Sq 16 fp16 and MQA fp8;
  3. cold and hot p50, the runners in rotating order, 2 rounds, --iters 50.
Runners in bin/ (xz): main (f94fb86's cpasync build), pf4, pf8.  Inputs: seed 0, Q ~ N(0,1) fp16, K and V random E4M3
codes below 16 in magnitude, scale 1/64.     python3 ab_pf.py   (results under $OUT/pf.jsonl)
(As run, its unpack and make were written out here; they are ../ab_kit.py's since, the same code and inputs.)"""
import json, os, pathlib, subprocess, time, sys
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/pf_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/dev/shm/kvpf"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "pf.jsonl", "w")
T0, BUDGET_S = time.time(), float(os.environ.get("AB_BUDGET_S", "200"))
RUNNERS = ("main", "pf4", "pf8")
KERNEL = {"fp16": "wgmma_sm90", "fp8": "wgmma_fp8_sm90"}
CASES = {  # name: (q_shape, kv_shape, causal)
    "sq16_b8_32k": ((8, 32, 16, 128), (8, 8, 32768, 128), True),
    "sq1_b8_32k": ((8, 32, 1, 128), (8, 8, 32768, 128), False),
    "mqa_b8_32k": ((8, 32, 1, 128), (8, 1, 32768, 128), False),
    "sq16_b1_32k": ((1, 32, 16, 128), (1, 8, 32768, 128), True),
    "sq16_b64_4k": ((64, 32, 16, 128), (64, 8, 4096, 128), True),
    "sq1_b1_128k": ((1, 32, 1, 128), (1, 8, 131072, 128), False),
}


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)


def unpack(stem):
    return ab_kit.unpack(TMP, stem)


def make(name, qs, kvs):
    return ab_kit.code_inputs(TMP / name, qs, kvs)


def run(exe, f, tier, causal, extra, out, timeout=60):
    cmd = [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out", str(out),
           "--precision", tier, "--kernel", KERNEL[tier], "--split", "0", *(["--causal"] if causal else []), *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
    return {"rc": p.returncode, "line": line, "stderr": p.stderr[-300:]}


exes = {k: unpack(k) for k in RUNNERS}
files = {n: make(n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    for tier in KERNEL:
        outs = {}
        for k, exe in exes.items():
            r = run(exe, files[name], tier, causal, ["--iters", "1", "--warmup", "0"], TMP / f"o_{k}.npy")
            outs[k] = np.load(TMP / f"o_{k}.npy") if r["rc"] == 0 else None
            if r["rc"] != 0:
                log({"step": "check", "case": name, "tier": tier, "runner": k, "rc": r["rc"], "stderr": r.get("stderr")})
        a = outs["main"]
        log({"step": "bitcmp", "case": name, "tier": tier, "kv_chunks": r.get("line", {}).get("kv_chunks"),
             "finite": bool(a is not None and np.isfinite(a.astype(np.float32)).all()),
             **{k: bool(a is not None and outs[k] is not None and np.array_equal(a.view(np.uint16), outs[k].view(np.uint16)))
                for k in RUNNERS[1:]}})
for k in RUNNERS[1:]:
    for name, tier in (("sq16_b8_32k", "fp16"), ("mqa_b8_32k", "fp8")):
        r = run(exes[k], files[name], tier, CASES[name][2], ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"],
                TMP / "o_s.npy", timeout=90)
        log({"step": "soak", "runner": k, "case": name, "tier": tier, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
for rnd in range(2):
    for name, (_, _, causal) in CASES.items():
        for tier in KERNEL:
            for mode in ("cold", "hot"):
                order = RUNNERS[rnd % 3:] + RUNNERS[:rnd % 3]
                for k in order:
                    if time.time() - T0 > BUDGET_S:
                        log({"step": "time", "skipped": "budget"}); RES.close(); raise SystemExit(0)
                    r = run(exes[k], files[name], tier, causal, ["--iters", "50", "--warmup", "10", "--timing", mode],
                            TMP / "o_t.npy")
                    s = sorted(r.get("line", {}).get("samples_us") or [float("nan")])
                    log({"step": "time", "round": rnd, "case": name, "tier": tier, "mode": mode, "runner": k,
                         "rc": r["rc"], "p50_us": s[len(s) // 2]})
RES.close()
