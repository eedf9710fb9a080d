"""Is MQA's decode kernel bound by its warps' latency? `wide1` (SDPA_DECODE_WIDE=1: where 17-32 rows keep one 16-row
tile a warp, 8 key groups of two warps, 512 threads, Q's fragments in shared memory: 127 registers, 16 warps a
block) against `cur1` (main: 4 key groups of two warps, 8 warps): error against float64, a soak, racecheck and
synccheck, then cold and hot p50, 3 rounds, alternating.
  python3 wide.py     (runners cur1, wide1 in $BIN; results under $OUT/wide.jsonl)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("wide", 300, results="wide.jsonl")
CASES = {
    "decode_b8_32k_mqa": ((8, 32, 1, 128), (8, 1, 32768, 128), False),
    "b1_32k_mqa": ((1, 32, 1, 128), (1, 1, 32768, 128), False),
    "b8_4k_mqa": ((8, 32, 1, 128), (8, 1, 4096, 128), False),
    "b8_128k_mqa": ((8, 32, 1, 128), (8, 1, 131072, 128), False),
    "b8_4k_g4_sq8": ((8, 32, 8, 128), (8, 8, 4096, 128), True),
}
SCALES = (1 / 64, 1 / 64)


def e4m3(codes):
    c = codes.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0); e = (c >> 3) & 0xF; m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def reference(f):  # not causal, Sq 1
    q = np.load(f["q"]).astype(np.float64); k = e4m3(np.load(f["k"])) * SCALES[0]; v = e4m3(np.load(f["v"])) * SCALES[1]
    B, Hq, Sq, D = q.shape; Hkv = k.shape[1]; G = Hq // Hkv
    o = np.empty_like(q)
    for b in range(B):
        for h in range(Hkv):
            qq = q[b, h * G:(h + 1) * G].reshape(G * Sq, D)
            s = qq @ k[b, h].T / np.sqrt(D)
            s -= s.max(1, keepdims=True); p = np.exp(s); p /= p.sum(1, keepdims=True)
            o[b, h * G:(h + 1) * G] = (p @ v[b, h]).reshape(G, Sq, D)
    return o


def run(exe, f, causal, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, ["--precision", "fp16", "--kernel", "auto", *extra], out, timeout, pre)


exes = {k: lab.unpack(k) for k in ("cur1", "wide1")}
files = {n: ab_kit.code_inputs(lab.tmp / n, qs, kvs, scales=SCALES) for n, (qs, kvs, _) in CASES.items()}
one = ["--iters", "1", "--warmup", "0"]
ref = reference(files["decode_b8_32k_mqa"])
for k, exe in exes.items():
    r = run(exe, files["decode_b8_32k_mqa"], False, one, lab.tmp / "o.npy")
    o = np.load(lab.tmp / "o.npy").astype(np.float64) if r["rc"] == 0 else None
    lab.log({"step": "accuracy", "runner": k, "rc": r["rc"], "stderr": r.get("stderr", "")[-200:],
             **({} if o is None else {"rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                                      "max_abs_over_max_ref": float(np.abs(o - ref).max() / np.abs(ref).max())})})
r = run(exes["wide1"], files["decode_b8_32k_mqa"], False, [*one, "--soak", "300", "--streams", "4"], lab.tmp / "s.npy", 120)
lab.log({"step": "soak", "rc": r["rc"], "mismatched": r.get("line", {}).get("soak_mismatched_elements")})
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
small = ab_kit.code_inputs(lab.tmp / "small", (1, 32, 1, 128), (1, 1, 2000, 128), scales=SCALES)
for tool in ("racecheck", "synccheck", "memcheck"):
    r = run(exes["wide1"], small, False, [*one, "--timing", "hot", "--kernel", "decode_sm89"], lab.tmp / "san.npy", 150,
            pre=(san, "--tool", tool, "--error-exitcode", "3"))
    lab.log({"step": "sanitizer", "tool": tool, "rc": r["rc"], "tail": r.get("stdout", "")[-90:]})
for rnd in range(3):
    for name, (_, _, causal) in CASES.items():
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(list(exes), rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], files[name], causal, ["--iters", "50", "--warmup", "10", "--timing", mode], lab.tmp / "t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "p50_us": ab_kit.p50_us(r)})
lab.close()
