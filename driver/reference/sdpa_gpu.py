"""The float64 SDPA reference on the GPU: the same function as `sdpa.reference`, computed by torch in
float64 on a CUDA device, written as a float64 .npy.

Why: the numpy reference of the largest default shape, (4,32,4096,64), takes 20-100 s of CPU per input
set (2 x 275 GFLOP of float64 matrix products and 2.1 G exponentials), and the checks need one per
shape, seed and input distribution; an H100 does the same float64 work in well under a second. The
arithmetic is the numpy reference's, term for term: Q as float64 times 1/sqrt(D), K and V decoded from
their E4M3 codes by the same table (`sdpa._DECODE`) times their scales, scores minus their row max,
exp, P V divided by the row sums, all in float64 (cuBLAS DGEMM, no TF32: torch never uses it for
float64). Only the summation order differs, by a few float64 ulps (tests/gpu checks it against numpy).

    python -m driver.reference.sdpa_gpu --q Q.npy --k K.npy --v V.npy --scales SCALES.npy --out REF.npy
    python -m driver.reference.sdpa_gpu --serve      (a long-lived worker: driver/workers.py protocol)

Prints one JSON line {"reference": OUT, "shape": [...], "seconds": ...}. Exit codes as the SDPA peers'
(driver/peers/sdpa_io.py): 2 bad input, 3 a CUDA error, 4 no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from driver.peers import sdpa_io, serving
from driver.reference.sdpa import _DECODE

_BLOCK_ELEMS = 1 << 26  # scores per block on the GPU (512 MiB of float64)


def reference(torch, q: np.ndarray, k_u8: np.ndarray, v_u8: np.ndarray, k_scale: float, v_scale: float,
              device: str = "cuda") -> np.ndarray:
    """softmax(Q K^T / sqrt(D)) V in float64 on `device`; [B, H, S, D] float64 on the host."""
    B, H, S, D = q.shape
    table = torch.tensor(_DECODE, dtype=torch.float64, device=device)
    qd = torch.as_tensor(q, device=device).to(torch.float64).reshape(B * H, S, D) * (1.0 / math.sqrt(D))
    kd = table[torch.as_tensor(k_u8, device=device).long()].reshape(B * H, S, D) * float(k_scale)
    vd = table[torch.as_tensor(v_u8, device=device).long()].reshape(B * H, S, D) * float(v_scale)
    out = torch.empty((B * H, S, D), dtype=torch.float64, device=device)
    heads = max(1, min(B * H, _BLOCK_ELEMS // (S * S)))
    rows = S if heads > 1 else max(1, min(S, _BLOCK_ELEMS // S))
    for h0 in range(0, B * H, heads):
        kt = kd[h0:h0 + heads].transpose(1, 2)
        for r0 in range(0, S, rows):
            s = torch.bmm(qd[h0:h0 + heads, r0:r0 + rows], kt)
            s -= s.amax(dim=2, keepdim=True)
            s.exp_()
            o = torch.bmm(s, vd[h0:h0 + heads])
            o /= s.sum(dim=2, keepdim=True)
            out[h0:h0 + heads, r0:r0 + rows] = o
    return out.reshape(B, H, S, D).cpu().numpy()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="driver.reference.sdpa_gpu")
    for name in ("q", "k", "v", "scales", "out"):
        p.add_argument(f"--{name}", required=True)
    ns = p.parse_args(argv)
    try:
        case = sdpa_io.load_case(ns.q, ns.k, ns.v, ns.scales)
    except sdpa_io.BadInput as exc:
        sdpa_io.fail(str(exc), sdpa_io.EXIT_BAD_INPUT)
    torch = sdpa_io.import_torch()
    t0 = time.perf_counter()
    try:
        ref = reference(torch, case.q, case.k_u8, case.v_u8, case.k_scale, case.v_scale)
    except RuntimeError as exc:  # CUDA out of memory and friends: one line, the peers' CUDA-error code
        sdpa_io.fail(f"reference on the GPU: {' '.join(str(exc).split())[:300]}", sdpa_io.EXIT_CUDA_ERROR)
    finally:
        torch.cuda.empty_cache()  # a served worker keeps no GPU memory between cases: the kernels timed next need it
    np.save(ns.out, ref)
    print(json.dumps({"reference": ns.out, "shape": list(case.shape),
                      "seconds": round(time.perf_counter() - t0, 4)}), flush=True)


if __name__ == "__main__":
    serving.entry(main)
