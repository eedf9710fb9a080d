"""What each kernel family measures: our variants and the peers we time them against, each declared once.

Every list of names in the driver is derived from the two families here, at the time it is used: the `impl`
values a result line may carry (records.AllreduceLine, records.SdpaLine) and the peers and variants a gate may
name (driver/thresholds.py), the SDPA peers' precision tiers (`SDPA_PEER_PRECISION`), the suites' variant and
peer lists, the build targets of the SDPA variants (driver/targets.py), the order of COMPARE.md's side by side
(driver/report.py), stress, `bench --peers/--variants` and the tests. Adding a peer is its module plus one
`Peer` entry; adding a variant is one `Variant` entry (docs/EXTENDING.md has the steps).

A test registers a throwaway entry with `monkeypatch.setitem(registry.SDPA.peers, name, Peer(...))`: nothing
copies these tables at import time, so every stage sees it.

No imports from the rest of the driver: records.py, targets.py and peers/ read this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class Variant:
    """One of our variants: a build target of its own, timed and gated under its name (`impl`)."""

    target: str  # the build target (driver/targets.py) whose executable runs it
    defines: Mapping[str, str] = field(default_factory=dict)  # the -D defines that make this variant of its source
    report_rank: int = 0  # COMPARE.md: candidates in rising rank; a variant is compared with those ranked after it


@dataclass(frozen=True)
class Peer:
    """A peer: a comparison, never our product (its correctness is recorded, never gated)."""

    module: str | None  # run as `python -m <module>`; None: a built executable (`target`)
    target: str | None = None  # the build target of a built peer (upstream_bench)
    precision: str | None = None  # SDPA: the tier its arithmetic computes in (fp16, fp8)
    needs: tuple[str, ...] = ()  # Python modules it imports, in the order they are checked
    install: Mapping[str, str] = field(default_factory=dict)  # module -> what to install, where not its own name
    min_sm: int = 0  # oldest GPU (compute capability x10) it runs on; 0: any
    available: str | None = None  # "module:function": a check of its own (which FlashAttention imports)
    argv: tuple[str, ...] = ()  # arguments that select it within its module (one module, several peers)
    timed: bool = True  # False: measured for the report (the link ceiling), not timed against ours nor gated
    # SDPA: bytes of one K/V element as the peer reads them (2: it decodes our E4M3 to fp16 K/V first, outside the
    # timing; 1: it reads the E4M3 codes), for hbm_frac (records.ArchivedRecord); ours read E4M3 (OURS_KV_BYTES)
    kv_elem_bytes: int = 0


@dataclass(frozen=True)
class Family:
    name: str  # the suite that measures it
    variants: dict[str, Variant]  # ours, in the order they run
    peers: dict[str, Peer]  # the peers, in the order they run after ours


CUDNN_FRONTEND = "nvidia-cudnn-frontend (pyproject.toml's peers group; a bundle carries its wheel)"

ALLREDUCE = Family(
    "allreduce",
    # One executable; its kernels are chosen with --kernel (config.ALLREDUCE_KERNEL_NAMES), not as variants.
    variants={"ours": Variant("allreduce_bench")},
    peers={
        # Checked by our rules (bound, rank agreement), recorded, not gated.
        "upstream": Peer(None, target="upstream_bench"),
        "nccl": Peer("driver.peers.nccl_allreduce", needs=("torch",)),
        # PyTorch's own custom allreduce (torch.ops.symm_mem, multicast off): timed and checked like NCCL.
        "torch_symm_oneshot": Peer("driver.peers.symm_allreduce", needs=("torch",),
                                   argv=("--impl", "torch_symm_oneshot")),
        "torch_symm_twoshot": Peer("driver.peers.symm_allreduce", needs=("torch",),
                                   argv=("--impl", "torch_symm_twoshot")),
        "p2p_copy": Peer("driver.peers.p2p_copy", needs=("torch",), timed=False),  # the link ceiling
    },
)

SDPA = Family(
    "sdpa",
    # One source (kernels_cuda/sdpa_fp8/runner.cu), one executable per variant; cpasync is reported first.
    variants={
        "baseline": Variant("sdpa_fp8_baseline", {"USE_CP_ASYNC": "0"}, report_rank=1),
        "cpasync": Variant("sdpa_fp8_cpasync", {"USE_CP_ASYNC": "1"}, report_rank=0),
    },
    # Each in its precision tier: its error against the float64 reference is reported, never gated;
    # thresholds.toml's [[sdpa.accuracy]] gates ours against them.
    peers={
        "torch_sdpa": Peer("driver.peers.torch_sdpa", precision="fp16", needs=("torch",), kv_elem_bytes=2),
        "cudnn_fp8": Peer("driver.peers.cudnn_sdpa", precision="fp8", needs=("torch", "cudnn"),
                          install={"cudnn": CUDNN_FRONTEND}, min_sm=90, kv_elem_bytes=1),
        "flash_attn": Peer("driver.peers.flash_sdpa", precision="fp16", needs=("torch",),
                           available="driver.peers.flash_sdpa:missing", kv_elem_bytes=2),
        # FP8-KV attention of an inference engine: fp16 Q on E4M3 K/V decoded in the kernel, fp16 compute (our
        # fp16 tier's arithmetic, reading the bytes ours reads)
        "flashinfer": Peer("driver.peers.flashinfer_sdpa", precision="fp16", needs=("torch",),
                           available="driver.peers.flashinfer_sdpa:missing", kv_elem_bytes=1),
        # the device's copy bandwidth, which hbm_frac divides by (measured, not timed against ours nor gated)
        "hbm_copy": Peer("driver.peers.hbm_copy", needs=("torch",), timed=False),
    },
)
OURS_KV_BYTES = 1  # our variants read K and V as E4M3 codes

FAMILIES: dict[str, Family] = {f.name: f for f in (ALLREDUCE, SDPA)}


class View(Mapping[str, V]):
    """A read-only table derived from the registry at each use, never a copy taken at import."""

    def __init__(self, derive: Callable[[], dict[str, V]]):
        self._derive = derive

    def __getitem__(self, key: str) -> V:
        return self._derive()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._derive())

    def __len__(self) -> int:
        return len(self._derive())

    def __repr__(self) -> str:
        return f"View({self._derive()!r})"


def all_peers() -> dict[str, Peer]:
    return {name: p for f in FAMILIES.values() for name, p in f.peers.items()}


def family_of_peer(name: str) -> str:
    return next(f.name for f in FAMILIES.values() if name in f.peers)


def variant_names(family: str) -> tuple[str, ...]:
    return tuple(FAMILIES[family].variants)


def peer_names(family: str) -> tuple[str, ...]:
    """The peers timed against ours (the link ceiling is measured, not a peer of a gate)."""
    return tuple(name for name, p in FAMILIES[family].peers.items() if p.timed)


def impl_names(family: str) -> tuple[str, ...]:
    """Every `impl` a result line of the family may carry: our variants, then the timed peers."""
    return variant_names(family) + peer_names(family)


def report_order(family: str) -> tuple[str, ...]:
    """Our variants in the order COMPARE.md's side by side takes them as candidates."""
    variants = FAMILIES[family].variants
    return tuple(sorted(variants, key=lambda n: variants[n].report_rank))


def all_variants() -> tuple[str, ...]:
    """Every variant name of every family (for COMPARE.md's candidates)."""
    return tuple(name for f in FAMILIES for name in report_order(f))


# The SDPA peers' tiers, derived: {peer: fp16 | fp8}.
SDPA_PEER_PRECISION: Mapping[str, str] = View(
    lambda: {name: p.precision for name, p in SDPA.peers.items() if p.precision})


def select(family: str, kind: str, given: tuple[str, ...] | None) -> tuple[str, ...]:
    """`bench --peers/--variants`: the family's names of a kind (peers, variants) that run. None (not given):
    all of them; else those named, and all of them where no name given belongs to this family (so that
    `--variants cpasync` leaves the allreduce suite as it is). The CLI checks the names (`registered`)."""
    known = peer_names(family) if kind == "peers" else variant_names(family)
    if given is None or not set(given) & set(known):
        return known
    return tuple(n for n in known if n in given)


NOT_SELECTED = "not selected: "


def not_selected(kind: str) -> str:
    """The reason a Skip gives for a peer or variant that `bench --peers/--variants` left out: its gates are
    listed as not measured with it, and do not block the run (gates.evaluate)."""
    return f"{NOT_SELECTED}--{kind} left it out"


def registered(kind: str) -> tuple[str, ...]:
    """Every registered name of a kind (peers, variants) across the families, in declaration order."""
    return tuple(n for f in FAMILIES for n in (peer_names(f) if kind == "peers" else variant_names(f)))


class Names:
    """A pydantic type for a name the registry holds, checked at validation time (so a registered entry is
    accepted without reloading the models) and published as an `enum` in the JSON Schema.

    `Annotated[str, Names(lambda: registry.impl_names("sdpa"))]`."""

    def __init__(self, names: Callable[[], tuple[str, ...]]):
        self.names = names

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        def check(value: str) -> str:
            allowed = self.names()
            if value not in allowed:
                raise ValueError(f"{value!r} is not one of the registered names {', '.join(allowed)} "
                                 "(driver/registry.py)")
            return value

        return core_schema.no_info_after_validator_function(check, core_schema.str_schema())

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.names())}
