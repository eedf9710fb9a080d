"""The SDPA inputs and the float64 reference on the GPU, by torch: the same functions as `inputs.make` and
`sdpa.reference`, computed on a CUDA device, written as the .npy files the runners and the driver read.

Why: numpy on the CPU makes the bench's inputs in about a minute of CPU (2 G normals for 7 shapes x 3 distributions x
3 seeds) and the reference of the largest default shape, (4,32,4096,64), in 20-100 s per input set (2 x 275 GFLOP of
float64 matrix products and 2.1 G exponentials); an H100 does either in well under a second.

Inputs: the generator of driver/reference/inputs.py on torch (TorchBackend): the same integers and the same float64
operations in the same order as in numpy, so the files are the same bytes as `sdpa.make_inputs` makes on the CPU
(tests/gpu/test_reference_gpu.py checks it). Reference: the numpy reference's arithmetic term for term (Q as float64
times 1/sqrt(D), K and V decoded from their E4M3 codes by the same table times their scales, scores minus their row
max, exp, P V divided by the row sums, all in float64: cuBLAS DGEMM, no TF32, which torch never uses for float64),
with the same head groups and causal mask; only the summation order differs, by a few float64 ulps.

    python -m driver.reference.sdpa_gpu --q Q.npy --k K.npy --v V.npy --scales SCALES.npy --out REF.npy [--causal]
    python -m driver.reference.sdpa_gpu --make-inputs DIR --q-shape B,Hq,Sq,D --kv-shape B,Hkv,Skv,D --seed N
                                        --distribution NAME
    python -m driver.reference.sdpa_gpu --serve      (a long-lived worker taking either: driver/workers.py protocol)

Prints one JSON line: {"reference": OUT, "shape": [...], "seconds": ...} (records.ReferenceLine), or {"inputs": DIR,
"q_shape": [...], "kv_shape": [...], "k_scale": ..., "v_scale": ..., "generator": ..., "seconds": ...}
(records.InputsLine). Exit codes as the SDPA peers' (driver/peers/sdpa_io.py): 2 bad input, 3 a CUDA error, 4 no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from driver.peers import sdpa_io, serving
from driver.reference import inputs
from driver.reference.sdpa import _DECODE

_BLOCK_ELEMS = 1 << 26  # scores per block on the GPU (512 MiB of float64)
_KV_ELEMS = 1 << 27  # decoded K (and V) elements per block of heads (1 GiB of float64 each)


def reference(torch, q: np.ndarray, k_u8: np.ndarray, v_u8: np.ndarray, k_scale: float, v_scale: float,
              device: str = "cuda", *, causal: bool = False, into: np.ndarray | None = None) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) + mask) V in float64 on `device` (sdpa.reference's function: GQA head groups, the
    bottom-right causal mask); [B, Hq, Sq, D] float64 on the host, copied straight into `into` where given (a
    writable float64 array of that shape, e.g. the mapped output file). The (batch, K/V head) groups go in blocks whose
    scores (`_BLOCK_ELEMS`) and decoded K/V (`_KV_ELEMS`) stay bounded, rows in blocks where one group's scores
    alone would pass the bound; a causal block multiplies only the keys its last row sees."""
    (B, Hq, Sq, D), (_, Hkv, Skv, _) = inputs.check_shapes(q.shape, k_u8.shape, causal)
    if v_u8.shape != k_u8.shape:
        raise ValueError(f"K and V must share one [B,Hkv,Skv,D] shape, got {k_u8.shape} and {v_u8.shape}")
    group, bh = Hq // Hkv, B * Hkv
    rows = group * Sq
    table = torch.tensor(_DECODE, dtype=torch.float64, device=device)
    qd = torch.as_tensor(q).to(device).reshape(bh, rows, D)  # fp16; row g Sq + i of group (b, h)
    kd = torch.as_tensor(k_u8).to(device).reshape(bh, Skv, D)
    vd = torch.as_tensor(v_u8).to(device).reshape(bh, Skv, D)
    out = torch.empty((bh, rows, D), dtype=torch.float64, device=device)
    heads = max(1, min(bh, _BLOCK_ELEMS // (rows * Skv), _KV_ELEMS // (Skv * D)))
    block = rows if rows * Skv <= _BLOCK_ELEMS else max(1, _BLOCK_ELEMS // Skv)
    scale = 1.0 / math.sqrt(D)
    for h0 in range(0, bh, heads):
        h1 = min(bh, h0 + heads)
        k64 = table[kd[h0:h1].int()] * float(k_scale)
        v64 = table[vd[h0:h1].int()] * float(v_scale)
        for r0 in range(0, rows, block):
            r1 = min(rows, r0 + block)
            qb = qd[h0:h1, r0:r1].to(torch.float64) * scale
            if causal:
                last_host = np.arange(r0, r1) % Sq + (Skv - Sq)  # the last key each row sees
                keys = int(last_host.max()) + 1
                s = torch.bmm(qb, k64[:, :keys].transpose(1, 2))
                last = torch.as_tensor(last_host, device=device)
                s.masked_fill_(torch.arange(keys, device=device)[None, :] > last[:, None], -math.inf)
            else:
                keys = Skv
                s = torch.bmm(qb, k64.transpose(1, 2))
            s -= s.amax(dim=2, keepdim=True)
            s.exp_()
            o = torch.bmm(s, v64[:, :keys])
            o /= s.sum(dim=2, keepdim=True)
            out[h0:h1, r0:r1] = o
        del k64, v64
    out = out.reshape(B, Hq, Sq, D)
    if into is None:
        return out.cpu().numpy()
    torch.from_numpy(into).copy_(out)
    return into


def load_case(q: str, k: str, v: str, scales: str, causal: bool) -> sdpa_io.SdpaCase:
    """The four input files of one attention case (Q [B,Hq,Sq,D] fp16; K, V [B,Hkv,Skv,D] uint8 E4M3 codes; scales
    two positive floats), checked: one BadInput for the first thing wrong."""
    arrays = {}
    for name, path in (("Q", q), ("K", k), ("V", v), ("scales", scales)):
        if not Path(path).is_file():
            raise sdpa_io.BadInput(f"{name} input file {path} does not exist")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise sdpa_io.BadInput(f"{name} input file {path} is not a .npy array: {exc}") from None
    qa, ka, va, sa = arrays["Q"], arrays["K"], arrays["V"], arrays["scales"]
    if ka.shape != va.shape:
        raise sdpa_io.BadInput(f"K and V shapes disagree: K {list(ka.shape)}, V {list(va.shape)}")
    try:
        inputs.check_shapes(qa.shape if qa.ndim == 4 else (0,), ka.shape if ka.ndim == 4 else (0,), causal)
    except ValueError as exc:
        raise sdpa_io.BadInput(str(exc)) from None
    if qa.dtype != np.float16 or ka.dtype != np.uint8 or va.dtype != np.uint8:
        raise sdpa_io.BadInput(f"Q must be float16 and K, V uint8 E4M3 codes, got {qa.dtype}, {ka.dtype}, {va.dtype}")
    if sa.shape != (2,) or not np.issubdtype(sa.dtype, np.floating) or not (np.isfinite(sa).all() and (sa > 0).all()):
        raise sdpa_io.BadInput(f"scales must hold two positive finite floats [k_scale, v_scale], got {sa!r}")
    return sdpa_io.SdpaCase(q=qa, k_u8=ka, v_u8=va, k_scale=float(sa[0]), v_scale=float(sa[1]))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one `error:` line and the bad-input code, as the runners and peers do
        sdpa_io.fail(f"{self.prog}: {message}", sdpa_io.EXIT_BAD_INPUT)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is B,H,S,D (four integers), got {text!r}") from None
    if len(dims) != 4:
        raise argparse.ArgumentTypeError(f"a shape is B,H,S,D (four integers), got {text!r}")
    return dims


def make_inputs(argv: list[str]) -> None:
    p = _Parser(prog="driver.reference.sdpa_gpu --make-inputs")
    p.add_argument("--make-inputs", dest="folder", required=True)
    p.add_argument("--q-shape", type=_shape, required=True)
    p.add_argument("--kv-shape", type=_shape, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--distribution", required=True)
    ns = p.parse_args(argv)
    try:
        inputs.check_shapes(ns.q_shape, ns.kv_shape)
        inputs.distribution_of(ns.distribution)
        inputs._key(ns.seed)
    except ValueError as exc:
        sdpa_io.fail(str(exc), sdpa_io.EXIT_BAD_INPUT)
    if not Path(ns.folder).is_dir():
        sdpa_io.fail(f"--make-inputs {ns.folder}: no such folder", sdpa_io.EXIT_BAD_INPUT)
    torch = sdpa_io.import_torch()
    t0 = time.perf_counter()
    be = inputs.TorchBackend(torch, "cuda")
    try:
        _files, (k_scale, v_scale) = inputs.write_files(be, ns.folder, ns.q_shape, ns.kv_shape, ns.seed,
                                                        ns.distribution)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        sdpa_io.fail(f"inputs on the GPU: {' '.join(str(exc).split())[:300]}", sdpa_io.EXIT_CUDA_ERROR)
    finally:
        torch.cuda.empty_cache()
    print(json.dumps({"inputs": ns.folder, "q_shape": list(ns.q_shape), "kv_shape": list(ns.kv_shape),
                      "k_scale": k_scale, "v_scale": v_scale, "generator": f"{inputs.GENERATOR}; {be.name}",
                      "seconds": round(time.perf_counter() - t0, 4)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if "--make-inputs" in argv:
        make_inputs(argv)
        return
    p = _Parser(prog="driver.reference.sdpa_gpu")
    for name in ("q", "k", "v", "scales", "out"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--causal", action="store_true", help="bottom-right causal mask: row i sees keys j <= i + Skv - Sq")
    ns = p.parse_args(argv)
    try:
        case = load_case(ns.q, ns.k, ns.v, ns.scales, ns.causal)
    except sdpa_io.BadInput as exc:
        sdpa_io.fail(str(exc), sdpa_io.EXIT_BAD_INPUT)
    torch = sdpa_io.import_torch()
    t0 = time.perf_counter()
    # Written as it comes off the GPU into the mapped .npy file (no host array between, no second copy by np.save);
    # not flushed: the driver reads it from the page cache, then removes it.
    target = np.lib.format.open_memmap(ns.out, mode="w+", dtype=np.float64, shape=case.q.shape)
    try:
        reference(torch, case.q, case.k_u8, case.v_u8, case.k_scale, case.v_scale, causal=ns.causal, into=target)
    except RuntimeError as exc:  # CUDA out of memory and friends: one line, the peers' CUDA-error code
        sdpa_io.fail(f"reference on the GPU: {' '.join(str(exc).split())[:300]}", sdpa_io.EXIT_CUDA_ERROR)
    finally:
        del target
        torch.cuda.empty_cache()  # a served worker keeps no GPU memory between cases: the kernels timed next need it
    print(json.dumps({"reference": ns.out, "shape": list(case.q.shape),
                      "seconds": round(time.perf_counter() - t0, 4)}), flush=True)


def warm() -> None:
    """The worker's start-up, before it says it is ready (beside the runners' start-ups, which take longer): CUDA,
    then one small case's inputs and reference, so that the kernels and the cuBLAS handle they need are loaded here
    and not in the first case the suite waits for."""
    serving.warm_torch()
    import torch

    if not torch.cuda.is_available():
        return
    shape = (1, 1, 64, 64)
    made = inputs.make(inputs.TorchBackend(torch, "cuda"), shape, shape, 0, "normal", inputs.in_memory(shape, shape))
    reference(torch, made.q.reshape(shape), made.k.reshape(shape), made.v.reshape(shape), made.k_scale, made.v_scale)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


if __name__ == "__main__":
    serving.entry(main, warm=warm)
