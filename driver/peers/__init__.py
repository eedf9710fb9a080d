"""The peers our kernels are timed against: what each is, what it needs, how it is launched.

`upstream` is an executable we build (upstream_bench); the others run as
`python -m driver.peers.<module>`. Where a peer cannot run on a host, `missing` says why, and every
gate that names it is reported as not measured (never passed): it fails the run unless
thresholds.toml's [[optional]] names that gate for the host.

A peer is a comparison, not our product: its own correctness is checked by the same rules as ours
and recorded (a wrong peer's record says which property failed), but it is no gate, so a wrong peer
never fails our run (docs/ALLREDUCE.md).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    suite: str
    module: str | None  # driver.peers.<module>; None: a built executable
    needs: tuple[str, ...] = ()  # Python modules it imports, in the order they are checked
    install: dict[str, str] | None = None  # module -> what to install, where that is not the module's own name
    min_sm: int = 0  # oldest GPU (compute capability x10) it runs on; 0: any
    available: Callable[[], str | None] | None = None  # a check of its own (which FlashAttention imports)
    argv: tuple[str, ...] = ()  # arguments that select it within its module (one module, several peers)


def _flash_missing() -> str | None:
    from driver.peers import flash_sdpa  # imports numpy only; torch and FlashAttention are looked up, not loaded

    return flash_sdpa.missing()


CUDNN_FRONTEND = "nvidia-cudnn-frontend (pyproject.toml's peers group; a bundle carries its wheel)"
PEERS: dict[str, Peer] = {
    # Allreduce peers: checked by our rules (bound, rank agreement), recorded, not gated.
    "upstream": Peer("allreduce", None),
    "nccl": Peer("allreduce", "nccl_allreduce", needs=("torch",)),
    # PyTorch's own custom allreduce (torch.ops.symm_mem, multicast off): timed and checked like NCCL.
    "torch_symm_oneshot": Peer("allreduce", "symm_allreduce", needs=("torch",), argv=("--impl", "torch_symm_oneshot")),
    "torch_symm_twoshot": Peer("allreduce", "symm_allreduce", needs=("torch",), argv=("--impl", "torch_symm_twoshot")),
    "p2p_copy": Peer("allreduce", "p2p_copy", needs=("torch",)),  # the link ceiling, not a competitor
    # SDPA peers, each in its precision tier (records.SDPA_PEER_PRECISION): their error against the float64
    # reference is reported, never gated; thresholds.toml's [[sdpa.accuracy]] gates ours against them.
    "torch_sdpa": Peer("sdpa", "torch_sdpa", needs=("torch",)),
    "cudnn_fp8": Peer("sdpa", "cudnn_sdpa", needs=("torch", "cudnn"), install={"cudnn": CUDNN_FRONTEND}, min_sm=90),
    "flash_attn": Peer("sdpa", "flash_sdpa", needs=("torch",), available=_flash_missing),
}


def is_peer(impl: str) -> bool:
    return impl in PEERS


def of_suite(suite: str) -> tuple[str, ...]:
    """The Python peers of a suite, in the order they run after ours."""
    return tuple(name for name, p in PEERS.items() if p.suite == suite and p.module and name != "p2p_copy")


def _found(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _sm(arch: str) -> int:
    return int(arch.removeprefix("sm_").rstrip("a"))


def missing(name: str, gpu_arch: str | None = None) -> str | None:
    """Why this host (and GPU, where given) cannot run peer `name`, or None when it can (it may still
    refuse a shape: that is its own error line, and the suite records it)."""
    p = PEERS[name]
    for module in p.needs:
        if not _found(module):
            return f"{(p.install or {}).get(module, module)} is not installed on this host"
    if p.min_sm and gpu_arch and _sm(gpu_arch) < p.min_sm:
        return f"{name} needs sm_{p.min_sm} or newer; this GPU is {gpu_arch}"
    return p.available() if p.available else None


def command(name: str, *args: str) -> list[str]:
    """How a Python peer is launched (the same interpreter as the driver)."""
    module = PEERS[name].module
    assert module is not None, f"{name} is a built executable"
    return [sys.executable, "-m", f"driver.peers.{module}", *PEERS[name].argv, *args]


def allreduce_server(ngpus: int) -> list[str]:
    """The worker serving every torch-driven allreduce peer at `ngpus` GPUs (driver/peers/allreduce_server.py;
    each case names its peer with `--impl`)."""
    return [sys.executable, "-m", "driver.peers.allreduce_server", "--ngpus", str(ngpus)]
