#!/usr/bin/env python3
"""Three probes of what keeps the fp8 tier behind cuDNN FP8 at head dim 128 after the 24-register producer
(experiments/2026-11-29-sdpa-fp8-producer24), against today's build and cuDNN FP8, in one call on one GPU.

Runners (in bin/, xz-compressed), built side by side from the same sources (build.sh):
  base    the default build (select_config's rule with the 256-key kernel; SASS of 1fafc7e, whose kernels main has)
  rs0     -DSDPA_SM90_ROWSUM_MMA=0: the row sums with FADD on the probabilities, as cuDNN FP8 does, instead of
          BN/32 m64n8k32 wgmma per tile (ours ran 1.67x cuDNN's QGMMA)
  hint    -DSDPA_SM90_MBAR_SUSPEND_NS=1000000: every mbarrier wait with try_wait's suspend-time hint (ours ran 2.3x
          cuDNN's SYNCS and 3x its branches: polling)
  p24all  -DSDPA_SM90_PRODUCER24=1: the 128- and 192-key head-dim-128 kernels with the 256-key kernel's producer
          (24 registers, consumers 240 instead of 216)

1. correctness: every runner at CHECK against float64 (torch on the GPU); base against hint and p24all bit for bit
   (the same arithmetic); cuDNN FP8 the same way.
2. timing: cold, --iters 50, p50, runners and cuDNN alternating, ROUNDS rounds.

Inputs as experiments/2026-11-29-sdpa-fp8-producer24/ab24.py (seed 0, N(0,1), E4M3 K/V with scale amax / 448).

  python3 ab3.py [check] [time]   (results under $OUT: results.jsonl, summary.txt; run.sh tees the log)
(Adapted from experiments/2026-11-29-sdpa-fp8-producer24/ab24.py.)
"""

from __future__ import annotations

import json
import lzma
import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
OUT = pathlib.Path(os.environ.get("OUT", "/tmp/ab3_out"))
TMP = pathlib.Path("/tmp/ab3")
T0 = time.time()
BUDGET_S = float(os.environ.get("AB_BUDGET_S", "270"))  # the call's limit is 300 s; keep a margin

RUNNERS = {"base": "base", "ns4": "ns4"}
BITWISE = [("base", "ns4")]
# The fp8 tier's split configuration at head dim 128 (grids of at most half the SMs): base (main, 3 K stages) against
# ns4 (branch ns4: 4), cold.
CHECK = [(1, 4, 1000, 128, False), (1, 8, 1024, 128, True), (2, 16, 256, 128, False)]
TIME = [(1, 4, 1000, 128, False), (1, 8, 1024, 128, False), (1, 8, 1024, 128, True), (2, 16, 256, 128, False)]
TIMED_RUNNERS = ["base", "ns4"]
ROUNDS = int(os.environ.get("AB_ROUNDS", "2"))
ITERS = 50

LOG = None
HUNG: set[str] = set()  # runners that ran past their time limit once: skipped from then on
SUMMARY: list[str] = []


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def log(rec: dict) -> None:
    LOG.write(json.dumps(rec) + "\n")
    LOG.flush()


def say(*a) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def name(c) -> str:
    return "x".join(str(x) for x in c[:4]) + (" causal" if c[4] else "")


def unpack_runners() -> dict[str, pathlib.Path]:
    bdir = TMP / "bin"
    bdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, stem in RUNNERS.items():
        src = HERE / "bin" / f"{stem}.xz"
        dst = bdir / stem
        if src.exists():
            dst.write_bytes(lzma.decompress(src.read_bytes()))
            dst.chmod(0o755)
            out[key] = dst
    return out


def make_case(c, seed: int = 0):
    """Inputs on the GPU and the runner's .npy files; returns (files, q, kd, vd) with kd, vd decoded float64 * scale."""
    B, H, S, D, _ = c
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32).to(torch.float16)
    kx = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32)
    vx = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32)
    ks = float(np.float32(kx.abs().max().item() / 448.0)) or 1.0
    vs = float(np.float32(vx.abs().max().item() / 448.0)) or 1.0
    k8 = (kx / ks).to(torch.float8_e4m3fn)
    v8 = (vx / vs).to(torch.float8_e4m3fn)
    d = TMP / "case"
    d.mkdir(parents=True, exist_ok=True)
    files = {n: d / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    np.save(files["q"], q.cpu().numpy())
    np.save(files["k"], k8.view(torch.uint8).cpu().numpy())
    np.save(files["v"], v8.view(torch.uint8).cpu().numpy())
    np.save(files["scales"], np.array([ks, vs], dtype=np.float32))
    return files, q, k8.to(torch.float64) * ks, v8.to(torch.float64) * vs


def reference(q, kd, vd, causal: bool):
    B, H, S, D = q.shape
    out = torch.empty((B, H, S, D), dtype=torch.float64, device="cuda")
    qf, kf, vf, of = (t.reshape(B * H, S, D) for t in (q.to(torch.float64), kd, vd, out))
    per = max(1, int(2e9 // (S * S * 8)))
    mask = None
    if causal:  # square: row i sees keys j <= i
        mask = torch.ones((S, S), dtype=torch.bool, device="cuda").triu(1)
    for i in range(0, B * H, per):
        s = torch.matmul(qf[i:i + per], kf[i:i + per].transpose(1, 2)) / math.sqrt(D)
        if mask is not None:
            s.masked_fill_(mask, -math.inf)
        of[i:i + per] = torch.matmul(torch.softmax(s, dim=-1), vf[i:i + per])
    return out


def errors(o: np.ndarray, ref) -> dict:
    ot = torch.from_numpy(o.astype(np.float64)).to("cuda")
    err = (ot - ref).abs()
    if not bool(torch.isfinite(err).all()):
        return {"finite": False}
    return {"rel_l2": float(torch.linalg.norm(err) / torch.linalg.norm(ref)),
            "max_abs_rel": float(err.max() / ref.abs().max()), "max_abs": float(err.max()), "finite": True}


def io_args(files) -> list[str]:
    return [a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))]


def run_runner(exe, files, causal: bool, extra: list[str], out=None, timeout: float = 60.0) -> dict:
    cmd = [str(exe), *io_args(files), "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", *extra]
    if causal:
        cmd.append("--causal")
    if out is not None:
        cmd += ["--out", str(out)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    if p.returncode != 0:
        return {"rc": p.returncode, "stderr": p.stderr.strip()[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


class CudnnWorker:
    """cuDNN FP8 (driver/peers/cudnn_sdpa.py) as the driver runs it: one `python3 -m driver.peers.cudnn_sdpa --serve`
    worker (the bundle's driver on PYTHONPATH), a case per line of tab-separated arguments, its result line and then
    its end line ({"worker_end": true, "rc": ..., "error": ...}).  torch and cuDNN are loaded once."""

    def __init__(self) -> None:
        self.err = open(TMP / "cudnn_worker.err", "w")  # noqa: SIM115 - the worker's whole life
        self.p = subprocess.Popen([sys.executable, "-m", "driver.peers.cudnn_sdpa", "--serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1)
        first = self.p.stdout.readline()
        self.ready = first.startswith("{") and json.loads(first).get("worker_ready", False)

    def run(self, argv: list[str]) -> dict:
        if not self.ready or self.p.poll() is not None:
            return {"rc": "no worker", "stderr": (TMP / "cudnn_worker.err").read_text()[-400:]}
        self.p.stdin.write("\t".join(argv) + "\n")
        self.p.stdin.flush()
        result = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                return {"rc": "worker ended", "stderr": (TMP / "cudnn_worker.err").read_text()[-400:]}
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if d.get("worker_end"):
                if d.get("rc"):
                    return {"rc": d["rc"], "stderr": d.get("error", "")}
                return result or {"rc": "no line"}
            result = d


_CUDNN: CudnnWorker | None = None


def run_cudnn(files, causal: bool, extra: list[str], out=None) -> dict:
    global _CUDNN
    if _CUDNN is None:
        _CUDNN = CudnnWorker()
    argv = [*io_args(files), *extra] + (["--causal"] if causal else []) + (["--out", str(out)] if out else [])
    return _CUDNN.run(argv)


def p50(line: dict) -> float | None:
    s = line.get("samples_us")
    return float(np.median(s)) if s else None


def tflops(c, us: float) -> float:
    B, H, S, D, causal = c
    f = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    return f / us / 1e6


def correctness(runners) -> None:
    for c in CHECK:
        if left() < 100:
            say("skip the rest of the checks (time)")
            log({"phase": "check", "case": name(c), "skipped": "time"})
            continue
        files, q, kd, vd = make_case(c)
        ref = reference(q, kd, vd, c[4])
        outs = {}
        for key, exe in runners.items():
            if key in HUNG:
                continue
            o = TMP / f"o_{key}.npy"
            line = run_runner(exe, files, c[4], ["--iters", "1", "--warmup", "0"], out=o, timeout=20.0)
            if line.get("rc") == "timeout":
                HUNG.add(key)
            rec = {"phase": "check", "case": name(c), "impl": key}
            if "rc" in line:
                rec.update(line)
            else:
                outs[key] = np.load(o)
                rec.update(errors(outs[key], ref), bn=line.get("bn"), q_terms=line.get("q_terms"),
                           grid=line.get("grid"), smem=line.get("smem_bytes"), regs=line.get("regs_per_thread"))
            log(rec)
            say("check", name(c), key, {k: rec.get(k) for k in ("rel_l2", "max_abs_rel", "bn", "q_terms", "rc")})
            if "rel_l2" in rec:
                SUMMARY.append(f"check {name(c):22s} {key:10s} rel_l2 {rec['rel_l2']:.4f} max_abs_rel {rec['max_abs_rel']:.4f}"
                               f" bn {rec.get('bn')} q_terms {rec.get('q_terms')}")
            else:
                SUMMARY.append(f"check {name(c):22s} {key:10s} {rec.get('rc')} {rec.get('stderr', '')[:80]}")
        for a, b in BITWISE:
            if a in outs and b in outs:
                same = bool(np.array_equal(outs[a].view(np.uint16), outs[b].view(np.uint16)))
                log({"phase": "bitwise", "case": name(c), "a": a, "b": b, "equal": same})
                say("bitwise", a, "==", b, name(c), same)
        o = TMP / "o_cudnn.npy"
        line = run_cudnn(files, c[4], ["--timing", "cold", "--iters", "1", "--warmup", "0"], out=o)
        rec = {"phase": "check", "case": name(c), "impl": "cudnn"}
        if "rc" in line:
            rec.update(line)
        else:
            rec.update(errors(np.load(o), ref), arithmetic=line.get("arithmetic"), version=line.get("peer_version"))
        log(rec)
        say("check", name(c), "cudnn", {k: rec.get(k) for k in ("rel_l2", "max_abs_rel", "rc", "stderr")})
        if "rel_l2" in rec:
            SUMMARY.append(f"check {name(c):22s} {'cudnn':10s} rel_l2 {rec['rel_l2']:.4f} max_abs_rel {rec['max_abs_rel']:.4f}")
        del ref, q, kd, vd
        torch.cuda.empty_cache()


def timing(runners) -> None:
    for c in TIME:
        if left() < 50:
            say("skip the rest of the timing (time)")
            log({"phase": "time", "case": name(c), "skipped": "time"})
            continue
        files, q, kd, vd = make_case(c)
        del q, kd, vd
        for r in range(ROUNDS):
            for key in [k for k in TIMED_RUNNERS if k in runners and k not in HUNG] + ["cudnn"]:
                args = ["--timing", "cold", "--iters", str(ITERS), "--warmup", "5"]
                # (the runner requires --out on every run: call 1 timed none of ours for want of it)
                line = run_cudnn(files, c[4], args) if key == "cudnn" else run_runner(runners[key], files, c[4], args,
                                                                                     out=TMP / "o_time.npy", timeout=30.0)
                if line.get("rc") == "timeout":
                    HUNG.add(key)
                us = p50(line)
                rec = {"phase": "time", "case": name(c), "impl": key, "round": r, "p50_us": us,
                       "tflops": tflops(c, us) if us else None}
                if "rc" in line:
                    rec.update(line)
                else:
                    rec.update(samples_us=line.get("samples_us"), bn=line.get("bn"), q_terms=line.get("q_terms"),
                               l2_flush_bytes=line.get("l2_flush_bytes"))
                log(rec)
                say("time", name(c), key, r, us and f"{us:.1f} us {tflops(c, us):.0f} TF/s", line.get("stderr", ""))
                SUMMARY.append(f"time  {name(c):22s} {key:10s} round {r} " +
                               (f"p50 {us:9.2f} us {tflops(c, us):6.0f} TF/s" if us else f"{line.get('rc')}"))


def main() -> None:
    global LOG
    OUT.mkdir(parents=True, exist_ok=True)
    LOG = open(OUT / "results.jsonl", "w")  # noqa: SIM115 - kept open for the whole run
    env = {"phase": "env", "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    try:
        env["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version",
                                            "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    log(env)
    say(env)
    runners = unpack_runners()
    say("runners", sorted(runners))
    which = sys.argv[1:] or ["check", "time"]
    if "check" in which:
        correctness(runners)
    if "time" in which:
        timing(runners)
    (OUT / "summary.txt").write_text("\n".join(SUMMARY) + "\n")
    print("\n".join(SUMMARY), flush=True)
    say("done; hung:", sorted(HUNG))


if __name__ == "__main__":
    main()
