"""NCCL peer: torch.distributed all_reduce, one process per GPU, timed like ours.

Speaks the allreduce executables' vocabulary and prints the same JSON line per size (impl "nccl");
everything but the collective itself (flags, inputs, check, the cold / hot / host timing, the line)
is driver/peers/torch_allreduce.py, which PyTorch's symmetric-memory peers share; served with them by
driver/peers/allreduce_server.py. The timed runs reduce a zero-filled buffer in place, so repeated
sums never overflow.
Run on the GPU host: `python -m driver.peers.nccl_allreduce --sizes 256K --ngpus 2`.
"""

from __future__ import annotations

from driver.peers.torch_allreduce import Collective, main, time_collective

__all__ = ["setup", "time_collective"]  # time_collective: the cold/hot timing of any torch-driven collective


def setup(torch, dist, elements: int, dtype, device) -> Collective:
    work = torch.zeros(elements, dtype=dtype, device=device)

    def check(x):
        dist.all_reduce(x)
        return x

    return Collective(run=lambda: dist.all_reduce(work), check=check)


if __name__ == "__main__":  # served, with the other torch peers: driver/peers/allreduce_server.py
    main("nccl_allreduce", "nccl", setup)
