"""The fp16 tier's key-chunk kernel (head dim 128, V decoded by the consumers) with the producer's per-tile named
barrier before a K stage's refill (main) against an mbarrier that only the refilling thread waits on
(SDPA_SM90_KV_KRAW_MBAR=1): outputs byte for byte, a 4-stream soak of 300 launches, compute-sanitizer memcheck /
racecheck / synccheck at a small case, then cold and hot p50, the runners alternating, 3 rounds, --iters 50.
Runners in $BIN (default bin/; xz), named on the command line: the first is the reference.  Inputs: seed 0, Q ~ N(0,1) fp16, K and
V random E4M3 codes below 16 in magnitude, scale 1/64.
  python3 ab.py main mbar     (results under $OUT/ab.jsonl)
(As run, the helpers and cases of ../ab_kit.py were this script's own; the same code.)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("kvp", 400)
CASES = dict(ab_kit.ROWS64_CASES)  # 64 rows per K/V head (the key chunks under --kernel auto)
SAN = ("san_sq16_2k", ((1, 32, 16, 128), (1, 8, 2048, 128), True))
KERNEL = ["--precision", "fp16", "--kernel", "wgmma_sm90", "--split", "0"]


def run(exe, f, causal, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, [*KERNEL, *extra], out, timeout, pre)


names = sys.argv[1:] or ["main", "mbar"]
exes = {k: lab.unpack(k) for k in names}
files = {n: ab_kit.code_inputs(lab.tmp / n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    outs = {}
    for k, exe in exes.items():
        r = run(exe, files[name], causal, ["--iters", "1", "--warmup", "0"], lab.tmp / f"o_{k}.npy")
        outs[k] = np.load(lab.tmp / f"o_{k}.npy") if r["rc"] == 0 else None
        lab.log({"step": "check", "case": name, "runner": k, "rc": r["rc"], "kv_chunks": r.get("line", {}).get("kv_chunks"),
                 "stderr": r.get("stderr", "")[-200:]})
    a = outs[names[0]]
    for k in names[1:]:
        b = outs[k]
        lab.log({"step": "bitcmp", "case": name, "runner": k, "identical": bool(a is not None and b is not None and np.array_equal(
            a.view(np.uint16), b.view(np.uint16))), "finite": bool(b is not None and np.isfinite(b.astype(np.float32)).all())})
for k in names[1:]:
    for name in ("decode_b8_32k_sq16", "b8_sq16_4k"):
        r = run(exes[k], files[name], CASES[name][2], ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"],
                lab.tmp / "o_s.npy", timeout=90)
        lab.log({"step": "soak", "case": name, "runner": k, "rc": r["rc"],
                 "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    fs = ab_kit.code_inputs(lab.tmp / SAN[0], SAN[1][0], SAN[1][1])
    for tool in ("memcheck", "racecheck", "synccheck"):
        r = run(exes[k], fs, SAN[1][2], ["--iters", "1", "--warmup", "0", "--timing", "hot"], lab.tmp / "o_san.npy",
                timeout=120, pre=(san, "--tool", tool, "--error-exitcode", "3"))
        lab.log({"step": "sanitizer", "tool": tool, "runner": k, "rc": r["rc"], "tail": r.get("stdout", "")[-160:]})
for rnd in range(3):
    for name, (_, _, causal) in CASES.items():
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(names, rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], files[name], causal, ["--iters", "50", "--warmup", "10", "--timing", mode], lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "p50_us": ab_kit.p50_us(r)})
lab.close()
