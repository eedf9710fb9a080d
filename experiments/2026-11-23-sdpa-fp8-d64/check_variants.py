"""Check several builds of the SDPA runners (NAME=DIR each: DIR holds sdpa_fp8_baseline and
sdpa_fp8_cpasync) against the float64 reference at many shapes, sharing each shape's inputs and
reference between them, time them at the --time-shapes, and time torch SDPA (fp16: the default
backend and the flash backend) at the same shapes the same way, in one process.  (Extends
experiments/2026-11-23-sdpa-hopper/check_and_time.py, whose helpers it imports, to several builds per call.)

  python3 check_variants.py --variants main=DIR,poly4=DIR2 --out OUT_DIR [--shapes 1x8x512x64,...]
                            [--time-shapes 2x16x2048x64,...] [--iters 50] [--kernels wgmma_fp8_sm90]

Inputs: check_and_time.make_inputs (the driver's generator, copied in numpy: the same bits). Reference: the exact
E4M3 decode, softmax(Q K^T / sqrt(D)) V in float64 on the GPU through torch (numpy's reference is
cross-checked on the smallest shape). Gates: thresholds.toml [sdpa] (max_abs_err, bad_err,
max_bad_frac). Each runner writes its output from one launch into a NaN-poisoned buffer, so unwritten
elements fail. baseline and cpasync outputs are also compared bit for bit. Timing: the runners' own
per-launch CUDA events (p50); torch with one event pair per launch behind a sleep kernel, as
driver/peers/torch_sdpa.py does. Writes results.jsonl under OUT_DIR and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# The helpers are check_and_time.py's (the single-build checker this one extends), imported, not copied.
sys.path.insert(0, str(ROOT / "experiments" / "2026-11-23-sdpa-hopper"))
from check_and_time import (  # noqa: E402
    DEFAULT_SHAPES,
    bit_identical_record,
    check_runner,
    make_inputs,
    parse_shape,
    reference,
    status_text,
    time_torch_peers,
    torch_reference,
    write_inputs,
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", required=True, help="NAME=DIR,NAME=DIR,...")
    ap.add_argument("--time-shapes", default=None, help="shapes timed (default: all); the rest launch once")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--extra-seeds-max-elems", type=int, default=2_000_000, help="seeds beyond the first only up to this size")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--kernels", default="wgmma_fp8_sm90", help="comma list; mma_sync_sm80 adds the old kernel (timed only)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--runner-args", default="", help="extra runner arguments, e.g. '--split 1'")
    ap.add_argument("--label", default="", help="tag for the records (a build variant)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per runner process")
    args = ap.parse_args()
    import torch

    gates = tomllib.loads((ROOT / "thresholds.toml").read_text())["sdpa"]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / "results.jsonl").open("a")
    variants = [(v.split("=", 1)[0], Path(v.split("=", 1)[1])) for v in args.variants.split(",")]
    time_shapes = None if args.time_shapes is None else {parse_shape(x) for x in args.time_shapes.split(",") if x}
    seeds = [int(s) for s in args.seeds.split(",")]
    kernels = args.kernels.split(",")
    rows = []
    hung: set[tuple[str, str]] = set()
    dev = torch.device("cuda", 0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    for shape_s in args.shapes.split(","):
        shape = parse_shape(shape_s)
        B, H, S, D = shape
        flops = 4.0 * B * H * S * S * D
        for seed in seeds:
            if seed != seeds[0] and B * H * S * D > args.extra_seeds_max_elems:
                continue
            t0 = time.time()
            q, k, v, ks, vs = make_inputs(shape, seed)
            expected = torch_reference(torch, q, k, v, ks, vs)
            if B * H * S * D <= 16384 and seed == seeds[0]:
                np_ref = reference(q, k, v, ks, vs)
                print(f"  numpy vs torch float64 reference {shape}: max diff {np.abs(np_ref - expected.cpu().numpy()).max():.3g}")
            timed = seed == seeds[0] and (time_shapes is None or shape in time_shapes)
            with tempfile.TemporaryDirectory() as tmp:
                fargs = write_inputs(Path(tmp), q, k, v, ks, vs)
                for vname, exe_dir in variants:
                    outs = {}
                    for kern in kernels:
                        for impl in ("baseline", "cpasync"):
                            o = Path(tmp) / f"out_{impl}_{kern}.npy"
                            iters = ["--iters", str(args.iters), "--warmup", str(args.warmup)] if timed else ["--iters", "1", "--warmup", "0", "--no-spin"]
                            cmd = [str(exe_dir / f"sdpa_fp8_{impl}"), *fargs, "--out", str(o), *iters, "--kernel", kern,
                                   *args.runner_args.split()]
                            rec = {"shape": list(shape), "seed": seed, "impl": impl, "kernel_req": kern, "label": vname,
                                   "runner_args": args.runner_args}
                            if (vname, impl, kern) in hung:
                                continue
                            did_hang, out = check_runner(torch, cmd, o, rec, expected, gates, args.timeout)
                            if did_hang:
                                hung.add((vname, impl, kern))  # a hang costs device time: no further runs of it
                            if out is not None:
                                outs[(impl, kern)] = out
                            log.write(json.dumps(rec) + "\n")
                            log.flush()
                            rows.append(rec)
                            print(f"{shape_s} s{seed} {vname:12s} {impl:8s} {kern:13s} {status_text(rec, timed, flops)}", flush=True)
                        same = bit_identical_record(outs, kern, shape, seed, shape_s, f"{vname} ", {"label": vname})
                        if same is not None:
                            rows.append(same)
                            log.write(json.dumps(same) + "\n")
            if timed and not args.no_torch:
                for rec in time_torch_peers(torch, dev, q, k, v, ks, vs, shape, seed, shape_s, args.iters,
                                            args.warmup, flops):
                    rows.append(rec)
                    log.write(json.dumps(rec) + "\n")
            del expected
            torch.cuda.empty_cache()
            print(f"  ({time.time() - t0:.1f} s)", flush=True)

    # ---- summary table (last): per shape, each build's cpasync p50 us (TF/s), its time / torch flash's
    # (< 1: ours faster), and whether every check of that build at that shape passed ----
    names = [n for n, _ in variants]
    print("\ncpasync p50 us (TF/s) [time / torch flash]; X = a check failed (see above)")
    print("| shape | " + " | ".join(names) + " | torch flash | torch default |")
    print("|---|" + "---|" * (len(names) + 2))
    all_ok = True
    for shape_s in args.shapes.split(","):
        shape = list(parse_shape(shape_s))
        B, H, S, D = shape
        flops = 4.0 * B * H * S * S * D
        sel = [r for r in rows if r["shape"] == shape]
        tf = {r["impl"]: r["p50_us"] for r in sel if r.get("impl", "").startswith("torch") and "p50_us" in r}
        fl = tf.get("torch_flash")
        cells = []
        for n in names:
            mine = [r for r in sel if r.get("label") == n]
            ok = bool(mine) and all(r.get("pass", True) and "error" not in r and r.get("bit_identical", True) for r in mine)
            all_ok &= ok
            c = [r["line"]["p50_us"] for r in mine if r.get("impl") == "cpasync" and r["seed"] == seeds[0] and "line" in r]
            timed = time_shapes is None or tuple(shape) in time_shapes
            if c and timed:
                cell = f"{c[0]:.2f} ({flops / c[0] / 1e6:.0f})" + (f" [{c[0] / fl:.2f}]" if fl else "")
            else:
                cell = "ok" if ok else "-"
            cells.append(cell + ("" if ok else " X"))
        fmt = lambda us: f"{us:.2f} ({flops / us / 1e6:.0f})" if us else "-"
        print(f"| {shape_s} | " + " | ".join(cells) + f" | {fmt(fl)} | {fmt(tf.get('torch_default'))} |")
    print(f"\nall checks passed: {all_ok}")
    return 0 if all_ok else 7


if __name__ == "__main__":
    sys.exit(main())
