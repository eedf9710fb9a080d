"""What the runner A/B scripts of the experiments share (since 2026-11-29): a results file and a time budget, runners
unpacked from xz, inputs of random E4M3 codes, one runner launch and its JSON line, and the runners' alternating order.
A script next to its experiment's README imports it as `sys.path.insert(0, <experiments/>); import ab_kit`; it runs on
a GPU host with the bundle's python (numpy only, no driver: the lab stays apart from what it measures)."""

import json
import lzma
import os
import pathlib
import shutil
import subprocess
import time

import numpy as np


# Issue 50's decode presets and the decode sanitizer cases (driver/config.py's SDPA_CASES of the same names), as
# name: (q_shape [B, Hq, Sq, D], kv_shape [B, Hkv, Skv, D], causal).
DECODE_CASES = {
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

# 64 query rows per K/V head (the key chunks under --kernel auto in both tiers), as name: (q_shape, kv_shape, causal).
ROWS64_CASES = {
    "decode_b8_32k_sq16": ((8, 32, 16, 128), (8, 8, 32768, 128), True),
    "b64_sq16_4k": ((64, 32, 16, 128), (64, 8, 4096, 128), True),
    "b8_sq16_4k": ((8, 32, 16, 128), (8, 8, 4096, 128), True),
    "b1_sq16_32k": ((1, 32, 16, 128), (1, 8, 32768, 128), True),
    "b8_g8_sq8_32k": ((8, 64, 8, 128), (8, 8, 32768, 128), False),
}


class Lab:
    """$OUT/<results> (JSON lines, each also printed), a scratch folder, and the budget $AB_BUDGET_S."""

    def __init__(self, scratch: str, budget_s: float, results: str = "ab.jsonl"):
        self.out = pathlib.Path(os.environ.get("OUT", f"/tmp/{scratch}_out"))
        self.out.mkdir(parents=True, exist_ok=True)
        self.tmp = pathlib.Path(f"/tmp/{scratch}")
        self.tmp.mkdir(exist_ok=True)
        self.res = open(self.out / results, "w")
        self.t0, self.budget_s = time.time(), float(os.environ.get("AB_BUDGET_S", str(budget_s)))

    def log(self, rec: dict) -> None:
        self.res.write(json.dumps(rec) + "\n")
        self.res.flush()
        print(json.dumps(rec), flush=True)

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.budget_s

    def unpack(self, stem: str) -> pathlib.Path:
        return unpack(self.tmp, stem)

    def close(self) -> None:
        self.res.close()


def unpack(folder: pathlib.Path, stem: str) -> pathlib.Path:
    """Runner `stem` from $BIN/stem.xz (default bin/), unpacked once into folder."""
    p = folder / stem
    if not p.exists():
        p.write_bytes(lzma.decompress((pathlib.Path(os.environ.get("BIN", "bin")) / f"{stem}.xz").read_bytes()))
        p.chmod(0o755)
    return p


def code_inputs(folder: pathlib.Path, q_shape, kv_shape, *, seed: int = 0, scales=(1 / 64, 1 / 64), edit=None) -> dict:
    """q.npy, k.npy, v.npy, scales.npy in folder: Q ~ N(0, 1) fp16; K and V random E4M3 codes below 16 in magnitude
    (0x00-0x57, either sign); edit(q, k, v, rng) may change them first (q float32)."""
    folder.mkdir(exist_ok=True)
    f = {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(q_shape, dtype=np.float32)
    kv = [rng.integers(0, 0x58, size=kv_shape, dtype=np.uint8) | (rng.integers(0, 2, size=kv_shape, dtype=np.uint8) << 7)
          for _ in "kv"]
    if edit is not None:
        edit(q, kv[0], kv[1], rng)
    np.save(f["q"], q.astype(np.float16))
    np.save(f["k"], kv[0])
    np.save(f["v"], kv[1])
    np.save(f["scales"], np.array(scales, dtype=np.float32))
    return f


def e4m3_values(codes) -> np.ndarray:
    """E4M3 codes (uint8 array) as the float64 values they stand for (finite codes: code_inputs makes no NaN)."""
    c = codes.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def reference(files: dict, causal: bool) -> np.ndarray:
    """The float64 attention of code_inputs' files: Q [B, Hq, Sq, D], K and V [B, Hkv, Skv, D] (codes times the
    scales of scales.npy), the query heads of a K/V head together, the bottom-right causal mask (row i of Sq sees keys
    j <= i + Skv - Sq)."""
    sc = np.load(files["scales"]).astype(np.float64)
    q = np.load(files["q"]).astype(np.float64)
    k, v = e4m3_values(np.load(files["k"])) * sc[0], e4m3_values(np.load(files["v"])) * sc[1]
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    o = np.empty_like(q)
    for b in range(B):
        for h in range(Hkv):
            qq = q[b, h * G:(h + 1) * G].reshape(G * Sq, D)
            s = qq @ k[b, h].T / np.sqrt(D)
            if causal:
                i = np.tile(np.arange(Sq), G)[:, None]
                j = np.arange(Skv)[None, :]
                s = np.where(j <= i + Skv - Sq, s, -np.inf)
            s -= s.max(1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(1, keepdims=True)
            o[b, h * G:(h + 1) * G] = (pr @ v[b, h]).reshape(G, Sq, D)
    return o


def launch(exe, files: dict, causal: bool, args, out, timeout: float = 60, pre=()) -> dict:
    """One runner launch: {"rc", "line" (its JSON line), "stdout", "stderr"} (tails), or {"rc": "timeout"}."""
    cmd = [*pre, str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))], "--out",
           str(out), *(["--causal"] if causal else []), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
    return {"rc": p.returncode, "line": line, "stdout": p.stdout[-400:], "stderr": p.stderr[-300:]}


def p50_us(result: dict) -> float:
    """The launch's p50 (NaN without samples)."""
    s = sorted(result.get("line", {}).get("samples_us") or [float("nan")])
    return s[len(s) // 2]


def in_turn(names: list[str], rnd: int) -> list[str]:
    """The runners in round rnd's order: as given in even rounds, reversed in odd ones."""
    return list(names) if rnd % 2 == 0 else list(names)[::-1]


# ---- the steps of a decode-kernel A/B (since 2026-11-29: experiments/2026-11-29-sdpa-decode-block-timeline's scripts),
# each logged to the lab as one line per launch and one per result.  Runners take the fp16 tier.
SANITIZERS = ("memcheck", "racecheck", "synccheck", "initcheck")
ONE = ["--iters", "1", "--warmup", "0"]


def decode_files(lab: Lab, name: str, q_shape, kv_shape) -> dict:
    """code_inputs' files for a case, made once in the lab's scratch folder."""
    folder = lab.tmp / name
    if (folder / "scales.npy").exists():
        return {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    return code_inputs(folder, q_shape, kv_shape)


def fp16_launch(exe, files: dict, causal: bool, kernel: str, extra, out, timeout: float = 60, pre=()) -> dict:
    return launch(exe, files, causal, ["--precision", "fp16", "--kernel", kernel, *extra], out, timeout, pre)


def same_outputs(lab: Lab, exes: dict, name: str, files: dict, causal: bool, split: int, pairs) -> dict:
    """Every runner once on the decode kernel with --split split; logs each launch and whether each pair's outputs are
    equal bit for bit; returns the outputs (None where a runner failed)."""
    outs = {}
    for k, exe in exes.items():
        r = fp16_launch(exe, files, causal, "decode_sm89", [*ONE, "--split", str(split)], lab.tmp / f"o_{k}.npy")
        outs[k] = np.load(lab.tmp / f"o_{k}.npy") if r["rc"] == 0 else None
        lab.log({"step": "run", "case": name, "runner": k, "rc": r["rc"], "split": r["line"].get("split"),
                 "stderr": r.get("stderr", "")[-200:]})

    def eq(a, b):
        return outs[a] is not None and outs[b] is not None and np.array_equal(outs[a].view(np.uint16), outs[b].view(np.uint16))

    lab.log({"step": "same", "case": name, "split": split, **{f"{a}_vs_{b}": eq(a, b) for a, b in pairs}})
    return outs


def sanitize(lab: Lab, runner: str, exe, name: str, files: dict, causal: bool) -> None:
    """The four compute-sanitizer tools on one case (hot timing, one launch per sample)."""
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    for tool in SANITIZERS:
        r = fp16_launch(exe, files, causal, "decode_sm89", [*ONE, "--timing", "hot"], lab.tmp / "o_san.npy",
                        timeout=150, pre=(san, "--tool", tool, "--error-exitcode", "3"))
        lab.log({"step": "sanitizer", "case": name, "tool": tool, "runner": runner, "rc": r["rc"],
                 "tail": r.get("stdout", "")[-90:]})


def soak(lab: Lab, runner: str, exe, name: str, files: dict) -> None:
    """300 launches on 4 streams, each output compared with the first."""
    r = fp16_launch(exe, files, False, "decode_sm89", [*ONE, "--soak", "300", "--streams", "4"], lab.tmp / "o_s.npy",
                    timeout=120)
    lab.log({"step": "soak", "case": name, "runner": runner, "rc": r["rc"],
             "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})


def timeline(lab: Lab, cases: dict) -> None:
    """The lab's `timeline` runner (its kernel built with the trace patch), 30 cold launches per case, into
    $OUT/timeline.jsonl.  cases: name -> "B,Hq,Hkv,Sq,Skv,D,causal"."""
    tl = lab.unpack("timeline")
    with open(lab.out / "timeline.jsonl", "w") as fh:
        p = subprocess.run([str(tl), "30", *[f"{n}:{c}" for n, c in cases.items()]], stdout=fh, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    lab.log({"step": "timeline", "rc": p.returncode, "stderr": p.stderr[-300:]})


def time_in_turn(lab: Lab, exes: dict, runners, name: str, files: dict, causal: bool) -> bool:
    """Cold and hot p50 under --kernel auto (--iters 40), 2 rounds, the runners in turn; False once over budget."""
    for rnd in range(2):
        for mode in ("cold", "hot"):
            for k in in_turn(runners, rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"})
                    return False
                r = fp16_launch(exes[k], files, causal, "auto", ["--iters", "40", "--warmup", "10", "--timing", mode],
                                lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "split": r.get("line", {}).get("split"),
                         "p50_us": p50_us(r)})
    return True
