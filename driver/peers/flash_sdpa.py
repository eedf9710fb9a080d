"""FlashAttention peer: `flash_attn_func` on fp16 Q and the dequantized fp16 K/V, where a FlashAttention
package imports: FlashAttention-3 (`flash_attn_interface`, Hopper), FlashAttention-4 (`flash_attn.cute`)
or FlashAttention-2 (`flash_attn`), the first found.

Same inputs, flags and line as the other SDPA peers (driver/peers/sdpa_io.py), impl `flash_attn`;
the fp16 tier, as the torch peer (K/V decoded with decode_e4m3_sim and scaled, fp16 compute).
FlashAttention takes [B, S, H, D]: the inputs are transposed once, outside the timing. It groups query heads
over fewer K/V heads itself (GQA, MQA), and its `causal=True` is bottom-right aligned since FlashAttention 2.1
(row i sees keys j <= i + Skv - Sq), the case's mask.

Availability (checked 2026-11-23): PyPI has no binary wheel that loads on the GPU host (torch 2.11
cu130, Python 3.12): flash-attn 2.8.3.post2 is a source distribution only (its build needs nvcc and
the torch headers), FlashAttention-3 is not on PyPI, and flash-attn-4 4.0.0b36 is a pure-Python wheel
whose nvidia-cutlass-dsl-libs-cu13 dependency is a 92 MB wheel, more than the 64 MiB a GPU run carries.
So the driver records this peer as skipped with `UNAVAILABLE` wherever none of the modules imports.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from driver.peers import sdpa_io, serving
from driver.peers.sdpa_io import EXIT_CUDA_ERROR, fail

IMPL = "flash_attn"
# (module, distribution, label), most recent first; FA4's function lives in a submodule.
MODULES = (("flash_attn_interface", "flash-attn-3", "FlashAttention-3"),
           ("flash_attn.cute", "flash-attn-4", "FlashAttention-4"),
           ("flash_attn", "flash-attn", "FlashAttention-2"))
UNAVAILABLE = ("no FlashAttention module (flash_attn_interface, flash_attn.cute, flash_attn) imports on this host; "
               "PyPI has no binary wheel for torch 2.11 cu130 / Python 3.12 (flash-attn 2.8.3.post2 is source only, "
               "FlashAttention-3 is not on PyPI, flash-attn-4 needs the 92 MB nvidia-cutlass-dsl-libs-cu13)")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package of a dotted name is absent
        return False


def missing() -> str | None:
    """Why this host cannot run the peer (no torch, no FlashAttention), or None."""
    if not _found("torch"):
        return "torch is not installed on this host"
    return None if any(_found(m) for m, _, _ in MODULES) else UNAVAILABLE


def load():
    """(flash_attn_func, a version label) of the first FlashAttention that imports, or exit 3."""
    errors = []
    for module, dist, label in MODULES:
        if not _found(module):
            continue
        try:
            fn = importlib.import_module(module).flash_attn_func
        except Exception as exc:  # noqa: BLE001 - an install that does not load (ABI, CUDA): say so
            errors.append(f"{module}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
        return fn, f"{label} ({dist} {version})"
    fail("; ".join(errors) or UNAVAILABLE, EXIT_CUDA_ERROR)


def main(argv: list[str] | None = None) -> None:
    ns, case = sdpa_io.args_and_case("flash_sdpa", argv, mmap_kv=True)
    torch = sdpa_io.import_torch()
    flash_attn_func, version = load()
    dev = torch.device("cuda", 0)
    # [B, H, S, D] -> [B, S, H, D], contiguous, once
    q = torch.from_numpy(case.q).to(dev).transpose(1, 2).contiguous()
    k, v = (t.transpose(1, 2).contiguous() for t in sdpa_io.kv_fp16_on_gpu(torch, ns, case, dev))

    def attend():
        out = flash_attn_func(q, k, v, causal=case.causal)
        return out[0] if isinstance(out, tuple) else out  # FA3 and FA4 also return the softmax LSE

    try:
        out = attend().transpose(1, 2).float().cpu().numpy()
        times, batch, flush = sdpa_io.time_mode(torch, attend, ns)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's refusal (shape, arch), as one line
        fail(f"{version} failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", EXIT_CUDA_ERROR)
    sdpa_io.write_out(ns.out, out)
    sdpa_io.emit(IMPL, case, times, ns, batch=batch, flush_bytes=flush,
                 arithmetic="q fp16, k/v e4m3 decoded to fp16 (scaled), fp16 compute" +
                 ("; causal (bottom-right)" if case.causal else ""), version=version)


if __name__ == "__main__":
    serving.entry(main)
