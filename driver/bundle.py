"""GPU-host bundle: the built executables plus everything the driver needs to run them.

Building on a CPU box and running on a GPU box is the normal workflow. The bundle
holds the driver package, the executables and build_meta.json under bin/, the
four Mojo runtime libraries under lib/, and the driver's Python dependencies
installed per Python version under site/pyXY/ (the GPU host needs only the
NVIDIA driver, python3 and numpy). `./run bench ...` there archives results in
the bundle's bench_results/ exactly as a source tree would; `./run-tests` runs
the GPU tests against the same executables.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from driver import build, paths, targets, thresholds
from driver.errors import ConfigError, ToolchainMissing
from driver.host import git_state, utc_now

MOJO_RUNTIME_LIBS = (
    "libKGENCompilerRTShared.so",
    "libAsyncRTMojoBindings.so",
    "libAsyncRTRuntimeGlobals.so",
    "libMSupportGlobals.so",
)
# What the driver imports beyond numpy and the standard library, pinned to the
# versions this machine runs so the GPU host behaves the same. The peers' packages
# (pyproject.toml's `peers` group, e.g. cudnn-frontend) travel too, per Python version
# where PyPI has a binary wheel for it.
BUNDLED_PACKAGES = ("pydantic", "psutil", "nvidia-ml-py")
MANYLINUX = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")

RUN_SCRIPT = """#!/usr/bin/env bash
# Run the driver from this bundle: ./run bench --sizes 256K,16M
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
site="$here/site/py$ver"
if [ ! -d "$site" ]; then
  echo "toolchain missing: this bundle has no packages for Python ${ver} (it has: $(ls "$here/site" | tr '\\n' ' ')); rebuild it with --python" >&2
  exit 3
fi
export PYTHONPATH="$here:$site${PYTHONPATH:+:$PYTHONPATH}"
# `python -m` puts the working directory first on sys.path: run from a source checkout, that
# checkout's driver (and its peers, started with -m too) would shadow this bundle's. Python >= 3.11.
export PYTHONSAFEPATH=1
export NCCL_NVLS_ENABLE=0
exec "$py" -m driver "$@"
"""
RUN_TESTS_SCRIPT = RUN_SCRIPT.replace("# Run the driver from this bundle: ./run bench --sizes 256K,16M",
                                      "# Run the GPU tests against this bundle's executables: ./run-tests -x")
RUN_TESTS_SCRIPT = RUN_TESTS_SCRIPT.replace('exec "$py" -m driver "$@"', 'cd "$here" && exec "$py" -m pytest tests/gpu "$@"')


def peer_pins() -> list[str]:
    """The peers' pinned packages: pyproject.toml's `peers` optional dependencies."""
    data = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())
    return list(data["project"]["optional-dependencies"].get("peers", []))


def _pip_target(site: Path, py: str, pins: list[str], *, deps: bool = True) -> str | None:
    """Install `pins` (binary wheels for CPython `py` on manylinux x86-64) into `site`; pip's last error line."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", *(() if deps else ("--no-deps",)),
           "--target", str(site), "--python-version", py, "--implementation", "cp", "--only-binary=:all:"]
    cmd += [a for plat in MANYLINUX for a in ("--platform", plat)] + pins
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode == 0:
        return None
    return (res.stderr.strip().splitlines() or ["pip failed"])[-1]


def _site(site: Path, py: str) -> dict[str, str]:
    """The driver's dependencies (required) and the peers' wheels (where PyPI has one for `py`) into
    `site`; returns {pin: why it is missing} for the peers' that could not be packed."""
    pins = [f"{name}=={metadata.version(name)}" for name in BUNDLED_PACKAGES]
    err = _pip_target(site, py, pins)
    if err:
        raise ToolchainMissing(f"cannot fetch {', '.join(pins)} for Python {py}: {err}",
                               "the bundle step needs the package index; the GPU host does not")
    missing = {}
    # One at a time, without dependencies (torch and its cuDNN are the host's own; an optional extra
    # such as cudnn-frontend's cutedsl is not used): a peer without a wheel for this Python leaves the others.
    for pin in peer_pins():
        err = _pip_target(site, py, [pin], deps=False)
        if err:
            missing[pin] = err
            print(f"bundle: no {pin} for Python {py} ({err}); that peer will be recorded as skipped there",
                  file=sys.stderr)
    return missing


def make(out: Path, archs: tuple[str, ...], pythons: tuple[str, ...]) -> Path:
    if paths.is_bundle():
        raise ConfigError("this is already a bundle", "make bundles from a source tree")
    for py in pythons:
        if not py.replace(".", "").isdigit() or py.count(".") != 1:
            raise ConfigError(f"malformed Python version {py!r}", "e.g. --python 3.11,3.12")
    # Build first (content-hash cached, so this is quick when nothing changed): a bundle packed from
    # build outputs older than the sources would carry the current git sha on stale executables.
    meta, _compiled = build.build_all(targets.select("all"), archs, thresholds.load(None).build)
    lib_dir = paths.mojo_runtime_lib_dir()
    if lib_dir is None or not all((lib_dir / n).is_file() for n in MOJO_RUNTIME_LIBS):
        raise ToolchainMissing(f"the Mojo runtime libraries are not in {lib_dir}", "run through nox, which installs them")

    out = out.resolve()
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(paths.ROOT / "driver", tmp / "driver", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(paths.thresholds_file(), tmp / "thresholds.toml")
    # The tests travel too, so the GPU host can run the GPU tests against these very executables:
    # PYTHONPATH=.:site/pyXY python3 -m pytest tests/gpu
    shutil.copytree(paths.ROOT / "tests", tmp / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(paths.ROOT / "pyproject.toml", tmp / "pyproject.toml")
    kept = [t for t in meta.targets if t.arch in archs]
    for t in kept:
        dest = tmp / "bin" / t.arch / t.target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.ROOT / t.output, dest)
    (tmp / "bin" / "build_meta.json").write_text(
        meta.model_copy(update={"targets": kept, "archs": list(archs)}).model_dump_json(indent=1)
    )
    (tmp / "lib").mkdir()
    for name in MOJO_RUNTIME_LIBS:
        shutil.copy2(lib_dir / name, tmp / "lib" / name)
    peers_missing = {py: m for py in pythons if (m := _site(tmp / "site" / f"py{py.replace('.', '')}", py))}
    for name, text in (("run", RUN_SCRIPT), ("run-tests", RUN_TESTS_SCRIPT)):
        (tmp / name).write_text(text)
        (tmp / name).chmod(0o755)
    sha, dirty = git_state()
    marker = {"git_sha": sha, "git_dirty": dirty, "created_utc": utc_now(), "archs": list(archs),
              "pythons": list(pythons), "peer_packages": peer_pins(), "peer_packages_missing": peers_missing}
    (tmp / paths.BUNDLE_MARKER.name).write_text(json.dumps(marker, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
