"""Static checks of what a build produced: ptxas resource reports and PTX contents.

These run on any machine, GPU or not, and are how `nox -s test` proves on a CPU
box that a cp.async kernel really contains cp.async and the baseline does not.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from driver.errors import BuildFailed
from driver.records import PtxasKernel, PtxKernel

_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
# ptxas info C75xx (nvcc 12.3+): "wgmma.mma_async instructions are serialized due to <reason> in the
# function '<name>'" -- it may come before or after the function's own report lines. The code names the reason:
# C7520 (a compiler-inserted warpgroup.arrive in a divergent path), C7511 (too few registers for the wgmma
# pipeline), C7514 (non-wgmma instructions read an accumulator inside the pipeline), ... (nvcc 13.0). Until
# 2026-11-27 only C7520 was read, so a kernel serialized for any other reason passed the build's gate.
_WGMMA_SERIAL = re.compile(
    r"\((C75\d\d)\)[^\n]*?wgmma\.mma_async instructions are serialized due to (.*?),? in the function '([^']+)'")


def parse_ptxas(text: str) -> list[PtxasKernel]:
    """Parse `nvcc -Xptxas -v` output into one record per (kernel, arch)."""
    kernels: list[PtxasKernel] = []
    name = arch = None
    frame = (0, 0, 0)
    for line in text.splitlines():
        if m := _COMPILING.search(line):
            name, arch, frame = m.group(1), m.group(2), (0, 0, 0)
        elif (m := _FRAME.search(line)) and name:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and name and arch:
            smem = _SMEM.search(line)
            cmem = _CMEM.search(line)
            kernels.append(
                PtxasKernel(
                    name=name,
                    arch=arch,
                    registers=int(m.group(1)),
                    smem_bytes=int(smem.group(1)) if smem else 0,
                    stack_frame_bytes=frame[0],
                    spill_store_bytes=frame[1],
                    spill_load_bytes=frame[2],
                    cmem_bytes=int(cmem.group(1)) if cmem else 0,
                )
            )
            name = arch = None
    serialized = {m.group(3): f"{m.group(2).strip()} ({m.group(1)})" for m in _WGMMA_SERIAL.finditer(text)}
    return [k.model_copy(update={"wgmma_serialized": serialized[k.name]}) if k.name in serialized else k for k in kernels]


_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*\(")
_SECTION_END = re.compile(r"\.(entry|func)\s+[\w$.]+\s*\(|\.version\s+\d")
_MMA = re.compile(r"\b(wgmma|wmma|mma)\.")


def scan_ptx(text: str) -> list[PtxKernel]:
    """One record per `.entry` in PTX text (also PTX embedded in an executable)."""
    out: list[PtxKernel] = []
    for m in _ENTRY.finditer(text):
        nxt = _SECTION_END.search(text, m.end())
        body = text[m.end() : nxt.start() if nxt else len(text)]
        out.append(PtxKernel(name=m.group(1), has_cp_async="cp.async" in body, has_mma=bool(_MMA.search(body))))
    return out


def scan_binary_ptx(path: Path) -> list[PtxKernel]:
    """Mojo executables embed their kernels as PTX text; read it straight out of the file."""
    return scan_ptx(path.read_bytes().decode("latin-1"))


# Instructions looked for in machine code: cp.async (LDGSTS), mma.sync (HMMA), warpgroup MMA
# (HGMMA; QGMMA for fp8 operands), the copy engine's tensor and plain bulk loads (UTMALDG, UBLKCP).
SASS_INSTRUCTIONS = ("LDGSTS", "HMMA", "HGMMA", "QGMMA", "UTMALDG", "UBLKCP")
_SASS_OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", re.MULTILINE)


def sass_opcodes(text: str) -> set[str]:
    """Opcodes (without modifiers) of `cuobjdump --dump-sass` text."""
    return set(_SASS_OPCODE.findall(text))


def sass_check(cuobjdump: str, exe: Path) -> dict[str, bool]:
    """Where cuobjdump exists: which of SASS_INSTRUCTIONS the machine code holds."""
    # cuobjdump runs nvdisasm, found on PATH: the one beside it first (the wheels put both in one folder).
    env = {**os.environ, "PATH": f"{Path(cuobjdump).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    res = subprocess.run([cuobjdump, "--dump-sass", str(exe)], capture_output=True, text=True, timeout=300, env=env,
                         check=False)
    if res.returncode != 0:
        raise BuildFailed(f"cuobjdump --dump-sass {exe} failed: {res.stderr.strip().splitlines()[-1:]}")
    ops = sass_opcodes(res.stdout)
    return {ins: ins in ops for ins in SASS_INSTRUCTIONS}
