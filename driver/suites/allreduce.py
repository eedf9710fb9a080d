"""The allreduce suite: ours, upstream comm.allreduce and NCCL, same sizes, same timing."""

from __future__ import annotations

import importlib.util
import sys
from functools import partial
from pathlib import Path

from driver import device
from driver.config import SUPPORTED_NGPUS
from driver.errors import NoGPU
from driver.launch import launch
from driver.options import RunOptions
from driver.parse import parse_lines
from driver.records import AllreduceLine, ArchivedRecord, CeilingLine, DeviceInfo, Skip, Verdict
from driver.verify import allreduce_errors
from driver.gates import allreduce_correctness, allreduce_speed
from driver.suites.common import SuiteResult, interleaved, progress, telemetry_flags
from driver.thresholds import Thresholds

TARGETS = "allreduce"
EXE = "allreduce_bench"
UPSTREAM_EXE = "upstream_bench"


def kernel_flags(kernel: str) -> list[str]:
    """The executable's flags for a kernel name: `1stage_cpasync_s3` -> --kernel 1stage_cpasync --stages 3."""
    if kernel.startswith("1stage_cpasync_s"):
        return ["--kernel", "1stage_cpasync", "--stages", kernel.rsplit("_s", 1)[1]]
    return ["--kernel", kernel]


def timing_flags(opts: RunOptions) -> list[str]:
    """The timing method's flags, the same for ours, upstream and the NCCL peer."""
    if opts.timing == "host":
        return ["--timing", "host", "--batch", str(opts.batch)]
    return ["--timing", "device"]


def _args(opts: RunOptions, dtype: str, ngpus: int, impl: str) -> list[str]:
    args = ["--sizes", ",".join(str(s) for s in opts.sizes_bytes), "--dtype", dtype, "--ngpus", str(ngpus)]
    args += ["--iters", str(opts.iters), "--warmup", str(opts.warmup), *timing_flags(opts), "--check", "1"]
    if impl == "ours":
        args += kernel_flags(opts.kernel)
    return args


def _commands(opts: RunOptions, exe_dir: Path, dtype: str, ngpus: int) -> dict[str, list[str]]:
    exe = str(exe_dir / EXE)
    cmds = {
        "ours": [exe, *_args(opts, dtype, ngpus, "ours")],
        "upstream": [str(exe_dir / UPSTREAM_EXE), *_args(opts, dtype, ngpus, "upstream")],
    }
    if importlib.util.find_spec("torch") is not None:
        cmds["nccl"] = [sys.executable, "-m", "driver.peers.nccl_allreduce", *_args(opts, dtype, ngpus, "nccl")]
    return cmds


def _group(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, dtype: str, ngpus: int
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """One (dtype, GPU count): ours and the peers interleaved, verdicts per size."""
    cmds = _commands(opts, exe_dir, dtype, ngpus)
    skipped = [] if "nccl" in cmds else [Skip(suite="allreduce", impl="nccl", reason="torch is not installed on this host")]
    before = device.probe().gpus[:ngpus]
    run_rounds = partial(
        interleaved, cmds, AllreduceLine, min_rounds=min(2, opts.rounds), target_spread=gates.noise.target_spread,
        timeout_s=opts.timeout_s, key=lambda ln: (ln.impl, ln.bytes), label=f"allreduce {dtype} x{ngpus}",
        peers=frozenset({"upstream", "nccl"}),
    )
    samples = run_rounds(rounds=opts.rounds)
    for attempt in range(2):  # an inconclusive gate earns one more round, once
        reps = {k: samples.representative(k) for k in samples.by_key}
        peers = {k: ln for k, (ln, _) in reps.items() if k[0] != "ours"}
        perf = {k: allreduce_speed(ln, peers, gates) for k, (ln, _) in reps.items() if k[0] == "ours"}
        if attempt or not any(v and v.status == "inconclusive" for v in perf.values()):
            break
        samples = run_rounds(rounds=1, min_rounds=1, samples=samples)
    after = device.probe().gpus[:ngpus]
    flags = telemetry_flags(before, after)
    skipped += [Skip(suite="allreduce", impl=impl, reason=f"{dtype} x{ngpus}: {why}")
                for impl, why in samples.peer_failures.items()]
    records = []
    for (impl, nbytes), (ln, p50s) in sorted(reps.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        # Correctness counts in every round, not only in the representative one.
        rounds = samples.by_key[(impl, nbytes)]
        verdict = Verdict.combine([allreduce_correctness(x, gates) for x in rounds])
        errs = allreduce_errors(rounds, dtype=dtype, ngpus=ngpus, what=f"allreduce {impl} {dtype} x{ngpus} {nbytes} B")
        records.append(
            ArchivedRecord(
                suite="allreduce", impl=impl, kernel=ln.kernel_confirmed, config=f"{dtype}/{ngpus}gpu/{nbytes}B",
                device=dev.kind, git_sha=git_sha, passed=verdict.passed, max_abs_err=errs.max_abs_err,
                correctness=verdict, performance=perf.get((impl, nbytes)), measurement=ln, round_p50_us=p50s if ln.timed else [],
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
    if importlib.util.find_spec("torch") is not None:
        progress("link ceiling: GPU0 -> GPU1 copy")
        cmd = [sys.executable, "-m", "driver.peers.p2p_copy"]
        (ceiling,) = parse_lines(launch(cmd, what="p2p copy", timeout_s=opts.timeout_s).stdout, CeilingLine, what="p2p copy")
        result.ceilings_gbps["p2p_copy_gpu0_gpu1"] = ceiling.p2p_copy_gbps
    for ngpus in counts:
        for dtype in opts.dtypes:
            records, skipped = _group(opts, exe_dir, dev, gates, git_sha, dtype, ngpus)
            result.records += records
            result.skipped += [s for s in skipped if s not in result.skipped]
    return result
