"""PyTorch peer: scaled_dot_product_attention on fp16 Q and the dequantized fp16 K/V.

Reads the same .npy inputs as our runners (checked by driver/peers/sdpa_io.py: a missing file,
shapes that disagree, S = 0 or an unsupported head dim is one `error:` line and exit 2), decodes
K/V with exactly the kernels' simulated-E4M3 decode, times it in the mode asked for (`--timing`,
see driver/peers/torch_timing.py; the same two modes as our runners):
  cold: each launch alone by its own event pair, queued behind a spin kernel, an L2
    flush (a write of max(2 x L2, 64 MiB)) before each, outside the timed interval;
  hot: `--batch` launches captured in a CUDA graph and replayed, replay time / batch.
Prints one SdpaLine (impl "torch_sdpa"); `--out` writes its output for the driver to check. A mode
it cannot do (the graph capture failed) is one `error:` line and exit 3; the driver records that
mode as skipped with the reason and never times it another way.
"""

from __future__ import annotations

import numpy as np

from driver.peers import sdpa_io, serving
from driver.reference.sdpa import decode_e4m3_sim

IMPL = "torch_sdpa"


def main(argv: list[str] | None = None) -> None:
    ns, case = sdpa_io.args_and_case("torch_sdpa", argv)
    torch = sdpa_io.import_torch()
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    q = torch.from_numpy(case.q).to(dev)
    k16, v16 = sdpa_io.memo("kv fp16", (ns.k, ns.v, ns.scales), lambda: (
        (decode_e4m3_sim(case.k_u8) * case.k_scale).astype(np.float16),
        (decode_e4m3_sim(case.v_u8) * case.v_scale).astype(np.float16)))
    k, v = torch.from_numpy(k16).to(dev), torch.from_numpy(v16).to(dev)

    def sdpa() -> object:
        return F.scaled_dot_product_attention(q, k, v)

    out = sdpa().cpu().numpy()
    times, batch, flush = sdpa_io.time_mode(torch, sdpa, ns)
    sdpa_io.write_out(ns.out, out)
    sdpa_io.emit(IMPL, case.shape, times, ns, batch=batch, flush_bytes=flush,
                 arithmetic="q fp16, k/v e4m3 decoded to fp16 (scaled), fp16 compute",
                 version=f"torch {torch.__version__}")


if __name__ == "__main__":
    serving.entry(main)
