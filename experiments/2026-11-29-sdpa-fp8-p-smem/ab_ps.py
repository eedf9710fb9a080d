#!/usr/bin/env python3
"""The fp8 tier's 256-key kernel with P through shared memory and the intra-warpgroup overlap
(SDPA_SM90_BN256_PSMEM=1, mainloop.cuh consumer_loop256_ps) against today's loop and cuDNN FP8, in one call on one GPU.

Runners (in bin/, xz-compressed), built side by side from the same sources (build.sh):
  base    the default build (consumer_loop256: P V waited for in the turn, then Q K^T; producer 24 / consumers 240)
  ps      -DSDPA_SM90_BN256_PSMEM=1: P stored to shared memory, S_t and P_{t-1} V_{t-1} issued together in the turn,
          the softmax of S_t while P V runs; one raw V stage (producer 24 / consumers 240: the producer spills 12 bytes
          in the kernel without the mask)
  ps32    the same with -DSDPA_SM90_BN256_PRODUCER_REGS=32 (consumers 232): 0 spills

1. correctness: every runner at CHECK against float64 (torch on the GPU); base against ps and ps32 bit for bit
   (the same arithmetic and order); cuDNN FP8 the same way.
2. timing: cold, --iters 50, p50, runners and cuDNN alternating, ROUNDS rounds.

Inputs as experiments/2026-11-29-sdpa-fp8-producer24/ab24.py (seed 0, N(0,1), E4M3 K/V with scale amax / 448).

  python3 ab_ps.py [check] [time] [san]   (results under $OUT: results.jsonl, summary.txt; run.sh tees the log)
(Adapted from experiments/2026-11-29-sdpa-fp8-three-probes/ab3.py: the runner lists below changed, a sanitizer phase
added; what it shares with the earlier scripts is in ../ab_peer_kit.py, moved there verbatim after the calls ran.)
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import ab_peer_kit as kit

HERE = pathlib.Path(__file__).resolve().parent
OUT = pathlib.Path(os.environ.get("OUT", "/tmp/abps_out"))
TMP = pathlib.Path("/tmp/abps")
T0 = time.time()
BUDGET_S = float(os.environ.get("AB_BUDGET_S", "270"))  # the call's limit is 300 s; keep a margin

RUNNERS = {"base": "base", "ps": "ps", "ps32": "ps32"}
# pairs whose outputs must be equal bit for bit (same arithmetic)
BITWISE = [("base", "ps"), ("base", "ps32")]
# (B, H, S, D, causal)
# (small ones first: a runner that hangs is found, and skipped from then on, at a small cost)
CHECK = [(1, 4, 17, 128, False), (7, 3, 333, 128, False), (1, 4, 1000, 128, True), (2, 16, 1024, 128, False),
         (1, 32, 1024, 128, False), (2, 16, 2048, 128, False), (2, 16, 2048, 128, True), (1, 16, 8192, 128, False),
         (1, 16, 8192, 128, True), (2, 32, 4096, 128, False), (1, 16, 16384, 128, False)]
# the 256-key kernel's shapes, then the 128-key kernel's (the mask at 2048 keys, a short launch with Q in two terms,
# the split one) and the 192-key kernel's (7,3,333: split)
TIME = [(1, 16, 8192, 128, False), (2, 32, 4096, 128, False), (2, 16, 2048, 128, False), (1, 16, 8192, 128, True),
        (4, 16, 4096, 128, False), (1, 32, 1024, 128, False), (1, 16, 16384, 128, False)]
TIMED_RUNNERS = ["base", "ps", "ps32"]
# The later calls (AB_CALL=N): their runners, the pairs equal bit for bit, the checked and the timed cases.
# 3: polynomial exponentials (SDPA_SM90_EXP2_POLY_D128=4) in both loops, after call 2's profile had the tensor pipe
#    (53%) and MUFU (53%) of our kernel and cuDNN's busy almost never at the same time (three runners and the peer:
#    what the device tool carries beside the repository);
# 5: loop 0 with cuDNN FP8's one meeting of the two consumer warpgroups per tile (call 4's SASS of its kernel) instead
#    of the turns (SDPA_SM90_BN256_LOOP=2), with and without polynomial exponentials;
# 6: loop 0 with the exponentials taking turns as the products do (SDPA_SM90_BN256_LOOP=3, et.patch.gz), after
#    ../2026-11-29-sm90-tensor-mufu-overlap found the two warpgroups' softmax phases colliding on MUFU;
# 7: FlashAttention-4's conditional rescale in loop 0 (SDPA_SM90_FP8_LAZY_RESCALE = 5 or 8 tenths of a log2 unit,
#    lz.patch.gz): a warp rescales O and l only when a row's max moves by more than that;
# 9: speculative exponentials in loop 0 (SDPA_SM90_FP8_SPEC_EXP=5, sp.patch.gz): the exponentials against the kept max
#    with the tile's maxima beside them, moved to a new max only when a row's moves by more than 0.5; sp5 takes S again
#    past a jump of 100 (52 bytes of spills), sp5nj has no such path (N(0,1) inputs only).
_CHECK5 = [(1, 4, 1000, 128, True), (2, 16, 1024, 128, False), (2, 16, 2048, 128, False), (1, 16, 8192, 128, True),
           (2, 32, 4096, 128, False)]
_CHECK6 = _CHECK5[:3] + [(1, 16, 8192, 128, False)] + _CHECK5[3:]
_TIME6 = [(1, 16, 8192, 128, False), (2, 32, 4096, 128, False), (2, 16, 2048, 128, False), (1, 16, 8192, 128, True),
          (1, 32, 1024, 128, False), (4, 16, 4096, 128, False)]
# call: (runners, bit-for-bit pairs, checked cases, timed cases, sanitized runners)
CALLS = {
    "3": (("base", "p4", "ps32p4"), [("p4", "ps32p4")],
          [(2, 16, 2048, 128, False), (1, 16, 8192, 128, True), (2, 32, 4096, 128, False)], _TIME6[:5], []),
    "5": (("base", "rv", "rvp4"), [("base", "rv")], _CHECK5, _TIME6, ["rv"]),
    "6": (("base", "et"), [("base", "et")], _CHECK5, _TIME6, ["et"]),
    "7": (("base", "lz5", "lz8"), [], _CHECK6, _TIME6, ["lz5"]),
    "9": (("base", "sp5", "sp5nj"), [("sp5", "sp5nj")], _CHECK6, _TIME6, ["sp5"]),
}
SAN_RUNNERS = ["ps32", "ps"]
if os.environ.get("AB_CALL") in CALLS:
    _names, BITWISE, CHECK, TIME, SAN_RUNNERS = CALLS[os.environ["AB_CALL"]]
    RUNNERS = {k: k for k in _names}
    TIMED_RUNNERS = list(RUNNERS)
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


name = kit.case_name


def unpack_runners() -> dict[str, pathlib.Path]:
    return {key: kit.unpack_runner(HERE / "bin", TMP / "bin", stem) for key, stem in RUNNERS.items()
            if (HERE / "bin" / f"{stem}.xz").exists()}


_CUDNN: kit.CudnnWorker | None = None


def run_cudnn(files, causal: bool, extra: list[str], out=None) -> dict:
    global _CUDNN
    if _CUDNN is None:
        _CUDNN = kit.CudnnWorker(TMP)
    return _CUDNN.case(files, causal, extra, out)


def correctness(runners) -> None:
    for c in CHECK:
        if left() < 100:
            say("skip the rest of the checks (time)")
            log({"phase": "check", "case": name(c), "skipped": "time"})
            continue
        files, q, kd, vd = kit.make_case(TMP, c)
        ref = kit.reference(q, kd, vd, c[4])
        outs = {}
        for key, exe in runners.items():
            if key in HUNG:
                continue
            o = TMP / f"o_{key}.npy"
            line = kit.run_runner(exe, files, c[4], ["--iters", "1", "--warmup", "0"], out=o, timeout=20.0)
            if line.get("rc") == "timeout":
                HUNG.add(key)
            rec = {"phase": "check", "case": name(c), "impl": key}
            if "rc" in line:
                rec.update(line)
            else:
                outs[key] = np.load(o)
                rec.update(kit.errors(outs[key], ref), bn=line.get("bn"), q_terms=line.get("q_terms"),
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
            rec.update(kit.errors(np.load(o), ref), arithmetic=line.get("arithmetic"), version=line.get("peer_version"))
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
        files, q, kd, vd = kit.make_case(TMP, c)
        del q, kd, vd
        for r in range(ROUNDS):
            for key in [k for k in TIMED_RUNNERS if k in runners and k not in HUNG] + ["cudnn"]:
                args = ["--timing", "cold", "--iters", str(ITERS), "--warmup", "5"]
                # (the runner requires --out on every run: call 1 timed none of ours for want of it)
                line = run_cudnn(files, c[4], args) if key == "cudnn" else kit.run_runner(runners[key], files, c[4], args,
                                                                                     out=TMP / "o_time.npy", timeout=30.0)
                if line.get("rc") == "timeout":
                    HUNG.add(key)
                us = kit.p50(line)
                rec = {"phase": "time", "case": name(c), "impl": key, "round": r, "p50_us": us,
                       "tflops": kit.tflops(c, us) if us else None}
                if "rc" in line:
                    rec.update(line)
                else:
                    rec.update(samples_us=line.get("samples_us"), bn=line.get("bn"), q_terms=line.get("q_terms"),
                               l2_flush_bytes=line.get("l2_flush_bytes"))
                log(rec)
                say("time", name(c), key, r, us and f"{us:.1f} us {kit.tflops(c, us):.0f} TF/s", line.get("stderr", ""))
                SUMMARY.append(f"time  {name(c):22s} {key:10s} round {r} " +
                               (f"p50 {us:9.2f} us {kit.tflops(c, us):6.0f} TF/s" if us else f"{line.get('rc')}"))


# the four sanitizers on the new loop, at a shape that runs the 256-key kernel with two units per block
SAN_CASE = (2, 16, 1024, 128, False)


def sanitizers(runners) -> None:
    import shutil
    tool_exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    files, q, kd, vd = kit.make_case(TMP, SAN_CASE)
    ref = kit.reference(q, kd, vd, SAN_CASE[4])
    for key in [k for k in SAN_RUNNERS if k in runners]:
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            if left() < 30:
                log({"phase": "san", "impl": key, "tool": tool, "skipped": "time"})
                continue
            o = TMP / f"o_san_{key}.npy"
            cmd = [tool_exe, "--tool", tool, "--error-exitcode", "99", str(runners[key]), *kit.io_args(files),
                   "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", "--iters", "1", "--warmup", "0",
                   "--out", str(o)]
            t0 = time.time()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, min(120.0, left() - 20)))
                rc, tail = p.returncode, (p.stdout + p.stderr).strip().splitlines()[-3:]
            except subprocess.TimeoutExpired:
                rc, tail = "timeout", []
            rec = {"phase": "san", "case": name(SAN_CASE), "impl": key, "tool": tool, "rc": rc, "tail": tail,
                   "s": round(time.time() - t0, 1)}
            if rc == 0:
                line = json.loads([x for x in p.stdout.strip().splitlines() if x.startswith("{")][-1])
                rec.update(kit.errors(np.load(o), ref), bn=line.get("bn"))
            log(rec)
            say("san", key, tool, rc, rec.get("bn"), rec.get("rel_l2"), tail[-1:] if tail else "")
            SUMMARY.append(f"san   {name(SAN_CASE):22s} {key:10s} {tool:10s} rc {rc} bn {rec.get('bn')} "
                           f"rel_l2 {rec.get('rel_l2')}")


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
    which = sys.argv[1:] or ["check", "time", "san"]
    if "check" in which:
        correctness(runners)
    if "time" in which:
        timing(runners)
    if "san" in which:
        sanitizers(runners)
    (OUT / "summary.txt").write_text("\n".join(SUMMARY) + "\n")
    print("\n".join(SUMMARY), flush=True)
    say("done; hung:", sorted(HUNG))


if __name__ == "__main__":
    main()
