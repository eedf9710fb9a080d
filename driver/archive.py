"""Archive: one run folder in bench_results/, written whole or not at all, and read back.

Everything is written into `bench_results/.tmp-<run id>/` and renamed into place
at the end, so an interrupted run leaves nothing that looks like a result. What the
files say (COMPARE.md, the index) is rendered by driver/report.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import gzip
import itertools
import os
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

from driver import paths
from driver.errors import ConfigError, IOFailed
from driver.records import BuildMeta, RunArchive

# The run's records, gzip-compressed JSON (`zcat results.json.gz`; schema in bench_results/schema/): an SDPA bench's
# records are about 1 MB of JSON, a tenth of that compressed, and the archive travels with every GPU call
# (tracked files count against the device tool's 64 MiB). Runs archived before 2026-11-26 21:00 UTC had
# results.json, compressed in place since; the readers take either.
RESULTS_FILE = "results.json.gz"
LEGACY_RESULTS_FILE = "results.json"
RESULTS_HINT = "make it a writable folder, or point BENCH_RESULTS_DIR at one"
# What an OSError while writing says about the request (ConfigError, exit 2: a folder the user named that is no
# folder or not theirs to write, which check_writable finds before the work): every other errno is the machine
# refusing the write (IOFailed, exit 10: ENOSPC, EROFS, EIO, EDQUOT, ...).
CONFIG_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT,
                           errno.ENAMETOOLONG, errno.ELOOP})
IO_HINTS = {errno.ENOSPC: "free space on that disk, then run again",
            errno.EDQUOT: "free space within your disk quota, then run again",
            errno.EROFS: "remount it read-write, or point BENCH_RESULTS_DIR at a writable folder"}


def check_writable(folder: Path, what: str = "results folder", hint: str = RESULTS_HINT) -> None:
    """Refuse, in one line and before any work, a folder that cannot be made or written into (a file in
    its place or above it, no write permission): found later it is a traceback after the work, or a
    move stopped half-way. Creates nothing."""
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        where = "it is" if probe == folder else f"{probe} is"
        raise ConfigError(f"cannot write the {what} {folder}: {where} a file, not a folder", hint)
    where = "" if probe == folder else f" ({probe}, where it would be made)"
    if _read_only(probe):
        raise IOFailed(f"cannot write the {what} {folder}: a read-only file system{where}", IO_HINTS[errno.EROFS])
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write the {what} {folder}: no write permission{where}", hint)


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def os_reason(exc: OSError) -> str:
    """An OSError in a few words with the path it is about (shutil.copytree's Error: its first failure)."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        _src, dst, why = exc.args[0][0]  # `why` is str(OSError), with the path where it has one
        more = len(exc.args[0]) - 1
        return (why if dst in why else f"{why} ({dst})") + (f", and {more} more" if more else "")
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def write_failed(what: str, exc: OSError, hint: str = RESULTS_HINT) -> ConfigError | IOFailed:
    """One line for an OSError while writing `what`: a ConfigError (with `hint`) where the errno is about the
    folder asked for (`CONFIG_ERRNOS`), else an IOFailed (a full disk, a read-only file system, a failing device)."""
    if exc.errno in CONFIG_ERRNOS:
        return ConfigError(f"cannot write {what}: {os_reason(exc)}", hint)
    return IOFailed(f"cannot write {what}: {os_reason(exc)}", IO_HINTS.get(exc.errno))


@contextlib.contextmanager
def writing(what: str, hint: str = RESULTS_HINT) -> Iterator[None]:
    """An OSError while writing `what` becomes one line naming the path (`write_failed`). The writers replace
    whole files and folders (`paths.write_atomic`, `write_run`), so nothing half-written stays behind."""
    try:
        yield
    except OSError as exc:
        raise write_failed(what, exc, hint) from None


def run_id(created_utc: str, git_sha: str, device_kind: str) -> str:
    """`<UTC time>-<sha>-<device>`; a second run archived within the same second gets `-2`, `-3`, ..."""
    stamp = dt.datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ").strftime("%Y%m%dT%H%M%SZ")
    base = f"{stamp}-{git_sha[:8]}-{device_kind}"
    taken = {p.name for p in archived_runs()}
    return next(c for c in (base if n == 1 else f"{base}-{n}" for n in itertools.count(1)) if c not in taken)


def write_run(run: RunArchive, meta: BuildMeta, thresholds_text: str, files: dict[str, bytes] | None = None) -> Path:
    """results.json.gz, build_meta.json, the thresholds used and `files` (name -> bytes), as one folder."""
    root = paths.results_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = root / run.run_id
    tmp = root / f".tmp-{run.run_id}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        own = {RESULTS_FILE: gzip.compress(run.model_dump_json(indent=1).encode(), mtime=0),
               "build_meta.json": meta.model_dump_json(indent=1).encode(), "thresholds.toml": thresholds_text.encode()}
        for name, data in itertools.chain(own.items(), ({} if files is None else files).items()):
            with paths.naming(tmp / name):  # a full disk's OSError names no file
                (tmp / name).write_bytes(data)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def results_path(folder: Path) -> Path | None:
    """The run folder's records file (results.json.gz, or an older run's results.json); None: not a run folder."""
    for name in (RESULTS_FILE, LEGACY_RESULTS_FILE):
        if (folder / name).is_file():
            return folder / name
    return None


def results_text(folder: Path) -> str:
    """The run's records as JSON text. Raises OSError (no such file, or a damaged gzip stream) or ValueError."""
    path = results_path(folder)
    if path is None:
        raise FileNotFoundError(f"{folder} holds neither {RESULTS_FILE} nor {LEGACY_RESULTS_FILE}")
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (EOFError, zlib.error) as exc:  # truncated or damaged (BadGzipFile is an OSError already)
            raise ValueError(f"{path}: not a whole gzip stream ({exc})") from None
    return data.decode()


def load_run(folder: Path) -> RunArchive:
    return RunArchive.model_validate_json(results_text(folder))


def archived_runs(root: Path | None = None) -> list[Path]:
    """Run folders, oldest first: not a `.tmp-*` folder that a killed run left half-written."""
    root = root or paths.results_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and results_path(p) is not None)
