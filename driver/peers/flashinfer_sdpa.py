"""FlashInfer peer: an inference engine's attention on FP8 K/V, where `import flashinfer` works on the host.

Same inputs, flags and line as the other SDPA peers (driver/peers/sdpa_io.py), impl `flashinfer`, the fp16 tier:
fp16 Q against our E4M3 K/V codes as they are (torch.float8_e4m3fn, OCP E4M3, the format decode_e4m3_sim decodes),
our per-tensor scales handed over as `k_scale` / `v_scale`, decoded to fp16 inside the kernel, fp16 compute: the
arithmetic of our fp16 tier, reading the bytes ours read (records' hbm_frac counts 1 byte a K/V element).

K and V [B, Hkv, Skv, D] are FlashInfer's paged cache in its HND layout as they lie: one page of Skv keys per
sequence (page b holds sequence b). One query row per sequence (Sq = 1: decode; a causal row 0 sees every key
then) runs `BatchDecodeWithPagedKVCacheWrapper`; more rows `BatchPrefillWithPagedKVCacheWrapper`, whose causal mask
is aligned to the end of the keys (row i sees keys j <= i + Skv - Sq), the case's bottom-right mask. FlashInfer
groups the query heads over the K/V heads itself (GQA, MQA). `plan_of` decides all of it without torch.

Availability (checked 2026-11-28): flashinfer-python 0.7.2.post1, the newest on PyPI, is a 62 MB pure-Python wheel
that compiles its kernels with nvcc and ninja at first call, and requires nvidia-cudnn-frontend >= 1.31 (the cuDNN
peer pins 1.22.1), nvidia-cutlass-dsl (whose library wheel alone is 92 MB), apache-tvm-ffi, cuda-python, cuda-tile
and nccl4py: more than the 64 MiB a GPU run carries, and the GPU host has no network to fetch them. It is not
installed there, so the driver records this peer as skipped with `UNAVAILABLE` wherever `flashinfer` does not import.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from driver.peers import sdpa_io, serving
from driver.peers.sdpa_io import EXIT_CUDA_ERROR, fail

IMPL = "flashinfer"
WORKSPACE_BYTES = 256 << 20  # FlashInfer's scratch for split-KV partial results (its examples use 128 MiB)
UNAVAILABLE = ("flashinfer is not installed on this host, and its wheel cannot be built or carried offline: "
               "flashinfer-python 0.7.2.post1 is a 62 MB pure-Python wheel that compiles its kernels with nvcc and "
               "ninja at first call and needs nvidia-cudnn-frontend >= 1.31 (the cuDNN peer pins 1.22.1), "
               "nvidia-cutlass-dsl (92 MB of libraries), apache-tvm-ffi, cuda-python, cuda-tile and nccl4py: more "
               "than the 64 MiB a GPU run carries")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def missing() -> str | None:
    """Why this host cannot run the peer (no torch, no FlashInfer), or None."""
    if not _found("torch"):
        return "torch is not installed on this host"
    return None if _found("flashinfer") else UNAVAILABLE


@dataclass(frozen=True)
class Plan:
    """What FlashInfer is asked for one case, decided without torch: the wrapper, one page of `page_size` keys per
    sequence (`pages`), and for prefill the rows of each sequence (`qo_indptr`) and the mask."""

    kind: Literal["decode", "prefill"]
    pages: int
    page_size: int
    qo_indptr: tuple[int, ...]  # prefill: sequence b's query rows are [qo_indptr[b], qo_indptr[b + 1]); decode: ()
    causal: bool  # prefill only: FlashInfer aligns it to the end of the keys (bottom-right)

    @property
    def kv_indptr(self) -> tuple[int, ...]:
        return tuple(range(self.pages + 1))  # one page per sequence


def plan_of(b: int, sq: int, skv: int, causal: bool) -> Plan:
    """Decode for one query row per sequence (its row sees every key, causal or not), prefill otherwise."""
    if sq == 1:
        return Plan("decode", pages=b, page_size=skv, qo_indptr=(), causal=False)
    return Plan("prefill", pages=b, page_size=skv, qo_indptr=tuple(i * sq for i in range(b + 1)), causal=causal)


def load():
    """(the flashinfer module, its version label), or exit 3 with the reason."""
    if not _found("flashinfer"):
        fail(UNAVAILABLE, EXIT_CUDA_ERROR)
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001 - an install that does not load (ABI, CUDA, its JIT): say so
        fail(f"flashinfer failed to load: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", EXIT_CUDA_ERROR)
    return flashinfer, f"FlashInfer {getattr(flashinfer, '__version__', 'unknown version')}"


def main(argv: list[str] | None = None) -> None:
    ns, case = sdpa_io.args_and_case("flashinfer_sdpa", argv)
    torch = sdpa_io.import_torch()
    fi, version = load()
    dev = torch.device("cuda", 0)
    (b, hq, sq, d), (_, hkv, skv, _) = case.shape, case.kv_shape
    plan = plan_of(b, sq, skv, case.causal)
    i32 = {"dtype": torch.int32, "device": dev}
    k8, v8 = (torch.from_numpy(a).to(dev).view(torch.float8_e4m3fn) for a in (case.k_u8, case.v_u8))
    q = torch.from_numpy(case.q).to(dev)
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    kv_indptr = torch.tensor(plan.kv_indptr, **i32)
    kv_indices = torch.arange(plan.pages, **i32)
    last_page_len = torch.full((b,), plan.page_size, **i32)
    try:
        if plan.kind == "decode":
            wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "HND")
            wrapper.plan(kv_indptr, kv_indices, last_page_len, hq, hkv, d, plan.page_size,
                         q_data_type=torch.float16, kv_data_type=torch.float8_e4m3fn)
            q_rows = q.reshape(b, hq, d)  # Sq = 1
        else:
            wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "HND")
            wrapper.plan(torch.tensor(plan.qo_indptr, **i32), kv_indptr, kv_indices, last_page_len, hq, hkv, d,
                         plan.page_size, causal=plan.causal, q_data_type=torch.float16,
                         kv_data_type=torch.float8_e4m3fn)
            q_rows = q.transpose(1, 2).reshape(b * sq, hq, d).contiguous()  # [B,Hq,Sq,D] -> rows [B*Sq, Hq, D]

        def attend():
            return wrapper.run(q_rows, (k8, v8), k_scale=case.k_scale, v_scale=case.v_scale)

        out = attend().reshape(b, sq, hq, d).transpose(1, 2).float().cpu().numpy()
        times, batch, flush = sdpa_io.time_mode(torch, attend, ns)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - FlashInfer's refusal (shape, arch, its JIT build), as one line
        fail(f"{version} {plan.kind} failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
             EXIT_CUDA_ERROR)
    sdpa_io.write_out(ns.out, out)
    mask = "; causal (aligned to the end of the keys)" if plan.causal else ""
    sdpa_io.emit(IMPL, case, times, ns, batch=batch, flush_bytes=flush,
                 arithmetic=f"q fp16, k/v e4m3 (our codes, k_scale/v_scale) decoded in the kernel, fp16 compute "
                            f"({plan.kind}, paged HND, one page of Skv keys per sequence){mask}", version=version)


if __name__ == "__main__":
    serving.entry(main)
