"""The fp16 tier's key-chunk kernel (head dim 128, V decoded by the consumers) with the producer's per-tile named
barrier before a K stage's refill (main) against an mbarrier that only the refilling thread waits on
(SDPA_SM90_KV_KRAW_MBAR=1): outputs byte for byte, a 4-stream soak of 300 launches, compute-sanitizer memcheck /
racecheck / synccheck at a small case, then cold and hot p50, the runners alternating, 3 rounds, --iters 50.
Runners in $BIN (default bin/; xz), named on the command line: the first is the reference.  Inputs: seed 0, Q ~ N(0,1) fp16, K and
V random E4M3 codes below 16 in magnitude, scale 1/64.
  python3 ab.py main mbar     (results under $OUT/ab.jsonl)"""
import json, lzma, os, pathlib, shutil, subprocess, sys, time
import numpy as np

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/kvp_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/kvp"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "ab.jsonl", "w")
T0, BUDGET_S = time.time(), float(os.environ.get("AB_BUDGET_S", "400"))
CASES = {  # name: (q_shape, kv_shape, causal): 64 rows per K/V head (the key chunks under --kernel auto)
    "decode_b8_32k_sq16": ((8, 32, 16, 128), (8, 8, 32768, 128), True),
    "b64_sq16_4k": ((64, 32, 16, 128), (64, 8, 4096, 128), True),
    "b8_sq16_4k": ((8, 32, 16, 128), (8, 8, 4096, 128), True),
    "b1_sq16_32k": ((1, 32, 16, 128), (1, 8, 32768, 128), True),
    "b8_g8_sq8_32k": ((8, 64, 8, 128), (8, 8, 32768, 128), False),
}
SAN = ("san_sq16_2k", ((1, 32, 16, 128), (1, 8, 2048, 128), True))


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)


def unpack(stem):
    p = TMP / stem
    if not p.exists():
        p.write_bytes(lzma.decompress((pathlib.Path(os.environ.get("BIN", "bin")) / f"{stem}.xz").read_bytes())); p.chmod(0o755)
    return p


def make(name, qs, kvs):
    d = TMP / name; d.mkdir(exist_ok=True)
    f = {n: d / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    rng = np.random.default_rng(0)
    np.save(f["q"], rng.standard_normal(qs, dtype=np.float32).astype(np.float16))
    for n in ("k", "v"):
        np.save(f[n], rng.integers(0, 0x58, size=kvs, dtype=np.uint8) | (rng.integers(0, 2, size=kvs, dtype=np.uint8) << 7))
    np.save(f["scales"], np.array([1 / 64, 1 / 64], dtype=np.float32))
    return f


def cmd(exe, f, causal, extra, out):
    return [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out", str(out),
            "--precision", "fp16", "--kernel", "wgmma_sm90", "--split", "0", *(["--causal"] if causal else []), *extra]


def run(exe, f, causal, extra, out, timeout=60, pre=()):
    try:
        p = subprocess.run([*pre, *cmd(exe, f, causal, extra, out)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
    return {"rc": p.returncode, "line": line, "stdout": p.stdout[-400:], "stderr": p.stderr[-300:]}


names = sys.argv[1:] or ["main", "mbar"]
exes = {k: unpack(k) for k in names}
files = {n: make(n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    outs = {}
    for k, exe in exes.items():
        r = run(exe, files[name], causal, ["--iters", "1", "--warmup", "0"], TMP / f"o_{k}.npy")
        outs[k] = np.load(TMP / f"o_{k}.npy") if r["rc"] == 0 else None
        log({"step": "check", "case": name, "runner": k, "rc": r["rc"], "kv_chunks": r.get("line", {}).get("kv_chunks"),
             "stderr": r.get("stderr", "")[-200:]})
    a = outs[names[0]]
    for k in names[1:]:
        b = outs[k]
        log({"step": "bitcmp", "case": name, "runner": k, "identical": bool(a is not None and b is not None and np.array_equal(
            a.view(np.uint16), b.view(np.uint16))), "finite": bool(b is not None and np.isfinite(b.astype(np.float32)).all())})
for k in names[1:]:
    for name in ("decode_b8_32k_sq16", "b8_sq16_4k"):
        r = run(exes[k], files[name], CASES[name][2], ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"],
                TMP / "o_s.npy", timeout=90)
        log({"step": "soak", "case": name, "runner": k, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    fs = make(SAN[0], SAN[1][0], SAN[1][1])
    for tool in ("memcheck", "racecheck", "synccheck"):
        r = run(exes[k], fs, SAN[1][2], ["--iters", "1", "--warmup", "0", "--timing", "hot"], TMP / "o_san.npy",
                timeout=120, pre=(san, "--tool", tool, "--error-exitcode", "3"))
        log({"step": "sanitizer", "tool": tool, "runner": k, "rc": r["rc"], "tail": r.get("stdout", "")[-160:]})
for rnd in range(3):
    for name, (_, _, causal) in CASES.items():
        for mode in ("cold", "hot"):
            for k in (names if rnd % 2 == 0 else names[::-1]):
                if time.time() - T0 > BUDGET_S:
                    log({"step": "time", "skipped": "budget"}); RES.close(); raise SystemExit(0)
                r = run(exes[k], files[name], causal, ["--iters", "50", "--warmup", "10", "--timing", mode], TMP / "o_t.npy")
                s = sorted(r.get("line", {}).get("samples_us") or [float("nan")])
                log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                     "p50_us": s[len(s) // 2]})
RES.close()
