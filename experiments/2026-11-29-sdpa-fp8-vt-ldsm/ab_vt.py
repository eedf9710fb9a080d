#!/usr/bin/env python3
"""SDPA_SM90_VT_LDSM (the head-dim-128 fp8 producer's V transpose by ldmatrix / stmatrix) against today's transpose,
in one call on one GPU.

Runners (cpasync; in bin/, xz-compressed), built side by side on the same sources (build.sh):
  old        the default build (select_config's 128- / 192-key rule; the kernels of main, SASS identical)
  ldsm       -DSDPA_SM90_VT_LDSM=1: the same kernels, V transposed by ldmatrix / stmatrix (producer 56)
  b256       -DSDPA_SM90_BN_D128=256: the 256-key kernel wherever it serves, today's transpose (producer 56)
  b256_ldsm  b256 with -DSDPA_SM90_VT_LDSM=1 (producer 56)
  b256_ldsm_p24  b256_ldsm with -DSDPA_SM90_BN256_PRODUCER_REGS=24 (consumers 240, cuDNN FP8's split), when built
and vt_unit (vt_unit.cu): the transposes alone on random tiles in shared memory, byte for byte.

1. vt_unit.
2. bit-identity: at CHECK every runner's output against its pair's (ldsm vs old, b256_ldsm* vs b256) bit for bit,
   and every output against float64 (rel_l2, max_abs_rel) as a sanity check.
3. timing: cold (--timing cold: L2 flushed, one event pair per launch), --iters 50, p50, runners alternating, ROUNDS.

Inputs (made on the GPU, seed 0): Q ~ N(0,1) fp16; K, V ~ N(0,1) stored as E4M3 codes with the per-tensor scale
amax / 448. Results under $OUT: results.jsonl, summary.txt (run.sh tees log.txt).
"""

from __future__ import annotations

import json
import lzma
import math
import os
import pathlib
import subprocess
import time

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
OUT = pathlib.Path(os.environ.get("OUT", "/tmp/ab_vt_out"))
TMP = pathlib.Path("/tmp/ab_vt")
T0 = time.time()
BUDGET_S = float(os.environ.get("AB_BUDGET_S", "270"))
ROUNDS = int(os.environ.get("AB_ROUNDS", "2"))
ITERS = 50

RUNNERS = ["old", "ldsm", "b256", "b256_ldsm", "b256_ldsm_p24"]
PAIRS = [("ldsm", "old"), ("b256_ldsm", "b256"), ("b256_ldsm_p24", "b256")]  # must be equal bit for bit
# (B, H, S, D, causal), small first
CHECK = [(1, 4, 17, 128, False), (7, 3, 333, 128, False), (2, 16, 2048, 128, False), (2, 16, 2048, 128, True),
         (1, 4, 1000, 128, True), (1, 16, 8192, 128, True), (2, 32, 4096, 128, False)]
TIME = [(1, 16, 8192, 128, False), (1, 16, 16384, 128, False), (2, 32, 4096, 128, False), (4, 16, 4096, 128, False)]

LOG = None
SUMMARY: list[str] = []
HUNG: set[str] = set()


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def log(rec: dict) -> None:
    LOG.write(json.dumps(rec) + "\n")
    LOG.flush()


def say(*a) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def name(c) -> str:
    return "x".join(str(x) for x in c[:4]) + (" causal" if c[4] else "")


def unpack(stem: str) -> pathlib.Path | None:
    src = HERE / "bin" / f"{stem}.xz"
    if not src.exists():
        return None
    dst = TMP / "bin" / stem
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(lzma.decompress(src.read_bytes()))
    dst.chmod(0o755)
    return dst


def make_case(c, seed: int = 0):
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
    mask = torch.ones((S, S), dtype=torch.bool, device="cuda").triu(1) if causal else None
    for i in range(0, B * H, per):
        s = torch.matmul(qf[i:i + per], kf[i:i + per].transpose(1, 2)) / math.sqrt(D)
        if mask is not None:
            s.masked_fill_(mask, -math.inf)
        of[i:i + per] = torch.matmul(torch.softmax(s, dim=-1), vf[i:i + per])
    return out


def run_runner(exe, files, causal: bool, extra: list[str], out, timeout: float = 60.0) -> dict:
    cmd = [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))], "--precision", "fp8",
           "--kernel", "wgmma_fp8_sm90", "--split", "0", *extra, "--out", str(out)] + (["--causal"] if causal else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    if p.returncode != 0:
        return {"rc": p.returncode, "stderr": (p.stderr + p.stdout).strip()[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def vt_unit() -> None:
    exe = unpack("vt_unit")
    if exe is None:
        return
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    log({"phase": "vt_unit", "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-400:]})
    say("vt_unit rc", p.returncode, p.stdout.strip())
    SUMMARY.append(f"vt_unit rc {p.returncode}: " + " | ".join(p.stdout.strip().splitlines()))


def check(runners) -> None:
    for c in CHECK:
        if left() < 150:
            SUMMARY.append(f"check {name(c)}: skipped (time)")
            continue
        files, q, kd, vd = make_case(c)
        ref = reference(q, kd, vd, c[4])
        outs = {}
        for key, exe in runners.items():
            o = TMP / f"o_{key}.npy"
            line = run_runner(exe, files, c[4], ["--iters", "1", "--warmup", "0"], o, timeout=20.0)
            rec = {"phase": "check", "case": name(c), "impl": key}
            if "rc" in line:
                rec.update(line)
                if line["rc"] == "timeout":
                    HUNG.add(key)
            else:
                outs[key] = np.load(o)
                ot = torch.from_numpy(outs[key].astype(np.float64)).to("cuda")
                err = (ot - ref).abs()
                rec.update(rel_l2=float(torch.linalg.norm(err) / torch.linalg.norm(ref)),
                           max_abs_rel=float(err.max() / ref.abs().max()), bn=line.get("bn"),
                           q_terms=line.get("q_terms"))
            log(rec)
            SUMMARY.append(f"check {name(c):22s} {key:14s} " + (
                f"rel_l2 {rec['rel_l2']:.4f} max_abs_rel {rec['max_abs_rel']:.4f} bn {rec.get('bn')} "
                f"q_terms {rec.get('q_terms')}" if "rel_l2" in rec else f"rc {rec.get('rc')} {rec.get('stderr', '')[:120]}"))
        for a, b in PAIRS:
            if a in outs and b in outs:
                same = bool(np.array_equal(outs[a].view(np.uint16), outs[b].view(np.uint16)))
                log({"phase": "bitwise", "case": name(c), "a": a, "b": b, "equal": same})
                SUMMARY.append(f"bitwise {name(c):22s} {a} == {b}: {same}")
                say("bitwise", name(c), a, b, same)
        del ref, q, kd, vd
        torch.cuda.empty_cache()


def timing(runners) -> None:
    for c in TIME:
        if left() < 40:
            SUMMARY.append(f"time {name(c)}: skipped (time)")
            continue
        files, q, kd, vd = make_case(c)
        del q, kd, vd
        for r in range(ROUNDS):
            for key in [k for k in runners if k not in HUNG]:
                line = run_runner(runners[key], files, c[4], ["--timing", "cold", "--iters", str(ITERS), "--warmup", "5"],
                                  TMP / "o_time.npy", timeout=30.0)
                s = line.get("samples_us")
                us = float(np.median(s)) if s else None
                B, H, S, D, causal = c
                tf = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0) / us / 1e6 if us else None
                rec = {"phase": "time", "case": name(c), "impl": key, "round": r, "p50_us": us, "tflops": tf,
                       "bn": line.get("bn"), "samples_us": s, "rc": line.get("rc"), "stderr": line.get("stderr")}
                log(rec)
                SUMMARY.append(f"time  {name(c):22s} {key:14s} round {r} " +
                               (f"p50 {us:9.2f} us {tf:6.0f} TF/s bn {line.get('bn')}" if us else f"rc {line.get('rc')}"))
                say("time", name(c), key, r, us)


def main() -> None:
    global LOG
    OUT.mkdir(parents=True, exist_ok=True)
    TMP.mkdir(parents=True, exist_ok=True)
    LOG = open(OUT / "results.jsonl", "w")  # noqa: SIM115
    say("device", torch.cuda.get_device_name(0), "torch", torch.__version__)
    log({"phase": "device", "name": torch.cuda.get_device_name(0), "torch": torch.__version__})
    vt_unit()
    runners = {k: p for k in RUNNERS if (p := unpack(k)) is not None}
    say("runners", list(runners))
    try:
        check(runners)
        timing(runners)
    finally:
        (OUT / "summary.txt").write_text("\n".join(SUMMARY) + "\n")
        LOG.close()


if __name__ == "__main__":
    main()
