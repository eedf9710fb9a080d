"""Where things live, in a source tree and in a GPU-host bundle alike.

A bundle is the same layout with `bundle.json` at its root and prebuilt
executables under `bin/` instead of `build/`; nothing else in the driver needs to
know which of the two it runs from.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from driver.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
BUNDLE_MARKER = ROOT / "bundle.json"
OWN_RESULTS = ROOT / "bench_results"
# The checkout's own folders besides bench_results/: no output folder (BENCH_RESULTS_DIR, `bundle --out`) may be
# one of them, lie inside one, or hold the checkout. kernels_* are found by name, whatever kernels come next.
OWN_FOLDERS = ("build", "driver", "docs", "tests", "experiments", ".git", ".toolchain", ".nox")


def env_path(name: str, default: Path) -> Path:
    """A path from the environment variable `name`, `default` where it is unset. Set but empty (an unset shell
    variable spelt `NAME=$X`) is a ConfigError, never the current folder: `BENCH_RESULTS_DIR=` once wrote the
    run index over the checkout's README.md."""
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.strip():
        raise ConfigError(f"{name} is set but empty", f"unset it for the default {default}, or set it to a folder")
    return Path(value)


def own_folders() -> tuple[Path, ...]:
    """The checkout's own folders (resolved), bench_results/ first: what `bundle --out` must never replace."""
    kernels = sorted(p for p in ROOT.glob("kernels_*") if p.is_dir())
    return tuple(p.resolve() for p in (OWN_RESULTS, *(ROOT / n for n in OWN_FOLDERS), *kernels))


def clash(folder: Path) -> str | None:
    """Why `folder` is one of the checkout's own places (the checkout itself, a folder holding it, one of
    `own_folders()` or a folder inside one), in a few words; None where it is none of them."""
    folder = folder.resolve()
    root = ROOT.resolve()
    if root.is_relative_to(folder):
        return "the checkout itself" if folder == root else f"a folder holding the checkout {root}"
    for own in own_folders():
        if folder.is_relative_to(own):
            return f"the checkout's own {own.name}/" if folder == own else f"inside the checkout's own {own.name}/"
    return None


def is_bundle() -> bool:
    return BUNDLE_MARKER.is_file()


def build_dir() -> Path:
    return ROOT / ("bin" if is_bundle() else "build")


def results_dir() -> Path:
    """`bench_results/`; BENCH_RESULTS_DIR overrides it (tests use a temporary one). An empty one is a ConfigError,
    and so is one that is the checkout (whose README.md the index would replace), holds it, or lies in one of its
    other folders (driver/, docs/, ...)."""
    folder = env_path("BENCH_RESULTS_DIR", OWN_RESULTS)
    why = clash(folder)
    if why is not None and not folder.resolve().is_relative_to(OWN_RESULTS.resolve()):
        raise ConfigError(f"BENCH_RESULTS_DIR={folder} is {why}", "point it at a folder of its own, or unset it")
    return folder


def own_results() -> bool:
    """Whether the results folder is this checkout's own bench_results/ (not a temporary or foreign one):
    only its runs may rewrite the tracked known-limits table."""
    return results_dir().resolve() == OWN_RESULTS.resolve()


def thresholds_file() -> Path:
    return ROOT / "thresholds.toml"


def pyproject_file() -> Path:
    """pyproject.toml: the project's dependencies and the pinned Mojo toolchain (a bundle carries it too)."""
    return ROOT / "pyproject.toml"


def toolchain_venv() -> Path:
    """The one shared venv holding the pinned Mojo toolchain (about 1 GB, made once)."""
    return env_path("DRIVER_TOOLCHAIN_VENV", ROOT / ".toolchain" / "venv")


def cluster_dir() -> Path:
    """The shared folder `submit` puts a submission in when --shared is not given: DRIVER_CLUSTER_DIR, else
    cluster_runs/ in this checkout."""
    return env_path("DRIVER_CLUSTER_DIR", ROOT / "cluster_runs")


def mojo_runtime_lib_dir() -> Path | None:
    """Folder with the four Mojo runtime libraries the executables load."""
    if is_bundle():
        return ROOT / "lib"
    venv = toolchain_venv()
    for cand in sorted(venv.glob("lib/python3*/site-packages/modular/lib")):
        return cand
    return None


def new_file_mode() -> int:
    """The mode a file made now gets: 0o666 less the umask (0o644 under umask 022). Read from /proc on Linux,
    where asking `os.umask` means setting it, which other threads would see."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError without a path (a full disk found by `write()`, which names none) gets `path`, so that the
    one line it becomes says which file."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole (a stamp, build_meta.json, a re-rendered COMPARE.md, the index): a reader
    sees the old file or the new one, never half of one. The file keeps the mode it had; a new one gets
    the umask's (`new_file_mode`), as any file the user makes would (a temporary file alone is 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = new_file_mode()
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with naming(tmp), os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_between(path: Path, begin: str, end: str) -> str | None:
    """What lies between the marker lines `begin` and `end` of a tracked page (a generated block: docs/LIMITS.md's
    known limits, the README's headline); None when the file or a marker is missing."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, stop = text.find(begin), text.find(end)
    return text[start + len(begin) + 1: stop] if 0 <= start < stop else None


def write_between(path: Path, begin: str, end: str, block: str) -> bool:
    """Replace what lies between the markers with `block`, the rest of the page kept; False (and nothing
    written) when the file or a marker is missing."""
    try:
        text = path.read_text()
    except OSError:
        return False
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return False
    new = text[: start + len(begin)] + "\n" + block + text[stop:]
    if new != text:
        write_atomic(path, new)  # the page's mode kept; no half-written copy left beside it
    return True
