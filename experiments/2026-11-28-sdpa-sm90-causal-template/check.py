"""The Hopper SDPA kernels with the causal mask as a template argument (CaseTraits), on one GPU: is the square
non-causal case back to the speed of 90347d1, with the same output bits, and do the causal, GQA and Sq != Skv cases
still give the right answers?

Run on the GPU host from the folder holding the runners (README.md "Method"):
    python3 check.py            # results.json under $OUT

Runners (xz-unpacked beside this file by run.sh): sdpa_fp8_{cpasync,baseline} of this branch ("new"),
old_sdpa_fp8_{cpasync,baseline} of 90347d1 ("old": the kernels before the attention cases), cur_sdpa_fp8_cpasync of
c9a8daf ("cur": every kernel with the causal bookkeeping at run time). Each serves cases through --serve.

Sections, each written to $OUT/results.json as soon as it is done:
  timing:   the seven default square shapes, both tiers, cpasync: cold p50 (the runner's own samples_us: L2 flushed
            before each launch, 100 launches after 10 warm-up) of new and old in the order new old old new new old
            (three runs each; the median of a runner's three p50s, and new / old); every run's output bytes against
            the first new run's.
  checks:   causal (MHA, GQA, split, three-warpgroup, chunked), GQA / MQA without the mask, Sq > Skv: both tiers,
            new baseline and cpasync against float64 on the GPU (E4M3 decode as driver/reference/sdpa.py, query head
            h on K/V head h / G, the bottom-right mask) and against thresholds.toml's bounds for N(0, 1) inputs
            (fp16 tier rel_l2 <= 5.86e-4, max_abs_rel <= 1.76e-3; fp8 tier 0.0751, 0.225), baseline = cpasync = cur
            byte for byte; and --ablate with --causal refused with exit 2.
  causal_timing: three causal shapes, both tiers, new against cur (new cur cur new), cold p50.
  identity: square non-causal (2,4,S,D), both tiers: new baseline / cpasync = old baseline / cpasync byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import select
import shutil
import subprocess
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp/prefill2_out")
T0 = time.time()
BUDGET_S = float(os.environ.get("BUDGET_S", "130"))
DEV = torch.device(os.environ.get("CHECK_DEVICE", "cuda"))  # cpu: a dry run of this script against a fake runner
RESULTS: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

# thresholds.toml [sdpa.accuracy]: fp16 tier (every distribution), fp8 tier on `normal` (N(0, 1) inputs)
BOUNDS = {"fp16": {"rel_l2": 5.86e-4, "max_abs_rel": 1.76e-3}, "fp8": {"rel_l2": 0.0751, "max_abs_rel": 0.225}}
SQUARE = [(4, 32, 4096, 64), (2, 16, 2048, 128), (1, 16, 8192, 128), (2, 16, 2048, 64), (8, 8, 1024, 64),
          (1, 8, 512, 64), (3, 5, 777, 64)]
# (B, Hq, Hkv, Sq, Skv, D, causal)
CHECKS = [(2, 4, 4, 300, 300, 64, 1), (1, 8, 2, 128, 1000, 64, 1), (1, 8, 2, 512, 2048, 128, 1),
          (2, 16, 16, 2048, 2048, 64, 1), (2, 4, 4, 2048, 2048, 128, 1), (3, 12, 4, 129, 129, 128, 1),
          (1, 6, 2, 777, 777, 64, 1), (1, 8, 8, 1, 1, 64, 1), (1, 4, 1, 7, 8192, 128, 0), (1, 8, 2, 1000, 300, 64, 0),
          (2, 8, 2, 777, 777, 128, 0), (4, 32, 8, 512, 512, 64, 0)]
CAUSAL_TIMING = [(2, 16, 16, 2048, 2048, 128), (8, 8, 8, 1024, 1024, 64), (1, 32, 8, 512, 8192, 128)]
IDENTITY_S = [1, 7, 128, 300, 1000, 2048]
if DEV.type == "cpu":  # the dry run: the same sections on small cases (the fake runner computes in numpy)
    SQUARE = [(1, 2, 300, 64), (1, 2, 129, 128)]
    CHECKS = [c for c in CHECKS if c[0] * c[1] * c[3] * c[4] <= 8 << 20]
    CAUSAL_TIMING = [(1, 4, 2, 100, 400, 64)]
    IDENTITY_S = [1, 7, 300]


def left_s() -> float:
    return BUDGET_S - (time.time() - T0)


def save() -> None:
    os.makedirs(OUT, exist_ok=True)
    RESULTS["elapsed_s"] = round(time.time() - T0, 1)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


def scratch_dir() -> str:
    base = "/dev/shm" if shutil.disk_usage("/dev/shm").free > 2 << 30 else "/tmp"
    d = os.path.join(base, "prefill2_cases")
    os.makedirs(d, exist_ok=True)
    return d


TMP = scratch_dir()


def _decode_table() -> torch.Tensor:
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    val = sign * np.where(exp == 0, (man / 8.0) * 2.0**-6, (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0))
    val[(codes & 0x7F) == 0x7F] = np.nan
    return torch.from_numpy(val).to(DEV)


DECODE = _decode_table()


def encode(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per-tensor scale amax / 448 (float32) and the E4M3 codes of x / scale (the `normal` inputs' recipe)."""
    amax = float(x.abs().max())
    scale = float(np.float32(amax / 448.0)) if amax > 0 else 1.0
    return (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8), scale


def make_case(B, Hq, Hkv, Sq, Skv, D, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn((B, Hq, Sq, D), generator=g, device=DEV, dtype=torch.float32).half()
    k, ks = encode(torch.randn((B, Hkv, Skv, D), generator=g, device=DEV, dtype=torch.float32))
    v, vs = encode(torch.randn((B, Hkv, Skv, D), generator=g, device=DEV, dtype=torch.float32))
    return q, k, v, ks, vs


def write_case(tag, q, k, v, ks, vs) -> dict:
    paths = {n: os.path.join(TMP, f"{tag}_{n}.npy") for n in ("q", "k", "v", "s")}
    np.save(paths["q"], q.cpu().numpy())
    np.save(paths["k"], k.cpu().numpy())
    np.save(paths["v"], v.cpu().numpy())
    np.save(paths["s"], np.array([ks, vs], dtype=np.float32))
    return paths


def reference(q, k, v, ks, vs, causal) -> torch.Tensor:
    """float64 softmax(Q K^T / sqrt(D) + mask) V, query head h on K/V head h / G, the mask bottom-right."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    out = torch.empty((B, Hq, Sq, D), dtype=torch.float64, device=DEV)
    for b in range(B):
        for hk in range(Hkv):
            kk = DECODE[k[b, hk].long()] * ks
            vv = DECODE[v[b, hk].long()] * vs
            s = (q[b, hk * G:(hk + 1) * G].double() / math.sqrt(D)) @ kk.T
            if causal:
                i = torch.arange(Sq, device=DEV)[:, None]
                j = torch.arange(Skv, device=DEV)[None, :]
                s.masked_fill_(j > i + (Skv - Sq), float("-inf"))
            out[b, hk * G:(hk + 1) * G] = torch.softmax(s, dim=-1) @ vv
    return out


def errors(out16: np.ndarray, ref: torch.Tensor) -> dict:
    o = torch.from_numpy(out16).to(DEV).double()
    err = o - ref
    return {"max_abs": float(err.abs().max()), "rel_l2": float(err.norm() / ref.norm()),
            "max_abs_rel": float(err.abs().max() / ref.abs().max()), "nan": int(torch.isnan(o).sum())}


class Worker:
    """One `--serve` process: cases on stdin (tab-separated arguments), the result line and a worker_end line out."""

    def __init__(self, exe: str):
        self.exe = exe
        self.start()

    def start(self):
        self.err = open(os.path.join(TMP, os.path.basename(self.exe) + ".stderr"), "a")  # noqa: SIM115 (the worker's)
        self.proc = subprocess.Popen([self.exe, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, bufsize=0)
        self.buf = b""
        line = self._line(60)
        assert line and json.loads(line).get("worker_ready"), line

    def _line(self, timeout: float):
        end = time.time() + timeout
        while b"\n" not in self.buf:
            r, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.time()))
            if not r:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def run(self, args: list[str], timeout: float = 60.0):
        """(result dict or None, rc, error)."""
        self.proc.stdin.write(("\t".join(args) + "\n").encode())
        self.proc.stdin.flush()
        result = None
        while True:
            line = self._line(timeout)
            if line is None:  # hung or died
                self.proc.kill()
                self.proc.wait()
                self.start()
                return None, -1, f"no answer within {timeout} s (worker killed)"
            d = json.loads(line)
            if d.get("worker_end"):
                if d["rc"] in (3, 4):
                    self.proc.wait()
                    self.start()
                return result, d["rc"], d["error"]
            result = d


def case_args(p, out, precision, causal, iters=1, warmup=0, extra=()):
    a = ["--q", p["q"], "--k", p["k"], "--v", p["v"], "--scales", p["s"], "--out", out, "--iters", str(iters),
         "--warmup", str(warmup), "--precision", precision,
         "--kernel", "wgmma_fp8_sm90" if precision == "fp8" else "wgmma_sm90", *extra]
    return a + (["--causal"] if causal else [])


def p50(xs):
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def timed_runs(w_new, w_ref, p, prec, causal, order, tag):
    """Cold p50 of each run in `order` ("n" new, "r" the reference runner); the outputs' sha256 per run."""
    row = {"new_p50s": [], "ref_p50s": [], "sha": []}
    for who in order:
        w = w_new if who == "n" else w_ref
        o = os.path.join(TMP, f"{tag}_out.npy")
        r, rc, err = w.run(case_args(p, o, prec, causal, 100, 10), 60)
        if r is None:
            row.setdefault("errors", []).append(f"{who}: rc {rc}: {err}")
            continue
        row["new_p50s" if who == "n" else "ref_p50s"].append(p50(r["samples_us"]))
        row["sha"].append((who, sha(o)))
        row[("new" if who == "n" else "ref") + "_grid_block"] = [r["grid"][0], r["block"][0]]
        row["overruns"] = row.get("overruns", 0) + r.get("hold_overruns", 0)
    if row["new_p50s"] and row["ref_p50s"]:
        row["new_us"], row["ref_us"] = p50(row["new_p50s"]), p50(row["ref_p50s"])
        row["new_over_ref"] = row["new_us"] / row["ref_us"]
    row["outputs_identical"] = len({s for _, s in row["sha"]}) == 1 and len(row["sha"]) == len(order)
    row["sha"] = sorted({s for _, s in row["sha"]})
    return row


def section_timing(new_c, old_c):
    res = []
    RESULTS["timing"] = res
    for B, H, S, D in SQUARE:
        if left_s() < 60:
            RESULTS["timing_stopped"] = f"out of time before {(B, H, S, D)}"
            break
        q, k, v, ks, vs = make_case(B, H, H, S, S, D, 1)
        p = write_case("t", q, k, v, ks, vs)
        for prec in ("fp16", "fp8"):
            row = {"shape": [B, H, S, D], "precision": prec,
                   **timed_runs(new_c, old_c, p, prec, False, "nronnr", "t")}
            res.append(row)
            print(json.dumps(row), flush=True)
            save()
        for f in p.values():
            os.remove(f)
        if DEV.type == "cuda":
            torch.cuda.empty_cache()


def section_checks(new_b, new_c, cur_c):
    res = []
    RESULTS["checks"] = res
    for n, (B, Hq, Hkv, Sq, Skv, D, causal) in enumerate(CHECKS):
        if left_s() < 35:
            RESULTS["checks_stopped"] = f"out of time before {CHECKS[n]}"
            break
        q, k, v, ks, vs = make_case(B, Hq, Hkv, Sq, Skv, D, 100 + n)
        p = write_case("c", q, k, v, ks, vs)
        ref = reference(q, k, v, ks, vs, causal)
        for prec in ("fp16", "fp8"):
            row = {"q_shape": [B, Hq, Sq, D], "kv_shape": [B, Hkv, Skv, D], "causal": bool(causal), "precision": prec}
            outs = {}
            for name, w in (("baseline", new_b), ("cpasync", new_c), ("cur_cpasync", cur_c)):
                o = os.path.join(TMP, f"c_{name}.npy")
                r, rc, err = w.run(case_args(p, o, prec, causal), 30)
                if r is None:
                    row[name + "_error"] = f"rc {rc}: {err}"
                    continue
                arr = np.load(o)
                outs[name] = arr.tobytes()
                if name != "cur_cpasync":
                    row[name] = errors(arr, ref)
                    row[name]["within_bounds"] = (row[name]["nan"] == 0 and
                                                  row[name]["rel_l2"] <= BOUNDS[prec]["rel_l2"] and
                                                  row[name]["max_abs_rel"] <= BOUNDS[prec]["max_abs_rel"])
                    row[name + "_grid_block"] = [r["grid"][0], r["block"][0]]
            row["baseline_eq_cpasync"] = "baseline" in outs and outs.get("baseline") == outs.get("cpasync")
            row["cpasync_eq_cur"] = "cpasync" in outs and outs.get("cpasync") == outs.get("cur_cpasync")
            res.append(row)
            print(json.dumps(row), flush=True)
        for f in p.values():
            os.remove(f)
        save()
    # --ablate with --causal: refused before any launch (exit 2, one line)
    q, k, v, ks, vs = make_case(1, 4, 4, 128, 128, 64, 9)
    p = write_case("a", q, k, v, ks, vs)
    r, rc, err = new_c.run(case_args(p, os.path.join(TMP, "a_out.npy"), "fp16", True, extra=("--ablate", "no_loads")))
    RESULTS["ablate_causal"] = {"rc": rc, "error": err, "result": r}
    r, rc, err = new_c.run(case_args(p, os.path.join(TMP, "a_out.npy"), "fp16", False, extra=("--ablate", "no_loads")))
    RESULTS["ablate_noncausal"] = {"rc": rc, "error": err, "ablate": (r or {}).get("ablate")}
    save()


def section_causal_timing(new_c, cur_c):
    res = []
    RESULTS["causal_timing"] = res
    for B, Hq, Hkv, Sq, Skv, D in CAUSAL_TIMING:
        if left_s() < 20:
            RESULTS["causal_timing_stopped"] = f"out of time before {(B, Hq, Hkv, Sq, Skv, D)}"
            break
        q, k, v, ks, vs = make_case(B, Hq, Hkv, Sq, Skv, D, 2)
        p = write_case("ct", q, k, v, ks, vs)
        for prec in ("fp16", "fp8"):
            row = {"q_shape": [B, Hq, Sq, D], "kv_shape": [B, Hkv, Skv, D], "precision": prec,
                   **timed_runs(new_c, cur_c, p, prec, True, "nrrn", "ct")}
            res.append(row)
            print(json.dumps(row), flush=True)
        for f in p.values():
            os.remove(f)
        save()


def section_identity(new_b, new_c, old_b, old_c):
    res = []
    RESULTS["identity"] = res
    for D in (64, 128):
        for S in IDENTITY_S:
            if left_s() < 5:
                RESULTS["identity_stopped"] = f"out of time before {(2, 4, S, D)}"
                return
            q, k, v, ks, vs = make_case(2, 4, 4, S, S, D, 7)
            p = write_case("i", q, k, v, ks, vs)
            for prec in ("fp16", "fp8"):
                outs = {}
                for name, w in (("new_baseline", new_b), ("new_cpasync", new_c), ("old_baseline", old_b),
                                ("old_cpasync", old_c)):
                    o = os.path.join(TMP, f"i_{name}.npy")
                    r, rc, err = w.run(case_args(p, o, prec, False), 15)
                    outs[name] = sha(o) if r is not None else f"rc {rc}: {err}"
                ok = all(not x.startswith("rc ") for x in outs.values())
                res.append({"shape": [2, 4, S, D], "precision": prec, "identical": ok and len(set(outs.values())) == 1,
                            **{n: x for n, x in outs.items() if x.startswith("rc ")}})
    save()


def main():
    if DEV.type == "cuda":
        RESULTS["device"] = torch.cuda.get_device_name(0)
        RESULTS["sms"] = torch.cuda.get_device_properties(0).multi_processor_count
    RESULTS["torch"] = torch.__version__
    names = ("sdpa_fp8_cpasync", "sdpa_fp8_baseline", "old_sdpa_fp8_cpasync", "old_sdpa_fp8_baseline",
             "cur_sdpa_fp8_cpasync")
    RESULTS["sha256"] = {n: sha(os.path.join(HERE, n)) for n in names}
    new_c, new_b, old_c, old_b, cur_c = (Worker(os.path.join(HERE, n)) for n in names)
    for name in os.environ.get("SECTIONS", "timing,checks,causal_timing,identity").split(","):
        t = time.time()
        try:
            if name == "timing":
                section_timing(new_c, old_c)
            elif name == "checks":
                section_checks(new_b, new_c, cur_c)
            elif name == "causal_timing":
                section_causal_timing(new_c, cur_c)
            elif name == "identity":
                section_identity(new_b, new_c, old_b, old_c)
        except Exception:  # noqa: BLE001 (the section's failure is a result, with its traceback)
            import traceback
            RESULTS[f"{name}_exception"] = traceback.format_exc()
            print(RESULTS[f"{name}_exception"], flush=True)
        RESULTS[f"{name}_s"] = round(time.time() - t, 1)
        save()
    # one line per question
    t = RESULTS.get("timing", [])
    RESULTS["summary"] = {
        "square_new_over_old": {f"{r['precision']} {tuple(r['shape'])}": round(r.get("new_over_ref", float("nan")), 4)
                                for r in t},
        "square_outputs_identical": all(r["outputs_identical"] for r in t) and len(t) == 2 * len(SQUARE),
        "checks_within_bounds": all(r.get(v, {}).get("within_bounds") for r in RESULTS.get("checks", [])
                                    for v in ("baseline", "cpasync")) and len(RESULTS.get("checks", [])) == 2 * len(CHECKS),
        "checks_baseline_eq_cpasync_eq_cur": all(r["baseline_eq_cpasync"] and r["cpasync_eq_cur"]
                                                 for r in RESULTS.get("checks", [])),
        "ablate_causal_refused": RESULTS.get("ablate_causal", {}).get("rc") == 2,
        "causal_new_over_cur": {f"{r['precision']} {tuple(r['q_shape'])}/{tuple(r['kv_shape'])}":
                                round(r.get("new_over_ref", float("nan")), 4) for r in RESULTS.get("causal_timing", [])},
        "identity_all": all(r["identical"] for r in RESULTS.get("identity", [])) and
                        len(RESULTS.get("identity", [])) == 4 * len(IDENTITY_S),
    }
    save()
    print(json.dumps(RESULTS["summary"], indent=1), flush=True)


if __name__ == "__main__":
    main()
