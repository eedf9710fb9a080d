"""Archive: one run folder in bench_results/, written whole or not at all, and read back.

The run's folder name is claimed first (an empty folder: two runs at once never share one), everything is
written into a `bench_results/.tmp-<run id>-<random>/` of its own and renamed onto the claimed name at the end,
so an interrupted run leaves nothing that looks like a result. Reading goes through `try_load_run`: a run, or
the reason a folder does not read as one. What the files say (COMPARE.md, the index) is rendered by
driver/report.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import gzip
import itertools
import os
import secrets
import shutil
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, TextIO

from pydantic import ValidationError

from driver import paths
from driver.errors import ConfigError, DriverError, IOFailed
from driver.records import BuildMeta, RunArchive

# The run's records, gzip-compressed JSON (`zcat results.json.gz`; schema in bench_results/schema/): an SDPA bench's
# records are about 1 MB of JSON, a tenth of that compressed, and the archive travels with every GPU call
# (tracked files count against the device tool's 64 MiB). Runs archived before 2026-11-26 21:00 UTC had
# results.json, compressed in place since; the readers take either.
RESULTS_FILE = "results.json.gz"
# The build metadata of the run's executables, gzip-compressed since 2026-11-29 (about 130 KB of JSON a run, the
# largest file of most; every tracked file travels with each GPU call, 64 MiB at most): `zcat` reads it.
BUILD_META_FILE = "build_meta.json.gz"
# The thresholds the run was gated with, gzip-compressed since 2026-11-29 (37 KB of TOML a run, 12 KB compressed; the
# 196 copies archived before were compressed in place): `zcat` reads it, and so does `thresholds_text`.
THRESHOLDS_FILE = "thresholds.toml.gz"
LEGACY_THRESHOLDS_FILE = "thresholds.toml"
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
    """`<UTC time>-<sha>-<device>`: the name a run asks for. `write_run` claims it, or, where another run of the
    same commit and device was archived in the same second, the first free one of `-2`, `-3`, ..."""
    stamp = dt.datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ").strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{git_sha[:8]}-{device_kind}"


def _claim(root: Path, wanted: str) -> Path:
    """Make the empty folder `wanted` (or `wanted-2`, `-3`, ... where that name is taken) in `root`: mkdir is
    atomic and fails on a name that exists, so of two runs asking for one name at once, one gets it."""
    for n in itertools.count(1):
        final = root / (wanted if n == 1 else f"{wanted}-{n}")
        try:
            final.mkdir()
        except FileExistsError:
            continue
        return final
    raise AssertionError("unreachable")


def fresh_tmp(root: Path, name: str) -> Path:
    """A new folder `.tmp-<name>-<random>` of this process alone (an earlier run killed while writing may have
    left a `.tmp-<name>-*` of its own)."""
    while True:
        tmp = root / f".tmp-{name}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
        except FileExistsError:
            continue
        return tmp


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` itself (flock, released when the descriptor closes): what is listed
    and written under it (the index) is one step for every process. Where the filesystem has no locks (or the
    folder is not there yet), none: the writes stay whole either way."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def fill_claim(root: Path, final: Path, write: Callable[[Path], None]) -> None:
    """Fill the empty run folder `final` claimed in `root`: `write(tmp)` fills a temporary folder of this call
    alone, which then replaces the claim (rename(2) onto an empty folder). On any failure or interrupt the
    temporary folder and the claim are removed, so no reader ever sees a part of a run. archive.write_run and the
    cluster's collect (a run copied in) both archive this way."""
    tmp: Path | None = None
    done = False
    try:
        tmp = fresh_tmp(root, final.name)
        write(tmp)
        os.replace(tmp, final)  # onto the empty folder claimed for it
        done = True
    finally:
        if not done:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            with contextlib.suppress(OSError):
                final.rmdir()  # only while still empty: never a run that was renamed into place


FileMap = dict[str, bytes]


def thresholds_text(folder: Path) -> str:
    """The thresholds a run folder was gated with (thresholds.toml.gz, or a plain thresholds.toml); OSError if it
    has neither."""
    gz = folder / THRESHOLDS_FILE
    if gz.is_file():
        return gzip.decompress(gz.read_bytes()).decode()
    return (folder / LEGACY_THRESHOLDS_FILE).read_text()


def write_run(run: RunArchive, meta: BuildMeta, thresholds_text: str,
              files: FileMap | Callable[[RunArchive], FileMap] | None = None) -> Path:
    """results.json.gz, build_meta.json.gz, thresholds.toml.gz (the thresholds used) and `files` (name -> bytes, or a function of the
    run that renders them), as one folder named by the run id it claimed, which its records carry.

    The name is claimed first (an empty folder, `_claim`), so two runs archived at once never share a name or a
    folder; the files are written into a temporary folder of this call alone, which then replaces the empty
    claimed one (rename(2) onto an empty folder). A run id already taken gets the next free suffix, and the
    records and `files` are made with the id claimed. On any failure or interrupt the temporary folder and the
    claim are removed: no reader ever sees a part of a run (`archived_runs` lists only folders with records)."""
    root = paths.results_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = _claim(root, run.run_id)
    run = run.model_copy(update={"run_id": final.name})

    def write(tmp: Path) -> None:
        own = {RESULTS_FILE: gzip.compress(run.model_dump_json(indent=1).encode(), mtime=0),
               BUILD_META_FILE: gzip.compress(meta.model_dump_json(indent=1).encode(), mtime=0),
               THRESHOLDS_FILE: gzip.compress(thresholds_text.encode(), mtime=0)}
        rendered = files(run) if callable(files) else files
        for name, data in itertools.chain(own.items(), ({} if rendered is None else rendered).items()):
            with paths.naming(tmp / name):  # a full disk's OSError names no file
                (tmp / name).write_bytes(data)

    fill_claim(root, final, write)
    return final


def results_path(folder: Path) -> Path | None:
    """The run folder's records file (results.json.gz, or an older run's results.json); None: not a run folder."""
    for name in (RESULTS_FILE, LEGACY_RESULTS_FILE):
        if (folder / name).is_file():
            return folder / name
    return None


class Unreadable(NamedTuple):
    """A folder that looks like a run (it holds a records file) but does not read as one, and why: a damaged
    gzip stream, bytes that are not UTF-8, text that is not JSON or not a `RunArchive`, records that name
    another run than the folder, or a read the machine refused (`os_error`)."""

    folder: Path
    reason: str
    os_error: bool = False

    def line(self) -> str:
        """The one line a reader prints for a run it skips."""
        return f"skipped {self.folder}: {self.reason}"

    def error(self) -> DriverError:
        """For a run that was asked for by name: a refused read is an I/O error (10), a damaged run a ConfigError
        (2)."""
        hint = "check the file's permissions and the disk" if self.os_error else \
            "the run folder is damaged: restore it from git or the cluster's copy, or remove it"
        cls = IOFailed if self.os_error else ConfigError
        return cls(f"cannot read run {self.folder}: {self.reason}", hint)


def validation_reason(exc: ValidationError, what: str = "a run record") -> str:
    """A record that failed its model, in a few words: the first error and how many more."""
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if first["type"] == "json_invalid":
        return f"not JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
    return f"not {what}: {where + ': ' if where else ''}{first['msg']}{more}"


def _records_text(folder: Path) -> str | Unreadable:
    path = results_path(folder)
    if path is None:
        return Unreadable(folder, f"holds neither {RESULTS_FILE} nor {LEGACY_RESULTS_FILE}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Unreadable(folder, f"cannot read {path.name}: {os_reason(exc)}", os_error=True)
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # truncated, damaged or not gzip (BadGzipFile: an OSError)
            return Unreadable(folder, f"{path.name} is not a whole gzip stream ({exc})")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1]
        return Unreadable(folder, f"{path.name} is not UTF-8 text (byte {exc.start}: {bad!r})")


def try_load_run(folder: Path) -> RunArchive | Unreadable:
    """The one reader of a run folder: its `RunArchive`, or `Unreadable` with the reason in a few words; never
    raises for what is in the folder. A run that reads has `run_id == folder.name` (a records file naming
    another run, `../../etc` say, is Unreadable), so a path or link made from a run's id is its folder's."""
    text = _records_text(folder)
    if isinstance(text, Unreadable):
        return text
    name = results_path(folder).name
    try:
        run = RunArchive.model_validate_json(text)
    except ValidationError as exc:
        return Unreadable(folder, f"{name} is {validation_reason(exc)}")
    if run.run_id != folder.resolve().name:  # `compare .` inside a run folder, or a link to one, is that folder
        return Unreadable(folder, f"{name} names run {run.run_id!r}, not the folder's own name")
    return run


def load_run(folder: Path) -> RunArchive:
    """A run asked for by name: its `RunArchive`, or the reason it does not read as a DriverError (exit 2, or 10
    for a read the machine refused)."""
    got = try_load_run(folder)
    if isinstance(got, Unreadable):
        raise got.error()
    return got


def results_text(folder: Path) -> str:
    """The run's records file as JSON text, unparsed (a DriverError where `try_load_run` could not read it)."""
    text = _records_text(folder)
    if isinstance(text, Unreadable):
        raise text.error()
    return text


def archived_runs(root: Path | None = None) -> list[Path]:
    """Run folders, oldest first: not a `.tmp-*` folder that a killed run left half-written, nor a name claimed
    by a run still writing (no records file yet). A results folder that cannot be listed is an IOFailed."""
    root = root or paths.results_dir()
    if not root.is_dir():
        return []
    try:
        return sorted(p for p in root.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and results_path(p) is not None)
    except OSError as exc:
        raise IOFailed(f"cannot read the results folder {root}: {os_reason(exc)}",
                       "make it readable, or point BENCH_RESULTS_DIR at another folder") from None


def read_runs(root: Path | None = None) -> list[tuple[Path, RunArchive | Unreadable]]:
    """Every run folder (`archived_runs`), oldest first, with what `try_load_run` made of it."""
    return [(folder, try_load_run(folder)) for folder in archived_runs(root)]


def readable_runs(root: Path | None = None, out: TextIO | None = None) -> list[tuple[Path, RunArchive]]:
    """Every run folder that reads as a run, oldest first, with its records; each one that does not is named on
    `out` (stderr by default) in one line and skipped. The reader for every command that goes over the archive."""
    kept = []
    for folder, got in read_runs(root):
        if isinstance(got, Unreadable):
            print(got.line(), file=out or sys.stderr)
        else:
            kept.append((folder, got))
    return kept
