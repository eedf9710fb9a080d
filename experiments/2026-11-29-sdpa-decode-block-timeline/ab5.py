"""Call 5: one thread fences and counts each block (fe: thread 0's fence after the block's barrier releases the block's
partials, the last block's thread 0 fences again after its count, CUTLASS's semaphore pattern) where every thread
fenced before (twice in the last block), against e034b35 (mg). Outputs byte for byte against mg's (the cpasync
variant; auto and forced chunk counts, up to 264 chunks), error against float64, compute-sanitizer, a 4-stream soak, then
cold and hot p50 under --kernel auto (2 rounds, the runners alternating); no timeline.
Runners in $BIN (xz): mg1 fe1 (cpasync).
  python3 ab5.py     (results under $OUT/ab5.jsonl)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("tl5", 420, "ab5.jsonl")
RUNNERS = ("mg1", "fe1")  # (the cpasync variant only: the call carries the bundle too, 64 MiB at most)
D = ab_kit.DECODE_CASES
# name: (q_shape, kv_shape, causal, --split (0: the plan's))
SAME = {
    "mqa_2k": ((2, 32, 1, 128), (2, 1, 2048, 128), False, 4),
    "san_decode_rows32": (*D["san_decode_rows32"], 0),
    "san_decode_split": (*D["san_decode_split"], 0),
    "g4_sq8_8k_causal": ((2, 16, 8, 128), (2, 4, 8192, 128), True, 0),
    "rows17_d64": ((1, 17, 1, 64), (1, 1, 4097, 64), False, 0),
    "g4_sq8_d64_causal": ((3, 8, 8, 64), (3, 2, 8193, 64), True, 0),
    "hkv1_g4_128k": ((1, 4, 1, 128), (1, 1, 131072, 128), False, 0),
    "hkv1_g2_40k_d64_causal": ((1, 2, 3, 64), (1, 1, 40000, 64), True, 0),
    "decode_b8_32k_mqa": (*D["decode_b8_32k_mqa"], 0),
    "decode_b1_32k": (*D["decode_b1_32k"], 0),
    "decode_b1_128k": (*D["decode_b1_128k"], 0),
    "rows64_d64_causal": ((1, 8, 16, 64), (1, 2, 1000, 64), True, 2),
    "g4_sq8_32k_causal": ((8, 32, 8, 128), (8, 8, 32768, 128), True, 0),
}
ACCURACY = ("mqa_2k", "san_decode_split", "hkv1_g4_128k", "hkv1_g2_40k_d64_causal", "g4_sq8_d64_causal")
TIMED = {n: D[n] for n in ("decode_b1_128k", "decode_b1_32k", "decode_b8_32k_mqa", "decode_b1_4k", "decode_b8_4k",
                           "decode_b8_32k", "decode_b8_32k_hq64")}
TIMED["b8_32k_g4_sq8"] = ((8, 32, 8, 128), (8, 8, 32768, 128), True)
TIMELINE = {
    "decode_b8_32k_mqa": "8,32,1,1,32768,128,0",
    "decode_b1_32k": "1,32,8,1,32768,128,0",
    "decode_b1_128k": "1,32,8,1,131072,128,0",
    "decode_b8_32k": "8,32,8,1,32768,128,0",
}
SCALES = (1 / 64, 1 / 64)


def e4m3(codes):
    c = codes.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0); e = (c >> 3) & 0xF; m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def reference(f, causal):
    q = np.load(f["q"]).astype(np.float64); k = e4m3(np.load(f["k"])) * SCALES[0]; v = e4m3(np.load(f["v"])) * SCALES[1]
    B, Hq, Sq, Dh = q.shape; Hkv, Skv = k.shape[1], k.shape[2]; G = Hq // Hkv
    o = np.empty_like(q)
    for b in range(B):
        for h in range(Hkv):
            qq = q[b, h * G:(h + 1) * G].reshape(G * Sq, Dh)
            s = qq @ k[b, h].T / np.sqrt(Dh)
            if causal:
                i = np.tile(np.arange(Sq), G)[:, None]; j = np.arange(Skv)[None, :]
                s = np.where(j <= i + Skv - Sq, s, -np.inf)
            s -= s.max(1, keepdims=True); p = np.exp(s); p /= p.sum(1, keepdims=True)
            o[b, h * G:(h + 1) * G] = (p @ v[b, h]).reshape(G, Sq, Dh)
    return o


def files_of(name, qs, kvs):
    folder = lab.tmp / name
    if (folder / "scales.npy").exists():
        return {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    return ab_kit.code_inputs(folder, qs, kvs, scales=SCALES)


def run(exe, f, causal, kernel, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, ["--precision", "fp16", "--kernel", kernel, *extra], out, timeout, pre)


exes = {k: lab.unpack(k) for k in RUNNERS}
one = ["--iters", "1", "--warmup", "0"]
for name, (qs, kvs, causal, split) in SAME.items():
    f = files_of(name, qs, kvs)
    outs = {}
    for k, exe in exes.items():
        r = run(exe, f, causal, "decode_sm89", [*one, "--split", str(split)], lab.tmp / f"o_{k}.npy")
        outs[k] = np.load(lab.tmp / f"o_{k}.npy") if r["rc"] == 0 else None
        lab.log({"step": "run", "case": name, "runner": k, "rc": r["rc"], "split": r["line"].get("split"),
                 "stderr": r.get("stderr", "")[-200:]})
    ok = {k: v is not None for k, v in outs.items()}
    eq = lambda a, b: ok[a] and ok[b] and np.array_equal(outs[a].view(np.uint16), outs[b].view(np.uint16))
    lab.log({"step": "same", "case": name, "split": split, **{f"{a}_vs_{b}": eq(a, b) for a, b in
             (("fe1", "mg1"),)}})
    if name in ACCURACY:
        ref = reference(f, causal)
        for k in ("mg1", "fe1"):
            if outs[k] is None:
                continue
            o = outs[k].astype(np.float64)
            lab.log({"step": "accuracy", "case": name, "runner": k,
                     "rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                     "max_abs_over_max_ref": float(np.abs(o - ref).max() / np.abs(ref).max())})
    if name.startswith("decode_"):
        shutil.rmtree(lab.tmp / name)
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
SAN = {"fe1": ("san_decode_split", "rows64_d64_causal")}
for k, cases in SAN.items():
    for name in cases:
        qs, kvs, causal, _ = SAME[name]
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            r = run(exes[k], files_of(name, qs, kvs), causal, "decode_sm89", [*one, "--timing", "hot"], lab.tmp / "o_san.npy",
                    timeout=150, pre=(san, "--tool", tool, "--error-exitcode", "3"))
            lab.log({"step": "sanitizer", "case": name, "tool": tool, "runner": k, "rc": r["rc"],
                     "tail": r.get("stdout", "")[-90:]})
f = files_of("mqa_2k", *SAME["mqa_2k"][:2])
r = run(exes["fe1"], f, False, "decode_sm89", [*one, "--soak", "300", "--streams", "4"], lab.tmp / "o_s.npy", timeout=120)
lab.log({"step": "soak", "case": "mqa_2k", "runner": "fe1", "rc": r["rc"],
         "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})


for name, (qs, kvs, causal) in TIMED.items():
    f = files_of(name, qs, kvs)
    for rnd in range(2):
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(["mg1", "fe1"], rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], f, causal, "auto", ["--iters", "40", "--warmup", "10", "--timing", mode], lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "split": r.get("line", {}).get("split"),
                         "p50_us": ab_kit.p50_us(r)})
    shutil.rmtree(lab.tmp / name)
lab.close()
