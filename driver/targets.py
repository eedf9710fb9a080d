"""The build table: every executable this project builds, and what its PTX must hold.

Kernels live in kernels_mojo/ and kernels_cuda/; this file only says how to turn
them into executables and which instructions each kernel's PTX must (not) hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from driver import paths, registry
from driver.errors import ConfigError

# Measured (or provisional) allreduce dispatch windows, written by `python -m driver sweep --write`
# and read here as Mojo -D defines.
DISPATCH_WINDOWS_FILE = paths.ROOT / "kernels_mojo" / "dispatch_windows.json"
# The define that tells an executable its implementation's name (`Target.impl`): it prints it in every line's
# `impl`, and the suites refuse a line whose `impl` is not the one they asked for (suites/common.check_impl).
# Read as a bare token and stringified by runner.cu, with get_defined_string by benchlib/runner.mojo.
IMPL_NAME_DEFINE = "IMPL_NAME"


@dataclass(frozen=True)
class PtxExpectation:
    """Kernels whose PTX entry name contains `pattern` must (not) hold cp.async / mma."""

    pattern: str
    cp_async: bool | None = None
    mma: bool | None = None


@dataclass(frozen=True)
class SassExpectation:
    """Machine-code instructions a target's executable for `arch` must (not) hold, checked
    where cuobjdump exists (inspect_ptx.SASS_INSTRUCTIONS lists the ones looked for)."""

    arch: str
    require: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    name: str
    lang: Literal["mojo", "cuda"]
    suite: str
    entry: str
    source_globs: tuple[str, ...]
    defines: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    ptx: tuple[PtxExpectation, ...] = ()
    min_arch: int = 80  # compute capability x10; below it the target is not built
    sass: tuple[SassExpectation, ...] = ()
    # On sm_90, compile for the arch-specific sm_90a (wgmma, setmaxnreg) and define
    # SDPA_SM90A=1 so that the host code knows the Hopper kernel is in the binary.
    sm90a: bool = False
    # The `impl` every line of the executable says (passed as -DIMPL_NAME); None for one that prints no
    # result line (dispatch_table).
    impl: str | None = None

    def gencode_cc(self, arch: str) -> str:
        cc = arch.removeprefix("sm_")
        return f"{cc}a" if self.sm90a and cc == "90" else cc

    def defines_for(self, arch: str) -> dict[str, str]:
        extra = {"SDPA_SM90A": "1"} if self.gencode_cc(arch) == "90a" else {}
        named = {IMPL_NAME_DEFINE: self.impl} if self.impl else {}
        return {**self.defines, **extra, **named}

    def supports(self, arch: str) -> bool:
        return int(arch.removeprefix("sm_")) >= self.min_arch

    def sources(self) -> list[Path]:
        found = {p for g in self.source_globs for p in paths.ROOT.glob(g) if p.is_file()}
        return sorted(found)


DISPATCH_MOJO = paths.ROOT / "kernels_mojo" / "allreduce" / "dispatch.mojo"


def dispatch_define_names() -> frozenset[str]:
    """The -D names dispatch.mojo reads (`get_defined_int["NAME", ...]`, `is_defined["NAME"]`)."""
    return frozenset(re.findall(r'(?:get_defined_int|is_defined)\[\s*"(\w+)"', DISPATCH_MOJO.read_text()))


def _dispatch_defines() -> dict[str, str]:
    """dispatch_windows.json's defines, every one passed to the allreduce builds as -D (the per-GPU-count
    AR_..._<n>GPU ones and the shared ones alike). A name dispatch.mojo does not read is refused: Mojo would
    ignore it, and the build would silently dispatch on a default."""
    if not DISPATCH_WINDOWS_FILE.is_file():
        return {}
    data = json.loads(DISPATCH_WINDOWS_FILE.read_text())
    defines = {str(k): str(v) for k, v in data.get("defines", {}).items()}
    if DISPATCH_MOJO.is_file():
        unknown = sorted(set(defines) - dispatch_define_names())
        if unknown:
            raise ConfigError(f"{DISPATCH_WINDOWS_FILE.name} names defines dispatch.mojo does not read: "
                              f"{', '.join(unknown)}", "re-derive it (python -m driver sweep --from RUN --write)")
    return defines


CUDA_FLAGS = ("-O3", "-std=c++17", "-lineinfo")


def all_targets() -> tuple[Target, ...]:
    mojo_sources = ("kernels_mojo/**/*.mojo", "kernels_mojo/dispatch_windows.json")
    sdpa_sources = ("kernels_cuda/sdpa_fp8/**/*.cu", "kernels_cuda/sdpa_fp8/**/*.cuh", "kernels_cuda/sdpa_fp8/**/*.h",
                    "kernels_cuda/sdpa_fp8_sm90/**/*.cuh", "kernels_cuda/sdpa_decode/**/*.cuh",
                    "kernels_cuda/sdpa_decode/**/*.h")
    windows = _dispatch_defines()  # read once: the bench and its dispatch table must build with the same windows
    return (
        Target(
            name="allreduce_bench",
            lang="mojo",
            suite="allreduce",
            entry="kernels_mojo/bin/allreduce_bench.mojo",
            source_globs=mojo_sources,
            defines=windows,
            impl="ours",
            # Kernel function names (ar_oneshot_k, ...) are kept short: Mojo keeps
            # only about 30 characters of module + function in the PTX entry name.
            ptx=(PtxExpectation("ar_cpasync_k", cp_async=True), PtxExpectation("ar_oneshot_k", cp_async=False),
                 PtxExpectation("ar_twoshot_k", cp_async=False)),
        ),
        Target(
            # The upstream peer (max-core's comm.allreduce), same flags and JSON line; no -D windows.
            name="upstream_bench",
            lang="mojo",
            suite="allreduce",
            entry="kernels_mojo/bin/upstream_bench.mojo",
            source_globs=mojo_sources,
            impl="upstream",
        ),
        Target(
            # Host-only: prints the dispatch table select_kernel gives this build's defines.
            name="dispatch_table",
            lang="mojo",
            suite="allreduce",
            entry="kernels_mojo/bin/dispatch_table.mojo",
            source_globs=mojo_sources,
            defines=windows,
        ),
        *(
            Target(
                name=variant.target,
                lang="cuda",
                suite="sdpa",
                entry="kernels_cuda/sdpa_fp8/runner.cu",
                source_globs=sdpa_sources,
                defines=dict(variant.defines),
                flags=CUDA_FLAGS,
                min_arch=89,  # decodes E4M3 with cvt.rn.f16x2.e4m3x2
                ptx=(PtxExpectation("sdpa", cp_async=cp_async, mma=True),),
                sm90a=True,
                impl=impl,
                # sm_90: both tiers' Hopper kernels, the fp16 tier's warpgroup MMA (HGMMA) and the fp8 tier's
                # (QGMMA), and the copy engine's tensor loads in the cpasync build only (the mma_sync kernel
                # beside them brings HMMA, and LDGSTS in cpasync).
                # sm_89: the mma_sync kernel alone.
                sass=(
                    SassExpectation("sm_90", require=("HGMMA", "QGMMA", "HMMA") + (("UTMALDG", "LDGSTS") if cp_async else ()),
                                    forbid=() if cp_async else ("UTMALDG", "LDGSTS")),
                    SassExpectation("sm_89", require=("HMMA",) + (("LDGSTS",) if cp_async else ()),
                                    forbid=("HGMMA", "QGMMA", "UTMALDG") + (() if cp_async else ("LDGSTS",))),
                ),
            )
            # One target per SDPA variant of driver/registry.py, with its defines.
            for impl, variant in registry.SDPA.variants.items()
            for cp_async in (variant.defines.get("USE_CP_ASYNC") == "1",)
        ),
    )


def select(names: str | None) -> tuple[Target, ...]:
    """`None`/`all` -> every target; else a comma list of target names or suites."""
    targets = all_targets()
    if not names or names == "all":
        return targets
    chosen: list[Target] = []
    for item in (n.strip() for n in names.split(",")):
        hits = [t for t in targets if item in (t.name, t.suite)]
        if not hits:
            known = ", ".join([t.name for t in targets] + sorted({t.suite for t in targets}))
            raise ConfigError(f"unknown build target {item!r}", f"choose from {known}")
        chosen += [t for t in hits if t not in chosen]
    return tuple(chosen)
