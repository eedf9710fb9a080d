"""What every SDPA peer shares: its command line, its inputs read and checked, its timing, its line.

Every peer speaks our runners' vocabulary: `--q --k --v --scales` (.npy files: Q float16
[B,Hq,Sq,D]; K, V uint8 E4M3 codes [B,Hkv,Skv,D], Hq a multiple of Hkv; scales float32
[k_scale, v_scale]), `--causal` (the bottom-right aligned mask: query row i sees keys
j <= i + Skv - Sq), `--iters --warmup`, `--timing cold|hot` (`--batch` launches per hot sample)
and `--out` (the output, float16 [B,Hq,Sq,D], for the driver to check against the float64
reference). It prints one SdpaLine as JSON on stdout, naming the case it ran (q_shape, kv_shape,
causal), which the driver checks against the case it asked for.

Exit codes are the runners' (docs/BUILD.md, "Kernel executable interface"): 2 bad input (one
`error:` line naming the file or the shape; checked before torch is imported, so a bad
request costs no GPU), 3 a library or CUDA error or a mode the peer cannot do (the driver
records the peer, or that mode, as skipped with the line), 4 no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

from driver.config import SDPA_HEAD_DIMS
from driver.errors import RunnerExit
from driver.records import SDPA_PEER_PRECISION

EXIT_BAD_INPUT, EXIT_CUDA_ERROR, EXIT_NO_GPU = RunnerExit.BAD_INPUT, RunnerExit.CUDA_ERROR, RunnerExit.NO_GPU
MODES = ("cold", "hot")


class BadInput(ValueError):
    """The input files do not describe one SDPA problem we run; str() says which and why."""


def fail(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one `error:` line and the bad-input code, as the runners do
        fail(f"{self.prog}: {message}", EXIT_BAD_INPUT)


def parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog)
    for name in ("q", "k", "v", "scales"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timing", default="cold", choices=MODES)
    p.add_argument("--batch", type=int, default=20, help="hot: launches per graph replay")
    p.add_argument("--out", default=None, help="write the output here (float16 [B,Hq,Sq,D] .npy)")
    p.add_argument("--causal", action="store_true",
                   help="the bottom-right aligned causal mask: query row i sees keys j <= i + Skv - Sq")
    return p


@dataclass(frozen=True)
class SdpaCase:
    q: np.ndarray  # float16 [B, Hq, Sq, D]
    k_u8: np.ndarray  # uint8 E4M3 codes [B, Hkv, Skv, D]
    v_u8: np.ndarray
    k_scale: float
    v_scale: float
    causal: bool = False  # bottom-right aligned

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """Q's shape [B, Hq, Sq, D] (and O's)."""
        return tuple(int(n) for n in self.q.shape)  # type: ignore[return-value]

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        return tuple(int(n) for n in self.k_u8.shape)  # type: ignore[return-value]

    @property
    def key(self) -> tuple:
        """What a graph or plan built for this case depends on: both shapes and the mask."""
        return self.shape, self.kv_shape, self.causal


def _load(path: str, what: str, mmap: bool = False) -> np.ndarray:
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"{what} input file {path} does not exist")
    try:
        return np.load(file, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError, EOFError) as exc:
        raise BadInput(f"{what} input file {path} is not a .npy array: {exc}") from None


def load_case(q: str, k: str, v: str, scales: str, causal: bool = False, mmap_kv: bool = False) -> SdpaCase:
    """The four input files, read and checked (the runners' checks, attn_shape.h): one clear BadInput for the
    first thing wrong. `mmap_kv`: K and V mapped read-only, not read, until a peer touches them (a peer whose K/V
    are memoized on the GPU, `kv_fp16_on_gpu`, never reads them again for the same files)."""
    arrays = {name: _load(path, name.upper() if name != "scales" else "scales", mmap_kv and name in ("k", "v"))
              for name, path in (("q", q), ("k", k), ("v", v), ("scales", scales))}
    qa, ka, va, sa = arrays["q"], arrays["k"], arrays["v"], arrays["scales"]
    if qa.ndim != 4:
        raise BadInput(f"Q must be [B,Hq,Sq,D], got {qa.ndim} dimension(s) {list(qa.shape)}")
    shapes = f"Q {list(qa.shape)}, K {list(ka.shape)}, V {list(va.shape)}"
    if ka.ndim != 4 or va.shape != ka.shape:
        raise BadInput(f"Q, K and V shapes disagree: {shapes}: K and V must share one shape [B,Hkv,Skv,D]")
    b, h, s, d = qa.shape
    if s == 0 or ka.shape[2] == 0:
        raise BadInput(f"S = 0 in shape Q {list(qa.shape)}, K/V {list(ka.shape)}: there is no sequence to attend over")
    if min(b, h, d, *ka.shape) == 0:
        raise BadInput(f"shape Q {list(qa.shape)}, K/V {list(ka.shape)} has a zero dimension")
    if (ka.shape[0], ka.shape[3]) != (b, d):
        raise BadInput(f"Q, K and V shapes disagree: {shapes}: Q [B,Hq,Sq,D] and K/V [B,Hkv,Skv,D] share B and D")
    if h % ka.shape[1]:
        raise BadInput(f"Q has {h} heads, K/V {ka.shape[1]}: Hq must be a multiple of Hkv (grouped-query heads)")
    if causal and s > ka.shape[2]:
        raise BadInput(f"causal with Sq = {s} > Skv = {ka.shape[2]}: bottom-right alignment leaves query rows "
                       f"0..{s - ka.shape[2] - 1} without a key")
    if d not in SDPA_HEAD_DIMS:
        raise BadInput(f"head dim {d} is not supported (supported: {', '.join(map(str, SDPA_HEAD_DIMS))})")
    if qa.dtype != np.float16:
        raise BadInput(f"Q must be float16, got {qa.dtype}")
    if ka.dtype != np.uint8 or va.dtype != np.uint8:
        raise BadInput(f"K and V must be uint8 E4M3 codes, got {ka.dtype} and {va.dtype}")
    if sa.shape != (2,) or not np.issubdtype(sa.dtype, np.floating) or not (np.isfinite(sa).all() and (sa > 0).all()):
        raise BadInput(f"scales must hold two positive finite floats [k_scale, v_scale], got {sa!r}")
    return SdpaCase(q=qa, k_u8=ka, v_u8=va, k_scale=float(sa[0]), v_scale=float(sa[1]), causal=causal)


def args_and_case(prog: str, argv: list[str] | None = None,
                  mmap_kv: bool = False) -> tuple[argparse.Namespace, SdpaCase]:
    """The command line and the inputs, or one error line and exit 2 (`mmap_kv`: load_case's)."""
    ns = parser(prog).parse_args(argv)
    if ns.iters < 1 or ns.warmup < 0 or ns.batch < 1:
        fail("--iters and --batch must be >= 1, --warmup >= 0", EXIT_BAD_INPUT)
    try:
        return ns, load_case(ns.q, ns.k, ns.v, ns.scales, ns.causal, mmap_kv)
    except BadInput as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def import_torch():
    """torch with a usable GPU, or the error line and code the driver expects."""
    try:
        import torch
    except ImportError:
        fail("torch is not installed on this host", EXIT_BAD_INPUT)
    if not torch.cuda.is_available():
        fail("no GPU: torch sees no CUDA device", EXIT_NO_GPU)
    return torch


def time_mode(torch, fn: Callable[[], object], ns: argparse.Namespace) -> tuple[list[float], int, int]:
    """Per-launch times (us) in the mode asked for, the launches per sample and the L2 flush bytes.

    cold: each launch alone behind a spin kernel, a write of max(2 x L2, 64 MiB) before each;
    hot: `--batch` launches captured in one CUDA graph and replayed. A callable that cannot be
    captured ends the peer with exit 3 and the reason: that mode is skipped, never timed another way.
    """
    from driver.peers import torch_timing

    if ns.timing == "cold":
        flush = torch_timing.l2_flush_bytes(torch, 0)
        return torch_timing.time_cold(torch, fn, iters=ns.iters, warmup=ns.warmup, flush_bytes=flush), 1, flush
    try:
        return torch_timing.time_hot(torch, fn, iters=ns.iters, warmup=ns.warmup, launches=ns.batch), ns.batch, 0
    except torch_timing.GraphCaptureFailed as exc:
        fail(f"hot timing: {exc}", EXIT_CUDA_ERROR)


_MEMO: dict[tuple, tuple[object, int]] = {}
_MEMO_ENTRIES = 8  # a served peer sees a shape's timed seed once per round and mode: keep a few
# What the memo holds at most, by the sizes its callers declare: fp16 K/V on the GPU are 8.6 GB at decode with
# B 64, Skv 32K, next to our runners' and the reference's memory on the same GPU.
_MEMO_BYTES = 12 << 30


def memo(what: str, files: tuple[str, ...], make: Callable[[], object], nbytes: int = 0) -> object:
    """`make()`, computed once per content of `files` in this process: a served peer (long-lived worker)
    asked for the same inputs in every round quantizes or decodes them once. Keyed by each file's path,
    size and modification time, so a rewritten input is computed again. `nbytes`: what the value holds (GPU or
    host memory); the oldest entries are dropped before a new one is made until it fits `_MEMO_BYTES` (one entry
    larger than that is still made, alone)."""
    key = (what, *((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files))
    if key not in _MEMO:
        while _MEMO and (len(_MEMO) >= _MEMO_ENTRIES or sum(n for _v, n in _MEMO.values()) + nbytes > _MEMO_BYTES):
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = (make(), nbytes)
    return _MEMO[key][0]


# E4M3 codes decoded on the GPU a slice at a time (int64 indices: 512 MiB a slice).
_DECODE_SLICE = 1 << 26


def decode_fp16_on_gpu(torch, codes: np.ndarray, scale: float, dev) -> object:
    """uint8 E4M3 codes -> fp16 values x scale, on the GPU: a lookup in the 256 values `(decode(code) * scale)`
    rounded to fp16 once, in float64 as `reference.sdpa.decode_e4m3_sim(codes) * scale` rounds each element, so
    the result is the same bits as that CPU decode (tests/test_sdpa_peers.py), at any size."""
    from driver.reference.sdpa import decode_e4m3_sim

    table = torch.from_numpy((decode_e4m3_sim(np.arange(256, dtype=np.uint8)) * scale).astype(np.float16)).to(dev)
    flat = codes.reshape(-1)
    out = torch.empty(flat.size, dtype=torch.float16, device=dev)
    for start in range(0, flat.size, _DECODE_SLICE):
        part = torch.from_numpy(np.array(flat[start:start + _DECODE_SLICE])).to(dev)
        out[start:start + part.numel()] = table[part.long()]
    return out.view(*codes.shape)


def kv_fp16_on_gpu(torch, ns: argparse.Namespace, case: SdpaCase, dev) -> tuple[object, object]:
    """K and V as the fp16-operand peers take them (decoded, scaled, rounded to fp16), on the GPU, made once per
    content of the input files in this worker (`memo`)."""
    nbytes = 2 * 2 * int(np.prod(case.kv_shape))
    return memo("kv fp16 on the GPU", (ns.k, ns.v, ns.scales), lambda: (
        decode_fp16_on_gpu(torch, case.k_u8, case.k_scale, dev),
        decode_fp16_on_gpu(torch, case.v_u8, case.v_scale, dev)), nbytes)  # type: ignore[return-value]


def write_out(path: str | None, out: np.ndarray) -> None:
    if path:
        np.save(path, np.ascontiguousarray(out, dtype=np.float16))


def emit(impl: str, case: SdpaCase, times_us: list[float], ns: argparse.Namespace, *,
         batch: int, flush_bytes: int, arithmetic: str, version: str) -> None:
    """Print the peer's SdpaLine: in its precision tier (records.SDPA_PEER_PRECISION), naming the case it ran
    (q_shape, kv_shape, causal), `arithmetic` saying in words what its numbers are made of. `times_us`: the raw
    samples in the order timed (per launch; hot: a replay's time / its launches); the driver computes every
    statistic from them (driver/stats.py)."""
    print(json.dumps({
        "suite": "sdpa", "impl": impl, "shape": list(case.shape), "q_shape": list(case.shape),
        "kv_shape": list(case.kv_shape), "causal": case.causal, "iters": ns.iters, "warmup": ns.warmup,
        "samples_us": [float(t) for t in times_us],
        "timing": ns.timing, "batch": batch, "l2_flush_bytes": flush_bytes,
        "precision": SDPA_PEER_PRECISION[impl], "arithmetic": arithmetic, "peer_version": version,
    }), flush=True)
