"""The peers our kernels are timed against: what each is, what it needs, how it is launched.

`upstream` is an executable we build (upstream_bench); the others run as
`python -m driver.peers.<module>` and need torch on the host. Where a peer cannot run,
`missing` says why, and every gate that names it is reported as not measured (never passed).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    suite: str
    module: str | None  # driver.peers.<module>; None: a built executable
    needs: tuple[str, ...] = ()  # Python packages it imports
    checked: bool = True  # its output is checked against the reference (else: timed only)


PEERS: dict[str, Peer] = {
    "upstream": Peer("allreduce", None),
    "nccl": Peer("allreduce", "nccl_allreduce", needs=("torch",)),
    "torch_sdpa": Peer("sdpa", "torch_sdpa", needs=("torch",), checked=False),
    "p2p_copy": Peer("allreduce", "p2p_copy", needs=("torch",)),  # the link ceiling, not a competitor
}
TIMED_ONLY = frozenset(name for name, p in PEERS.items() if not p.checked)


def is_peer(impl: str) -> bool:
    return impl in PEERS


def missing(name: str) -> str | None:
    """Why this host cannot run peer `name`, or None when it can."""
    absent = [pkg for pkg in PEERS[name].needs if importlib.util.find_spec(pkg) is None]
    return f"{', '.join(absent)} is not installed on this host" if absent else None


def command(name: str, *args: str) -> list[str]:
    """How a Python peer is launched (the same interpreter as the driver)."""
    module = PEERS[name].module
    assert module is not None, f"{name} is a built executable"
    return [sys.executable, "-m", f"driver.peers.{module}", *args]
