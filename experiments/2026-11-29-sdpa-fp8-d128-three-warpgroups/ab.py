#!/usr/bin/env python3
"""The fp8 tier at head dim 128 with three consumer warpgroups (192 rows per block, 128-key tiles, the 24-register
producer; branch fp8w3, -DSDPA_SM90_NCWG3_D128=1) against main's kernels (the 128/192/256-key two-warpgroup
kernels select_config picks) and cuDNN FP8, in one call on one GPU.

Call 1 (runners in bin/*.xz, cpasync builds of the branch at its probe commit): base (the define off: main's SASS, 96
of 96 kernels), w3 (the define on: the three-warpgroup kernel for every unsplit head-dim-128 launch without ablation).
1. check: each runner and cuDNN FP8 against float64 (torch on the GPU); the kernel each runner says it ran.
2. sanitizers: memcheck, racecheck, synccheck, initcheck on w3 at two small cases (both, it turned out, ran the
   two-warpgroup kernels: split launches; call 2 sanitizes the three-warpgroup kernel).
3. timing: cold and hot, --iters 50, p50, base, w3 and cuDNN alternating, 2 rounds, until $AB_BUDGET_S.
Call 2 (`ab.py 2`; runners of the branch with select_config's rule): base (SDPA_SM90_NCWG3_D128=0), w3 (1: the
makespan model), w3a (2: every launch the 256-key kernel would run), w3ap4 (2, and SDPA_SM90_EXP2_POLY_D128=4).
1. check against float64 (a square case: torch on the GPU; grouped heads: ab_kit's numpy reference) with cuDNN FP8;
2. the four sanitizers on w3a at the stress case san_ncwg3_d128 and at a causal case over 8192 keys (--split 1), and
   a 4-stream soak;
3. timing as in call 1: base, w3a, w3ap4 and cuDNN (w3 runs one of base's and w3a's kernels: its pick is logged).
  python3 ab.py [2]   (results under $OUT/results.jsonl; the bundle's driver on PYTHONPATH for cuDNN: run.sh)"""
import json, os, pathlib, shutil, subprocess, sys, time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_peer_kit as kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/w3_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/w3"); TMP.mkdir(exist_ok=True)
BIN = pathlib.Path(os.environ.get("BIN", "bin"))
T0, BUDGET = time.time(), float(os.environ.get("AB_BUDGET_S", "300"))
res = open(OUT / "results.jsonl", "w")


def log(rec):
    res.write(json.dumps(rec) + "\n"); res.flush(); print(json.dumps(rec), flush=True)


CALL = int(sys.argv[1]) if len(sys.argv) > 1 else 1
CHECK = [(1, 4, 17, 128, False), (7, 3, 333, 128, False), (1, 4, 1000, 128, True), (1, 32, 1024, 128, False),
         (2, 16, 2048, 128, False), (2, 16, 2048, 128, True), (1, 16, 8192, 128, False)]
TIMED = [(1, 16, 8192, 128, False), (1, 16, 16384, 128, False), (2, 32, 4096, 128, False), (4, 16, 4096, 128, False),
         (2, 16, 2048, 128, False), (1, 32, 1024, 128, False), (2, 16, 2048, 128, True), (1, 16, 8192, 128, True),
         (7, 3, 333, 128, False)]
SAN = [(1, 4, 1000, 128, True), (1, 3, 700, 128, False)]
if CALL == 2:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import call2  # noqa: E402  (this folder)
    call2.main(kit, log, BIN, TMP, T0, BUDGET)
    res.close()
    sys.exit(0)
runners = {k: kit.unpack_runner(BIN, TMP, k) for k in ("base", "w3")}
cudnn = kit.CudnnWorker(TMP)
log({"phase": "start", "cudnn_ready": cudnn.ready})
DETAIL = ("kernel", "bn", "block", "grid", "split", "q_terms", "tiles", "smem_bytes", "regs_per_thread")

for c in CHECK:
    files, q, kd, vd = kit.make_case(TMP, c)
    ref = kit.reference(q, kd, vd, c[4])
    for k, exe in runners.items():
        o = TMP / f"o_{k}.npy"
        line = kit.run_runner(exe, files, c[4], ["--timing", "cold", "--iters", "1", "--warmup", "0"], out=o)
        log({"phase": "check", "case": kit.case_name(c), "impl": k, "config": line.get("config"),
             "detail": {x: line.get(x) for x in DETAIL if x in line},
             **(kit.errors(np.load(o), ref) if "rc" not in line else {"rc": line["rc"], "stderr": line.get("stderr")})})
    o = TMP / "o_cudnn.npy"
    line = cudnn.case(files, c[4], ["--timing", "cold", "--iters", "1", "--warmup", "0"], out=o)
    log({"phase": "check", "case": kit.case_name(c), "impl": "cudnn",
         **(kit.errors(np.load(o), ref) if "rc" not in line else {"rc": line.get("rc"), "stderr": line.get("stderr")})})
    del ref, q, kd, vd

san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for c in SAN:
    files, *_ = kit.make_case(TMP, c)
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        cmd = [san, "--tool", tool, "--error-exitcode", "3", str(runners["w3"]), *kit.io_args(files), "--precision",
               "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", "--timing", "hot", "--iters", "1", "--warmup", "0",
               "--out", str(TMP / "o_san.npy")] + (["--causal"] if c[4] else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-160:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        log({"phase": "sanitizer", "case": kit.case_name(c), "tool": tool, "rc": rc, "tail": tail})

for c in TIMED:
    files, *_ = kit.make_case(TMP, c)
    for rnd in range(2):
        for mode in ("cold", "hot"):
            order = ["base", "w3", "cudnn"] if rnd == 0 else ["cudnn", "w3", "base"]
            for k in order:
                if time.time() - T0 > BUDGET:
                    log({"phase": "time", "skipped": "budget"}); sys.exit(0)
                args = ["--timing", mode, "--iters", "50", "--warmup", "5"]
                line = (cudnn.case(files, c[4], args) if k == "cudnn"  # (the runner requires --out on every run)
                        else kit.run_runner(runners[k], files, c[4], args, out=TMP / "o_time.npy"))
                p50 = kit.p50(line)
                log({"phase": "time", "case": kit.case_name(c), "mode": mode, "round": rnd, "impl": k, "p50_us": p50,
                     "tflops": kit.tflops(c, p50) if p50 else None, **({"rc": line["rc"]} if "rc" in line else {})})
res.close()
