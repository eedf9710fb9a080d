"""Build: compile every target for every requested arch, with a content-hash cache.

A target rebuilds only when its sources, its command line (flags, defines, arch)
or its toolchain version change. Each result is a TargetBuild record kept in a
stamp beside the executable, so a cached build still reports its ptxas numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from driver import gates, inspect_ptx, paths, toolchain
from driver.errors import BuildFailed
from driver.host import git_state, host_info, utc_now
from driver.launch import run_process
from driver.records import BuildMeta, TargetBuild, Toolchain
from driver.targets import Target
from driver.thresholds import BuildGates

BUILD_TIMEOUT_S = 1800


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _command(t: Target, arch: str, tc: Toolchain, out: Path, keep_dir: Path) -> list[str]:
    if t.lang == "mojo":
        assert tc.mojo is not None
        cmd = [tc.mojo.path, "build", "-I", "kernels_mojo", "--target-accelerator", arch]
        cmd += [f"-D{k}={v}" for k, v in sorted(t.defines.items())]
        return cmd + [t.entry, "-o", str(out)]
    assert tc.nvcc is not None
    cc = t.gencode_cc(arch)  # sm_90 -> 90a for the targets that hold the Hopper kernel
    cmd = [tc.nvcc.path, *t.flags, "-gencode", f"arch=compute_{cc},code=[sm_{cc},compute_{cc}]", "-Xptxas", "-v"]
    cmd += [f"-D{k}={v}" for k, v in sorted(t.defines_for(arch).items())]
    return cmd + ["-keep", "-keep-dir", str(keep_dir), t.entry, "-o", str(out)]


def _portable(cmd: list[str], out: Path, keep_dir: Path) -> list[str]:
    """The command as recorded: no temporary folders, output relative to the repo."""
    rel = os.path.relpath(out, paths.ROOT)
    return [rel if c == str(out) else "<keep-dir>" if c == str(keep_dir) else c for c in cmd]


def _source_hash(t: Target, arch: str, recorded_cmd: list[str], tc: Toolchain) -> str:
    h = hashlib.sha256()
    for src in t.sources():
        h.update(str(src.relative_to(paths.ROOT)).encode() + b"\0" + src.read_bytes() + b"\0")
    tool = tc.mojo if t.lang == "mojo" else tc.nvcc
    h.update(json.dumps([arch, recorded_cmd, tool.version if tool else None]).encode())
    return h.hexdigest()


def cached_record(stamp: Path, log_file: Path, lang: str) -> TargetBuild:
    """A cached build's record, its ptxas report read again from the build's log: a cached build is judged by
    today's parser (inspect_ptx), not the one that stamped it (since 2026-11-27: the parser learnt C75xx)."""
    cached = TargetBuild.model_validate_json(stamp.read_text())
    if lang == "cuda" and log_file.is_file():
        cached = cached.model_copy(update={"ptxas": inspect_ptx.parse_ptxas(log_file.read_text(errors="replace"))})
    return cached


def build_target(t: Target, arch: str, tc: Toolchain, *, force: bool = False) -> tuple[TargetBuild, bool]:
    """Return (record, compiled): compiled is False when the cache was valid."""
    out_dir = paths.build_dir() / arch
    out = out_dir / t.name
    stamp = out_dir / f"{t.name}.stamp.json"
    with tempfile.TemporaryDirectory(prefix=f"keep-{t.name}-") as keep:
        keep_dir = Path(keep)
        cmd = _command(t, arch, tc, out, keep_dir)
        recorded = _portable(cmd, out, keep_dir)
        key = _source_hash(t, arch, recorded, tc)
        if not force and out.is_file() and stamp.is_file():
            cached = cached_record(stamp, out_dir / f"{t.name}.log", t.lang)
            if cached.source_hash == key:
                return cached, False
        if not Path(paths.ROOT / t.entry).is_file():
            raise BuildFailed(f"{t.name}: source {t.entry} does not exist")
        out_dir.mkdir(parents=True, exist_ok=True)
        log(f"[build] {arch} {t.name}: compiling ...")
        res = run_process(cmd, timeout_s=BUILD_TIMEOUT_S, cwd=paths.ROOT)
        log_path = out_dir / f"{t.name}.log"
        paths.write_atomic(log_path, f"$ {' '.join(recorded)}\n{res.stdout}\n{res.stderr}")
        if res.timed_out or res.returncode != 0:
            first = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()), res.last_error_line())
            raise BuildFailed(f"{t.name} for {arch}: {first.strip()}", f"full log: {log_path}")
        ptxas: list = []
        if t.lang == "cuda":
            ptxas = inspect_ptx.parse_ptxas(res.stderr + res.stdout)
            ptx_text = "".join(p.read_text(errors="replace") for p in sorted(keep_dir.glob("*.ptx")))
            kernels = inspect_ptx.scan_ptx(ptx_text)
        else:
            kernels = inspect_ptx.scan_binary_ptx(out)
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
        sass=inspect_ptx.sass_check(cuobjdump, out) if cuobjdump else None,
    )
    paths.write_atomic(stamp, record.model_dump_json(indent=1))
    log(f"[build] {arch} {t.name}: compiled in {res.seconds:.1f} s")
    return record, True


def build_all(
    targets: tuple[Target, ...], archs: tuple[str, ...], build_gates: BuildGates, *, force: bool = False
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
    for arch in archs:
        for t in targets:
            if not t.supports(arch):
                log(f"[build] {arch} {t.name}: skipped, needs sm_{t.min_arch} or newer")
                continue
            rec, did = build_target(t, arch, tc, force=force)
            if did:
                compiled.append(rec)
            records.append(rec)
            violations += gates.static_violations(t, rec, build_gates)
    sha, dirty = git_state()
    # Keep what an earlier call built for other targets or archs, so that
    # `build --arch sm_89` does not forget the sm_90 executables.
    try:
        before = load_meta()
        earlier = [r for r in before.targets if (r.target, r.arch) not in {(n.target, n.arch) for n in records}]
        if earlier:  # the kept targets' toolchains stay on record too
            tc = tc.model_copy(update={k: getattr(tc, k) or getattr(before.toolchain, k) for k in ("mojo", "nvcc", "ptxas")})
    except (BuildFailed, ValueError):
        earlier = []
    all_records = sorted(earlier + records, key=lambda r: (r.arch, r.target))
    meta = BuildMeta(
        created_utc=utc_now(), git_sha=sha, git_dirty=dirty, toolchain=tc, host=host_info(),
        archs=sorted({r.arch for r in all_records}), targets=all_records,
    )
    paths.write_atomic(paths.build_dir() / "build_meta.json", meta.model_dump_json(indent=1))
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
    (the CPU box), once a host that has it (the GPU hosts) runs them. Unchanged elsewhere."""
    cuobjdump = toolchain.find_cuobjdump()
    if cuobjdump is None:
        return meta
    targets = []
    for t in meta.targets:
        exe = paths.build_dir() / t.arch / t.target
        if t.lang == "cuda" and t.sass is None and exe.is_file():
            t = t.model_copy(update={"sass": inspect_ptx.sass_check(cuobjdump, exe)})
            log(f"{t.arch} {t.target}: SASS " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in t.sass.items()))
        targets.append(t)
    return meta.model_copy(update={"targets": targets})
