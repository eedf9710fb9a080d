"""Build: compile every target for every requested arch, with a content-hash cache that checks what it trusts.

A target rebuilds only when its sources, its command line (flags, defines, arch) or its toolchain (version and
pins, never its path) change, or when a file it wrote is no longer what its stamp says (size and sha256).
Each result is a TargetBuild record kept in a stamp beside the executable, so a cached build still reports its
ptxas numbers. A compiler writes under a temporary name that is renamed into place only after it succeeded;
an interrupted build kills every running compiler's whole process group before the driver exits.
The targets compile side by side, at most one per CPU core (`build_all`); each target's lines are printed whole
and in the table's order, once it and every target before it are done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path

import psutil
from pydantic import ValidationError

from driver import archive, build_gates, inspect_ptx, paths, toolchain
from driver.errors import BuildFailed, Interrupted, IOFailed
from driver.host import git_state, host_info, utc_now
from driver.launch import run_process
from driver.records import BuildMeta, BuiltFile, TargetBuild, Toolchain
from driver.targets import Target
from driver.thresholds import BuildGates

BUILD_TIMEOUT_S = 1800
KEEP_DIR = "<keep-dir>"  # nvcc's -keep-dir as recorded: a temporary folder
# Every process of one compile carries this variable (a fresh value per compile): an interrupted build finds and
# kills them by it, with their process groups, even those whose parent has already died.
COMPILE_TOKEN_VAR = "DRIVER_BUILD_TOKEN"
STOP_WAIT_S = 10.0
BUILD_DIR_HINT = "make build/ writable, or build in a writable copy of the checkout"

# The compiles running now (token -> "<target> for <arch>"), and the flag that keeps new ones from starting once
# the build is being stopped: `build_all` kills what this holds on Ctrl-C, SIGTERM or another target's failure.
_RUNNING: dict[str, str] = {}
_RUNNING_LOCK = threading.Lock()
_LOCAL = threading.local()  # .lines: where log() collects a compile's lines while it runs beside others


class _Stopped(Exception):
    """A compile that the build stopped (killed, or never started): it wrote and cached nothing."""


def log(msg: str) -> None:
    lines = getattr(_LOCAL, "lines", None)
    if lines is not None:
        lines.append(msg)
    else:
        print(msg, file=sys.stderr, flush=True)


def _command(t: Target, arch: str, tc: Toolchain, out: Path | str, keep_dir: Path | str) -> list[str]:
    if t.lang == "mojo":
        assert tc.mojo is not None
        cmd = [tc.mojo.path, "build", "-I", "kernels_mojo", "--target-accelerator", arch]
        cmd += [f"-D{k}={v}" for k, v in sorted(t.defines_for(arch).items())]
        return cmd + [t.entry, "-o", str(out)]
    assert tc.nvcc is not None
    cc = t.gencode_cc(arch)  # sm_90 -> 90a for the targets that hold the Hopper kernel
    cmd = [tc.nvcc.path, *t.flags, "-gencode", f"arch=compute_{cc},code=[sm_{cc},compute_{cc}]", "-Xptxas", "-v"]
    cmd += [f"-D{k}={v}" for k, v in sorted(t.defines_for(arch).items())]
    return cmd + ["-keep", "-keep-dir", str(keep_dir), t.entry, "-o", str(out)]


def _recorded(t: Target, arch: str, tc: Toolchain, out: Path) -> list[str]:
    """The command as recorded: no temporary folder or name, the output relative to the repo."""
    return _command(t, arch, tc, os.path.relpath(out, paths.ROOT), KEEP_DIR)


def _source_hash(t: Target, arch: str, recorded_cmd: list[str], tc: Toolchain) -> str:
    """The cache key: the sources (named relative to the repo), the command line and the compiler's fingerprint
    (toolchain.fingerprint); the compiler's path, the one absolute path in the command, stays out of it."""
    h = hashlib.sha256()
    for src in t.sources():
        h.update(str(src.relative_to(paths.ROOT)).encode() + b"\0" + src.read_bytes() + b"\0")
    tool = tc.mojo if t.lang == "mojo" else tc.nvcc
    cmd = [tool.name if tool else "", *recorded_cmd[1:]]
    h.update(json.dumps([arch, cmd, toolchain.fingerprint(tool) if tool else None]).encode())
    return h.hexdigest()


def _built_file(path: Path, name: str | None = None) -> BuiltFile:
    """`path`'s size and sha256, under `name` (default: its own)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return BuiltFile(name=name or path.name, size_bytes=path.stat().st_size, sha256=h.hexdigest())


def cached_record(stamp: Path, log_file: Path, lang: str) -> TargetBuild:
    """A cached build's record, its ptxas report read again from the build's log: a cached build is judged by
    today's parser (inspect_ptx), not the one that stamped it (since 2026-11-27: the parser learnt C75xx)."""
    cached = TargetBuild.model_validate_json(stamp.read_text())
    if lang == "cuda" and log_file.is_file():
        cached = cached.model_copy(update={"ptxas": inspect_ptx.parse_ptxas(log_file.read_text(errors="replace"))})
    return cached


def _stale(stamp: Path, log_file: Path, key: str, lang: str) -> tuple[TargetBuild | None, str]:
    """(the cached record, "") while the stamp's key matches and every file it lists is unchanged; else (None,
    why the target compiles: "" where it never was)."""
    if not stamp.is_file():
        return None, ""
    folder = stamp.parent
    try:
        cached = cached_record(stamp, log_file, lang)
    except (OSError, ValidationError, ValueError) as exc:
        return None, f"its stamp {stamp.name} is unreadable ({type(exc).__name__})"
    if cached.source_hash != key:
        return None, "sources, flags or toolchain changed"
    if not cached.outputs:
        return None, "its stamp predates output hashes"
    for want in cached.outputs:
        path = folder / want.name
        if not path.is_file():
            return None, f"output {want.name} is missing"
        size = path.stat().st_size
        if size != want.size_bytes or _built_file(path) != want:
            return None, (f"output {want.name} changed since it was built ({size} bytes, its stamp says "
                          f"{want.size_bytes}{', another sha256' if size == want.size_bytes else ''})")
    return cached, ""


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing into build/ is one IOFailed line naming the path."""
    try:
        yield
    except OSError as exc:
        raise IOFailed(f"cannot write {path}: {archive.os_reason(exc)}", BUILD_DIR_HINT) from None


def stop_compiler(token: str) -> None:
    """Kill every process of one compile (found by COMPILE_TOKEN_VAR in its environment) with its whole process
    group, and wait until they are gone: after this nothing of the compile writes anything."""
    procs = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and p.environ().get(COMPILE_TOKEN_VAR) == token:
                procs.append(p)
    groups = set()
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(p.pid))
    for group in groups - {os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for p in procs:  # one that left its group (setsid) too
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        alive = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        if not alive:
            return
        time.sleep(0.05)


def sass_stale(rec: TargetBuild) -> bool:
    """Whether a record's SASS was read for another instruction list than the inspector's today
    (inspect_ptx.SASS_INSTRUCTIONS; the record's `sass` keys are the list it was read for)."""
    return rec.sass is not None and set(rec.sass) != set(inspect_ptx.SASS_INSTRUCTIONS)


def _sass_current(cached: TargetBuild, exe: Path, stamp: Path) -> TargetBuild:
    """A cached build whose SASS was read for another instruction list is read again (where cuobjdump is; else it
    is left unread, for `with_sass` on a GPU host) and its stamp rewritten: a cache hit is never judged on an
    inspection that did not look for what the gates ask about. Unchanged otherwise."""
    if not sass_stale(cached):
        return cached
    cuobjdump = toolchain.find_cuobjdump()
    sass = inspect_ptx.sass_check(cuobjdump, exe) if cuobjdump else None
    log(f"[build] {cached.arch} {cached.target}: the SASS instructions looked for changed "
        f"({', '.join(sorted(cached.sass or {}))} -> {', '.join(sorted(inspect_ptx.SASS_INSTRUCTIONS))}): "
        + ("read again" if cuobjdump else "no cuobjdump here, left unread"))
    record = cached.model_copy(update={"sass": sass})
    with contextlib.suppress(OSError):  # a read-only build/: the record is right, the next build reads it again
        paths.write_atomic(stamp, record.model_dump_json(indent=1))
    return record


def build_target(t: Target, arch: str, tc: Toolchain, *, force: bool = False) -> tuple[TargetBuild, bool]:
    """Return (record, compiled): compiled is False when the cache was valid.

    A cache hit writes nothing (a read-only checkout builds when everything is cached)."""
    out_dir = paths.build_dir() / arch
    out = out_dir / t.name
    stamp = out_dir / f"{t.name}.stamp.json"
    log_path = out_dir / f"{t.name}.log"
    recorded = _recorded(t, arch, tc, out)
    key = _source_hash(t, arch, recorded, tc)
    cached, why = (None, "--force") if force else _stale(stamp, log_path, key, t.lang)
    if cached is not None:
        return _sass_current(cached, out, stamp), False
    if not Path(paths.ROOT / t.entry).is_file():
        raise BuildFailed(f"{t.name}: source {t.entry} does not exist")
    with _writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out_dir, prefix=f".{t.name}-building-")  # no suffix: the compiler
        os.close(fd)  # reads none into the output's kind; the name is the compile's, and the folder is writable
    tmp_out = Path(name)
    tmp_out.unlink()
    token = secrets.token_hex(8)
    stop = getattr(_LOCAL, "stop", None)
    try:
        with tempfile.TemporaryDirectory(prefix=f"keep-{t.name}-") as keep:
            keep_dir = Path(keep)
            log(f"[build] {arch} {t.name}: {why + ': rebuilding' if why else 'compiling'} ...")
            with _RUNNING_LOCK:
                if stop is not None and stop.is_set():
                    raise _Stopped()
                _RUNNING[token] = f"{t.name} for {arch}"
            try:
                res = run_process(_command(t, arch, tc, tmp_out, keep_dir), timeout_s=BUILD_TIMEOUT_S,
                                  cwd=paths.ROOT, env={**os.environ, COMPILE_TOKEN_VAR: token})
            finally:
                with _RUNNING_LOCK:
                    _RUNNING.pop(token, None)
            if stop is not None and stop.is_set():  # killed by build_all, or finished as it stopped: keep nothing
                raise _Stopped()
            with _writing(log_path):
                paths.write_atomic(log_path, f"$ {' '.join(recorded)}\n{res.stdout}\n{res.stderr}")
            if res.timed_out or res.returncode != 0 or not tmp_out.is_file():
                first = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()), res.last_error_line())
                if res.returncode == 0 and not res.timed_out:
                    first = f"the compiler exited 0 but wrote no {tmp_out.name}"
                raise BuildFailed(f"{t.name} for {arch}: {first.strip()}", f"full log: {log_path}")
            ptxas: list = []
            if t.lang == "cuda":
                ptxas = inspect_ptx.parse_ptxas(res.stderr + res.stdout)
                ptx_text = "".join(p.read_text(errors="replace") for p in sorted(keep_dir.glob("*.ptx")))
                kernels = inspect_ptx.scan_ptx(ptx_text)
            else:
                kernels = inspect_ptx.scan_binary_ptx(tmp_out)
        cuobjdump = toolchain.find_cuobjdump() if t.lang == "cuda" else None
        record = TargetBuild(
            target=t.name,
            lang=t.lang,
            arch=arch,
            source_hash=key,
            command=recorded,
            defines=t.defines_for(arch),
            flags=list(t.flags),
            output=os.path.relpath(out, paths.ROOT),
            build_seconds=round(res.seconds, 2),
            ptxas=ptxas,
            ptx_kernels=kernels,
            sass=inspect_ptx.sass_check(cuobjdump, tmp_out) if cuobjdump else None,
            outputs=[_built_file(tmp_out, out.name), _built_file(log_path)],
        )
        with _writing(out):
            os.replace(tmp_out, out)  # the stamp, written last, is what makes it a cache hit
        with _writing(stamp):
            paths.write_atomic(stamp, record.model_dump_json(indent=1))
    except KeyboardInterrupt as exc:
        stop_compiler(token)
        raise Interrupted(f"build of {t.name} for {arch} stopped and its compiler killed; nothing of it was written",
                          "build/ keeps what the last finished build made; the next build compiles what that is "
                          "not") from exc
    finally:
        tmp_out.unlink(missing_ok=True)
    log(f"[build] {arch} {t.name}: compiled in {res.seconds:.1f} s")
    return record, True


def _build_side_by_side(jobs: list[tuple[Target, str]], tc: Toolchain, force: bool) -> list[tuple[TargetBuild, bool]]:
    """build_target for every (target, arch), at most os.cpu_count() at once; their results, and their lines
    printed whole, in the order of `jobs`. A failure stops the rest at once (their compilers are killed) and is
    raised, after its own lines; so is Ctrl-C or SIGTERM (Interrupted, naming the compiles it stopped)."""
    stop = threading.Event()
    lines: list[list[str]] = [[] for _ in jobs]

    def one(i: int) -> tuple[TargetBuild, bool]:
        _LOCAL.lines, _LOCAL.stop = lines[i], stop
        try:
            if stop.is_set():
                raise _Stopped()
            t, arch = jobs[i]
            return build_target(t, arch, tc, force=force)
        finally:
            _LOCAL.lines = _LOCAL.stop = None

    pool = ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1)), thread_name_prefix="build")
    futures = [pool.submit(one, i) for i in range(len(jobs))]
    results: list[tuple[TargetBuild, bool]] = []
    try:
        for i, fut in enumerate(futures):
            while not fut.done():  # a failure anywhere ends the build at once, not when its turn comes
                wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
                failed = next((j for j, f in enumerate(futures) if f.done() and f.exception() is not None), None)
                if failed is not None:
                    i, fut = failed, futures[failed]
                    break
            for line in lines[i]:
                log(line)
            results.append(fut.result())  # a failure raises here, and stops the others below
    except KeyboardInterrupt as exc:  # SIGTERM too (errors.Terminated): the signal lands in this thread
        order = [f"{t.name} for {arch}" for t, arch in jobs]
        stopped = sorted(_stop_all(stop, futures), key=order.index)
        if not stopped:
            raise
        n = len(stopped)
        raise Interrupted(f"build of {', '.join(stopped)} stopped and {'its compiler' if n == 1 else 'their compilers'}"
                          f" killed; nothing of {'it' if n == 1 else 'them'} was written",
                          "build/ keeps what the last finished build made; the next build compiles what that is "
                          "not") from exc
    except BaseException:
        _stop_all(stop, futures)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def _stop_all(stop: threading.Event, futures: list[Future]) -> list[str]:
    """Keep every compile from starting, kill every running one's process group (stop_compiler) until all of
    `futures` are done; the compiles it stopped, "<target> for <arch>"."""
    with _RUNNING_LOCK:
        stop.set()
    stopped: list[str] = []
    while True:
        with _RUNNING_LOCK:
            running = dict(_RUNNING)
        for token, what in running.items():
            stop_compiler(token)
            if what not in stopped:
                stopped.append(what)
        if not wait(futures, timeout=0.1).not_done:
            return stopped


def build_all(
    targets: tuple[Target, ...], archs: tuple[str, ...], gates: BuildGates, *, force: bool = False
) -> tuple[BuildMeta, list[TargetBuild]]:
    """Build everything, write build/build_meta.json, enforce static gates.

    Returns the metadata and the records of the targets this call compiled (the cache held the others).
    """
    tc = toolchain.describe(
        need_mojo=any(t.lang == "mojo" for t in targets), need_cuda=any(t.lang == "cuda" for t in targets)
    )
    records: list[TargetBuild] = []
    compiled: list[TargetBuild] = []
    violations: list[str] = []
    jobs = []
    for arch in archs:
        for t in targets:
            if not t.supports(arch):
                log(f"[build] {arch} {t.name}: skipped, needs sm_{t.min_arch} or newer")
                continue
            jobs.append((t, arch))
    for (t, arch), (rec, did) in zip(jobs, _build_side_by_side(jobs, tc, force), strict=True):
        if did:
            compiled.append(rec)
        records.append(rec)
        violations += build_gates.static_violations(t, rec, gates)
    # Keep what an earlier call built for other targets or archs, so that
    # `build --arch sm_89` does not forget the sm_90 executables.
    try:
        before: BuildMeta | None = load_meta()
    except (BuildFailed, ValueError, OSError):
        before = None
    earlier = [r for r in before.targets if (r.target, r.arch) not in {(n.target, n.arch) for n in records}] \
        if before else []
    if earlier:  # the kept targets' toolchains stay on record too
        kept = {k: getattr(tc, k) or getattr(before.toolchain, k) for k in ("mojo", "nvcc", "ptxas")}
        tc = tc.model_copy(update=kept)
    all_records = sorted(earlier + records, key=lambda r: (r.arch, r.target))
    archs_built = sorted({r.arch for r in all_records})
    if before is not None and not compiled and before.targets == all_records and before.archs == archs_built:
        meta = before  # it describes these very executables: a cached build writes nothing
    else:
        sha, dirty = git_state()
        meta = BuildMeta(
            created_utc=utc_now(), git_sha=sha, git_dirty=dirty, toolchain=tc, host=host_info(),
            archs=archs_built, targets=all_records,
        )
        meta_path = paths.build_dir() / "build_meta.json"
        with _writing(meta_path):
            paths.write_atomic(meta_path, meta.model_dump_json(indent=1))
    if violations:
        raise BuildFailed(f"{len(violations)} static gate(s) failed: " + "; ".join(violations))
    return meta, compiled


def report_lines(records: list[TargetBuild]) -> list[str]:
    """The ptxas report (registers, shared memory, spills) of every kernel in these records, and each
    target's PTX kernel count, one line each: what `build` prints for what it compiled, or with -v."""
    lines = []
    for t in records:
        for k in t.ptxas:
            lines.append(f"  {t.arch} {t.target} {k.name[:60]}: {k.registers} regs, {k.smem_bytes} B smem, "
                         f"{k.spill_store_bytes + k.spill_load_bytes} B spills")
        n_cp = sum(k.has_cp_async for k in t.ptx_kernels)
        lines.append(f"  {t.arch} {t.target}: {len(t.ptx_kernels)} PTX kernel(s), {n_cp} with cp.async")
    return lines


def load_meta() -> BuildMeta:
    path = paths.build_dir() / "build_meta.json"
    if not path.is_file():
        raise BuildFailed(f"{path} does not exist", "run `nox -s build` (or `python -m driver build`) first")
    return BuildMeta.model_validate_json(path.read_text())


def with_sass(meta: BuildMeta) -> BuildMeta:
    """Record the SASS check (LDGSTS, HMMA) for CUDA executables built where no cuobjdump was
    (the CPU box), once a host that has it (the GPU hosts) runs them, and read it again where it was read for
    another instruction list than today's (`sass_stale`). Unchanged elsewhere."""
    cuobjdump = toolchain.find_cuobjdump()
    if cuobjdump is None:
        return meta
    targets = []
    for t in meta.targets:
        exe = paths.build_dir() / t.arch / t.target
        if t.lang == "cuda" and (t.sass is None or sass_stale(t)) and exe.is_file():
            t = t.model_copy(update={"sass": inspect_ptx.sass_check(cuobjdump, exe)})
            log(f"{t.arch} {t.target}: SASS " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in t.sass.items()))
        targets.append(t)
    return meta.model_copy(update={"targets": targets})
