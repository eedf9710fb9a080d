"""Where things live, in a source tree and in a GPU-host bundle alike.

A bundle is the same layout with `bundle.json` at its root and prebuilt
executables under `bin/` instead of `build/`; nothing else in the driver needs to
know which of the two it runs from.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE_MARKER = ROOT / "bundle.json"


def is_bundle() -> bool:
    return BUNDLE_MARKER.is_file()


def build_dir() -> Path:
    return ROOT / ("bin" if is_bundle() else "build")


def results_dir() -> Path:
    """`bench_results/`; BENCH_RESULTS_DIR overrides it (tests use a temporary one)."""
    return Path(os.environ.get("BENCH_RESULTS_DIR", ROOT / "bench_results"))


def thresholds_file() -> Path:
    return ROOT / "thresholds.toml"


def pyproject_file() -> Path:
    """pyproject.toml: the project's dependencies and the pinned Mojo toolchain (a bundle carries it too)."""
    return ROOT / "pyproject.toml"


def toolchain_venv() -> Path:
    """The one shared venv holding the pinned Mojo toolchain (about 1 GB, made once)."""
    return Path(os.environ.get("DRIVER_TOOLCHAIN_VENV", ROOT / ".toolchain" / "venv"))


def mojo_runtime_lib_dir() -> Path | None:
    """Folder with the four Mojo runtime libraries the executables load."""
    if is_bundle():
        return ROOT / "lib"
    venv = toolchain_venv()
    for cand in sorted(venv.glob("lib/python3*/site-packages/modular/lib")):
        return cand
    return None


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole (a stamp, build_meta.json, a re-rendered COMPARE.md, the index): a reader
    sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
