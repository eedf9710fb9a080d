"""cuDNN FP8 and torch SDPA peers on one GPU: versions, cuDNN's E4M3 decode against ours, then per
shape (seed 0) the float64 reference's host cost and each peer in cold and hot timing with its error
against that reference. The peers' own main() runs in this process (torch is imported once).

    PYTHONPATH=<bundle>:<bundle>/site/py312 python3 run_peers.py OUTDIR
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def main() -> None:
    out_dir = Path(sys.argv[1])
    import torch

    from driver.peers import cudnn_sdpa, torch_sdpa
    from driver.reference import sdpa as ref
    from driver.verify import sdpa_errors

    log(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}, "
        f"sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}, torch cuDNN {torch.backends.cudnn.version()}")
    cudnn = cudnn_sdpa.import_cudnn()
    log(f"cudnn-frontend loaded: {cudnn_sdpa.versions(torch, cudnn)}")
    check = cudnn_sdpa.decode_check(torch, cudnn)
    log(f"decode check: {json.dumps(check)}")
    rows = []
    shapes = [("mission", (1, 8, 512, 64), ("cold", "hot")), ("large_d128", (2, 16, 2048, 128), ("cold", "hot")),
              ("long_d128", (1, 16, 8192, 128), ("cold", "hot")), ("odd", (3, 5, 777, 64), ("cold",))]
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, modes in shapes:
            t = time.perf_counter()
            q, k, v, ks, vs = ref.make_inputs(shape, 0)
            t_in = time.perf_counter() - t
            t = time.perf_counter()
            expected = ref.reference(q, k, v, ks, vs)
            t_ref = time.perf_counter() - t
            log(f"{name} {shape}: make_inputs {t_in:.2f} s, float64 reference {t_ref:.2f} s")
            files = {n: Path(tmp) / f"{n}.npy" for n in ("q", "k", "v", "scales")}
            for n, a in (("q", q), ("k", k), ("v", v), ("scales", np.array([ks, vs], dtype=np.float32))):
                np.save(files[n], a)
            for peer in (cudnn_sdpa, torch_sdpa):
                for mode in modes:
                    outp = Path(tmp) / f"out_{peer.IMPL}_{mode}.npy"
                    argv = [a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))]
                    argv += ["--iters", "100", "--warmup", "10", "--timing", mode, "--batch", "20", "--out", str(outp)]
                    buf = io.StringIO()
                    t = time.perf_counter()
                    try:
                        with contextlib.redirect_stdout(buf):
                            peer.main(argv)
                    except SystemExit as exc:
                        log(f"{name} {peer.IMPL} {mode}: exit {exc.code} (the error line is above)")
                        rows.append({"shape": name, "impl": peer.IMPL, "timing": mode, "exit": exc.code})
                        continue
                    line = json.loads(buf.getvalue().strip().splitlines()[-1])
                    errs = sdpa_errors(np.load(outp), expected, bad_err=0.06)
                    row = {"shape": name, "dims": list(shape), "impl": peer.IMPL, "timing": mode,
                           "p50_us": line["p50_us"], "tflops": line["tflops"], "max_abs_err": errs.max_abs_err,
                           "rel_l2": errs.rel_l2, "bad_frac": errs.bad_frac, "wall_s": time.perf_counter() - t,
                           "line": line}
                    rows.append(row)
                    log(f"{name} {peer.IMPL} {mode}: p50 {line['p50_us']:.2f} us, {line['tflops']:.1f} TFLOP/s, "
                        f"max_abs_err {errs.max_abs_err}, rel_l2 {errs.rel_l2}, ({row['wall_s']:.1f} s)")
    (out_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows)
                                           + json.dumps({"decode_check": check}) + "\n")
    print("\n| shape | impl | timing | p50 us | TFLOP/s | max_abs_err | rel_l2 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "p50_us" in r:
            print(f"| {r['shape']} | {r['impl']} | {r['timing']} | {r['p50_us']:.2f} | {r['tflops']:.1f} | "
                  f"{r['max_abs_err']:.4f} | {r['rel_l2']:.4f} |")
        else:
            print(f"| {r['shape']} | {r['impl']} | {r['timing']} | exit {r['exit']} | | | |")
    precisions = {r["impl"]: r["line"]["precision"] for r in rows if "line" in r}
    for impl, text in precisions.items():
        print(f"precision {impl}: {text}")


if __name__ == "__main__":
    main()
