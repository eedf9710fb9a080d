"""Call 2 of ab.py (see its docstring): the rule's runners, the three-warpgroup kernel's sanitizers and soak."""
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

RUNNERS = ("base", "w3", "w3a", "w3ap4")
DETAIL = ("kernel", "bn", "block", "grid", "split", "q_terms", "tiles")
# (q_shape, kv_shape, causal, --split): square MHA cases as (B, H, S, D, causal) go through torch (ab_peer_kit)
SQUARE = [(1, 33, 768, 128, False), (1, 2, 8192, 128, True), (1, 16, 8192, 128, True)]
GQA = {"san_ncwg3_d128": ((1, 32, 640, 128), (1, 8, 768, 128), False, 0),
       "causal_8k_rows192": ((1, 8, 192, 128), (1, 8, 8192, 128), True, 1)}
TIMED = [(1, 16, 16384, 128, False), (2, 32, 4096, 128, False), (1, 16, 8192, 128, False), (1, 16, 8192, 128, True),
         (1, 16, 16384, 128, True)]


def _cmd(exe, files, causal, split, extra, out):
    return [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))], "--precision", "fp8",
            "--kernel", "wgmma_fp8_sm90", "--split", str(split), *extra, "--out", str(out)] + (["--causal"] if causal else [])


def _run(cmd, timeout=120):
    import json
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    if p.returncode != 0:
        return {"rc": p.returncode, "stderr": (p.stdout + p.stderr).strip()[-300:]}
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]  # (under compute-sanitizer its summary follows)
    return json.loads(lines[-1]) if lines else {"rc": "no line", "stderr": p.stdout[-300:]}


def main(kit, log, BIN, TMP, T0, BUDGET):
    runners = {k: kit.unpack_runner(BIN, TMP, k) for k in RUNNERS}
    cudnn = kit.CudnnWorker(TMP)
    log({"phase": "start", "call": 2, "cudnn_ready": cudnn.ready})
    one = ["--timing", "cold", "--iters", "1", "--warmup", "0"]
    # 1. check
    for c in SQUARE:
        files, q, kd, vd = kit.make_case(TMP, c)
        ref = kit.reference(q, kd, vd, c[4])
        for k, exe in runners.items():
            o = TMP / f"o_{k}.npy"
            line = _run(_cmd(exe, files, c[4], 0, one, o))
            log({"phase": "check", "case": kit.case_name(c), "impl": k, "detail": {x: line.get(x) for x in DETAIL},
                 **(kit.errors(np.load(o), ref) if "rc" not in line else line)})
        line = cudnn.case(files, c[4], one, out=TMP / "o_cudnn.npy")
        log({"phase": "check", "case": kit.case_name(c), "impl": "cudnn",
             **(kit.errors(np.load(TMP / "o_cudnn.npy"), ref) if "rc" not in line else line)})
        del ref, q, kd, vd
    for name, (qs, kvs, causal, split) in GQA.items():
        files = ab_kit.code_inputs(TMP / name, qs, kvs)
        ref = ab_kit.reference(files, causal)

        def err(o):
            o = o.astype(np.float64)
            return {"rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                    "max_abs_rel": float(np.abs(o - ref).max() / np.abs(ref).max())}
        for k, exe in runners.items():
            o = TMP / f"o_{k}.npy"
            line = _run(_cmd(exe, files, causal, split, one, o))
            log({"phase": "check", "case": name, "impl": k, "detail": {x: line.get(x) for x in DETAIL},
                 **(err(np.load(o)) if "rc" not in line else line)})
        line = cudnn.case(files, causal, one, out=TMP / "o_cudnn.npy")
        log({"phase": "check", "case": name, "impl": "cudnn", **(err(np.load(TMP / "o_cudnn.npy")) if "rc" not in line else line)})
    # 2. sanitizers and soak on w3a
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    for name, (qs, kvs, causal, split) in GQA.items():
        files = ab_kit.code_inputs(TMP / name, qs, kvs)
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            t = time.time()
            line = _run([san, "--tool", tool, "--error-exitcode", "3",
                         *_cmd(runners["w3a"], files, causal, split, ["--timing", "hot", "--iters", "1", "--warmup", "0"],
                               TMP / "o_san.npy")], timeout=240)
            log({"phase": "sanitizer", "case": name, "tool": tool, "rc": line.get("rc", 0), "s": round(time.time() - t, 1),
                 "block": line.get("block"), "stderr": line.get("stderr", "")[-200:]})
    files = ab_kit.code_inputs(TMP / "san_ncwg3_d128", *GQA["san_ncwg3_d128"][:2])
    line = _run(_cmd(runners["w3a"], files, False, 0, ["--timing", "hot", "--iters", "1", "--warmup", "0", "--soak", "300",
                                                       "--streams", "4"], TMP / "o_soak.npy"))
    log({"phase": "soak", "case": "san_ncwg3_d128", "impl": "w3a", "rc": line.get("rc", 0), "block": line.get("block"),
         "mismatched": line.get("soak_mismatched_elements"), "stderr": line.get("stderr", "")[-200:]})
    # 3. timing
    for c in TIMED:
        files, *_ = kit.make_case(TMP, c)
        line = _run(_cmd(runners["w3"], files, c[4], 0, one, TMP / "o_pick.npy"))
        log({"phase": "pick", "case": kit.case_name(c), "impl": "w3", "detail": {x: line.get(x) for x in DETAIL}})
        for rnd in range(2):
            for mode in ("cold", "hot"):
                order = ["base", "w3a", "w3ap4", "cudnn"]
                for k in (order if rnd == 0 else order[::-1]):
                    if time.time() - T0 > BUDGET:
                        log({"phase": "time", "skipped": "budget"})
                        return
                    args = ["--timing", mode, "--iters", "50", "--warmup", "5"]
                    line = cudnn.case(files, c[4], args) if k == "cudnn" else _run(_cmd(runners[k], files, c[4], 0, args,
                                                                                       TMP / "o_time.npy"))
                    p50 = kit.p50(line)
                    log({"phase": "time", "case": kit.case_name(c), "mode": mode, "round": rnd, "impl": k, "p50_us": p50,
                         "tflops": kit.tflops(c, p50) if p50 else None, **({"rc": line["rc"]} if "rc" in line else {})})
