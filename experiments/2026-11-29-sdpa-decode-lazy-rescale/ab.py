"""The fp16 tier's decode kernel with the conditional rescale (SDPA_DECODE_LAZY_RESCALE=1: a warp moves its rows'
reference max only when a tile's max exceeds it by more than 2^8) against main's (every tile): error against a float64
reference of the same E4M3 codes at three inputs (random codes; q with std 8, large logits; late sinks, a key in the
last tile that every query scores about 10 above the rest), both runners; determinism across 3 launches; a 4-stream soak;
compute-sanitizer memcheck / racecheck / synccheck; then cold and hot p50 under --kernel auto (the decode kernel at
these cases), 3 rounds, the runners alternating.
Runners in $BIN (xz), named on the command line: the first is the reference runner.
  python3 ab.py main lz1     (results under $OUT/ab.jsonl)
(As run, the helpers of ../ab_kit.py were this script's own; the same code.)"""
import pathlib, shutil, sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("lz", 400)
CASES = {n: c for n, c in ab_kit.DECODE_CASES.items() if n not in ('decode_b8_32k_hq64',)}  # the presets but hq64
ACCURACY = ("decode_b8_32k_mqa", "decode_b1_32k", "decode_b8_32k_sq4", "san_decode_rows64_d64")
TIMED = ("decode_b8_32k_mqa", "decode_b1_4k", "decode_b1_32k", "decode_b1_128k", "decode_b8_4k", "decode_b8_32k",
         "decode_b8_32k_sq4")
SCALES = (1 / 64, 1 / 64)


def e4m3(codes):  # E4M3 code -> value (no NaN codes are made here)
    c = codes.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0); e = (c >> 3) & 0xF; m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def late_sinks(qs, kvs):
    """A shared direction u per K/V head in its queries (+4 u), and two keys along it (15/64 u): one in the middle,
    one last; their scores about 10 above the rest (e^10)."""
    def edit(q, k, v, rng):
        G = qs[1] // kvs[1]
        for b in range(kvs[0]):
            for h in range(kvs[1]):
                u = rng.integers(0, 2, size=qs[3]) * 2 - 1
                q[b, h * G:(h + 1) * G] += 4.0 * u
                code = np.where(u > 0, 0x57, 0xD7).astype(np.uint8)
                k[b, h, -1] = code; k[b, h, kvs[2] // 2] = code
    return edit


def make(name, qs, kvs, dist):
    folder = lab.tmp / f"{name}_{dist}"
    if (folder / "scales.npy").exists():
        return {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    edit = {"codes": None, "large_logits": lambda q, k, v, rng: q.__imul__(8.0), "late_sinks": late_sinks(qs, kvs)}[dist]
    return ab_kit.code_inputs(folder, qs, kvs, scales=SCALES, edit=edit)


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


def run(exe, f, causal, kernel, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, ["--precision", "fp16", "--kernel", kernel, *extra], out, timeout, pre)


names = sys.argv[1:] or ["main", "lz1"]
exes = {k: lab.unpack(k) for k in names}
for name in ACCURACY:
    qs, kvs, causal = CASES[name]
    for dist in ("codes", "large_logits", "late_sinks"):
        f = make(name, qs, kvs, dist)
        ref = reference(f, causal)
        for k, exe in exes.items():
            outs = []
            for rep in range(3):
                r = run(exe, f, causal, "decode_sm89", ["--iters", "1", "--warmup", "0"], lab.tmp / f"o_{k}_{rep}.npy")
                outs.append(np.load(lab.tmp / f"o_{k}_{rep}.npy").astype(np.float64) if r["rc"] == 0 else None)
            o = outs[0]
            same = all(x is not None and np.array_equal(x, o) for x in outs)
            err = {} if o is None else {"rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                                        "max_abs_over_max_ref": float(np.abs(o - ref).max() / np.abs(ref).max()),
                                        "finite": bool(np.isfinite(o).all())}
            lab.log({"step": "accuracy", "case": name, "dist": dist, "runner": k, "rc": r["rc"], "deterministic": same, **err})
files = {n: make(n, qs, kvs, "codes") for n, (qs, kvs, _) in CASES.items()}
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for k in names[1:]:
    r = run(exes[k], files["decode_b8_32k_mqa"], False, "decode_sm89", ["--iters", "1", "--warmup", "0", "--soak", "300",
            "--streams", "4"], lab.tmp / "o_s.npy", timeout=90)
    lab.log({"step": "soak", "case": "decode_b8_32k_mqa", "runner": k, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
    for name in ("san_decode_split", "san_decode_rows32", "san_decode_rows64_d64"):
        for tool in ("memcheck", "racecheck", "synccheck"):
            r = run(exes[k], files[name], CASES[name][2], "decode_sm89", ["--iters", "1", "--warmup", "0", "--timing", "hot"],
                    lab.tmp / "o_san.npy", timeout=120, pre=(san, "--tool", tool, "--error-exitcode", "3"))
            lab.log({"step": "sanitizer", "case": name, "tool": tool, "runner": k, "rc": r["rc"], "tail": r.get("stdout", "")[-90:]})
for rnd in range(3):
    for name in TIMED:
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(names, rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], files[name], CASES[name][2], "auto", ["--iters", "50", "--warmup", "10", "--timing", mode],
                        lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "p50_us": ab_kit.p50_us(r)})
lab.close()
