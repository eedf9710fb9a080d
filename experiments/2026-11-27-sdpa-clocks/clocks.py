"""Which SM clock and power does each SDPA implementation run at while it is timed?

  python3 clocks.py --runner RUNNER --out OUT_DIR [--shapes 4x32x4096x64,...] [--seconds 2.0] [--modes cold,hot]

For each shape, mode and implementation (our runner's fp16 and fp8 tiers, the torch SDPA peer, the cuDNN FP8
peer), one process times the case as the bench does (the same command lines: `--timing cold|hot`, 10 warm-up
launches, iterations chosen so that the timed part lasts about --seconds), while a thread of this script reads
NVML every 2 ms: SM clock, instantaneous power (field NVML_FI_DEV_POWER_INSTANT where the driver has it, else
the averaged reading) and the clock event reasons. The implementations alternate per shape and mode.

A process's window is [its start, its end]; the samples that count are those with instantaneous power >= --busy-w
(an SDPA kernel at work; the import, the input upload, the hold kernel and an idle GPU draw less). Per window:
the samples counted, SM clock p10 / p50 / p90, power p50 / p90, and the share of counted samples with each
clock event reason. Inputs: experiments/2026-11-23-sdpa-hopper/check_and_time.py make_inputs (N(0,1), seed 0).
Run with the bundle's Python path (its site holds nvidia-ml-py; `driver.peers.*` are the bench's peers).
--runner-args and --label: our runner with more flags (an ablation), named apart in the records.
Writes OUT_DIR/samples.jsonl.gz (every sample), OUT_DIR/phases.jsonl (one record per process) and prints a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments" / "2026-11-23-sdpa-hopper"))
import pynvml as nv
from check_and_time import make_inputs

SHAPES = "4x32x4096x64,2x16x2048x64,2x16x2048x128,1x16x8192x128"


def p50_of(line: dict) -> float | None:
    """The line's p50: its p50_us where it has one, else the median of samples_us (since 2026-11-28 the runners and
    peers write the samples only; the driver takes every p50 with one estimator)."""
    if line.get("p50_us") is not None:
        return line["p50_us"]
    s = line.get("samples_us")
    return float(np.median(s)) if s else None
FIELD_POWER_INSTANT = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", 186)
REASONS = {
    "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
    "idle": 0x1, "app_clocks": 0x2,
}


class Sampler(threading.Thread):
    def __init__(self, handle, period_s: float = 0.002):
        super().__init__(daemon=True)
        self.h, self.period, self.rows, self.stop = handle, period_s, [], threading.Event()
        self.instant = True

    def power_w(self) -> float:
        if self.instant:
            try:
                v = nv.nvmlDeviceGetFieldValues(self.h, [FIELD_POWER_INSTANT])[0]
                if v.nvmlReturn == 0:
                    return v.value.uiVal / 1000.0
            except nv.NVMLError:
                pass
            self.instant = False
        return nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.time()
            try:
                reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(self.h)
            except (AttributeError, nv.NVMLError):
                reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(self.h)
            self.rows.append((t, nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM), self.power_w(), int(reasons)))
            time.sleep(self.period)


def flops(shape) -> float:
    b, h, s, d = shape
    return 4.0 * b * h * s * s * d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True, help="sdpa_fp8_cpasync (ours)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--modes", default="cold,hot")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed part of each process, about")
    ap.add_argument("--busy-w", type=float, default=300.0, help="samples at or above this power count")
    ap.add_argument("--impls", default="ours_fp16,torch_sdpa,ours_fp8,cudnn_fp8")
    ap.add_argument("--runner-args", default="", help="more arguments for our runner, e.g. '--ablate no_loads'")
    ap.add_argument("--label", default="", help="appended to our implementations' names in the records")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    print(f"{nv.nvmlDeviceGetName(h)}, driver {nv.nvmlSystemGetDriverVersion()}, max SM clock "
          f"{nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)} MHz, power limit "
          f"{nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000:.0f} W", flush=True)
    sampler = Sampler(h)
    sampler.start()
    phases = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.shapes.split(","):
            shape = tuple(int(x) for x in spec.split("x"))
            q, k, v, ks, vs = make_inputs(shape, 0)
            files = {n: Path(tmp) / f"{n}.npy" for n in ("q", "k", "v", "scales")}
            for n, x in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
                np.save(files[n], x)
            io = [x for n in ("q", "k", "v", "scales") for x in (f"--{n}", str(files[n]))]
            # A guess of the launch time (us) at ~600 TF/s fp16, ~900 fp8, to size --iters.
            for mode in a.modes.split(","):
                for impl in a.impls.split(","):
                    est_us = flops(shape) / (900e6 if "fp8" in impl else 600e6) + (40 if mode == "cold" else 0)
                    iters = max(100, int(a.seconds * 1e6 / est_us))
                    common = ["--timing", mode, "--iters", str(iters), "--warmup", "10", "--batch", "20"]
                    if impl.startswith("ours"):
                        prec = impl.split("_")[1]
                        kernel = "wgmma_sm90" if prec == "fp16" else "wgmma_fp8_sm90"
                        cmd = [a.runner, *io, "--out", str(Path(tmp) / "out.npy"), "--precision", prec, "--kernel",
                               kernel, *a.runner_args.split(), *common]
                    else:
                        cmd = [sys.executable, "-m", f"driver.peers.{'torch_sdpa' if impl == 'torch_sdpa' else 'cudnn_sdpa'}",
                               *io, *common]
                    t0 = time.time()
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                    t1 = time.time()
                    line = {}
                    if p.returncode == 0:
                        try:
                            line = json.loads(p.stdout.strip().splitlines()[-1])
                        except (ValueError, IndexError):
                            pass
                    rows = [r for r in sampler.rows if t0 <= r[0] <= t1]
                    busy = [r for r in rows if r[2] >= a.busy_w]
                    clk = np.array([r[1] for r in busy]) if busy else np.array([np.nan])
                    pw = np.array([r[2] for r in busy]) if busy else np.array([np.nan])
                    rec = {
                        "shape": list(shape), "mode": mode, "rc": p.returncode,
                        "impl": impl + (a.label if impl.startswith("ours") else ""), "runner": a.runner,
                        "runner_args": a.runner_args if impl.startswith("ours") else "",
                        "stderr_tail": p.stderr.strip()[-300:] if p.returncode else "",
                        "iters": iters, "p50_us": p50_of(line), "window_s": round(t1 - t0, 3),
                        "samples": len(rows), "busy_samples": len(busy),
                        "sm_mhz_p10": float(np.percentile(clk, 10)), "sm_mhz_p50": float(np.percentile(clk, 50)),
                        "sm_mhz_p90": float(np.percentile(clk, 90)),
                        "power_w_p50": float(np.percentile(pw, 50)), "power_w_p90": float(np.percentile(pw, 90)),
                        "reasons_frac": {n: (sum(1 for r in busy if r[3] & m) / len(busy) if busy else None)
                                         for n, m in REASONS.items()},
                        "power_instant": sampler.instant,
                    }
                    if rec["p50_us"]:
                        rec["tflops"] = flops(shape) / rec["p50_us"] / 1e6
                    phases.append(rec)
                    print(json.dumps(rec), flush=True)
    sampler.stop.set()
    sampler.join()
    with gzip.open(out / "samples.jsonl.gz", "wt") as f:
        for r in sampler.rows:
            f.write(json.dumps({"t": r[0], "sm_mhz": r[1], "power_w": r[2], "reasons": r[3]}) + "\n")
    with open(out / "phases.jsonl", "w") as f:
        for r in phases:
            f.write(json.dumps(r) + "\n")
    print("\n| shape | mode | impl | p50 us | TF/s | busy samples | SM MHz p10 / p50 / p90 | W p50 / p90 | sw_power_cap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in phases:
        pc = r["reasons_frac"]["sw_power_cap"]
        tf = f"{r['tflops']:.0f}" if r.get("tflops") else "-"
        print(f"| {tuple(r['shape'])} | {r['mode']} | {r['impl']} | {r['p50_us'] or '-'} | {tf} | {r['busy_samples']} | "
              f"{r['sm_mhz_p10']:.0f} / {r['sm_mhz_p50']:.0f} / {r['sm_mhz_p90']:.0f} | "
              f"{r['power_w_p50']:.0f} / {r['power_w_p90']:.0f} | {'-' if pc is None else f'{pc:.2f}'} |")
    return 0 if all(r["rc"] == 0 for r in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
