"""The allreduce suite: ours, upstream comm.allreduce, NCCL and PyTorch's symmetric-memory one-shot and
two-shot allreduce, same sizes, same timing; every record carries the fraction of the run's measured
link ceiling it reached (`link_frac`)."""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

from driver import device, peers, phases, registry
from driver.config import SUPPORTED_NGPUS, kernel_flags
from driver.gates import allreduce_config, allreduce_correctness, allreduce_inconclusive
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import TIMING_METHOD_MODE, AllreduceLine, ArchivedRecord, CeilingLine, DeviceInfo, Skip, Verdict
from driver.suites.common import SuiteResult, check_impl, check_mode, interleaved, plan, progress, telemetry_flags
from driver.thresholds import Thresholds
from driver.verify import allreduce_errors
from driver.workers import Pool, Served, served

TARGETS = "allreduce"
EXE = registry.ALLREDUCE.variants["ours"].target
# The torch-driven peers (every Python peer of the family, driver/registry.py): one served worker runs them all,
# and their hot mode is a CUDA graph.
TORCH_PEERS = registry.View(lambda: dict.fromkeys(peers.of_suite("allreduce")))
LINK_CEILING = "p2p_copy_gpu0_gpu1"
# The Mojo executables' timed cases run on their long-lived workers. (A first 4x H200 run, 2026-11-26,
# timed every Mojo case after a worker's first 2.2 ms slow: the served NCCL worker's ranks 1..N-1 waited
# for their next case inside an NCCL broadcast, a kernel spinning on GPUs 1..N-1 that our and upstream's
# peer ranks then shared the GPUs with. They now wait on the host: allreduce_server._control_group;
# experiments/2026-11-26-workers.) False gives each Mojo timed case its own process again.
SERVE_TIMED_MOJO = True


def timing_flags(impl: str, mode: str, batch: int) -> list[str]:
    """Flags that make `impl` time in `mode` (docs/TIMING.md): the Mojo executables cannot
    capture a CUDA graph, so their hot is the host back-to-back batch; the NCCL peer's is a graph."""
    if mode == "cold":
        return ["--timing", "device"]
    if impl in TORCH_PEERS:
        return ["--timing", "hot", "--batch", str(batch)]
    return ["--timing", "host", "--batch", str(batch)]


def _args(opts: RunOptions, dtype: str, ngpus: int, impl: str, mode: str) -> list[str]:
    args = ["--sizes", ",".join(str(s) for s in opts.sizes_bytes), "--dtype", dtype, "--ngpus", str(ngpus)]
    args += ["--iters", str(opts.iters), "--warmup", str(opts.warmup), *timing_flags(impl, mode, opts.batch),
             "--check", "1"]
    if impl == "ours":
        args += kernel_flags(opts.kernel)
    return args


def torch_server(ngpus: int) -> list[str]:
    """The worker that serves every torch-driven peer at `ngpus` GPUs: one process group for the suite
    (driver/peers/allreduce_server.py); each case names its peer with `--impl`."""
    return peers.allreduce_server(ngpus)


def _commands(opts: RunOptions, exe_dir: Path, dtype: str, ngpus: int) -> dict[tuple[str, str], Served]:
    """Per (impl, mode), ours and the peers in the same mode one after the other, each a case for its
    long-lived worker; a peer this host cannot run is left out (its gates are then not measured)."""
    cmds: dict[tuple[str, str], Served] = {}
    variants, chosen = chosen_impls(opts)
    for mode in opts.modes("allreduce"):
        for name in variants:  # ours
            cmds[(name, mode)] = served([str(exe_dir / registry.ALLREDUCE.variants[name].target)],
                                        _args(opts, dtype, ngpus, name, mode), serve=SERVE_TIMED_MOJO)
        for name in chosen:  # upstream (built), then NCCL, PyTorch symm_mem one-shot and two-shot
            target = peers.PEERS[name].target
            if target:
                cmds[(name, mode)] = served([str(exe_dir / target)], _args(opts, dtype, ngpus, name, mode),
                                            serve=SERVE_TIMED_MOJO)
            elif peers.missing(name) is None:
                args = _args(opts, dtype, ngpus, name, mode)
                cmds[(name, mode)] = served(torch_server(ngpus), ["--impl", name, *args],
                                            one_shot=peers.command(name, *args))
    return cmds


def chosen_impls(opts: RunOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Our variants and the peers this run times (`bench --variants/--peers`; all registered by default)."""
    return registry.select("allreduce", "variants", opts.variants), registry.select("allreduce", "peers", opts.peers)


def line_key(cmd_key: tuple[str, str], line: AllreduceLine) -> tuple[str, str, int]:
    """(impl, mode, bytes); the line must name the impl asked for, its method serve the mode asked for."""
    check_impl(f"allreduce {cmd_key[1]}", cmd_key[0], line.impl)
    check_mode(f"allreduce {cmd_key[0]}", cmd_key[1], TIMING_METHOD_MODE.get(line.timing))
    return (line.impl, cmd_key[1], line.bytes)


def link_frac(line: AllreduceLine, ceilings_gbps: dict[str, float]) -> float | None:
    """algbw over the run's measured link ceiling (GPU0 -> GPU1 copy); None untimed or unmeasured."""
    ceiling = ceilings_gbps.get(LINK_CEILING)
    if not ceiling or not line.timed or line.algbw_gbps <= 0:
        return None
    return line.algbw_gbps / ceiling


def measure_ceiling(opts: RunOptions) -> tuple[dict[str, float], list[Skip]]:
    """The link ceiling of this run (GPU0 -> GPU1 copy-engine bandwidth), or why it cannot be measured."""
    why = peers.missing("p2p_copy")
    if why:
        return {}, [Skip(suite="allreduce", impl="p2p_copy", reason=why)]
    progress("link ceiling: GPU0 -> GPU1 copy")
    with phases.timed("link ceiling"):
        (ceiling,) = launch_lines(peers.command("p2p_copy"), CeilingLine, what="p2p copy", timeout_s=opts.timeout_s)
    return {LINK_CEILING: ceiling.p2p_copy_gbps}, []


def _group(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, dtype: str, ngpus: int,
    ceilings_gbps: dict[str, float], pool: Pool | None = None,
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """One (dtype, GPU count): ours and the peers interleaved per mode, records per size and mode."""
    if pool is None:
        with Pool(one_shot=not opts.workers) as own:
            return _group(opts, exe_dir, dev, gates, git_sha, dtype, ngpus, ceilings_gbps, own)
    cmds = _commands(opts, exe_dir, dtype, ngpus)
    pool.prestart(sorted({c.server for c in cmds.values() if c.serve}))  # their start-ups overlap
    modes = opts.modes("allreduce")
    before = device.probe().gpus[:ngpus]
    run_rounds = partial(
        interleaved, cmds, AllreduceLine, min_rounds=min(2, opts.rounds), target_spread=gates.noise.target_spread,
        timeout_s=opts.timeout_s, key=line_key, label=f"allreduce {dtype} x{ngpus}",
        peers=frozenset(k for k in cmds if peers.is_peer(k[0])), pool=pool,
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
                link_frac=link_frac(ln, ceilings_gbps),
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
    device.require_gpus(dev, counts)
    variants, chosen = chosen_impls(opts)
    for kind, names, picked in (("variants", registry.variant_names("allreduce"), variants),
                                ("peers", registry.peer_names("allreduce"), chosen)):
        result.skipped += [Skip(suite="allreduce", impl=n, reason=registry.not_selected(kind))
                           for n in names if n not in picked]
    for name in peers.of_suite("allreduce"):
        why = peers.missing(name)
        if why and name in chosen:
            result.skipped.append(Skip(suite="allreduce", impl=name, reason=why))
    impls = len(variants) + sum(peers.PEERS[n].target is not None or peers.missing(n) is None for n in chosen)
    with contextlib.ExitStack() as stack:
        # Every GPU count's workers start at once, side by side (a torch import, a process group, CUDA contexts:
        # 10-17 s each on 4x H200), while the link ceiling's process imports torch and copies: the copy may
        # overlap their set-up, never a collective. Then every one of them is waited for: no collective is
        # timed while any worker still starts. An idle worker holds its GPUs without running anything (the
        # torch ranks wait on the host: allreduce_server._control_group), and each count's workers leave once
        # that count is done.
        pools = {n: stack.enter_context(Pool(one_shot=not opts.workers)) for n in counts}
        for ngpus in counts:
            for dtype in opts.dtypes:
                cmds = _commands(opts, exe_dir, dtype, ngpus)
                pools[ngpus].prestart(sorted({c.server for c in cmds.values() if c.serve}))
        ceilings, ceiling_skips = measure_ceiling(opts)
        result.ceilings_gbps |= ceilings
        result.skipped += ceiling_skips
        with phases.timed("startup (wait)"):
            for pool in pools.values():
                pool.wait_ready(opts.timeout_s)
        plan(len(counts) * len(opts.dtypes) * (opts.rounds + 1) * len(opts.modes("allreduce")) * impls)
        for ngpus in counts:
            for dtype in opts.dtypes:
                records, skipped = _group(opts, exe_dir, dev, gates, git_sha, dtype, ngpus, result.ceilings_gbps,
                                          pools[ngpus])
                result.records += records
                result.skipped += [s for s in skipped if s not in result.skipped]
            pools[ngpus].close()  # this GPU count's workers leave before the next count is timed
    return result
