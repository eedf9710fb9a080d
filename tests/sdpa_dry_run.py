"""A CPU dry run of the SDPA suite: where its wall time goes (the `phases`) when the GPU's work takes the times a
GPU took, without a GPU.

    PYTHONPATH=$PWD python -m tests.sdpa_dry_run [--shapes mission,large,...] [--scale 1.0]

Runs the suite's own code (`suites/sdpa.run`: Cases and its GPU worker plumbing, the checks side by side, the
verdicts, the interleaved rounds under the quiet lock, every output's error against its reference on the driver's
threads, the records) with doubles standing in for what needs a GPU: our two runners, the torch peer and the GPU
inputs/reference worker. Each double does the file work the real one does (reads the inputs, writes its output or
the reference, writes the input files through `inputs.write_files`) and sleeps for the GPU time, by the models
below. Everything the driver itself does is real: the numpy inputs and the CPU's share of the work, the error pass
over every output. What the doubles compute is not attention: the "reference" is Q in float64 and every output is Q
in fp16 (so every check passes and every variant is timed); the error pass costs the same on any values.

The models are from the 1x H200 run at e3ac34f (bench_results/20261129T001434Z-e3ac34fc-1xH200 and its progress
log; docs/TIMING.md, "Where the SDPA suite's time goes"): start-ups 4.1 s (the GPU worker) and 4.6 s (runners, the
torch peer); a check of ours 0.02 s + 8 ns per Q element (0.29 s at (4,32,4096,64)), of the torch peer 0.05 s + 20 ns
(0.72 s: it decodes K/V on the CPU); a timed run adds (iters + warmup) launches of flop / 450 TFLOP/s + 8 us (1.2 ms
at (4,32,4096,64), as measured); inputs 1 ns per Q, K or V value on the GPU; a reference 0.01 s + 0.25 s per 550
GFLOP (sdpa_gpu.py: 0.25 s at (4,32,4096,64)). They are estimates: the run says how the suite's own phases respond
to them (compare two checkouts with the same models), not what a GPU will measure.

Works with any checkout whose suite has GpuReference.SERVER, cpu_reference and write_inputs (2026-11-28 on).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# Seconds. See the module docstring for where each number comes from.
MODEL = {
    "startup_gpu_worker_s": 4.1,
    "startup_runner_s": 4.6,
    "ours_check_s": 0.02, "ours_check_s_per_q": 8e-9,
    "peer_check_s": 0.05, "peer_check_s_per_q": 20e-9,
    "launch_flops_per_s": 450e12, "launch_s": 8e-6,
    "inputs_s_per_value": 1e-9,
    "reference_s": 0.01, "reference_s_per_flop": 0.25 / 550e9,
}

RUNNER = r'''
import json, sys, time
import numpy as np
MODEL, IMPL, PEER = {model!r}, {impl!r}, {peer!r}
def case(argv):
    args, i = {{}}, 0
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        args[argv[i]] = argv[i + 1] if has_value else ""
        i += 2 if has_value else 1
    q = np.load(args["--q"])
    k = np.load(args["--k"])
    np.load(args["--v"])
    b, hq, sq, d = q.shape
    flop = 4 * q.size * k.shape[2]
    timed = int(args.get("--iters", "100")) > 1
    launch_s = flop / MODEL["launch_flops_per_s"] + MODEL["launch_s"]
    key = "peer" if PEER else "ours"
    sleep = MODEL[key + "_check_s"] + MODEL[key + "_check_s_per_q"] * q.size
    if timed:
        sleep += (int(args["--iters"]) + int(args.get("--warmup", "10"))) * launch_s
    time.sleep(sleep)
    np.save(args["--out"], q)
    p50 = launch_s * 1e6
    line = {{"suite": "sdpa", "impl": IMPL, "precision": args.get("--precision", "fp16"), "shape": list(q.shape),
             "iters": int(args.get("--iters", "100")), "warmup": int(args.get("--warmup", "10")),
             "samples_us": [p50 * 0.999, p50, p50, p50 * 1.001], "timing": args.get("--timing", "cold"),
             "batch": int(args.get("--batch", "1"))}}
    if not PEER:
        line["kernel"] = "wgmma_sm90"
    print(json.dumps(line), flush=True)
time.sleep(MODEL["startup_runner_s"])
'''

GPU_WORKER = r'''
import json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from driver.reference import inputs
MODEL = {model!r}

def fill(be, q_shape, kv_shape, seed, distribution, target, workers=1):
    """The files' bytes: any values do (the doubles compute nothing from them); the GPU's time is slept."""
    target.q[:] = np.float16(0.5)
    target.k[:] = 0x38
    target.v[:] = 0x38
    return target

def case(argv):
    arg = dict(zip(argv[::2], argv[1::2]))
    if "--make-inputs" in argv:
        qs = [int(x) for x in arg["--q-shape"].split(",")]
        kvs = [int(x) for x in arg["--kv-shape"].split(",")]
        t0 = time.perf_counter()
        time.sleep(MODEL["inputs_s_per_value"] * (np.prod(qs) + 2 * np.prod(kvs)))
        inputs.make = fill
        inputs.write_files(inputs.NUMPY, arg["--make-inputs"], qs, kvs, int(arg["--seed"]), arg["--distribution"])
        print(json.dumps({{"inputs": arg["--make-inputs"], "q_shape": qs, "kv_shape": kvs, "k_scale": 1.0,
                          "v_scale": 1.0, "generator": "dry run", "seconds": time.perf_counter() - t0}}), flush=True)
    else:
        t0 = time.perf_counter()
        q = np.load(arg["--q"])
        k = np.load(arg["--k"], mmap_mode="r")
        time.sleep(MODEL["reference_s"] + MODEL["reference_s_per_flop"] * 4 * q.size * k.shape[2])
        out = np.lib.format.open_memmap(arg["--out"], mode="w+", dtype=np.float64, shape=q.shape)
        out[...] = q
        del out
        print(json.dumps({{"reference": arg["--out"], "shape": list(q.shape),
                          "seconds": time.perf_counter() - t0}}), flush=True)
time.sleep(MODEL["startup_gpu_worker_s"])
'''


def _script(path: Path, text: str) -> Path:
    from tests.runner_doubles import SERVE

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + text + SERVE)
    path.chmod(0o755)
    return path


def dry_run(folder: Path, shapes: list[tuple[str, tuple[int, int, int, int]]], patch, model: dict | None = None,
            **opts) -> tuple[float, dict[str, float], int]:
    """The SDPA suite at `shapes` with the doubles (files under `folder`); `patch(obj, name, value)` sets what the
    run needs (pytest's monkeypatch.setattr, or a plain setattr in a script). (wall s, phases, records)."""
    import numpy as np

    from driver import device, peers, phases
    from driver.options import RunOptions
    from driver.records import DeviceInfo, GpuInfo
    from driver.suites import sdpa
    from driver.thresholds import load as load_thresholds

    model = {**MODEL, **(model or {})}
    exe_dir = folder / "build" / "sm_90"
    for impl, exe in sdpa.VARIANTS.items():
        _script(exe_dir / exe, RUNNER.format(model=model, impl=impl, peer=False))
    peer = _script(folder / "torch_sdpa_double.py", RUNNER.format(model=model, impl="torch_sdpa", peer=True))
    root = Path(sdpa.__file__).resolve().parents[2]  # the checkout under test (PYTHONPATH), for the worker double
    worker = _script(folder / "gpu_worker_double.py", GPU_WORKER.format(model=model, root=str(root)))
    dev = DeviceInfo(driver_version="dry run", gpus=[GpuInfo(index=0, name="NVIDIA H200", memory_mib=143771)])
    patch(device, "probe", lambda: dev)
    patch(device, "arch_of", lambda index=0: "sm_90")
    patch(sdpa, "nvml_sampler", lambda *a, **k: None)
    patch(peers, "missing", lambda name, gpu_arch=None: None if name == "torch_sdpa" else "not in the dry run")
    patch(peers, "command", lambda name, *args: [str(peer), *args])
    patch(sdpa.GpuReference, "SERVER", (str(worker),))

    def cpu_reference(files, causal=False, workers=None):  # the doubles' "reference", on the CPU
        time.sleep(model["reference_s"])
        return np.load(files["q"]).astype(np.float64)

    patch(sdpa, "cpu_reference", cpu_reference)
    run_opts = RunOptions(suites=("sdpa",), shapes=tuple(shapes), peers=("torch_sdpa",), **opts)
    phases.reset()
    result = sdpa.run(run_opts, exe_dir, dev, load_thresholds(None), "0" * 40)
    failed = [r for r in result.records if r.correctness.status == "fail"]
    if failed:
        raise AssertionError(f"{len(failed)} records failed in the dry run, e.g. {failed[0].correctness.reasons}")
    return phases.wall_s(), phases.snapshot(), len(result.records)


def main(argv: list[str] | None = None) -> None:
    from driver import config, phases

    p = argparse.ArgumentParser(prog="python -m tests.sdpa_dry_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=",".join(config.BENCH_SDPA_SHAPES))
    p.add_argument("--scale", type=float, default=1.0, help="every modelled GPU time times this")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the phases line")
    ns = p.parse_args(argv)
    shapes = [(name, config.SDPA_SHAPES[name]) for name in ns.shapes.split(",")]
    model = {k: v / ns.scale if k == "launch_flops_per_s" else v * ns.scale for k, v in MODEL.items()}
    with tempfile.TemporaryDirectory(prefix="sdpa-dry-run-") as tmp:
        wall, got, records = dry_run(Path(tmp), shapes, setattr, model)
    if ns.json:
        print(json.dumps({"wall_s": round(wall, 3), "phases_s": got, "records": records}))
    else:
        print(f"{records} records; {phases.one_line(wall, got)}")


if __name__ == "__main__":
    main()
