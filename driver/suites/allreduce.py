"""The allreduce suite: ours, upstream comm.allreduce and NCCL, same sizes, same timing."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from driver import device, peers
from driver.config import SUPPORTED_NGPUS, kernel_flags
from driver.errors import NoGPU
from driver.gates import allreduce_config, allreduce_correctness, allreduce_inconclusive
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import TIMING_METHOD_MODE, AllreduceLine, ArchivedRecord, CeilingLine, DeviceInfo, Skip, Verdict
from driver.suites.common import SuiteResult, check_mode, interleaved, progress, telemetry_flags
from driver.thresholds import Thresholds
from driver.verify import allreduce_errors

TARGETS = "allreduce"
EXE = "allreduce_bench"
UPSTREAM_EXE = "upstream_bench"


def timing_flags(impl: str, mode: str, batch: int) -> list[str]:
    """Flags that make `impl` time in `mode` (README "How we time"): the Mojo executables cannot
    capture a CUDA graph, so their hot is the host back-to-back batch; the NCCL peer's is a graph."""
    if mode == "cold":
        return ["--timing", "device"]
    if impl == "nccl":
        return ["--timing", "hot", "--batch", str(batch)]
    return ["--timing", "host", "--batch", str(batch)]


def _args(opts: RunOptions, dtype: str, ngpus: int, impl: str, mode: str) -> list[str]:
    args = ["--sizes", ",".join(str(s) for s in opts.sizes_bytes), "--dtype", dtype, "--ngpus", str(ngpus)]
    args += ["--iters", str(opts.iters), "--warmup", str(opts.warmup), *timing_flags(impl, mode, opts.batch),
             "--check", "1"]
    if impl == "ours":
        args += kernel_flags(opts.kernel)
    return args


def _commands(opts: RunOptions, exe_dir: Path, dtype: str, ngpus: int) -> dict[tuple[str, str], list[str]]:
    """Per (impl, mode), ours and the peers in the same mode one after the other; a peer this host
    cannot run is left out (its gates are then not measured)."""
    cmds: dict[tuple[str, str], list[str]] = {}
    for mode in opts.modes("allreduce"):
        cmds[("ours", mode)] = [str(exe_dir / EXE), *_args(opts, dtype, ngpus, "ours", mode)]
        cmds[("upstream", mode)] = [str(exe_dir / UPSTREAM_EXE), *_args(opts, dtype, ngpus, "upstream", mode)]
        if peers.missing("nccl") is None:
            cmds[("nccl", mode)] = peers.command("nccl", *_args(opts, dtype, ngpus, "nccl", mode))
    return cmds


def line_key(cmd_key: tuple[str, str], line: AllreduceLine) -> tuple[str, str, int]:
    """(impl, mode, bytes); the line's method must serve the mode asked for."""
    check_mode(f"allreduce {cmd_key[0]}", cmd_key[1], TIMING_METHOD_MODE.get(line.timing))
    return (line.impl, cmd_key[1], line.bytes)


def _group(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, dtype: str, ngpus: int
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """One (dtype, GPU count): ours and the peers interleaved per mode, records per size and mode."""
    cmds = _commands(opts, exe_dir, dtype, ngpus)
    modes = opts.modes("allreduce")
    before = device.probe().gpus[:ngpus]
    run_rounds = partial(
        interleaved, cmds, AllreduceLine, min_rounds=min(2, opts.rounds), target_spread=gates.noise.target_spread,
        timeout_s=opts.timeout_s, key=line_key, label=f"allreduce {dtype} x{ngpus}",
        peers=frozenset(k for k in cmds if peers.is_peer(k[0])),
    )
    samples = run_rounds(rounds=opts.rounds)
    if allreduce_inconclusive({k: samples.representative(k)[0] for k in samples.by_key}, gates):
        samples = run_rounds(rounds=1, min_rounds=1, samples=samples)  # an inconclusive gate earns one more round
    reps = {k: samples.representative(k) for k in samples.by_key}
    after = device.probe().gpus[:ngpus]
    flags = telemetry_flags(before, after)
    skipped = [Skip(suite="allreduce", impl=impl, reason=f"{dtype} x{ngpus} {mode}: {why}")
               for (impl, mode), why in samples.peer_failures.items()]
    records = []
    order = {m: i for i, m in enumerate(modes)}
    for (impl, mode, nbytes), (ln, p50s) in sorted(reps.items(), key=lambda kv: (kv[0][2], order[kv[0][1]], kv[0][0])):
        # Correctness counts in every round, not only in the representative one.
        rounds = samples.by_key[(impl, mode, nbytes)]
        verdict = Verdict.combine([allreduce_correctness(x, gates) for x in rounds])
        errs = allreduce_errors(rounds, dtype=dtype, ngpus=ngpus, what=f"allreduce {impl} {dtype} x{ngpus} {nbytes} B")
        records.append(
            ArchivedRecord(
                suite="allreduce", impl=impl, kernel=ln.kernel_confirmed, config=allreduce_config(dtype, ngpus, nbytes),
                device=dev.kind, git_sha=git_sha, passed=verdict.passed, max_abs_err=errs.max_abs_err,
                nonfinite=errs.nonfinite, correctness=verdict, measurement=ln,
                round_p50_us=p50s if ln.timed else [], timing=mode if ln.timed else None,
                telemetry_before=before, telemetry_after=after, flags=flags,
            )
        )
    return records, skipped


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    present = len(dev.gpus)
    counts = opts.ngpus or tuple(n for n in SUPPORTED_NGPUS if n <= present)
    result = SuiteResult()
    if not counts:
        result.skipped.append(Skip(suite="allreduce", impl="*", reason=f"needs at least 2 GPUs; this host has {present}"))
        return result
    for n in counts:
        if n > present:
            raise NoGPU(f"--ngpus {n} asked for, but this host has {present} GPU(s)")
    for name in ("nccl", "p2p_copy"):
        why = peers.missing(name)
        if why:
            result.skipped.append(Skip(suite="allreduce", impl=name, reason=why))
    if peers.missing("p2p_copy") is None:
        progress("link ceiling: GPU0 -> GPU1 copy")
        (ceiling,) = launch_lines(peers.command("p2p_copy"), CeilingLine, what="p2p copy", timeout_s=opts.timeout_s)
        result.ceilings_gbps["p2p_copy_gpu0_gpu1"] = ceiling.p2p_copy_gbps
    for ngpus in counts:
        for dtype in opts.dtypes:
            records, skipped = _group(opts, exe_dir, dev, gates, git_sha, dtype, ngpus)
            result.records += records
            result.skipped += [s for s in skipped if s not in result.skipped]
    return result
