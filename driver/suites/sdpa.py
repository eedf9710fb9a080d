"""The SDPA suite: both FP8 variants against a float64 reference; PyTorch, cuDNN FP8 and FlashAttention
as the peers (driver/peers/), in the same rounds and timing modes, their outputs checked against the same
reference (reported, not gated)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from driver import device, peers, phases
from driver.errors import ConfigError, KernelFailed
from driver.gates import sdpa_correctness, sdpa_runner_resources
from driver.options import RunOptions
from driver.records import ArchivedRecord, DeviceInfo, SdpaLine, Skip, Verdict
from driver.reference import sdpa as ref
from driver.suites.common import Samples, SuiteResult, check_mode, interleaved, plan, progress, telemetry_flags
from driver.thresholds import Thresholds
from driver.verify import SdpaErrors, sdpa_errors
from driver.workers import Pool, Served, served

TARGETS = "sdpa"
VARIANTS = {"baseline": "sdpa_fp8_baseline", "cpasync": "sdpa_fp8_cpasync"}
PEERS = peers.of_suite("sdpa")  # torch_sdpa, cudnn_fp8, flash_attn: each reads our inputs, writes --out
HOPPER_KERNEL, MMA_SYNC_KERNEL = "wgmma_fp8_sm90", "mma_sync_sm80"


def hopper_not_offered(gpu_arch: str, build_arch: str) -> str | None:
    """Why our Hopper kernel does not run here (the runner then runs the mma.sync kernel), or None."""
    if gpu_arch == "sm_90" and build_arch == "sm_90":
        return None
    why = (f"this GPU is {gpu_arch}" if gpu_arch != "sm_90" else
           f"this build is for {build_arch}, without sm_90a code")
    return (f"the Hopper kernel ({HOPPER_KERNEL}: warpgroup MMA, tensor copies) needs an sm_90 GPU and a build for "
            f"sm_90a; {why}, so the runners run the mma.sync kernel ({MMA_SYNC_KERNEL})")


def write_inputs(folder: Path, shape: tuple[int, int, int, int], seed: int) -> dict[str, Path]:
    return prepare_case(folder, shape, seed, with_reference=False)[0]


def prepare_case(
    folder: Path, shape: tuple[int, int, int, int], seed: int, *, with_reference: bool = True
) -> tuple[dict[str, Path], np.ndarray | None]:
    """Write one seed's inputs as the runners read them; the float64 reference from the same arrays."""
    arrays = ref.make_inputs(shape, seed)
    files = save_inputs(folder, arrays)
    return files, ref.reference(*arrays) if with_reference else None


def save_inputs(folder: Path, arrays: tuple) -> dict[str, Path]:
    """make_inputs' arrays as the files the runners and peers read (`--q --k --v --scales`)."""
    q, k, v, k_scale, v_scale = arrays
    files = {name: folder / f"{name}.npy" for name in ("q", "k", "v", "scales")}
    np.save(files["q"], q)
    np.save(files["k"], k)
    np.save(files["v"], v)
    np.save(files["scales"], np.array([k_scale, v_scale], dtype=np.float32))
    return files


def timing_args(opts: RunOptions, mode: str) -> list[str]:
    """The same flags for our runners and every SDPA peer (docs/TIMING.md)."""
    return ["--iters", str(opts.iters), "--warmup", str(opts.warmup), "--timing", mode, "--batch", str(opts.batch)]


def file_args(files: dict[str, Path]) -> list[str]:
    return [a for name in ("q", "k", "v", "scales") for a in (f"--{name}", str(files[name]))]


CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--no-spin"]  # a check-only run: one output launch, nothing timed
PEER_CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--timing", "cold"]  # the peers' check-only run


class Cases:
    """Every (shape, seed)'s inputs and float64 reference, made on a background thread in the order the
    shapes run, so the reference of the next shape is computed while the GPU works on this one. Each
    is made once per run: a reference is never computed twice for the same inputs."""

    def __init__(self, folder: Path, shapes: list[tuple[str, tuple[int, int, int, int]]], seeds: tuple[int, ...]):
        self.folder = folder
        # Inputs on a few threads (the shapes' seeds side by side), the references one at a time, each on
        # half the cores: the other half stays free for the host side of whatever is being timed meanwhile.
        self.input_pool = ThreadPoolExecutor(2, thread_name_prefix="sdpa-inputs")
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="sdpa-reference")
        self.ref_threads = max(1, (os.cpu_count() or 2) // 2)
        self.inputs: dict[tuple[str, int], Future] = {}
        self.refs: dict[tuple[str, int], Future] = {}
        for name, shape in shapes:
            for seed in seeds:
                self.inputs[(name, seed)] = self.input_pool.submit(self._inputs, name, shape, seed)
            for seed in seeds:
                self.refs[(name, seed)] = self.pool.submit(self._reference, name, seed)

    def _inputs(self, name: str, shape: tuple[int, int, int, int], seed: int):
        start = time.perf_counter()
        folder = self.folder / f"{name}-seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        arrays = ref.make_inputs(shape, seed)
        files = save_inputs(folder, arrays)
        phases.add("inputs (background)", time.perf_counter() - start)
        return files, arrays, folder

    def _reference(self, name: str, seed: int) -> np.ndarray:
        start = time.perf_counter()
        _files, (q, k, v, k_scale, v_scale), _folder = self.inputs[(name, seed)].result()
        out = ref.reference(q, k, v, k_scale, v_scale, workers=self.ref_threads)
        phases.add("reference (background)", time.perf_counter() - start)
        return out

    def files(self, name: str, seed: int) -> tuple[dict[str, Path], Path]:
        with phases.timed("inputs (wait)"):
            files, _arrays, folder = self.inputs[(name, seed)].result()
        return files, folder

    def close(self) -> None:
        for fut in [*self.inputs.values(), *self.refs.values()]:
            fut.cancel()
        self.pool.shutdown(wait=True)
        self.input_pool.shutdown(wait=True)


def servers(exe_dir: Path, peer_impls: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The command each implementation's worker runs (with --serve), or its one-shot command (without)."""
    out = {impl: (str(exe_dir / exe),) for impl, exe in VARIANTS.items()}
    out |= {impl: tuple(peers.command(impl)) for impl in peer_impls}
    return out


def planned_cases(opts: RunOptions, peer_impls: tuple[str, ...]) -> int:
    """Cases one shape sends at most: checks of every seed, then every round of every mode."""
    impls = len(VARIANTS) + len(peer_impls)
    checks = len(opts.seeds) * len(VARIANTS) + (len(opts.seeds) - 1) * len(peer_impls)
    return checks + opts.rounds * len(opts.modes("sdpa")) * impls


def _shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, peer_impls: tuple[str, ...],
    shape_name: str, shape: tuple[int, int, int, int], *, pool: Pool | None = None, cases: Cases | None = None,
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """Every seed of every variant and peer checked against the reference first (one launch each on its
    warm worker, nothing timed); then the first seed's inputs timed in every mode asked for, in
    interleaved rounds with the peers (`peer_impls`, those this host can run) in the same mode, for the
    variants that were correct on every seed, each timed run's output (ours and the peers') checked
    again. A variant with wrong results is never timed; a peer's error is reported, not gated.
    `pool` and `cases` (the suite's workers and its background references) are made here if not given."""
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(Pool(one_shot=not opts.workers))
        if cases is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sdpa-"))
            cases = Cases(Path(tmp), [(shape_name, shape)], opts.seeds)
            stack.callback(cases.close)
        checker = stack.enter_context(ThreadPoolExecutor(2, thread_name_prefix="sdpa-check"))
        return _run_shape(opts, exe_dir, dev, gates, git_sha, peer_impls, shape_name, pool, cases, checker)


def _run_shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, peer_impls: tuple[str, ...],
    shape_name: str, pool: Pool, cases: Cases, checker: ThreadPoolExecutor,
) -> tuple[list[ArchivedRecord], list[Skip]]:
    before = device.probe().gpus[:1]
    modes = opts.modes("sdpa")
    serve = servers(exe_dir, peer_impls)
    timed_seed = opts.seeds[0]
    check_lines: dict[tuple[str, int], SdpaLine] = {}
    seed_pending: dict[tuple[str, int], Future] = {}  # (impl, seed) -> its check's error, computed on a thread
    timed_pending: dict[str, list[Future]] = {}  # impl -> the errors of its timed runs' outputs
    peer_failures: dict[tuple[str, str], str] = {}
    outs: dict[tuple[str, int], Path] = {}

    def out_of(impl: str, seed: int) -> Path:
        return outs.setdefault((impl, seed), cases.files(shape_name, seed)[1] / f"out_{impl}.npy")

    def check_later(impl: str, seed: int, *, timed: bool) -> None:
        """The output is read now (the next case overwrites it), its error computed on a thread."""
        what = f"sdpa {shape_name} seed {seed} {impl} output"
        try:
            out = np.load(out_of(impl, seed))
        except (OSError, ValueError, EOFError) as exc:
            if impl in VARIANTS:
                raise KernelFailed(f"{what} cannot be read: {exc}") from None
            fut = _failed(f"{what}: {exc}")
        else:
            fut = checker.submit(_errors, out, cases.refs[(shape_name, seed)], gates.sdpa.bad_err, what)
        if timed:
            timed_pending.setdefault(impl, []).append(fut)
        else:
            seed_pending[(impl, seed)] = fut

    # ---- checks: every seed, ours and the peers, one launch each on the warm workers
    for seed in opts.seeds:
        files, _folder = cases.files(shape_name, seed)
        for impl in (*VARIANTS, *peer_impls):
            if (impl, "cold") in peer_failures:
                continue
            if impl not in VARIANTS and seed == timed_seed:
                continue  # the peers' timed runs on this seed are their checks
            what = f"sdpa {shape_name} seed {seed} {impl} (check)"
            progress(what, step=True)
            args = [*file_args(files), "--out", str(out_of(impl, seed)),
                    *(CHECK_ARGS if impl in VARIANTS else PEER_CHECK_ARGS)]
            try:
                with phases.timed("checks"):
                    (line,) = pool.run(served(serve[impl], args), SdpaLine, what=what, timeout_s=opts.timeout_s)
            except (KernelFailed, ConfigError) as exc:
                if impl in VARIANTS:
                    raise
                peer_failures[(impl, "cold")] = exc.one_line()  # its seed checks run cold
                progress(f"peer {impl} dropped: {exc.one_line()}")
                continue
            if impl in VARIANTS:
                check_lines[(impl, seed)] = line
            check_later(impl, seed, timed=False)
    # ---- verdicts of ours, before anything is timed: only variants correct on every seed are timed
    seed_errors: dict[tuple[str, int], SdpaErrors] = {}
    for impl in VARIANTS:
        for seed in opts.seeds:
            with phases.timed("reference (wait)"):
                seed_errors[(impl, seed)] = seed_pending[(impl, seed)].result()
    correct = [impl for impl in VARIANTS
               if all(sdpa_correctness(seed_errors[(impl, seed)], gates.sdpa).passed for seed in opts.seeds)]
    files, _folder = cases.files(shape_name, timed_seed)
    cmds: dict[tuple[str, str], Served] = {}
    for mode in modes:  # ours then the peers, per mode: A B C D E, A B C D E, ...
        for impl in correct:
            cmds[(impl, mode)] = served(serve[impl], [*file_args(files), "--out", str(out_of(impl, timed_seed)),
                                                      *timing_args(opts, mode)])
        for impl in peer_impls if correct else ():
            if any(k[0] == impl for k in peer_failures):
                continue
            cmds[(impl, mode)] = served(serve[impl], [*file_args(files), "--out", str(out_of(impl, timed_seed)),
                                                      *timing_args(opts, mode)])

    def on_line(cmd_key: tuple[str, str], _line: SdpaLine) -> None:
        check_later(cmd_key[0], timed_seed, timed=True)

    def key(cmd_key: tuple[str, str], line: SdpaLine) -> tuple[str, str]:
        check_mode(f"sdpa {shape_name} {cmd_key[0]}", cmd_key[1], line.timing)
        return (line.impl, cmd_key[1])

    samples: Samples[SdpaLine] | None = None
    if cmds:
        samples = interleaved(
            cmds, SdpaLine, rounds=opts.rounds, min_rounds=min(2, opts.rounds),
            target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s, key=key,
            on_line=on_line, label=f"sdpa {shape_name} seed {timed_seed}",
            peers=frozenset(k for k in cmds if peers.is_peer(k[0])), pool=pool,
        )
    # ---- every output's error (ours raise on a malformed output; a peer's is recorded)
    checks: dict[tuple[str, int], list[SdpaErrors]] = {}
    peer_checks: dict[str, list[SdpaErrors]] = {}
    peer_unchecked: dict[str, str] = {}
    with phases.timed("checks (wait)"):
        for impl in VARIANTS:
            for seed in opts.seeds:
                checks[(impl, seed)] = [seed_errors[(impl, seed)]]
            for fut in timed_pending.get(impl, []):
                checks[(impl, timed_seed)].append(fut.result())
        for impl in peer_impls:
            for fut in [*(f for (i, _s), f in seed_pending.items() if i == impl), *timed_pending.get(impl, [])]:
                try:
                    peer_checks.setdefault(impl, []).append(fut.result())
                except (KernelFailed, OSError, ValueError) as exc:
                    peer_unchecked[impl] = exc.one_line() if isinstance(exc, KernelFailed) else str(exc)
    after = device.probe().gpus[:1]
    timed_keys = samples.by_key if samples is not None else {}
    flags = telemetry_flags(before, after)
    records = []

    def record(impl: str, seed: int, line: SdpaLine, p50s: list[float], mode: str | None, **kw) -> ArchivedRecord:
        return ArchivedRecord(
            suite="sdpa", impl=impl, kernel=VARIANTS.get(impl, impl), config=f"{shape_name}/seed{seed}",
            device=dev.kind, git_sha=git_sha, seed=seed, measurement=line, round_p50_us=p50s, timing=mode,
            telemetry_before=before, telemetry_after=after, flags=flags, **kw,
        )

    def errors(m: SdpaErrors) -> dict:
        return {"max_abs_err": m.max_abs_err, "nonfinite": m.nonfinite > 0, "bad_frac": m.bad_frac, "rel_l2": m.rel_l2}

    for seed in opts.seeds:
        for impl in VARIANTS:
            metrics = SdpaErrors.worst(checks[(impl, seed)])
            verdict = sdpa_correctness(metrics, gates.sdpa)
            timed_modes = [m for m in modes if seed == timed_seed and (impl, m) in timed_keys]
            too_big = sdpa_runner_resources(check_lines[(impl, seed)], gates.build)
            if too_big:
                verdict = Verdict(status="fail", reasons=[*verdict.reasons, *too_big])
            if seed == timed_seed and not timed_modes:
                verdict = Verdict(status=verdict.status, reasons=[*verdict.reasons, "not timed: wrong results"])
            if not timed_modes:
                records.append(record(impl, seed, check_lines[(impl, seed)], [], None, passed=verdict.passed,
                                      correctness=verdict, **errors(metrics)))
            for mode in timed_modes:
                line, p50s = samples.representative((impl, mode))
                records.append(record(impl, seed, line, p50s, mode, passed=verdict.passed, correctness=verdict,
                                      **errors(metrics)))
    for impl in peer_impls:
        m = SdpaErrors.worst(peer_checks[impl]) if impl in peer_checks and impl not in peer_unchecked else None
        for mode in (m_ for m_ in modes if (impl, m_) in timed_keys):
            line, p50s = samples.representative((impl, mode))
            seeds_checked = ",".join(map(str, opts.seeds))
            reasons = [f"peer: its error against the float64 reference (worst of seeds {seeds_checked} and every "
                       "timed round) is reported, not gated"
                       if m else f"peer: output not checked: {peer_unchecked.get(impl, 'no output')}"]
            reasons += [f"precision: {line.precision}"] if line.precision else []
            records.append(record(impl, timed_seed, line, p50s, mode, passed=False,
                                  correctness=Verdict(status="not_measured", reasons=reasons),
                                  **(errors(m) if m else {})))
    failures = {**peer_failures, **(samples.peer_failures if samples is not None else {})}
    return records, [Skip(suite="sdpa", impl=impl, reason=f"{shape_name} {mode}: {why}")
                     for (impl, mode), why in failures.items()]


def _errors(out: np.ndarray, expected: Future, bad_err: float, what: str) -> SdpaErrors:
    return sdpa_errors(out, expected.result(), bad_err=bad_err, what=what)


def _failed(why: str) -> Future:
    fut: Future = Future()
    fut.set_exception(OSError(why))
    return fut


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    result = SuiteResult()
    gpu_arch, build_arch = device.arch_of(0), exe_dir.name  # exe_dir is build/<arch>
    why = hopper_not_offered(gpu_arch, build_arch)
    if why:
        result.skipped.append(Skip(suite="sdpa", impl=HOPPER_KERNEL, reason=why))
    here = []
    for impl in PEERS:
        why = peers.missing(impl, gpu_arch)
        if why:  # its gates are then not measured (gates.py), never passed
            result.skipped.append(Skip(suite="sdpa", impl=impl, reason=why))
        else:
            here.append(impl)
    here_t = tuple(here)
    plan(len(opts.shapes) * planned_cases(opts, here_t))
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(Pool(one_shot=not opts.workers))
        pool.prestart([served(cmd, []).server for cmd in servers(exe_dir, here_t).values()])  # start-ups overlap: a torch import each
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sdpa-"))
        cases = Cases(Path(tmp), list(opts.shapes), opts.seeds)
        stack.callback(cases.close)
        checker = stack.enter_context(ThreadPoolExecutor(2, thread_name_prefix="sdpa-check"))
        for shape_name, _shape_dims in opts.shapes:
            records, skipped = _run_shape(opts, exe_dir, dev, gates, git_sha, here_t, shape_name, pool, cases,
                                          checker)
            result.records += records
            result.skipped += skipped
    return result
