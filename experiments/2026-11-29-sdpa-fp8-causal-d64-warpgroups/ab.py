#!/usr/bin/env python3
"""The fp8 tier's causal head-dim-64 cases with two consumer warpgroups (128-row units) against the three of
select_config's rule (192-row units), and cuDNN FP8, in one call on one GPU.

Runners (bin/*.xz), the cpasync build of the same sources (e034b35):
  main  the default build (SDPA_SM90_NCWG3_D64=1: three consumer warpgroups where their grid fills a wave)
  two   -DSDPA_SM90_NCWG3_D64=0 (always two at head dim 64)
1. check: each runner and cuDNN FP8 against float64 (torch on the GPU), main against two bit for bit.
2. timing: cold and hot, --iters 50, p50, the runners and cuDNN alternating, 2 rounds.
  python3 ab.py         (results under $OUT/results.jsonl; needs the bundle's driver on PYTHONPATH for cuDNN: run.sh)
  python3 ab.py sweep   (call 3: causal cases from 512 to 3072 rows, the two runners only, bit for bit and timed)"""
import json, os, pathlib, sys, time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_peer_kit as kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/c64_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/c64"); TMP.mkdir(exist_ok=True)
BIN = pathlib.Path(os.environ.get("BIN", "bin"))
T0, BUDGET = time.time(), float(os.environ.get("AB_BUDGET_S", "300"))
res = open(OUT / "results.jsonl", "w")


def log(rec):
    res.write(json.dumps(rec) + "\n"); res.flush(); print(json.dumps(rec), flush=True)


CASES = [(8, 8, 1024, 64, True), (8, 8, 1024, 64, False), (2, 16, 2048, 64, True), (2, 16, 2048, 64, False),
         (4, 32, 4096, 64, True), (4, 32, 4096, 64, False)]
SWEEP = "sweep" in sys.argv[1:]
if SWEEP:
    CASES = [(1, 64, 512, 64, True), (1, 64, 768, 64, True), (1, 64, 1024, 64, True), (1, 32, 1024, 64, True),
             (1, 32, 1280, 64, True), (1, 32, 1536, 64, True), (1, 32, 2048, 64, True), (1, 16, 3072, 64, True)]
runners = {k: kit.unpack_runner(BIN, TMP, k) for k in ("main", "two")}
cudnn = None if SWEEP else kit.CudnnWorker(TMP)
log({"phase": "start", "cudnn_ready": cudnn.ready if cudnn else None})
for c in CASES:
    files, q, kd, vd = kit.make_case(TMP, c)
    ref = kit.reference(q, kd, vd, c[4]) if c[2] <= 2048 and not SWEEP else None
    outs = {}
    for k, exe in runners.items():
        o = TMP / f"o_{k}.npy"
        line = kit.run_runner(exe, files, c[4], ["--timing", "cold", "--iters", "1", "--warmup", "0"], out=o)
        outs[k] = np.load(o) if "rc" not in line else None
        log({"phase": "check", "case": kit.case_name(c), "impl": k, "config": line.get("config"),
             "kernel_detail": {x: line.get(x) for x in ("ncwg", "bn", "split", "bm") if x in line},
             **({} if outs[k] is None or ref is None else kit.errors(outs[k], ref)), **({"rc": line["rc"]} if "rc" in line else {})})
    if outs["main"] is not None and outs["two"] is not None:
        log({"phase": "same", "case": kit.case_name(c),
             "main_vs_two": bool(np.array_equal(outs["main"].view(np.uint16), outs["two"].view(np.uint16)))})
    if ref is not None and cudnn:
        o = TMP / "o_cudnn.npy"
        line = cudnn.case(files, c[4], ["--timing", "cold", "--iters", "1", "--warmup", "0"], out=o)
        log({"phase": "check", "case": kit.case_name(c), "impl": "cudnn",
             **(kit.errors(np.load(o), ref) if "rc" not in line else {"rc": line.get("rc"), "stderr": line.get("stderr")})})
    del ref
    for rnd in range(2):
        for mode in ("cold", "hot"):
            order = ["main", "two", "cudnn"] if rnd == 0 else ["cudnn", "two", "main"]
            order = [k for k in order if k != "cudnn" or cudnn]
            for k in order:
                if time.time() - T0 > BUDGET:
                    log({"phase": "time", "skipped": "budget"}); sys.exit(0)
                args = ["--timing", mode, "--iters", "50", "--warmup", "5"]
                line = (cudnn.case(files, c[4], args) if k == "cudnn"  # (the runner requires --out on every run)
                        else kit.run_runner(runners[k], files, c[4], args, out=TMP / "o_time.npy"))
                log({"phase": "time", "case": kit.case_name(c), "mode": mode, "round": rnd, "impl": k,
                     "p50_us": kit.p50(line), **({"rc": line["rc"]} if "rc" in line else {})})
res.close()
