"""The peers our kernels are timed against (declared in driver/registry.py): whether a host can run one, and
how it is launched.

`upstream` is an executable we build (upstream_bench); the others run as
`python -m driver.peers.<module>`. Where a peer cannot run on a host, `missing` says why, and every
gate that names it is reported as not measured (never passed): it fails the run unless
thresholds.toml's [[optional]] names that gate for the host.

A peer is a comparison, not our product: its own correctness is checked by the same rules as ours
and recorded (a wrong peer's record says which property failed), but it is no gate, so a wrong peer
never fails our run (docs/ALLREDUCE.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from driver import registry
from driver.registry import Peer

# Every peer of every family, derived from driver/registry.py at each use (name -> Peer).
PEERS = registry.View(registry.all_peers)
__all__ = ["PEERS", "Peer", "command", "is_peer", "missing", "of_suite"]


def is_peer(impl: str) -> bool:
    return impl in PEERS


def of_suite(suite: str) -> tuple[str, ...]:
    """The Python peers of a suite timed against ours, in the order they run after ours."""
    return tuple(name for name in registry.peer_names(suite) if PEERS[name].module)


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
            return f"{p.install.get(module, module)} is not installed on this host"
    if p.min_sm and gpu_arch and _sm(gpu_arch) < p.min_sm:
        return f"{name} needs sm_{p.min_sm} or newer; this GPU is {gpu_arch}"
    if p.available:
        module, function = p.available.split(":")
        return getattr(importlib.import_module(module), function)()  # flash_sdpa imports numpy only
    return None


def command(name: str, *args: str) -> list[str]:
    """How a Python peer is launched (the same interpreter as the driver)."""
    module = PEERS[name].module
    assert module is not None, f"{name} is a built executable"
    return [sys.executable, "-m", module, *PEERS[name].argv, *args]


def allreduce_server(ngpus: int) -> list[str]:
    """The worker serving every torch-driven allreduce peer at `ngpus` GPUs (driver/peers/allreduce_server.py;
    each case names its peer with `--impl`)."""
    return [sys.executable, "-m", "driver.peers.allreduce_server", "--ngpus", str(ngpus)]
