"""`python -m driver`: one subcommand per nox session, one error line per failure."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from driver import build, config, paths, registry, targets, thresholds
from driver.errors import ConfigError, DriverError, Interrupted, Terminated
from driver.options import RunOptions, SubmitOptions
from driver.records import SCHEMA_MODELS, published_schema


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors become ConfigError
        raise ConfigError(message, f"see `python -m {' '.join(['driver', *self.prog.split()[1:]])} --help`")


def _add_run_args(p: argparse.ArgumentParser, *, iters: int, dtypes: str, sizes: str = "256K,16M") -> None:
    """What every GPU command takes: sizes, dtypes, GPU counts, timing, rounds, build and gates."""
    p.add_argument("--sizes", default=None, help=f"allreduce sizes in bytes, K/M/G suffixes (default {sizes})")
    p.add_argument("--dtype", default=dtypes, help="float32, bfloat16, float16 (comma list)")
    p.add_argument("--ngpus", default=None, help="GPU counts for allreduce (default: every supported count present)")
    p.add_argument("--iters", default=str(iters), help="timed iterations per launch")
    p.add_argument("--warmup", default="10", help="warm-up iterations per launch")
    p.add_argument("--timing", default=None,
                   help="timing modes, comma list: cold = every launch timed alone with CUDA events behind a held "
                        "stream (SDPA: L2 flushed first); hot = --batch launches back to back (a CUDA graph where "
                        "the API allows it, else the host batch). device = cold, host = hot. Default: cold,hot "
                        "for SDPA, cold for allreduce (docs/TIMING.md)")
    p.add_argument("--batch", default="10", help="hot: launches back to back per timing sample")
    p.add_argument("--rounds", default="3", help="at most this many interleaved rounds of ours and the peers")
    p.add_argument("--arch", default=None, help="GPU architecture (default: GPU 0's)")
    p.add_argument("--thresholds", default=None, help="thresholds file (default: thresholds.toml)")
    p.add_argument("--timeout", default="300", help="seconds before a launch counts as hung")
    p.add_argument("--no-build", action="store_true", help="use the existing build as it is")
    p.add_argument("--no-workers", action="store_true",
                   help="start a new process for every case instead of one long-lived worker per runner and peer "
                        "(slower; for A/B of the timing method and for debugging a worker)")


def _add_suite_args(p: argparse.ArgumentParser, *, seeds: str, shapes: str, distributions: str) -> None:
    """bench and stress: which suites, kernels, SDPA shapes, seeds, precision tiers and input distributions."""
    p.add_argument("--suite", default="all", help="allreduce, sdpa or all (comma list)")
    p.add_argument("--kernel", default="auto", help=f"allreduce kernel override: {', '.join(config.ALLREDUCE_KERNELS)} or "
                   f"1stage_cpasync_s{{{','.join(map(str, config.CPASYNC_STAGES))}}}")
    p.add_argument("--shapes", default=shapes,
                   help=f"SDPA cases, comma list: names ({', '.join(config.SDPA_CASES)}), groups "
                        f"({', '.join(f'{g} = {len(n)} cases' for g, n in config.SDPA_CASE_GROUPS.items())}) or "
                        f"{config.CASE_SYNTAX}: q [B,Hq,Sq,D], k/v [B,Hkv,Skv,D] where it differs from q (Hq a "
                        f"multiple of Hkv), causal = the bottom-right mask (row i sees keys j <= i + Skv - Sq), e.g. "
                        f"{config.CASE_EXAMPLE}; BxHxSxD alone is the square case (default {shapes}; docs/SDPA.md)")
    p.add_argument("--seeds", default=seeds, help="SDPA input seeds")
    p.add_argument("--precision", default=",".join(config.DEFAULT_PRECISIONS),
                   help=f"SDPA precision tiers, comma list of {', '.join(config.PRECISIONS)}: fp16 = K/V decoded to "
                        "fp16, fp16 MMA, fp32 accumulators; fp8 = Q and P rounded to E4M3 (FP8 warpgroup MMA, sm_90 "
                        f"only: elsewhere that tier is skipped with the reason). Default "
                        f"{','.join(config.DEFAULT_PRECISIONS)} (docs/SDPA.md)")
    p.add_argument("--distributions", default=distributions,
                   help="SDPA input distributions every shape and seed is checked on, comma list or `all` "
                        f"(default {distributions}); timing uses normal only (docs/SDPA.md)")
    p.add_argument("--strict", action="store_true",
                   help="a speed gate marked `known` in thresholds.toml that passed (XPASS) fails the run (exit 8), "
                        "so that its mark comes off; without it XPASS is reported only (docs/BUILD.md)")


def _given(value: str | None, flag: str) -> str | None:
    """An option's value, None where it was not given. An empty value is an error, never the default:
    `--sizes ''` from an unset shell variable must not quietly run the default sizes."""
    if value is not None and not value.strip():
        raise ConfigError(f"empty {flag}", f"give {flag} a value, or leave the option out for its default")
    return value


def _once(values: tuple, flag: str, folded: list[str], key=lambda v: v, show=str) -> tuple:
    """`values` with each one once (config.fold); the repeats, as the user wrote them, go into `folded`."""
    kept, repeats = config.fold(values, key)
    if repeats:
        shown = dict.fromkeys(show(v) + ("" if show(v) == show(first) else f" (= {show(first)})")
                              for v, first in repeats)
        folded.append(f"{flag} {', '.join(shown)}")
    return kept


def _say_folded(folded: list[str]) -> None:
    """One line on stderr naming every value given twice, or nothing: the run goes on with each once."""
    if folded:
        print(f"note: given more than once, run once: {'; '.join(folded)}", file=sys.stderr)


def _registered(ns: argparse.Namespace, kind: str, notes: list[str]) -> tuple[str, ...] | None:
    """bench --peers/--variants: the names given (each once), or None for every registered one."""
    given = _given(getattr(ns, kind, None), f"--{kind}")
    return _once(config.parse_registered(given, kind), f"--{kind}", notes) if given is not None else None


def _run_options(ns: argparse.Namespace, folded: list[str] | None = None) -> RunOptions:
    """Every string is validated here, before any build or GPU work starts. A value a list option names twice
    runs once: said on stderr in one line, or added to `folded` for the caller to say."""
    tpath = Path(ns.thresholds) if _given(ns.thresholds, "--thresholds") else None
    thresholds.load(tpath)  # a misspelt field fails now, not after a 3-minute run
    write = getattr(ns, "write", False)
    if write and paths.is_bundle():
        raise ConfigError("a bundle has no source tree to write the dispatch windows into",
                          "run the sweep without --write, copy its run folder into the source tree's bench_results/ "
                          "and merge it there: python -m driver sweep --from bench_results/<run> --write")
    notes: list[str] = []
    chosen = _once(config.parse_suite(getattr(ns, "suite", "all")), "--suite", notes)
    suites = {"sweep": ("sweep",), "stress": ("stress",)}.get(ns.cmd, chosen)
    sizes = _given(ns.sizes, "--sizes")
    dtypes = _once(config.parse_dtypes(ns.dtype), "--dtype", notes)
    sizes_bytes = _once(config.parse_sizes(sizes or "256K,16M"), "--sizes", notes, show=config.format_size)
    config.check_sizes(sizes_bytes, dtypes)  # the executables would refuse them only after the build
    ngpus, arch = _given(ns.ngpus, "--ngpus"), _given(ns.arch, "--arch")
    archs = _once(config.parse_archs(arch), "--arch", notes) if arch else (None,)
    if len(archs) > 1:
        raise ConfigError(f"--arch {arch}: {ns.cmd} runs on one architecture, its GPU's, and would leave out "
                          f"{', '.join(archs[1:])}",
                          "give one architecture, or leave --arch out for GPU 0's; `build --arch` takes a list")
    precisions = _once(config.parse_precisions(getattr(ns, "precision", ",".join(config.DEFAULT_PRECISIONS))),
                       "--precision", notes)
    q_terms = config.parse_q_terms(getattr(ns, "q_terms", "auto"), precisions)
    distributions = _once(config.parse_distributions(getattr(ns, "distributions",
                                                             ",".join(config.BENCH_SDPA_DISTRIBUTIONS))),
                          "--distributions", notes)
    if ns.cmd == "bench" and "sdpa" in suites and "normal" not in distributions:
        raise ConfigError(f"--distributions {','.join(distributions)} leaves out normal",
                          "the SDPA timing runs on normal inputs and its outputs are checked there: add normal")
    opts = RunOptions(
        suites=suites,
        stress_parts=(*chosen, *(() if getattr(ns, "no_sanitizers", False) else ("sanitizers",)),
                      *(() if getattr(ns, "no_profile", False) else ("profile",))),
        sizes_bytes=sizes_bytes,
        sizes_given=sizes is not None,
        write_windows=write,
        dtypes=dtypes,
        ngpus=_once(config.parse_ngpus(ngpus), "--ngpus", notes) if ngpus else None,
        shapes=_once(config.parse_shapes(getattr(ns, "shapes", ",".join(config.BENCH_SDPA_SHAPES))), "--shapes",
                     notes, key=lambda s: s[1], show=lambda s: s[0]),
        sanitizer_shapes=_once(config.parse_shapes(ns.sanitizer_shapes), "--sanitizer-shapes", notes,
                               key=lambda s: s[1], show=lambda s: s[0])
        if getattr(ns, "sanitizer_shapes", None) is not None else None,
        seeds=_once(config.parse_seeds(getattr(ns, "seeds", "0")), "--seeds", notes),
        precisions=precisions,
        q_terms=q_terms,
        distributions=distributions,
        iters=config.parse_whole(ns.iters, "--iters"),
        warmup=config.parse_whole(ns.warmup, "--warmup"),
        batch=config.parse_whole(ns.batch, "--batch"),
        timing=_once(config.parse_timing(ns.timing), "--timing", notes) if ns.timing is not None else None,
        soak_minutes=config.parse_minutes(getattr(ns, "minutes", "0")),
        kernel=config.parse_kernel(getattr(ns, "kernel", "auto")),
        peers=_registered(ns, "peers", notes),
        variants=_registered(ns, "variants", notes),
        arch=archs[0],
        rounds=config.parse_whole(ns.rounds, "--rounds"),
        timeout_s=float(config.parse_whole(ns.timeout, "--timeout")),
        thresholds=tpath,
        build=not ns.no_build,
        workers=not ns.no_workers,
        strict=getattr(ns, "strict", False),
    )
    if folded is None:
        _say_folded(notes)
    else:
        folded.extend(notes)
    return opts


def cmd_build(ns: argparse.Namespace) -> int:
    archs = config.parse_archs(ns.arch)
    wanted = targets.select(_given(ns.targets, "--targets"))  # `all` is every target; '' is a mistake
    gates = thresholds.load(Path(ns.thresholds) if _given(ns.thresholds, "--thresholds") else None).build
    if paths.is_bundle():
        print("this is a GPU-host bundle: its executables are prebuilt, nothing to build", file=sys.stderr)
        return 0
    t0 = time.perf_counter()
    meta, compiled = build.build_all(wanted, archs, gates, force=ns.force)
    seconds = time.perf_counter() - t0
    names = {t.name for t in wanted}
    asked = [r for r in meta.targets if r.arch in archs and r.target in names]  # not what earlier calls built
    where = f"metadata: {paths.build_dir() / 'build_meta.json'}"
    if compiled:
        print(f"build: {len(compiled)} of {len(asked)} target(s) for {','.join(archs)} compiled, "
              f"{len(asked) - len(compiled)} cached, {seconds:.2f} s; {where}")
    else:
        print(f"build: nothing to compile, all {len(asked)} target(s) for {','.join(archs)} cached, {seconds:.2f} s; "
              f"{where} (-v prints the ptxas reports)")
    for line in build.report_lines(asked if ns.verbose else compiled):
        print(line)
    return 0


def cmd_bench(ns: argparse.Namespace) -> int:
    from driver import archive

    opts = _run_options(ns)
    if getattr(ns, "plan", False):  # bench --plan: what the run would do; nothing built, launched or written
        from driver import plan

        tpath = opts.thresholds or paths.thresholds_file()
        print(plan.render(opts, thresholds.load(opts.thresholds), plan.Host.probe(), tpath.name))
        return 0
    archive.check_writable(paths.results_dir())  # the run is archived there at its end, not lost then
    from driver import bench

    bench.run(opts, ["python", "-m", "driver", *sys.argv[1:]])
    return 0


def cmd_sweep(ns: argparse.Namespace) -> int:
    if ns.from_run is None:
        return cmd_bench(ns)
    from driver.suites import sweep

    folder = Path(ns.from_run)
    if not folder.is_dir():
        raise ConfigError(f"--from {folder}: no such run folder", "pass a folder under bench_results/")
    windows, md = sweep.from_run(folder)
    print(md)
    if ns.write:  # the run's GPU counts only; every other count's windows are kept
        written = sweep.write_windows(windows)
        print(f"wrote {written.relative_to(paths.ROOT) if written.is_relative_to(paths.ROOT) else written}")
    return 0


def cmd_bundle(ns: argparse.Namespace) -> int:
    from driver import bundle

    archs = config.parse_archs(ns.arch)
    out = bundle.make(Path(_given(ns.out, "--out")), archs, tuple(ns.python.split(",")))
    print(f"bundle: {out}")
    return 0


def cmd_schema(ns: argparse.Namespace) -> int:
    from driver import archive

    given = _given(ns.out, "--out")
    out = Path(given) if given else paths.results_dir() / "schema"
    hint = "pass --out a writable folder" if given else f"{archive.RESULTS_HINT}, or pass --out"
    archive.check_writable(out, "schema folder", hint)
    with archive.writing(f"the JSON Schemas into {out}", hint):
        out.mkdir(parents=True, exist_ok=True)
        for name in SCHEMA_MODELS:
            paths.write_atomic(out / f"{name}.schema.json", json.dumps(published_schema(name), indent=1) + "\n")
    print(f"schema: {len(SCHEMA_MODELS)} JSON Schemas in {out}")
    return 0


def cmd_index(ns: argparse.Namespace) -> int:
    from driver import archive, report

    root = paths.results_dir()
    archive.check_writable(root)
    runs = archive.read_runs(root)
    readable = [(folder, run) for folder, run in runs if not isinstance(run, archive.Unreadable)]
    for _folder, run in runs:
        if isinstance(run, archive.Unreadable):
            print(run.line(), file=sys.stderr)
    with archive.writing(f"the index of {root}"):
        if ns.rerender:
            for folder, run in readable:
                report.rerender_compare(folder, run)
        report.update_index(root, runs)
    unreadable = f" ({len(runs) - len(readable)} unreadable, skipped)" if len(readable) < len(runs) else ""
    print(f"index: {root / 'README.md'} lists {len(runs)} run(s){unreadable}")
    from driver import limits

    folders = [folder for folder, _run in readable]
    if why := limits.why_not_written(folders):  # the index of a foreign folder, and no more
        print(f"limits: {limits.TABLE_FILE} left alone: {why}")
        return 0
    _write_limits(folders)
    with archive.writing(f"the headline into {report.README_FILE}", "make it writable"):
        if report.write_headline(readable):
            print(f"headline: {report.README_FILE} refreshed from {root}")
        else:
            print(f"headline: {report.README_FILE} has no headline markers, left alone")
    return 0


def _write_limits(folders: list[Path] | None = None) -> bool:
    """The known-limits table from `folders` (default: every run folder that reads, each other one named)."""
    from driver import archive, limits

    if folders is None:
        folders = [folder for folder, _run in archive.readable_runs()]
    table = limits.markdown(limits.newest(folders, *_limits_gates()))
    with archive.writing(f"the known limits into {limits.TABLE_FILE}",
                         "make it writable, or print the table with `python -m driver limits`"):
        written = limits.write_table(table)
    if written:
        print(f"limits: known limits in {limits.TABLE_FILE} refreshed from {paths.results_dir()}")
    return written


def cmd_limits(ns: argparse.Namespace) -> int:
    from driver import archive, limits

    if ns.write:
        if why := limits.why_not_written(archive.archived_runs()):
            raise ConfigError(f"limits --write: {limits.TABLE_FILE} left alone: {why}",
                              "unset BENCH_RESULTS_DIR to write it from bench_results/, or print the table "
                              "with `python -m driver limits`")
        if limits.section() is None or not _write_limits():  # the markers checked before any run is read
            raise ConfigError(f"{limits.TABLE_FILE} has no limits markers", f"add the lines {limits.BEGIN!r} and "
                              f"{limits.END!r} where the table belongs")
        return 0
    folders = [folder for folder, _run in archive.readable_runs()]  # each unreadable one named on stderr
    print(limits.markdown(limits.newest(folders, *_limits_gates())), end="")
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    from driver import compare

    return compare.main(ns.runs)


def cmd_history(ns: argparse.Namespace) -> int:
    from driver import history

    out = _given(ns.out, "--out")
    return history.main(_given(ns.device, "--device"), _given(ns.suite, "--suite"), _given(ns.config, "--config"),
                        Path(out) if out else None)


def _limits_gates() -> tuple[float, thresholds.Thresholds]:
    """The noise band and the gates the known-limits table is read against: today's thresholds.toml."""
    gates = thresholds.load()
    return gates.noise.min_rel_noise, gates


DEFAULT_TASK_TIMEOUT_S = {"bench": 3600, "stress": 4 * 3600}


def _submit_options(ns: argparse.Namespace, driver_args: list[str]) -> SubmitOptions:
    """Every submit argument, the forwarded bench/stress ones included, validated before Slurm is asked."""
    notes: list[str] = []
    suites = _once(_parse_suites(ns.suite), "--suite", notes)
    for i, suite in enumerate(suites):  # the tasks' own arguments fail here, not on the nodes an hour later
        _run_options(build_parser().parse_args([suite, *driver_args]), notes if i == 0 else [])
    partitions = _once(tuple(p.strip() for p in ns.partitions.split(",")), "--partitions", notes)
    if not all(partitions):
        raise ConfigError(f"malformed partition list {ns.partitions!r}", "e.g. --partitions h100,h200")
    given_gpus, given_timeout = _given(ns.gpus, "--gpus"), _given(ns.timeout, "--timeout")
    gpus = _once(tuple(config.parse_whole(g, "--gpus") for g in given_gpus.split(",")), "--gpus", notes) \
        if given_gpus else None
    timeout = given_timeout or str(max(DEFAULT_TASK_TIMEOUT_S[s] for s in suites))
    shared = _given(ns.shared, "--shared") or str(paths.cluster_dir())
    opts = SubmitOptions(
        suites=suites, partitions=partitions, gpus=gpus,
        time_limit_s=config.parse_whole(timeout, "--timeout", config.TASK_TIME_LIMIT_S), shared_dir=Path(shared),
        pythons=tuple(ns.python.split(",")), node_python=ns.node_python, sbatch_args=tuple(ns.sbatch),
        driver_args=tuple(driver_args), poll_s=float(config.parse_whole(ns.poll, "--poll")),
        watch=not ns.no_watch,
    )
    _say_folded(notes)
    return opts


def _parse_suites(text: str) -> tuple[str, ...]:
    suites = tuple(s.strip() for s in text.split(","))
    for s in suites:
        if s not in DEFAULT_TASK_TIMEOUT_S:
            raise ConfigError(f"unknown cluster suite {s!r}", "submit takes --suite bench, stress or bench,stress; "
                              "the kernels' --suite goes after `--`")
    return suites


def cmd_submit(ns: argparse.Namespace) -> int:
    from driver import archive
    from driver.cluster import collect, submit, watch

    opts = _submit_options(ns, ns.driver_args)
    if opts.watch:  # collected into it once the array ends: refuse now, not hours later
        archive.check_writable(paths.results_dir())
    tasks = submit.plan(opts)
    submit.preflight(tasks, opts)
    for t in tasks:
        print(f"plan: task {t.index} {t.label}: --partition={t.partition} --gres={t.gres} ({t.arch}), "
              f"./bundle/run {' '.join(t.driver_args)}", file=sys.stderr)
    sub = submit.submit(opts, tasks, ["python", "-m", "driver", *sys.argv[1:]])
    print(f"submitted: job array {sub.job_id}, {len(tasks)} task(s), folder {sub.folder}", file=sys.stderr)
    if not opts.watch:
        print(f"collect it later: python -m driver collect {sub.folder}", file=sys.stderr)
        return 0
    collect.collect(sub, watch.watch(sub, opts.poll_s))
    return 0


def cmd_collect(ns: argparse.Namespace) -> int:
    from driver import archive
    from driver.cluster import collect, submit, watch

    poll = float(config.parse_whole(ns.poll, "--poll"))  # the option first, then the folder it reads
    sub = submit.load(Path(ns.folder))
    archive.check_writable(paths.results_dir())  # before the wait, not after it
    collect.collect(sub, watch.watch(sub, poll))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="driver", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    b = sub.add_parser("build", help="compile every kernel target (cached by content hash)")
    b.add_argument("--arch", default=config.DEFAULT_ARCH, help="sm_90, sm_89, sm_80 (comma list)")
    b.add_argument("--targets", default="all", help="target names or suites (comma list)")
    b.add_argument("--thresholds", default=None)
    b.add_argument("--force", action="store_true", help="ignore the cache")
    b.add_argument("-v", "--verbose", action="store_true",
                   help="print every kernel's ptxas report (registers, shared memory, spills), cached ones too; "
                        "without it only those of the targets this call compiled")
    b.set_defaults(func=cmd_build)

    for name, iters, seeds, shapes, dists, dtypes, helptext in (
        ("bench", 100, ",".join(map(str, config.BENCH_SDPA_SEEDS)), ",".join(config.BENCH_SDPA_SHAPES),
         ",".join(config.BENCH_SDPA_DISTRIBUTIONS), "float32",
         "build, check correctness, time ours against the peers, archive"),
        ("stress", 1000, "0,1,2", "small,mission,tail,large", "all", "float32,bfloat16,float16",
         "long soak of every kernel with every result checked, archived"),
    ):
        s = sub.add_parser(name, help=helptext)
        _add_run_args(s, iters=iters, dtypes=dtypes)
        _add_suite_args(s, seeds=seeds, shapes=shapes, distributions=dists)
        if name == "bench":
            s.add_argument("--plan", action="store_true",
                           help="print the cases, our variants, the peers and every gate with whether this run "
                                "measures it; build nothing, launch nothing, need no GPU (exit 0)")
            s.add_argument("--peers", default=None,
                           help=f"the peers to time, comma list of the registered ones ({', '.join(registry.registered('peers'))}; "
                                "default all); a suite none of whose peers is named runs all of its own. A gate "
                                "against a peer left out is listed as not measured (--peers left it out), not "
                                "blocking the run (docs/EXTENDING.md)")
            s.add_argument("--variants", default=None,
                           help=f"our variants to time, comma list of the registered ones "
                                f"({', '.join(registry.registered('variants'))}; default all); as --peers")
            s.add_argument("--q-terms", default="auto",
                           help="SDPA fp8 tier, Q in Q K^T: auto (default: two E4M3 terms in short launches, one "
                                "elsewhere), 1 (one term at every shape: the same numerics everywhere) or 2 (two; an "
                                "error at a shape whose fp8 kernel has one). Each record says which ran (q_terms). "
                                "stress runs auto, the release default (docs/SDPA.md)")
        if name == "stress":
            s.add_argument("--no-sanitizers", action="store_true", help="skip the compute-sanitizer runs")
            s.add_argument("--sanitizer-shapes", default=None,
                           help="the SDPA cases every sanitizer runs, as --shapes takes them (default: "
                                f"{','.join(config.SANITIZED_SHAPES)}: every kernel configuration at sizes racecheck "
                                "gets through; docs/STRESS.md)")
            s.add_argument("--no-profile", action="store_true",
                           help="skip the profile stage (Nsight Compute bank conflicts, prefetch/compute overlap)")
            s.add_argument("--minutes", default="0", help="soak each config for at least this many minutes "
                           "(on top of --iters launches; default 0: by count only)")
        s.set_defaults(func=cmd_bench)

    w = sub.add_parser("sweep", help="time every allreduce kernel at every size and find the dispatch windows")
    _add_run_args(w, iters=100, dtypes="float32", sizes="8K,16K,...,256M")
    w.add_argument("--write", action="store_true",
                   help=f"merge the measured windows into {targets.DISPATCH_WINDOWS_FILE.relative_to(paths.ROOT)}: "
                        "the swept GPU counts' are replaced, every other count's kept (without it they are only "
                        "archived with the run)")
    w.add_argument("--from", dest="from_run", metavar="RUN", default=None,
                   help="no GPU: re-derive the windows from an archived sweep run folder with today's rules "
                        "(prints its table and defines; --write merges them as above)")
    w.set_defaults(func=cmd_sweep)

    u = sub.add_parser("bundle", help="make a self-contained folder a GPU host runs without Mojo or nvcc")
    u.add_argument("--out", default="bundle")
    u.add_argument("--arch", default=config.DEFAULT_ARCH)
    u.add_argument("--python", default="3.11,3.12,3.13", help="Python versions the GPU host may have")
    u.set_defaults(func=cmd_bundle)

    c = sub.add_parser("compare", help="per-config deltas between two archived runs")
    c.add_argument("runs", nargs="*", help="two run folders (default: the newest two on one device kind)")
    c.set_defaults(func=cmd_compare)

    ix = sub.add_parser("index", help="rewrite bench_results/README.md from the run folders, docs/LIMITS.md's "
                        "known limits (see `limits`) and README.md's headline table")
    ix.add_argument("--rerender", action="store_true",
                    help="also re-render every run's COMPARE.md from its results.json.gz (after a report change)")
    ix.set_defaults(func=cmd_index)

    lm = sub.add_parser("limits", help="the speed gates not met in their newest archived run, as a markdown table")
    lm.add_argument("--write", action="store_true",
                    help="write the table into docs/LIMITS.md between its limits markers")
    lm.set_defaults(func=cmd_limits)

    hi = sub.add_parser("history", help="every archived run's p50 per device kind and config in commit order, "
                        "steps beyond the noise flagged with their commit")
    hi.add_argument("--device", default=None, help="one device kind, e.g. 2xH200 (default: every kind archived)")
    hi.add_argument("--suite", default=None, help="allreduce, sdpa, sweep (comma list; default: all)")
    hi.add_argument("--config", default=None, help="only configs containing this text, e.g. 16777216B or large_d128")
    hi.add_argument("--out", default=None, help="also write one PNG per device kind and suite into this folder "
                    "(`index` writes them into bench_results/history/)")
    hi.set_defaults(func=cmd_history)

    sm = sub.add_parser("submit", help="build once, submit the bench or stress matrix as one Slurm job array, "
                        "watch it, collect the run folders and compare the GPU kinds")
    sm.add_argument("--suite", default="bench", help="bench, stress or bench,stress (one task each)")
    sm.add_argument("--partitions", required=True, help="Slurm partitions (comma list); each one's GPU type is read "
                    "from its nodes' GRES (gpu:h100:8)")
    sm.add_argument("--gpus", default=None, help="GPUs per task (comma list, one task each; default: all of a node's)")
    sm.add_argument("--timeout", default=None, help="each task's time limit in seconds, sbatch --time rounded up to "
                    f"minutes (default {DEFAULT_TASK_TIMEOUT_S['bench']} for bench, {DEFAULT_TASK_TIMEOUT_S['stress']} "
                    "with stress); the kernels' per-launch --timeout goes after `--`")
    sm.add_argument("--shared", default=None, help="folder the nodes see at the same path (default $DRIVER_CLUSTER_DIR, "
                    "else cluster_runs/ in this checkout)")
    sm.add_argument("--python", default="3.11,3.12,3.13", help="the nodes' python3 versions the bundle carries")
    sm.add_argument("--node-python", default="python3", help="the Python (with numpy) the nodes run the bundle with")
    sm.add_argument("--sbatch", action="append", default=[], help="an sbatch option for this site, as is "
                    "(repeatable): --sbatch=--account=abc --sbatch=--qos=high")
    sm.add_argument("--poll", default="10", help="seconds between state queries while watching")
    sm.add_argument("--no-watch", action="store_true", help="submit and return; `driver collect FOLDER` later")
    sm.set_defaults(func=cmd_submit, driver_args=[])

    co = sub.add_parser("collect", help="watch an earlier submission until its tasks end, then collect it")
    co.add_argument("folder", help="the submission folder `driver submit` printed")
    co.add_argument("--poll", default="10")
    co.set_defaults(func=cmd_collect)

    sc = sub.add_parser("schema", help="write the JSON Schemas of every record")
    sc.add_argument("--out", default=None)
    sc.set_defaults(func=cmd_schema)
    return p


# What each command's Ctrl-C line says was lost; a build names the target it stopped (build.build_target).
INTERRUPTED = {"build": "the build stopped; nothing half-built was cached", "bench": "nothing was archived",
               "stress": "nothing was archived", "sweep": "nothing was archived"}


def _on_sigterm(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated()


def _interrupt_code(exc: BaseException) -> int:
    """143 where a SIGTERM is behind `exc` (itself, or what it was raised from), else 130."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Terminated):
            return Terminated.exit_code
        seen = seen.__cause__ or seen.__context__
    return Interrupted.exit_code


def main(argv: list[str] | None = None) -> int:
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    cmd = "the command"
    try:
        ns, extra = build_parser().parse_known_args(argv)
        cmd = ns.cmd
        if ns.cmd == "submit":  # what submit does not know is the tasks' bench/stress arguments
            if "--" in extra:
                extra.remove("--")
            ns.driver_args = extra
        elif extra:
            build_parser().parse_args(argv)  # argparse's own "unrecognized arguments" error
        return ns.func(ns)
    except DriverError as exc:
        print(exc.one_line(), file=sys.stderr)
        return _interrupt_code(exc) if isinstance(exc, Interrupted) else exc.exit_code
    except KeyboardInterrupt as exc:
        print(f"interrupted: {INTERRUPTED.get(cmd, f'{cmd} stopped')}", file=sys.stderr)
        return _interrupt_code(exc)
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)
