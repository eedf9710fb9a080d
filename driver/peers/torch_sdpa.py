"""PyTorch peer: scaled_dot_product_attention on fp16 Q and the dequantized fp16 K/V.

Reads the same .npy inputs as our runners (checked by driver/peers/sdpa_io.py: a missing file,
shapes that disagree, S = 0 or an unsupported head dim is one `error:` line and exit 2), decodes
K/V with exactly the kernels' simulated-E4M3 decode (on the GPU, once per input set:
sdpa_io.kv_fp16_on_gpu), times it in the mode asked for (`--timing`, see
driver/peers/torch_timing.py; the same two modes as our runners):
  cold: each launch alone by its own event pair, queued behind a spin kernel, an L2
    flush (a write of max(2 x L2, 64 MiB)) before each, outside the timed interval;
  hot: `--batch` launches captured in a CUDA graph and replayed, replay time / batch.
Grouped-query heads (Hkv < Hq) run with `enable_gqa=True` (K/V are not repeated: torch reads each K/V head
once per group, as it would in a model); the causal mask is the bottom-right aligned one of the case
(row i sees keys j <= i + Skv - Sq): `torch.nn.attention.bias.causal_lower_right(Sq, Skv)`, or
`is_causal=True` where Sq == Skv (the two masks are the same there, and is_causal reaches the fused
kernels directly). `is_causal=True` is never used when Sq != Skv: torch aligns it top-left (`torch_call`).
Prints one SdpaLine (impl "torch_sdpa"); `--out` writes its output for the driver to check. A mode
it cannot do (the graph capture failed) is one `error:` line and exit 3; the driver records that
mode as skipped with the reason and never times it another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from driver.peers import sdpa_io, serving

IMPL = "torch_sdpa"


@dataclass(frozen=True)
class TorchCall:
    """How torch's scaled_dot_product_attention is asked for one case, decided without torch."""

    enable_gqa: bool  # Hq != Hkv: torch groups the query heads over the K/V heads itself
    mask: Literal["none", "is_causal", "causal_lower_right"]

    def kwargs(self, torch, sq: int, skv: int) -> dict[str, object]:
        """The keyword arguments of scaled_dot_product_attention for this call."""
        out: dict[str, object] = {"enable_gqa": True} if self.enable_gqa else {}
        if self.mask == "is_causal":
            out["is_causal"] = True
        elif self.mask == "causal_lower_right":
            from torch.nn.attention.bias import causal_lower_right

            out["attn_mask"] = causal_lower_right(sq, skv)
        return out

    def words(self) -> str:
        parts = ["enable_gqa"] if self.enable_gqa else []
        parts += {"none": [], "is_causal": ["is_causal (Sq = Skv: bottom-right = top-left)"],
                  "causal_lower_right": ["causal_lower_right(Sq, Skv)"]}[self.mask]
        return ", ".join(parts)


def torch_call(hq: int, hkv: int, sq: int, skv: int, causal: bool) -> TorchCall:
    """The call for a case (Hq a multiple of Hkv; causal bottom-right aligned, Sq <= Skv): `enable_gqa` where the
    heads are grouped; the causal mask as `is_causal` only where Sq == Skv (top-left and bottom-right agree there),
    else `causal_lower_right`, because torch's `is_causal=True` is top-left aligned."""
    mask: Literal["none", "is_causal", "causal_lower_right"] = "none"
    if causal:
        mask = "is_causal" if sq == skv else "causal_lower_right"
    return TorchCall(enable_gqa=hq != hkv, mask=mask)


def main(argv: list[str] | None = None) -> None:
    ns, case = sdpa_io.args_and_case("torch_sdpa", argv, mmap_kv=True)
    torch = sdpa_io.import_torch()
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    q = torch.from_numpy(case.q).to(dev)
    k, v = sdpa_io.kv_fp16_on_gpu(torch, ns, case, dev)

    (_b, hq, sq, _d), (_, hkv, skv, _) = case.shape, case.kv_shape
    call = torch_call(hq, hkv, sq, skv, case.causal)
    kwargs = call.kwargs(torch, sq, skv)

    def sdpa() -> object:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    try:
        out = sdpa().cpu().numpy()
    except RuntimeError as exc:  # torch's refusal of the case, as one line
        sdpa_io.fail(f"torch SDPA refuses the case ({call.words() or 'no mask, MHA'}): "
                     f"{' '.join(str(exc).split())[:300]}", sdpa_io.EXIT_CUDA_ERROR)
    times, batch, flush = sdpa_io.time_mode(torch, sdpa, ns)
    sdpa_io.write_out(ns.out, out)
    how = f"; {call.words()}" if call.words() else ""
    sdpa_io.emit(IMPL, case, times, ns, batch=batch, flush_bytes=flush,
                 arithmetic=f"q fp16, k/v e4m3 decoded to fp16 (scaled), fp16 compute{how}",
                 version=f"torch {torch.__version__}")


if __name__ == "__main__":
    serving.entry(main)
