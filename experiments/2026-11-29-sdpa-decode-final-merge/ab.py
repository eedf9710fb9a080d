"""The decode kernel's final merge (the last block of a (b, hkv, row block) sums the chunks' partial O) with every item
of a thread loaded at once, in batches of chunks (dm), against main's, one item after another: outputs byte for byte
(both tiers, the decode kernel forced, every decode case of issue 50 up to 32K keys and the sanitizer cases), a
4-stream soak of 300 launches, compute-sanitizer memcheck / racecheck / synccheck, then cold and hot p50 under
--kernel auto where auto takes the decode kernel, the runners alternating, 3 rounds, --iters 50.
Runners in $BIN (xz), named on the command line: the first is the reference.  Inputs: seed 0, Q ~ N(0,1) fp16, K and
V random E4M3 codes below 16 in magnitude, scale 1/64.
  python3 ab.py main dm     (results under $OUT/ab.jsonl)
(As run, the helpers of ../ab_kit.py were this script's own; the same code.)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("dm", 480)
CASES = dict(ab_kit.DECODE_CASES)  # issue 50's decode presets and the decode sanitizer cases
FORCED = {"fp16": "decode_sm89", "fp8": "decode_fp8_sm89"}
TIMED = [("fp16", c) for c in ("decode_b8_32k_mqa", "decode_b1_4k", "decode_b1_32k", "decode_b1_128k", "decode_b8_4k",
                                "decode_b8_32k", "decode_b8_32k_sq4")] + \
        [("fp8", c) for c in ("decode_b1_32k", "decode_b8_32k", "decode_b8_32k_sq4")]



def run(exe, f, causal, tier, kernel, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, ["--precision", tier, "--kernel", kernel, *extra], out, timeout, pre)


names = sys.argv[1:] or ["main", "dm"]
exes = {k: lab.unpack(k) for k in names}
files = {n: ab_kit.code_inputs(lab.tmp / n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    for tier, kern in FORCED.items():
        outs = {}
        for k, exe in exes.items():
            r = run(exe, files[name], causal, tier, kern, ["--iters", "1", "--warmup", "0"], lab.tmp / f"o_{k}.npy")
            outs[k] = np.load(lab.tmp / f"o_{k}.npy") if r["rc"] == 0 else None
            if r["rc"] != 0:
                lab.log({"step": "check", "case": name, "tier": tier, "runner": k, "rc": r["rc"], "stderr": r.get("stderr")})
        a = outs[names[0]]
        for k in names[1:]:
            b = outs[k]
            lab.log({"step": "bitcmp", "case": name, "tier": tier, "runner": k, "split": r.get("line", {}).get("split"),
                     "identical": bool(a is not None and b is not None and np.array_equal(a.view(np.uint16), b.view(np.uint16))),
                     "finite": bool(b is not None and np.isfinite(b.astype(np.float32)).all())})
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for k in names[1:]:
    for tier, name in (("fp16", "decode_b8_32k_mqa"), ("fp8", "decode_b1_32k")):
        r = run(exes[k], files[name], CASES[name][2], tier, FORCED[tier],
                ["--iters", "1", "--warmup", "0", "--soak", "300", "--streams", "4"], lab.tmp / "o_s.npy", timeout=90)
        lab.log({"step": "soak", "case": name, "tier": tier, "runner": k, "rc": r["rc"],
                 "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    for name in ("san_decode_split", "san_decode_rows32"):
        for tier in FORCED:
            for tool in ("memcheck", "racecheck", "synccheck"):
                r = run(exes[k], files[name], CASES[name][2], tier, FORCED[tier], ["--iters", "1", "--warmup", "0",
                        "--timing", "hot"], lab.tmp / "o_san.npy", timeout=120, pre=(san, "--tool", tool, "--error-exitcode", "3"))
                lab.log({"step": "sanitizer", "case": name, "tier": tier, "tool": tool, "runner": k, "rc": r["rc"],
                         "tail": r.get("stdout", "")[-90:]})
for rnd in range(3):
    for tier, name in TIMED:
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(names, rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], files[name], CASES[name][2], tier, "auto", ["--iters", "50", "--warmup", "10",
                        "--timing", mode], lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "tier": tier, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "p50_us": ab_kit.p50_us(r)})
lab.close()
