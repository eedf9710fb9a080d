"""Find the compilers and say exactly what to install when one is missing."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from functools import cache
from pathlib import Path

from driver import paths
from driver.errors import ToolchainMissing
from driver.records import Toolchain, ToolVersion

INSTALL_NVCC = "install the CUDA toolkit and set CUDA_HOME, put nvcc on PATH, or pip install nvidia-cuda-nvcc"


@cache
def pins() -> dict[str, str]:
    """The pinned Mojo toolchain, {package: version}, from pyproject.toml's `toolchain` extra: its one
    home (nox installs from the same list)."""
    data = tomllib.loads(paths.pyproject_file().read_text())
    return dict(req.split("==", 1) for req in data["project"]["optional-dependencies"]["toolchain"])


def install_mojo_hint() -> str:
    return f"pip install {' '.join(f'{k}=={v}' for k, v in pins().items())}, or run through nox, which does it"


@cache
def _version_text(exe: str) -> str:
    """`exe --version`, whole (a release and a build id)."""
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, errors="replace", timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainMissing(f"{exe} does not run: {exc}") from None


def _version_line(exe: str, pattern: str) -> str:
    out = _version_text(exe)
    m = re.search(pattern, out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


@cache
def find_mojo() -> ToolVersion:
    """MOJO names the executable; else the shared toolchain venv; else PATH."""
    candidates = []
    if os.environ.get("MOJO"):
        candidates.append(os.environ["MOJO"])
    candidates.append(str(paths.toolchain_venv() / "bin" / "mojo"))
    on_path = shutil.which("mojo")
    if on_path:
        candidates.append(on_path)
    for cand in candidates:
        if Path(cand).is_file() and os.access(cand, os.X_OK):
            version = _version_line(cand, r"Mojo (\S+)")
            if version != pins()["mojo"]:
                raise ToolchainMissing(
                    f"found mojo {version} at {cand}, but this project is pinned to mojo {pins()['mojo']}",
                    install_mojo_hint(),
                )
            return ToolVersion(name="mojo", path=cand, version=version)
    raise ToolchainMissing("mojo not found (looked at $MOJO, the toolchain venv and PATH)", install_mojo_hint())


def _nvcc_wheel_candidates() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc", site / "nvidia" / "cu13" / "bin" / "nvcc"]


@cache
def find_nvcc() -> ToolVersion:
    """CUDA_HOME first, then PATH, then the nvidia-cuda-nvcc wheel."""
    candidates: list[Path] = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc")
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path))
    candidates += _nvcc_wheel_candidates()
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            version = _version_line(str(cand), r"release ([\d.]+)")
            return ToolVersion(name="nvcc", path=str(cand), version=version)
    raise ToolchainMissing("nvcc not found (looked at $CUDA_HOME/bin, PATH and the nvidia-cuda-nvcc wheel)", INSTALL_NVCC)


@cache
def find_ptxas() -> ToolVersion:
    nvcc = Path(find_nvcc().path)
    cand = nvcc.parent / "ptxas"
    path = str(cand) if cand.is_file() else shutil.which("ptxas")
    if not path:
        raise ToolchainMissing(f"ptxas not found next to {nvcc} or on PATH", INSTALL_NVCC)
    return ToolVersion(name="ptxas", path=path, version=_version_line(path, r"release ([\d.]+)"))


def find_cuobjdump() -> str | None:
    """Optional, for the SASS check: beside nvcc, on PATH (the GPU hosts), or the
    nvidia-cuda-cuobjdump wheel (with nvidia-cuda-nvdisasm beside it, which it runs)."""
    try:
        cand = Path(find_nvcc().path).parent / "cuobjdump"
        if cand.is_file():
            return str(cand)
    except ToolchainMissing:
        pass
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    wheel = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin" / "cuobjdump"
    if wheel.is_file() and (wheel.parent / "nvdisasm").is_file():
        return str(wheel)
    return None


def fingerprint(tool: ToolVersion) -> str:
    """What a build's cache key holds of its compiler: the name, the whole `--version` text and, for Mojo, the
    pinned packages (the standard library comes with them). Never the path: a copied checkout, or the same
    toolchain installed elsewhere, keeps its cache."""
    parts = [tool.name, _version_text(tool.path).strip()]
    if tool.name == "mojo":
        parts.append(" ".join(f"{k}=={v}" for k, v in sorted(pins().items())))
    return "\n".join(parts)


def describe(need_mojo: bool, need_cuda: bool) -> Toolchain:
    return Toolchain(
        mojo=find_mojo() if need_mojo else None,
        nvcc=find_nvcc() if need_cuda else None,
        ptxas=find_ptxas() if need_cuda else None,
        python=f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
    )
