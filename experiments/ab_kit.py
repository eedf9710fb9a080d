"""What the runner A/B scripts of the experiments share (since 2026-11-29): a results file and a time budget, runners
unpacked from xz, inputs of random E4M3 codes, one runner launch and its JSON line, and the runners' alternating order.
A script next to its experiment's README imports it as `sys.path.insert(0, <experiments/>); import ab_kit`; it runs on
a GPU host with the bundle's python (numpy only, no driver: the lab stays apart from what it measures)."""

import json
import lzma
import os
import pathlib
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
