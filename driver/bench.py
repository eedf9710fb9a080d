"""The bench, stress and sweep pipelines: configure -> build -> launch -> verify -> gate -> archive -> report."""

from __future__ import annotations

import sys
from pathlib import Path

from driver import archive, build, device, gates, history, paths, phases, plots, report, targets, thresholds
from driver.config import DEFAULT_ARCH
from driver.errors import BuildFailed, NoGPU
from driver.host import git_state, host_info, utc_now
from driver.options import RunOptions
from driver.records import BuildMeta, RunArchive
from driver.suites import allreduce, sdpa, stress, sweep
from driver.suites.common import Suite, SuiteResult, plan, progress

SUITES: dict[str, Suite] = {"allreduce": allreduce, "sdpa": sdpa, "sweep": sweep, "stress": stress}


def prepare(opts: RunOptions, limits: thresholds.Thresholds) -> tuple[BuildMeta, str]:
    """Build (or find the bundle's build), find the GPU arch.

    Builds before asking for a GPU, so a CPU box still compiles and checks.
    """
    wanted = targets.select(",".join(SUITES[s].TARGETS for s in opts.suites))
    can_build = opts.build and not paths.is_bundle()
    if can_build:
        build.build_all(wanted, (opts.arch or DEFAULT_ARCH,), limits.build)
    meta = build.load_meta()
    arch = opts.arch or device.arch_of(0)  # raises NoGPU on a CPU box, after the build
    if arch not in meta.archs:
        if not can_build:
            raise BuildFailed(f"this build has no executables for {arch} (it has {', '.join(meta.archs)})",
                              f"rebuild with --arch {arch}")
        build.build_all(wanted, (arch,), limits.build)
        meta = build.load_meta()
    return build.with_sass(meta), arch


def run(opts: RunOptions, argv: list[str]) -> Path:
    phases.reset()
    plan(0, reset=True)
    limits = thresholds.load(opts.thresholds)
    try:
        with phases.timed("build"):
            meta, arch = prepare(opts, limits)
        dev = device.probe()
        device.require_gpus(dev, opts.ngpus)  # before any launch (the ceiling, a suite)
    except NoGPU as exc:  # nothing ran: every gate of the run is absent, and the message says so
        raise NoGPU(f"{exc.message}; not measured: {gates.requested_summary(opts, limits)}", exc.hint) from None
    sha, dirty = git_state()
    exe_dir = paths.build_dir() / arch
    results = SuiteResult()
    # (The SDPA references are made on background threads while the SDPA suite's GPU work runs, not
    # while allreduce is timed: there, a busy host delays the un-held ranks' launches and moved the
    # torch peers' rounds by milliseconds on 2x H200; experiments/2026-11-26-workers.)
    for suite in opts.suites:
        progress(f"suite {suite} on {dev.kind} ({arch})")
        results.extend(SUITES[suite].run(opts, exe_dir, dev, limits, sha))
    created = utc_now()
    verdicts, records = gates.evaluate(results.records, results.skipped, opts, limits, dev.kind)
    run_rec = RunArchive(
        run_id=archive.run_id(created, sha, dev.kind),
        created_utc=created,
        command=argv,
        git_sha=sha,
        git_dirty=dirty,
        device=dev,
        device_after=device.probe(),
        host=host_info(),
        records=records,
        skipped=results.skipped,
        ceilings_gbps=results.ceilings_gbps,
        gates=verdicts,
    )
    thresholds_text = (opts.thresholds or paths.thresholds_file()).read_text()
    with phases.timed("report"):
        figures = plots.render(run_rec)
    # The archive's own write is the one phase results.json.gz cannot hold; it is the last step.
    run_rec = run_rec.model_copy(update={"wall_s": round(phases.wall_s(), 3), "phases_s": phases.snapshot()})
    progress(f"time: {phases.one_line(run_rec.wall_s, run_rec.phases_s)}")
    folder = report.publish(run_rec, meta, thresholds_text, {**figures, **results.extra_files})
    run_rec = run_rec.model_copy(update={"run_id": folder.name})  # the id write_run claimed (a suffix if taken)
    print(report.compare_markdown(run_rec))
    print(f"archived: {folder}", file=sys.stderr)
    print(history.since_previous(run_rec, limits.noise.min_rel_noise, folder.parent), file=sys.stderr)
    failure = gates.exit_decision(run_rec.gates, folder, strict=opts.strict)
    if failure:
        raise failure
    print(gates.exit_line(run_rec.gates, strict=opts.strict), file=sys.stderr)
    return folder
