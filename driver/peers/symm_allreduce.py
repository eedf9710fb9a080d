"""PyTorch's own custom allreduce as peers: `torch.ops.symm_mem` one-shot and two-shot.

impl `torch_symm_oneshot`: `one_shot_all_reduce_out` (every rank reads every peer's symmetric
buffer and sums); impl `torch_symm_twoshot`: `two_shot_all_reduce_out` (reduce-scatter by loads,
all-gather by stores into the peers). The input lives in a symmetric-memory buffer allocated once
per size (`torch.distributed._symmetric_memory.empty` + `rendezvous`), the output in a plain
tensor: the ops' most favourable use, with no copy into the symmetric buffer timed. Multicast stays
off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1, set before torch loads) and no multimem op is called; a
buffer that comes with a multicast mapping anyway is refused with the reason, as is a dtype the op
has no kernel for (PyTorch builds these for float32 and bfloat16): one `error:` line, no number. Everything else (flags, inputs, check,
timing, JSON line) is driver/peers/torch_allreduce.py, shared with the NCCL peer.
Run on the GPU host: `python -m driver.peers.symm_allreduce --impl torch_symm_oneshot --sizes 16M`.
"""

from __future__ import annotations

import sys
import warnings
from functools import partial

from driver.peers.torch_allreduce import EXIT_BAD_INPUT, Collective, PeerCannotRun, main

OPS = {"torch_symm_oneshot": "one_shot_all_reduce_out", "torch_symm_twoshot": "two_shot_all_reduce_out"}


def setup(impl: str, torch, dist, elements: int, dtype, device) -> Collective:
    """The `impl` collective for one size (bound with functools.partial: spawn pickles it)."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        op = getattr(torch.ops.symm_mem, OPS[impl])
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise PeerCannotRun(f"this torch ({torch.__version__}) has no symm_mem.{OPS[impl]}: {exc}") from exc
    group = dist.group.WORLD.group_name
    if hasattr(symm_mem, "set_backend"):
        try:
            symm_mem.set_backend("CUDA")  # not NVSHMEM: the CUDA backend's P2P buffers and signal pads
        except (RuntimeError, ValueError):
            pass  # already chosen for this process (second size): keep it
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.9; a deprecated no-op after
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group)
    buf = symm_mem.empty(elements, dtype=dtype, device=device)
    handle = symm_mem.rendezvous(buf, group)
    # (`has_multicast_support` is a static query of the device, not of this buffer: read the buffer's own
    # multicast pointer, 0 when none was mapped.)
    if getattr(handle, "multicast_ptr", 0):
        raise PeerCannotRun("the symmetric buffer has a multicast mapping although multicast is disabled here")
    out = torch.empty_like(buf)
    buf.zero_()

    def run():
        op(buf, "sum", group, out)

    def check(x):
        buf.copy_(x)
        try:
            run()
        except RuntimeError as exc:  # e.g. "not implemented for 'Half'": the op has no kernel for this dtype
            if "not implemented" not in str(exc):
                raise
            raise PeerCannotRun(f"{OPS[impl]}: {str(exc).splitlines()[0][:200]}") from exc
        res = out.clone()
        buf.zero_()
        return res

    return Collective(run=run, check=check)


def _impl_from_argv() -> str:
    """`--impl NAME` (removed from argv so the shared parser sees the executables' flags only)."""
    if "--impl" in sys.argv:
        i = sys.argv.index("--impl")
        if i + 1 < len(sys.argv) and sys.argv[i + 1] in OPS:
            impl = sys.argv[i + 1]
            del sys.argv[i:i + 2]
            return impl
    print(f"error: symm_allreduce needs --impl {' or '.join(OPS)}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    name = _impl_from_argv()
    main("symm_allreduce", name, partial(setup, name))
