"""The decode kernel's final merge (the last block of a (b, hkv, row block) sums the chunks' partial O) with every item
of a thread loaded at once, in batches of chunks (dm), against main's, one item after another: outputs byte for byte
(both tiers, the decode kernel forced, every decode case of issue 50 up to 32K keys and the sanitizer cases), a
4-stream soak of 300 launches, compute-sanitizer memcheck / racecheck / synccheck, then cold and hot p50 under
--kernel auto where auto takes the decode kernel, the runners alternating, 3 rounds, --iters 50.
Runners in $BIN (xz), named on the command line: the first is the reference.  Inputs: seed 0, Q ~ N(0,1) fp16, K and
V random E4M3 codes below 16 in magnitude, scale 1/64.
  python3 ab.py main dm     (results under $OUT/ab.jsonl)"""
import json, lzma, os, pathlib, shutil, subprocess, sys, time
import numpy as np

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/dm_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/dm"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "ab.jsonl", "w")
T0, BUDGET_S = time.time(), float(os.environ.get("AB_BUDGET_S", "480"))
CASES = {  # name: (q_shape, kv_shape, causal) (driver/config.py's presets of the same names)
    "decode_b8_32k_mqa": ((8, 32, 1, 128), (8, 1, 32768, 128), False),
    "decode_b1_4k": ((1, 32, 1, 128), (1, 8, 4096, 128), False),
    "decode_b1_32k": ((1, 32, 1, 128), (1, 8, 32768, 128), False),
    "decode_b1_128k": ((1, 32, 1, 128), (1, 8, 131072, 128), False),
    "decode_b8_4k": ((8, 32, 1, 128), (8, 8, 4096, 128), False),
    "decode_b8_32k": ((8, 32, 1, 128), (8, 8, 32768, 128), False),
    "decode_b8_32k_sq4": ((8, 32, 4, 128), (8, 8, 32768, 128), True),
    "decode_b8_32k_hq64": ((8, 64, 1, 128), (8, 8, 32768, 128), False),
    "san_decode_split": ((2, 8, 1, 128), (2, 2, 3000, 128), False),
    "san_decode_rows32": ((1, 32, 1, 128), (1, 1, 2000, 128), False),
    "san_decode_rows64_d64": ((1, 8, 16, 64), (1, 2, 1000, 64), True),
}
FORCED = {"fp16": "decode_sm89", "fp8": "decode_fp8_sm89"}
TIMED = [("fp16", c) for c in ("decode_b8_32k_mqa", "decode_b1_4k", "decode_b1_32k", "decode_b1_128k", "decode_b8_4k",
                                "decode_b8_32k", "decode_b8_32k_sq4")] + \
        [("fp8", c) for c in ("decode_b1_32k", "decode_b8_32k", "decode_b8_32k_sq4")]


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)


def unpack(stem):
    p = TMP / stem
    if not p.exists():
        p.write_bytes(lzma.decompress((pathlib.Path(os.environ.get("BIN", "bin")) / f"{stem}.xz").read_bytes()))
        p.chmod(0o755)
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


def run(exe, f, causal, tier, kernel, extra, out, timeout=60, pre=()):
    cmd = [*pre, str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out", str(out),
           "--precision", tier, "--kernel", kernel, *(["--causal"] if causal else []), *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
    return {"rc": p.returncode, "line": line, "stdout": p.stdout[-400:], "stderr": p.stderr[-300:]}


names = sys.argv[1:] or ["main", "dm"]
exes = {k: unpack(k) for k in names}
files = {n: make(n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    for tier, kern in FORCED.items():
        outs = {}
        for k, exe in exes.items():
            r = run(exe, files[name], causal, tier, kern, ["--iters", "1", "--warmup", "0"], TMP / f"o_{k}.npy")
            outs[k] = np.load(TMP / f"o_{k}.npy") if r["rc"] == 0 else None
            if r["rc"] != 0: log({"step": "check", "case": name, "tier": tier, "runner": k, "rc": r["rc"], "stderr": r.get("stderr")})
        a = outs[names[0]]
        for k in names[1:]:
            b = outs[k]
            log({"step": "bitcmp", "case": name, "tier": tier, "runner": k, "split": r.get("line", {}).get("split"),
                 "identical": bool(a is not None and b is not None and np.array_equal(a.view(np.uint16), b.view(np.uint16))),
                 "finite": bool(b is not None and np.isfinite(b.astype(np.float32)).all())})
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for k in names[1:]:
    for tier, name in (("fp16", "decode_b8_32k_mqa"), ("fp8", "decode_b1_32k")):
        r = run(exes[k], files[name], CASES[name][2], tier, FORCED[tier],
                ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"], TMP / "o_s.npy", timeout=90)
        log({"step": "soak", "case": name, "tier": tier, "runner": k, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    for name in ("san_decode_split", "san_decode_rows32"):
        for tier in FORCED:
            for tool in ("memcheck", "racecheck", "synccheck"):
                r = run(exes[k], files[name], CASES[name][2], tier, FORCED[tier], ["--iters", "1", "--warmup", "0",
                        "--timing", "hot"], TMP / "o_san.npy", timeout=120, pre=(san, "--tool", tool, "--error-exitcode", "3"))
                log({"step": "sanitizer", "case": name, "tier": tier, "tool": tool, "runner": k, "rc": r["rc"],
                     "tail": r.get("stdout", "")[-90:]})
for rnd in range(3):
    for tier, name in TIMED:
        for mode in ("cold", "hot"):
            for k in (names if rnd % 2 == 0 else names[::-1]):
                if time.time() - T0 > BUDGET_S:
                    log({"step": "time", "skipped": "budget"}); RES.close(); raise SystemExit(0)
                r = run(exes[k], files[name], CASES[name][2], tier, "auto", ["--iters", "50", "--warmup", "10",
                        "--timing", mode], TMP / "o_t.npy")
                s = sorted(r.get("line", {}).get("samples_us") or [float("nan")])
                log({"step": "time", "round": rnd, "case": name, "tier": tier, "mode": mode, "runner": k, "rc": r["rc"],
                     "kernel": r.get("line", {}).get("kernel"), "p50_us": s[len(s) // 2]})
RES.close()
