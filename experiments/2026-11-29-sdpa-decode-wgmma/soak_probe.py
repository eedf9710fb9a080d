"""Which kernel configurations keep every launch of a 4-stream soak bit-identical (the runner's --soak), and what
compute-sanitizer says of the fp8 tier's key-chunk kernel.  Inputs with numpy (seed 0): Q ~ N(0,1) fp16, K and V random
E4M3 codes below 16 in magnitude with scale 1/64.
  python3 soak_probe.py   (from the payload folder holding bin/*.xz; results under $OUT/soak.jsonl)
(As run, its unpack and make were written out here; they are ../ab_kit.py's since, the same code and inputs.)"""
import json, os, pathlib, shutil, subprocess, time, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/soak_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/soakp"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "soak.jsonl", "w")
CASES = {  # name: (q_shape, kv_shape, causal, --kernel, extra args)
    "kv_fp8_mqa_d128": ((8, 32, 1, 128), (8, 1, 32768, 128), False, "wgmma_fp8_sm90", []),
    "kv_fp16_mqa_d128": ((8, 32, 1, 128), (8, 1, 32768, 128), False, "wgmma_sm90", []),
    "kv_fp8_one_chunk": ((64, 32, 16, 128), (64, 8, 512, 128), True, "wgmma_fp8_sm90", []),
    "kv_fp16_one_chunk": ((64, 32, 16, 128), (64, 8, 512, 128), True, "wgmma_sm90", []),
    "kv_fp8_one_chunk_nc": ((64, 32, 16, 128), (64, 8, 512, 128), False, "wgmma_fp8_sm90", []),
    "kv_fp16_sq16": ((8, 32, 16, 128), (8, 8, 32768, 128), True, "wgmma_sm90", []),
    "kv_fp8_d64_rows32": ((2, 16, 4, 64), (2, 2, 8192, 64), True, "wgmma_fp8_sm90", []),
}


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec)[:300], flush=True)


def unpack(stem):
    return ab_kit.unpack(TMP, stem)


def make(name, qs, kvs):
    return ab_kit.code_inputs(TMP / name, qs, kvs)


def run(exe, f, causal, kernel, tier, extra, wrap=(), timeout=120):
    cmd = [*wrap, str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out",
           str(TMP / "o.npy"), "--precision", tier, "--kernel", kernel, *(["--causal"] if causal else []), *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}, ""
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None)
    return {"rc": p.returncode, "line": line, "stderr": p.stderr[-600:]}, p.stdout[-2500:]


exes = {v: unpack(f"sdpa_fp8_{v}") for v in ("cpasync", "baseline")}
for name, (qs, kvs, causal, kernel, extra) in CASES.items():
    f = make(name, qs, kvs)
    tier = "fp8" if "fp8" in kernel else "fp16"
    for v, exe in exes.items():
        r, _ = run(exe, f, causal, kernel, tier, ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4", "--split", "0", *extra][:None])
        ln = r.get("line") or {}
        log({"case": name, "variant": v, "rc": r["rc"], "kv_chunks": ln.get("kv_chunks"), "split": ln.get("split"),
             "soak_launches": ln.get("soak_launches"), "mismatched": ln.get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
cs = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for name, qs, kvs in (("kv_small_mqa", (2, 32, 1, 128), (2, 1, 4096, 128)), ("kv_small_one_chunk", (4, 32, 16, 128), (4, 8, 512, 128))):
  f = make(name, qs, kvs)
  for tool in ("memcheck", "synccheck", "racecheck"):
    for causal in (True,):
      for kern, tier in (("wgmma_fp8_sm90", "fp8"), ("wgmma_sm90", "fp16")):
        r, out = run(exes["cpasync"], f, causal, kern, tier, ["--iters", "1", "--warmup", "0", "--split", "0"],
                     wrap=(cs, "--tool", tool, "--error-exitcode", "9"), timeout=150)
        summ = [x for x in out.splitlines() if "SUMMARY" in x or "Error" in x or "Hazard" in x or "Invalid" in x or "at " in x][:8]
        log({"sanitizer": tool, "case": name, "tier": tier, "causal": causal, "rc": r["rc"], "kv_chunks": (r.get("line") or {}).get("kv_chunks"), "summary": summ, "stderr": r.get("stderr", "")[-300:]})
RES.close()
