"""The decode kernel's fp16 tier with two 16-row tiles per warp at 17-32 rows per K/V head (plan.h row_tiles_for) against
main's two warps of one tile: outputs byte for byte at forced chunk counts (the variants; main where the summation order is
main's), error against float64 under --kernel auto, a 4-stream soak, compute-sanitizer memcheck / racecheck / synccheck / initcheck, then cold and hot p50
under --kernel auto, 3 rounds, the runners alternating.
Runners in $BIN (xz): main1 main0 (main, cpasync / baseline), rt1 rt0 (this change).
  python3 ab.py     (results under $OUT/ab.jsonl)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("rt2", 420)
RUNNERS = ("main1", "main0", "rt1", "rt0")
# name: (q_shape, kv_shape, causal, forced --split): 17-32 rows per K/V head
SAME = {
    "mqa_2k": ((2, 32, 1, 128), (2, 1, 2048, 128), False, 4),
    "san_decode_rows32": ((1, 32, 1, 128), (1, 1, 2000, 128), False, 2),
    "g8_sq4_causal": ((2, 16, 4, 128), (2, 2, 1000, 128), True, 2),
    "g5_sq4_rows20_causal": ((1, 10, 4, 128), (1, 2, 777, 128), True, 2),
    "rows17_d64": ((1, 17, 1, 64), (1, 1, 4097, 64), False, 4),
    "g4_sq8_d64_causal_one_chunk": ((3, 8, 8, 64), (3, 2, 513, 64), True, 1),
    "decode_b8_32k_mqa": ((8, 32, 1, 128), (8, 1, 32768, 128), False, 4),
}
ACCURACY = tuple(SAME)
TIMED = {
    "decode_b8_32k_mqa": ((8, 32, 1, 128), (8, 1, 32768, 128), False),
    "b1_32k_mqa": ((1, 32, 1, 128), (1, 1, 32768, 128), False),
    "b8_4k_mqa": ((8, 32, 1, 128), (8, 1, 4096, 128), False),
    "b8_32k_g4_sq8": ((8, 32, 8, 128), (8, 8, 32768, 128), True),
    "b8_32k_g8_sq4": ((8, 64, 4, 128), (8, 8, 32768, 128), True),
    "decode_b8_32k": ((8, 32, 1, 128), (8, 8, 32768, 128), False),  # 4 rows: the same kernel in both (control)
}
SCALES = (1 / 64, 1 / 64)


def e4m3(codes):
    c = codes.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0); e = (c >> 3) & 0xF; m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def reference(f, causal):
    q = np.load(f["q"]).astype(np.float64); k = e4m3(np.load(f["k"])) * SCALES[0]; v = e4m3(np.load(f["v"])) * SCALES[1]
    B, Hq, Sq, D = q.shape; Hkv, Skv = k.shape[1], k.shape[2]; G = Hq // Hkv
    o = np.empty_like(q)
    for b in range(B):
        for h in range(Hkv):
            qq = q[b, h * G:(h + 1) * G].reshape(G * Sq, D)
            s = qq @ k[b, h].T / np.sqrt(D)
            if causal:
                i = np.tile(np.arange(Sq), G)[:, None]; j = np.arange(Skv)[None, :]
                s = np.where(j <= i + Skv - Sq, s, -np.inf)
            s -= s.max(1, keepdims=True); p = np.exp(s); p /= p.sum(1, keepdims=True)
            o[b, h * G:(h + 1) * G] = (p @ v[b, h]).reshape(G, Sq, D)
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
    lab.log({"step": "same", "case": name, "split": split, "rt1_vs_main1": eq("rt1", "main1"), "rt0_vs_rt1": eq("rt0", "rt1"),
             "main0_vs_main1": eq("main0", "main1")})
for name in ACCURACY:
    qs, kvs, causal, _ = SAME[name]
    f = files_of(name, qs, kvs)
    ref = reference(f, causal)
    for k in ("main1", "rt1"):
        r = run(exes[k], f, causal, "auto", one, lab.tmp / "o_a.npy")
        o = np.load(lab.tmp / "o_a.npy").astype(np.float64) if r["rc"] == 0 else None
        err = {} if o is None else {"rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                                    "max_abs_over_max_ref": float(np.abs(o - ref).max() / np.abs(ref).max())}
        lab.log({"step": "accuracy", "case": name, "runner": k, "rc": r["rc"], "kernel": r["line"].get("kernel"),
                 "split": r["line"].get("split"), **err})
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for k in ("rt1", "rt0"):
    f = files_of("decode_b8_32k_mqa", *SAME["decode_b8_32k_mqa"][:2])
    r = run(exes[k], f, False, "decode_sm89", [*one, "--soak", "300", "--streams", "4"], lab.tmp / "o_s.npy", timeout=120)
    lab.log({"step": "soak", "case": "decode_b8_32k_mqa", "runner": k, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    for name in ("san_decode_rows32", "g5_sq4_rows20_causal", "rows17_d64"):
        qs, kvs, causal, _ = SAME[name]
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            r = run(exes[k], files_of(name, qs, kvs), causal, "decode_sm89", [*one, "--timing", "hot"], lab.tmp / "o_san.npy",
                    timeout=150, pre=(san, "--tool", tool, "--error-exitcode", "3"))
            lab.log({"step": "sanitizer", "case": name, "tool": tool, "runner": k, "rc": r["rc"],
                     "tail": r.get("stdout", "")[-90:]})
tfiles = {n: files_of(n, qs, kvs) for n, (qs, kvs, _) in TIMED.items()}
for rnd in range(3):
    for name, (_, _, causal) in TIMED.items():
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(["main1", "rt1"], rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], tfiles[name], causal, "auto", ["--iters", "50", "--warmup", "10", "--timing", mode],
                        lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "split": r.get("line", {}).get("split"),
                         "p50_us": ab_kit.p50_us(r)})
lab.close()
