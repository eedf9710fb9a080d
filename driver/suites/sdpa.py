"""The SDPA suite: both variants in each precision tier asked for (--precision: fp16, fp8) against a float64
reference, on every input distribution asked for (--distributions), at every case asked for (--shapes: Q
[B,Hq,Sq,D], K/V [B,Hkv,Skv,D], the bottom-right causal mask; config.AttnCase); PyTorch, cuDNN FP8, FlashAttention
and FlashInfer as the peers of their tiers (driver/peers/), in the same rounds and timing modes, their outputs
checked against the same reference (reported, and the accuracy gates compare ours with them). Memory-bound cases'
records carry hbm_frac, over the device's copy bandwidth measured at the start of the run (driver/peers/hbm_copy.py).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Self

import numpy as np

from driver import config, device, peers, phases, registry, stats
from driver.clocks import ClockSampler, nvml_sampler
from driver.config import AttnCase
from driver.errors import ConfigError, DriverError, KernelFailed, TierNotOffered, WrongResults
from driver.gates import sdpa_correctness, sdpa_runner_resources, tier_skip
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import (
    SDPA_KERNEL_PRECISION,
    SDPA_PEER_PRECISION,
    ArchivedRecord,
    CopyLine,
    DeviceInfo,
    InputsLine,
    ReferenceLine,
    SdpaLine,
    Skip,
    Verdict,
)
from driver.reference import inputs
from driver.reference import sdpa as ref
from driver.suites.common import (
    Samples,
    SuiteResult,
    check_impl,
    check_mode,
    interleaved,
    plan,
    progress,
    telemetry_flags,
)
from driver.thresholds import SdpaGates, Thresholds
from driver.verify import SdpaErrors, abs_max, sdpa_errors
from driver.workers import Pool, Served, served

TARGETS = "sdpa"
# Derived from driver/registry.py at each use: our variants (name -> build target) and the peers (each reads our
# inputs, writes --out).
VARIANTS = registry.View(lambda: {name: v.target for name, v in registry.SDPA.variants.items()})
PEERS = registry.View(lambda: dict.fromkeys(peers.of_suite("sdpa")))
HOPPER_KERNEL, HOPPER_FP16_KERNEL, MMA_SYNC_KERNEL = "wgmma_fp8_sm90", "wgmma_sm90", "mma_sync_sm80"
# Each tier's split-KV decode kernel (kernels_cuda/sdpa_decode; `--kernel` forces it), from records' kernel list.
DECODE_KERNEL = {tier: k for k, tier in SDPA_KERNEL_PRECISION.items() if k.startswith("decode_")}
TIMED_DISTRIBUTION = "normal"  # the inputs every timing runs on: a launch's time does not depend on the values


def _no_hopper_here(gpu_arch: str, build_arch: str) -> str | None:
    """What keeps the Hopper kernels (an sm_90 GPU and an sm_90a build) from running here, or None."""
    if gpu_arch == "sm_90" and build_arch == "sm_90":
        return None
    return f"this GPU is {gpu_arch}" if gpu_arch != "sm_90" else f"this build is for {build_arch}, without sm_90a code"


def hopper_not_offered(gpu_arch: str, build_arch: str) -> str | None:
    """Why our Hopper kernels do not run here (the fp16 tier then runs the mma.sync kernel), or None."""
    why = _no_hopper_here(gpu_arch, build_arch)
    return why and (f"the Hopper kernels ({HOPPER_FP16_KERNEL}, {HOPPER_KERNEL}: warpgroup MMA, tensor copies) need "
                    f"an sm_90 GPU and a build for sm_90a; {why}, so the fp16 tier runs the mma.sync kernel "
                    f"({MMA_SYNC_KERNEL})")


def fp8_not_offered(gpu_arch: str, build_arch: str) -> str | None:
    """Why the fp8 tier cannot run here (it exists only as FP8 warpgroup MMA), or None. Decided before any
    launch; a runner asked anyway exits 5 (TierNotOffered), the backstop."""
    why = _no_hopper_here(gpu_arch, build_arch)
    return why and (f"the fp8 tier runs on FP8 warpgroup MMA ({HOPPER_KERNEL}), which needs an sm_90 GPU and a "
                    f"build for sm_90a; {why}")


def expected_kernel(precision: str, gpu_arch: str, build_arch: str) -> str | None:
    """The kernel our runners pick for a tier here (None: the tier does not run here)."""
    hopper = hopper_not_offered(gpu_arch, build_arch) is None
    if precision == "fp8":
        return HOPPER_KERNEL if hopper else None
    return HOPPER_FP16_KERNEL if hopper else MMA_SYNC_KERNEL


def write_inputs(folder: Path, shape, seed: int, distribution: str = "normal") -> dict[str, Path]:
    """One seed's inputs as the runners read them, made in numpy (driver/reference/inputs.py: the same bytes the GPU
    makes) and written straight into the files; `shape` a square (B, H, S, D) or anything AttnCase.of takes."""
    return _write_numpy(folder, AttnCase.of(shape), seed, distribution)


def _write_numpy(folder: Path, case: AttnCase, seed: int, distribution: str) -> dict[str, Path]:
    files, _scales = inputs.write_files(inputs.NUMPY, folder, case.q_shape, case.kv_shape, seed, distribution,
                                        workers=max(1, (os.cpu_count() or 2) // 2))
    return files


def prepare_case(
    folder: Path, shape, seed: int, distribution: str = "normal", *, with_reference: bool = True,
) -> tuple[dict[str, Path], np.ndarray | None]:
    """Write one seed's inputs as the runners read them; the float64 reference (numpy) from the same files."""
    case = AttnCase.of(shape)
    files = _write_numpy(folder, case, seed, distribution)
    return files, cpu_reference(files, case.causal) if with_reference else None


def cpu_reference(files: dict[str, Path], causal: bool = False, workers: int | None = None) -> np.ndarray:
    """The float64 reference of a case's input files, by numpy (the files mapped, not copied)."""
    k_scale, v_scale = (float(x) for x in np.load(files["scales"]))
    return ref.reference(np.load(files["q"], mmap_mode="r"), np.load(files["k"], mmap_mode="r"),
                         np.load(files["v"], mmap_mode="r"), k_scale, v_scale, causal=causal, workers=workers)


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


def case_args(case: AttnCase) -> list[str]:
    """What our runners and every peer take beyond the files (whose shapes say the rest of the case): the mask."""
    return ["--causal"] if case.causal else []


def line_case(line: SdpaLine) -> AttnCase:
    """The case a line says it ran; a line from before 2026-11-28 names Q's shape only: the square case."""
    q = tuple(line.q_shape or line.shape)
    return AttnCase(q, tuple(line.kv_shape or q), line.causal)  # type: ignore[arg-type]


def check_case(what: str, asked: AttnCase, line: SdpaLine) -> None:
    """A runner or peer must have run the case it was asked for (the files' shapes, --causal), never another:
    a line that says otherwise is a failed run (ours: the run stops; a peer: dropped, with this reason)."""
    got = line_case(line)
    if got != asked:
        raise KernelFailed(f"{what}: asked for the case {asked.words()}, the line says {got.words()}",
                           "rebuild the SDPA runners (python -m driver build --targets sdpa); a peer must read "
                           "--causal and K/V of their own shape (driver/peers/sdpa_io.py)")


def kv_elem_bytes(impl: str) -> int:
    """Bytes of one K/V element as an implementation reads them (ours: E4M3; a peer: registry's kv_elem_bytes)."""
    return registry.OURS_KV_BYTES if impl in VARIANTS else peers.PEERS[impl].kv_elem_bytes


def hbm_frac(case: AttnCase, impl: str, p50_us: float, copy_gbps: float | None) -> float | None:
    """The share of the device's measured copy bandwidth a timed memory-bound case reached: the bytes it must
    move (K and V as `impl` reads them, Q and O in fp16: AttnCase.bytes_moved) over its p50, over `copy_gbps`
    (read + write). None where the case is not memory-bound, nothing was timed or the copy was not measured."""
    elem = kv_elem_bytes(impl)
    if not case.memory_bound or not copy_gbps or p50_us <= 0 or not elem:
        return None
    return case.bytes_moved(elem) / (p50_us * 1e-6) / (copy_gbps * 1e9)


COPY_CEILING = "hbm_copy_gpu0"  # the run's ceilings_gbps key of the copy bandwidth


def copy_gbps(line: CopyLine) -> float:
    """Read + write bandwidth of the copy: 2 x bytes over the p50 of its samples (driver/stats.py)."""
    p50 = stats.percentile(line.samples_us, 50)
    return 2 * line.bytes / (p50 * 1e-6) / 1e9 if p50 > 0 else 0.0


def measure_copy(opts: RunOptions, gpu_arch: str) -> tuple[dict[str, float], list[Skip]]:
    """The device's copy bandwidth for this run's hbm_frac, where some case asked for is memory-bound; or why it
    is not measured (then those records carry no hbm_frac and the hbm gates say why)."""
    if not any(case.memory_bound for _, case in opts.shapes):
        return {}, []
    why = peers.missing("hbm_copy", gpu_arch)
    if why:
        return {}, [Skip(suite="sdpa", impl="hbm_copy", reason=why)]
    progress("copy bandwidth: a device-to-device copy on GPU 0 (cold, L2 flushed)")
    try:
        with phases.timed("copy bandwidth"):
            (line,) = launch_lines(peers.command("hbm_copy"), CopyLine, what="hbm copy", timeout_s=opts.timeout_s)
    except DriverError as exc:
        return {}, [Skip(suite="sdpa", impl="hbm_copy", reason=exc.one_line())]
    return {COPY_CEILING: copy_gbps(line)}, []


def precision_args(impl: str, precision: str, opts: RunOptions) -> list[str]:
    """Our runners take the tier per case (`--precision`, and for the fp8 tier `--q-terms` where asked); a peer
    computes in its own tier only."""
    if peers.is_peer(impl):
        return []
    return ["--precision", precision, *(["--q-terms", opts.q_terms] if precision == "fp8" and opts.q_terms != "auto"
                                        else [])]


def check_precision(what: str, asked: str, got: str) -> None:
    """A runner must compute in the tier it was asked for, never another in its place."""
    if got != asked:
        raise KernelFailed(f"{what}: asked for precision {asked}, the line says {got}",
                           "rebuild the SDPA runners (python -m driver build --targets sdpa)")


CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--no-spin"]  # a check-only run: one output launch, nothing timed
PEER_CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--timing", "cold"]  # the peers' check-only run

CaseKey = tuple[str, int, str]  # (shape name, seed, distribution)


class GpuTurns:
    """The GPU worker's turns: a lock whose waiters are served lowest priority first (not first come), so that a
    shape's inputs go before its references and both before the shapes after it, whatever order the background
    threads reach the worker in. Holding it plainly (`with turns:`, `acquire()`: what a timing section does) comes
    before every request."""

    FIRST = (-1,)

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._waiting: list[tuple] = []

    def acquire(self, priority: tuple = FIRST) -> None:
        with self._cond:
            self._waiting.append(priority)
            self._cond.wait_for(lambda: not self._held and min(self._waiting) == priority)
            self._waiting.remove(priority)
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @contextlib.contextmanager
    def turn(self, priority: tuple):
        self.acquire(priority)
        try:
            yield
        finally:
            self.release()


class GpuReference:
    """The inputs and the float64 references on the GPU (driver/reference/sdpa_gpu.py, a long-lived torch worker of
    its own): a case's inputs in well under a second where numpy takes seconds of CPU (the same bytes:
    driver/reference/inputs.py), its reference in 0.25 s at (4,32,4096,64) where numpy needs 20-100 s of CPU. Never
    while something is timed: the timing sections hold `quiet`, and each request takes it (so the worker, which takes
    one request at a time, is never asked twice at once). A worker that cannot start or fails leaves every input set
    and reference after it to numpy on the CPU (the same functions; tests/gpu/test_reference_gpu.py)."""

    SERVER = (sys.executable, "-m", "driver.reference.sdpa_gpu")

    def __init__(self, timeout_s: float):
        self.pool = Pool()
        self.quiet = GpuTurns()
        self.timeout_s = timeout_s
        self.broken: str | None = None

    def start(self) -> None:
        self.pool.prestart([served(self.SERVER, []).server])

    def _fail(self, exc: Exception, what: str) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        progress(f"the GPU {what} failed ({self.broken}); inputs and references are made on the CPU from now on")

    def make_inputs(self, folder: Path, case: AttnCase, seed: int, distribution: str,
                    priority: tuple = (0,)) -> dict[str, Path] | None:
        """The case's four input files in `folder`, made on the GPU, or None (then the CPU makes them) once the
        worker failed. The time spent making them (not waiting for `quiet`) goes to "inputs (background)"."""
        if self.broken:
            return None
        args = ["--make-inputs", str(folder), "--q-shape", ",".join(map(str, case.q_shape)),
                "--kv-shape", ",".join(map(str, case.kv_shape)), "--seed", str(seed), "--distribution", distribution]
        try:
            with self.quiet.turn(priority):
                start = time.perf_counter()
                self.pool.run(served(self.SERVER, args), InputsLine, what="SDPA inputs on the GPU",
                              timeout_s=self.timeout_s)
                phases.add("inputs (background)", time.perf_counter() - start)
        except (DriverError, OSError, ValueError) as exc:
            self._fail(exc, "inputs")
            return None
        return {name: folder / f"{name}.npy" for name in ("q", "k", "v", "scales")}

    def compute(self, files: dict[str, Path], out: Path, causal: bool = False,
                priority: tuple = (0,)) -> np.ndarray | None:
        """The reference of these input files, or None (then the CPU computes it) once the worker failed."""
        if self.broken:
            return None
        try:
            with self.quiet.turn(priority):
                self.pool.run(served(self.SERVER, [*file_args(files), "--out", str(out), *(["--causal"] if causal
                                                                                         else [])]),
                              ReferenceLine, what="float64 SDPA reference on the GPU", timeout_s=self.timeout_s)
            ref_out = np.load(out)
        except (DriverError, OSError, ValueError) as exc:
            self._fail(exc, "reference")
            return None
        finally:
            out.unlink(missing_ok=True)
        return ref_out

    def close(self) -> None:
        self.pool.close()


# Input files made ahead of the shape being checked, at most (bytes): the shapes after it wait for it to be released.
# The shape being checked is always made whole, whatever its size (each of its cases is needed).
INPUTS_AHEAD_BYTES = 16 << 30
# Cases this small are made on the CPU even where the GPU worker runs: numpy makes their inputs in 0.08-0.19 s on one
# core and their reference in 0.02-0.05 s on two (mission, odd; 2026-11-28, a 2-core EPYC VM), less than the worker's
# start-up (4 s) and round trips, so the first shape's checks never wait for the worker, and the worker starts on the
# next shape at once. Decided by size alone, so a case's reference is computed the same way in every run (the GPU's
# and numpy's differ in summation order, by a few float64 ulps); a broken worker sends everything to the CPU.
CPU_INPUTS_MAX_VALUES = 1 << 22  # Q, K and V elements
CPU_REFERENCE_MAX_FLOP = 1 << 32  # 4 B Hq Sq Skv D: the two matrix products of the reference


def on_cpu(case: AttnCase) -> tuple[bool, bool]:
    """Whether the case's (inputs, reference) are made on the CPU whatever the GPU worker does."""
    values = math.prod(case.q_shape) + 2 * math.prod(case.kv_shape)
    flop = 4 * math.prod(case.q_shape) * case.kv_shape[2]
    return values <= CPU_INPUTS_MAX_VALUES, flop <= CPU_REFERENCE_MAX_FLOP


class Cases:
    """Every (shape, seed, distribution)'s inputs and float64 reference, made on background threads in the
    order the shapes run (the timed `normal` inputs first), so the references of the next shape are computed
    while the GPU works on this one (on the GPU when `gpu` is given, between timings; else numpy on half the
    cores; cases as small as `on_cpu` says by numpy in any case). Each is made once per run, for ours and every
    peer in every tier: a reference is never computed twice for the same inputs. Inputs live as files only (never
    as arrays held here); those of shapes after the current one are made while they fit in INPUTS_AHEAD_BYTES.
    `release` drops a finished shape's files.
    A shape is a square (B, H, S, D) or anything AttnCase.of takes (Q and K/V shapes, causal)."""

    def __init__(self, folder: Path, shapes: list[tuple[str, object]], seeds: tuple[int, ...],
                 distributions: tuple[str, ...] = ("normal",), gpu: GpuReference | None = None):
        self.folder = folder
        self.gpu = gpu
        self.cases = {name: AttnCase.of(shape) for name, shape in shapes}
        # Inputs on a few threads (the shapes' seeds side by side), the references one at a time, each on
        # half the cores: the other half stays free for the host side of whatever is being timed meanwhile.
        self.input_pool = ThreadPoolExecutor(2, thread_name_prefix="sdpa-inputs")
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="sdpa-reference")
        self.ref_threads = max(1, (os.cpu_count() or 2) // 2)
        self.order = [name for name, _ in shapes]  # shapes not yet released, in the order they run
        self.ahead = threading.Condition()
        self.made_bytes = 0  # input files made or being made, of shapes not yet released
        self.reserved: dict[CaseKey, int] = {}
        self.closed = False
        self.inputs: dict[CaseKey, Future] = {}
        self.refs: dict[CaseKey, Future] = {}
        self.shape_index = {name: n for n, name in enumerate(self.order)}
        self.submitted: dict[CaseKey, int] = {}
        order = sorted(distributions, key=lambda d: d != TIMED_DISTRIBUTION)
        for name in self.order:
            keys = [(name, seed, dist) for dist in order for seed in seeds]
            for key in keys:
                self.submitted[key] = len(self.submitted)
                self.inputs[key] = self.input_pool.submit(self._inputs, key)
            for key in keys:
                self.refs[key] = self.pool.submit(self._reference, key)

    def _inputs(self, key: CaseKey) -> tuple[dict[str, Path], Path]:
        name, seed, dist = key
        case = self.cases[name]
        with self.ahead:  # the current shape always; a later one while the files made ahead fit
            self.ahead.wait_for(lambda: self.closed or name not in self.order or self.order[0] == name or
                                self.made_bytes + case.input_bytes <= INPUTS_AHEAD_BYTES)
            if self.closed or name not in self.order:
                raise RuntimeError(f"the SDPA cases of {name} were closed or released before their inputs were made")
            self.made_bytes += case.input_bytes
            self.reserved[key] = case.input_bytes
        folder = self.folder_of(name, seed, dist)
        folder.mkdir(parents=True, exist_ok=True)
        gpu = self.gpu if self.gpu and not on_cpu(case)[0] else None
        files = gpu.make_inputs(folder, case, seed, dist, self._priority(key, 0)) if gpu else None
        if files is None:
            start = time.perf_counter()
            files = _write_numpy(folder, case, seed, dist)
            phases.add("inputs (background)", time.perf_counter() - start)
        return files, folder

    def _reference(self, key: CaseKey) -> np.ndarray:
        start = time.perf_counter()
        files, folder = self.inputs[key].result()
        case = self.cases[key[0]]
        gpu = self.gpu if self.gpu and not on_cpu(case)[1] else None
        causal = case.causal
        out = gpu.compute(files, folder / "reference.npy", causal, self._priority(key, 1)) if gpu else None
        if out is None:
            out = cpu_reference(files, causal, workers=self.ref_threads)
        phases.add("reference (background)", time.perf_counter() - start)
        return out

    def _priority(self, key: CaseKey, kind: int) -> tuple:
        """The GPU worker's order: by shape, then inputs (0) before references (1), then the order submitted."""
        return self.shape_index[key[0]], kind, self.submitted[key]

    def quiet(self):
        """Held while something is timed: no GPU inputs or reference are made meanwhile."""
        return self.gpu.quiet if self.gpu else contextlib.nullcontext()

    def folder_of(self, name: str, seed: int, distribution: str) -> Path:
        """Where a case's inputs (and the outputs written beside them) go: known before its inputs are made."""
        return self.folder / f"{name}-{distribution}-seed{seed}"

    def files(self, name: str, seed: int, distribution: str) -> tuple[dict[str, Path], Path]:
        with phases.timed("inputs (wait)"):
            return self.inputs[(name, seed, distribution)].result()

    def release(self, name: str) -> None:
        """A shape is done: its references (float64, 8 bytes an element each) and files go."""
        for key in [k for k in self.inputs if k[0] == name]:
            self.inputs.pop(key).cancel()
            self.refs.pop(key, None)
            shutil.rmtree(self.folder_of(*key), ignore_errors=True)
        with self.ahead:
            for key in [k for k in self.reserved if k[0] == name]:
                self.made_bytes -= self.reserved.pop(key)
            if name in self.order:
                self.order.remove(name)
            self.ahead.notify_all()

    def close(self) -> None:
        for fut in [*self.inputs.values(), *self.refs.values()]:
            fut.cancel()
        with self.ahead:  # inputs waiting for room are not made
            self.closed = True
            self.ahead.notify_all()
        self.pool.shutdown(wait=True)
        self.input_pool.shutdown(wait=True)


def chosen_variants(opts: RunOptions) -> tuple[str, ...]:
    """Our variants this run times (`bench --variants`; all registered by default)."""
    return registry.select("sdpa", "variants", opts.variants)


def servers(exe_dir: Path, peer_impls: tuple[str, ...],
            variants: tuple[str, ...] | None = None) -> dict[str, tuple[str, ...]]:
    """The command each implementation's worker runs (with --serve), or its one-shot command (without);
    `variants`: ours that run (None: all)."""
    out = {impl: (str(exe_dir / exe),) for impl, exe in VARIANTS.items() if variants is None or impl in variants}
    out |= {impl: tuple(peers.command(impl)) for impl in peer_impls}
    return out


def peers_of(peer_impls: tuple[str, ...], tiers: tuple[str, ...]) -> tuple[str, ...]:
    """The peers that run: those of the tiers asked for (torch and FlashAttention fp16, cuDNN FP8 fp8)."""
    return tuple(p for p in peer_impls if SDPA_PEER_PRECISION[p] in tiers)


def planned_cases(opts: RunOptions, peer_impls: tuple[str, ...], tiers: tuple[str, ...] | None = None) -> int:
    """Cases one shape sends at most: checks of every distribution and seed, then every round of every mode."""
    tiers = opts.precisions if tiers is None else tiers
    impls = len(chosen_variants(opts)) * len(tiers) + len(peers_of(peer_impls, tiers))
    return len(opts.distributions) * len(opts.seeds) * impls + opts.rounds * len(opts.modes("sdpa")) * impls


def _shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, peer_impls: tuple[str, ...],
    shape_name: str, shape: AttnCase | tuple[int, int, int, int], *, pool: Pool | None = None,
    cases: Cases | None = None, tiers: tuple[str, ...] | None = None, copy_gbps: float | None = None,
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """Every seed of every distribution, of every variant in every tier (`tiers`: those that run here, by
    default every one asked for) and of the tiers' peers, checked against the reference first (one launch each
    on its warm worker, nothing timed); then the first seed's `normal` inputs timed in every mode asked for, in
    interleaved rounds with the peers (`peer_impls`, those this host can run, each in its tier) in the same
    mode, for the variants of each tier that were correct on every seed of those inputs, each timed run's
    output (ours and the peers') checked again. A variant with wrong results there is never timed; a peer's
    error is reported, not gated (the accuracy gates compare ours with it). `pool` and `cases` (the suite's
    workers and its background references) are made here if not given; `copy_gbps`: the device's copy bandwidth
    measured in the run (hbm_frac)."""
    case = AttnCase.of(shape)
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(Pool(one_shot=not opts.workers))
        if cases is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sdpa-"))
            cases = Cases(Path(tmp), [(shape_name, case)], opts.seeds, opts.distributions)
            stack.callback(cases.close)
        checker = stack.enter_context(ThreadPoolExecutor(2, thread_name_prefix="sdpa-check"))
        not_offered: dict[str, str] = {}
        records, skipped = _run_shape(opts, exe_dir, dev, gates, git_sha, peer_impls, shape_name, pool, cases,
                                      checker, opts.precisions if tiers is None else tiers, not_offered,
                                      copy_gbps=copy_gbps)
        return records, skipped + [Skip(suite="sdpa", impl=tier_skip(t), reason=why) for t, why in not_offered.items()]


Impl = tuple[str, str]  # (impl, precision tier): ("cpasync", "fp16"), ("cudnn_fp8", "fp8")


def _run_shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, peer_impls: tuple[str, ...],
    shape_name: str, pool: Pool, cases: Cases, checker: ThreadPoolExecutor, tiers: tuple[str, ...],
    not_offered: dict[str, str], sampler: ClockSampler | None = None, copy_gbps: float | None = None,
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """`not_offered` (tier -> the runner's words) collects the tiers a runner refused with exit 5 at a square case
    (no sm_90a code, no FP8 MMA): they are left out here and in the cases after this one. A refusal at any other
    case (a kernel that does not serve GQA, Sq != Skv or the mask) stands for that case alone: the tier is
    recorded as not offered there, with the runner's words, and the peers of the tier are still checked and timed.
    `sampler` (GPU 0's clock and power, read on a thread): each timed record gets the summary of its rounds'
    samples. `copy_gbps`: the run's measured copy bandwidth, which memory-bound records' hbm_frac divides by."""
    case = cases.cases[shape_name]
    before = device.probe().gpus[:1]
    modes = opts.modes("sdpa")
    serve = servers(exe_dir, peer_impls, chosen_variants(opts))
    timed_seed, dists = opts.seeds[0], opts.distributions
    ours: list[Impl] = [(impl, tier) for tier in tiers if tier not in not_offered for impl in chosen_variants(opts)]
    theirs: list[Impl] = [(p, SDPA_PEER_PRECISION[p]) for p in peers_of(peer_impls, tiers)]
    lines: dict[tuple[str, str, str, int], SdpaLine] = {}  # (impl, tier, dist, seed) -> its check's line
    pending: dict[tuple[str, str, str, int], list[Future]] = {}  # -> the errors of each checked output
    peer_failures: dict[tuple[str, str], str] = {}  # (peer, mode) -> why it was dropped

    def out_of(impl: str, tier: str, dist: str, seed: int) -> Path:
        return cases.folder_of(shape_name, seed, dist) / f"out_{impl}_{tier}.npy"

    taken = itertools.count()

    def check_later(impl: str, tier: str, dist: str, seed: int) -> None:
        """The output is moved aside now (the next case writes a new one), read and compared on a thread."""
        what = f"sdpa {shape_name} {dist} seed {seed} {impl} {tier} output"
        path = out_of(impl, tier, dist, seed)
        kept = path.with_name(f"{path.stem}.{next(taken)}.npy")
        try:
            os.replace(path, kept)
        except OSError as exc:
            if impl in VARIANTS:
                raise KernelFailed(f"{what} cannot be read: {exc}") from None
            fut = _failed(f"{what}: {exc}")
        else:
            fut = checker.submit(_file_errors, kept, impl in VARIANTS, cases.refs[(shape_name, seed, dist)],
                                 gates.sdpa, tier, dist, what)
        pending.setdefault((impl, tier, dist, seed), []).append(fut)

    def dropped(impl: str) -> bool:
        return any(k[0] == impl for k in peer_failures)

    # ---- checks: every distribution and seed, ours in each tier and the peers, one launch each on warm workers.
    # Nothing is timed here, so each implementation's worker takes its cases on a thread of its own, side by side
    # with the others' (the GPU and the file I/O overlap); the first error of ours stops every thread.
    check_order = [(dist, seed) for dist in sorted(dists, key=lambda d: d != TIMED_DISTRIBUTION) for seed in opts.seeds]
    stop = threading.Event()
    first_of_tier = {tier: threading.Lock() for tier in tiers}  # our runners ask a tier's first case one at a time
    refused: dict[str, TierNotOffered] = {}  # so that a refusal (exit 5) is asked once and stands for the case
    refused_here: dict[str, str] = {}  # tier -> why our runner refused this (not square) case

    def check_cases(impl: str, tiers_of: list[str]) -> list[tuple[str, str, int, SdpaLine | BaseException]]:
        """Every check of one implementation (one worker: both tiers of a runner share it), in order; (tier,
        dist, seed, line) each, or the error that ended a tier's cases."""
        done: list[tuple[str, str, int, SdpaLine | BaseException]] = []
        for tier in tiers_of:
            for n, (dist, seed) in enumerate(check_order):
                if stop.is_set():
                    return done
                gate = first_of_tier[tier] if impl in VARIANTS and n == 0 else contextlib.nullcontext()
                with gate:
                    if impl in VARIANTS and tier in refused:  # our other variant was refused: so is this one
                        done.append((tier, dist, seed, refused[tier]))
                        break
                    files, _folder = cases.files(shape_name, seed, dist)
                    what = f"sdpa {shape_name} {dist} seed {seed} {impl} {tier} (check)"
                    progress(what, step=True)
                    args = [*file_args(files), "--out", str(out_of(impl, tier, dist, seed)), *case_args(case),
                            *(CHECK_ARGS if impl in VARIANTS else PEER_CHECK_ARGS), *precision_args(impl, tier, opts)]
                    try:
                        (line,) = pool.run(served(serve[impl], args), SdpaLine, what=what, timeout_s=opts.timeout_s)
                        check_impl(what, impl, line.impl)
                        check_case(what, case, line)
                        if impl in VARIANTS:
                            check_precision(what, tier, line.precision)
                    except TierNotOffered as exc:
                        if impl in VARIANTS:
                            refused[tier] = exc
                        done.append((tier, dist, seed, exc))
                        break
                    except (KernelFailed, ConfigError, WrongResults) as exc:
                        if impl in VARIANTS:
                            stop.set()
                        done.append((tier, dist, seed, exc))
                        break
                done.append((tier, dist, seed, line))
        return done

    by_impl: dict[str, list[str]] = {}
    for impl, tier in [*ours, *theirs]:
        if tier not in not_offered and not dropped(impl):
            by_impl.setdefault(impl, []).append(tier)
    with phases.timed("checks"), ThreadPoolExecutor(max(len(by_impl), 1), thread_name_prefix="sdpa-case") as threads:
        futures = {impl: threads.submit(check_cases, impl, tiers_of) for impl, tiers_of in by_impl.items()}
        outcomes = [(impl, *got) for impl, fut in futures.items() for got in fut.result()]
    for impl, tier, dist, seed, outcome in outcomes:  # ours before the peers: an error of ours raises first
        if isinstance(outcome, TierNotOffered):
            if impl not in VARIANTS:
                raise outcome
            if not case.square:
                if tier not in refused_here:
                    refused_here[tier] = (f"{shape_name} ({case.words()}): the runner refused the {tier} tier for "
                                          f"this case: {outcome.message}")
                    progress(f"{tier} tier not offered at {shape_name}: {outcome.message}")
            elif tier not in not_offered:
                not_offered[tier] = f"the runner refused the {tier} tier: {outcome.message}"
                progress(f"{tier} tier not offered here: {outcome.message}")
        elif isinstance(outcome, BaseException):
            if impl in VARIANTS:
                raise outcome
            peer_failures[(impl, "cold")] = outcome.one_line()  # its checks run cold
            progress(f"peer {impl} dropped: {outcome.one_line()}")
        else:
            lines[(impl, tier, dist, seed)] = outcome
            check_later(impl, tier, dist, seed)
    ours = [(impl, tier) for impl, tier in ours if tier not in not_offered and tier not in refused_here]
    # ---- verdicts of ours on the timed inputs, before anything is timed: only variants correct there on every
    # seed are timed; the other distributions' errors come in meanwhile
    verdicts: dict[tuple[str, str, str, int], tuple[SdpaErrors, Verdict]] = {}

    def verdict_of(impl: str, tier: str, dist: str, seed: int) -> tuple[SdpaErrors, Verdict]:
        key = (impl, tier, dist, seed)
        if key not in verdicts:
            with phases.timed("reference (wait)"):
                metrics = SdpaErrors.worst([f.result() for f in pending[key]])
            verdicts[key] = (metrics, sdpa_correctness(metrics, gates.sdpa, tier, dist))
        return verdicts[key]

    correct = [(impl, tier) for impl, tier in ours if TIMED_DISTRIBUTION in dists and
               all(verdict_of(impl, tier, TIMED_DISTRIBUTION, seed)[1].passed for seed in opts.seeds)]
    # The peers of a tier are timed beside ours where ours is, and where our runner did not offer this case (their
    # numbers are then the case's benchmark); never where ours was wrong (a ratio would mean nothing).
    peer_tiers = {t for _, t in correct} | (set(refused_here) if TIMED_DISTRIBUTION in dists else set())
    cmds: dict[tuple[str, str, str], Served] = {}
    for mode in modes if peer_tiers else ():  # per mode, ours then the peers of each tier: A B C D E, A B C D E, ...
        files, _folder = cases.files(shape_name, timed_seed, TIMED_DISTRIBUTION)
        for tier in tiers:
            timed_here = [(impl, t) for impl, t in correct if t == tier]
            for impl, t in [*timed_here, *((p, t) for p, t in theirs if t == tier and tier in peer_tiers)]:
                if dropped(impl):
                    continue
                out = out_of(impl, t, TIMED_DISTRIBUTION, timed_seed)
                cmds[(impl, t, mode)] = served(serve[impl], [*file_args(files), "--out", str(out), *case_args(case),
                                                             *timing_args(opts, mode), *precision_args(impl, t, opts)])

    def on_line(cmd_key: tuple[str, str, str], _line: SdpaLine) -> None:
        check_later(cmd_key[0], cmd_key[1], TIMED_DISTRIBUTION, timed_seed)

    def key(cmd_key: tuple[str, str, str], line: SdpaLine) -> tuple[str, str, str]:
        impl, tier, mode = cmd_key
        check_impl(f"sdpa {shape_name} {tier} {mode}", impl, line.impl)
        check_case(f"sdpa {shape_name} {impl} {tier} {mode}", case, line)
        check_mode(f"sdpa {shape_name} {impl} {tier}", mode, line.timing)
        check_precision(f"sdpa {shape_name} {impl}", tier, line.precision)
        return (impl, tier, mode)

    samples: Samples[SdpaLine] | None = None
    if cmds:
        with cases.quiet():
            samples = interleaved(
                cmds, SdpaLine, rounds=opts.rounds, min_rounds=min(2, opts.rounds),
                target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s, key=key,
                on_line=on_line, label=f"sdpa {shape_name} seed {timed_seed}",
                peers=frozenset(k for k in cmds if peers.is_peer(k[0])), pool=pool,
            )
    # ---- every output's error (ours raise on a malformed output; a peer's is recorded)
    errors: dict[tuple[str, str, str, int], SdpaErrors] = {}
    peer_unchecked: dict[str, str] = {}
    with phases.timed("checks (wait)"):
        for (impl, tier, dist, seed), futs in pending.items():
            try:
                errors[(impl, tier, dist, seed)] = SdpaErrors.worst([f.result() for f in futs])
            except (KernelFailed, OSError, ValueError) as exc:
                if impl in VARIANTS:  # a malformed output of ours raises (or above, if it was timed input)
                    raise
                peer_unchecked[impl] = exc.one_line() if isinstance(exc, KernelFailed) else str(exc)
    after = device.probe().gpus[:1]
    timed_keys = samples.by_key if samples is not None else {}
    flags = telemetry_flags(before, after)
    gpu_name = dev.gpus[0].name if dev.gpus else ""
    records = []

    def record(impl: str, tier: str, dist: str, seed: int, line: SdpaLine, p50s: list[float], mode: str | None,
               **kw) -> ArchivedRecord:
        peak = config.tensor_peak_tflops(dev.kind, gpu_name, tier) if mode else None
        windows = samples.windows.get((impl, tier, mode)) if (mode and samples is not None) else None
        clock = sampler.summary(windows) if (sampler is not None and windows) else None
        return ArchivedRecord(
            suite="sdpa", impl=impl, kernel=VARIANTS.get(impl, impl), config=f"{shape_name}/seed{seed}",
            device=dev.kind, git_sha=git_sha, seed=seed, distribution=dist, measurement=line, round_p50_us=p50s,
            timing=mode, tensor_frac=line.tflops / peak if peak else None,
            hbm_frac=hbm_frac(case, impl, line.p50_us, copy_gbps) if mode else None,
            telemetry_before=before, telemetry_after=after, clock=clock, flags=flags, **kw,
        )

    def error_fields(m: SdpaErrors) -> dict:
        return {"max_abs_err": m.max_abs_err, "nonfinite": m.nonfinite > 0, "bad_frac": m.bad_frac,
                "rel_l2": m.rel_l2, "max_abs_rel": m.max_abs_rel}

    for dist in dists:
        for seed in opts.seeds:
            is_timed = (dist, seed) == (TIMED_DISTRIBUTION, timed_seed)
            for impl, tier in ours:
                metrics = errors[(impl, tier, dist, seed)]
                verdict = sdpa_correctness(metrics, gates.sdpa, tier, dist)
                timed_modes = [m for m in modes if is_timed and (impl, tier, m) in timed_keys]
                too_big = sdpa_runner_resources(lines[(impl, tier, dist, seed)], gates.build)
                if too_big:
                    verdict = Verdict(status="fail", reasons=[*verdict.reasons, *too_big])
                if is_timed and not timed_modes:
                    verdict = Verdict(status=verdict.status, reasons=[*verdict.reasons, "not timed: wrong results"])
                fields = dict(passed=verdict.passed, correctness=verdict, **error_fields(metrics))
                if not timed_modes:
                    records.append(record(impl, tier, dist, seed, lines[(impl, tier, dist, seed)], [], None, **fields))
                for mode in timed_modes:
                    line, p50s = samples.representative((impl, tier, mode))
                    records.append(record(impl, tier, dist, seed, line, p50s, mode, **fields))
            for impl, tier in theirs:
                if (impl, tier, dist, seed) not in lines:
                    continue  # dropped before this case: its skip says why
                m = errors.get((impl, tier, dist, seed)) if impl not in peer_unchecked else None
                what = "its checked runs" + (" (the check and every timed round)" if is_timed else "")
                reasons = [f"peer: its error against the float64 reference ({what}) is reported, not gated here; "
                           "the accuracy gates compare ours with it" if m else
                           f"peer: output not checked: {peer_unchecked.get(impl, 'no output')}"]
                check_line = lines[(impl, tier, dist, seed)]
                reasons += [f"arithmetic: {check_line.arithmetic}"] if check_line.arithmetic else []
                fields = dict(passed=False, correctness=Verdict(status="not_measured", reasons=reasons),
                              **(error_fields(m) if m else {}))
                timed_modes = [mode for mode in modes if is_timed and (impl, tier, mode) in timed_keys]
                if not timed_modes:
                    records.append(record(impl, tier, dist, seed, check_line, [], None, **fields))
                for mode in timed_modes:
                    line, p50s = samples.representative((impl, tier, mode))
                    records.append(record(impl, tier, dist, seed, line, p50s, mode, **fields))
    failures = {**peer_failures,
                **{(k[0], k[2]): why for k, why in (samples.peer_failures if samples is not None else {}).items()}}
    return records, [*(Skip(suite="sdpa", impl=impl, reason=f"{shape_name} {mode}: {why}")
                       for (impl, mode), why in failures.items()),
                     *(Skip(suite="sdpa", impl=tier_skip(t), reason=why) for t, why in refused_here.items())]


def tier_errors(out: np.ndarray, ref_out: np.ndarray, gates: SdpaGates, precision: str, distribution: str,
                what: str) -> SdpaErrors:
    """One output's error against its float64 reference, `bad_err` the tier's for this distribution at the
    reference's scale: the suite's checks and the stress soak measure it the same way."""
    bad_err = gates.bad_err_for(precision, distribution, abs_max(ref_out))
    return sdpa_errors(out, ref_out, bad_err=bad_err, what=what)


def _file_errors(path: Path, ours: bool, expected: Future, gates: SdpaGates, precision: str, distribution: str,
                 what: str) -> SdpaErrors:
    """The error of the output in `path` (read, then removed), on a checker thread: the reading of the outputs
    (27 of 67 MB each at (4,32,4096,64)) overlaps the checks, instead of following them one by one. An unreadable
    output of ours is malformed output (KernelFailed); a peer's, an OSError (its output is then not checked)."""
    try:
        out = np.load(path)
    except (OSError, ValueError, EOFError) as exc:
        if ours:
            raise KernelFailed(f"{what} cannot be read: {exc}") from None
        raise OSError(f"{what}: {exc}") from None
    finally:
        path.unlink(missing_ok=True)
    return tier_errors(out, expected.result(), gates, precision, distribution, what)


def _failed(why: str) -> Future:
    fut: Future = Future()
    fut.set_exception(OSError(why))
    return fut


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    result = SuiteResult()
    gpu_arch, build_arch = device.arch_of(0), exe_dir.name  # exe_dir is build/<arch>
    why = hopper_not_offered(gpu_arch, build_arch)
    if why and "fp16" in opts.precisions:
        result.skipped.append(Skip(suite="sdpa", impl=HOPPER_FP16_KERNEL, reason=why))
    tiers = []
    for tier in opts.precisions:
        why = fp8_not_offered(gpu_arch, build_arch) if tier == "fp8" else None
        if why:  # that tier's gates are then not measured, never passed
            result.skipped.append(Skip(suite="sdpa", impl=tier_skip(tier), reason=why))
        else:
            tiers.append(tier)
    tiers_t = tuple(tiers)
    chosen = registry.select("sdpa", "peers", opts.peers)
    result.skipped += [Skip(suite="sdpa", impl=n, reason=registry.not_selected("variants"))
                       for n in VARIANTS if n not in chosen_variants(opts)]
    result.skipped += [Skip(suite="sdpa", impl=n, reason=registry.not_selected("peers")) for n in PEERS if n not in chosen]
    here = []
    for impl in chosen:
        why = peers.missing(impl, gpu_arch)
        if why:  # its gates are then not measured (gates.py), never passed
            result.skipped.append(Skip(suite="sdpa", impl=impl, reason=why))
        else:
            here.append(impl)
    here_t = peers_of(tuple(here), tiers_t)
    if not tiers_t:
        return result
    plan(len(opts.shapes) * planned_cases(opts, here_t, tiers_t))
    not_offered: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(Pool(one_shot=not opts.workers))
        pool.prestart([served(cmd, []).server for cmd in servers(exe_dir, here_t, chosen_variants(opts)).values()])  # start-ups overlap
        # The copy bandwidth of hbm_frac, before any reference or case uses the GPU (the workers' start-ups may
        # overlap it: a torch import and a CUDA context, no kernel)
        ceilings, copy_skips = measure_copy(opts, gpu_arch)
        result.ceilings_gbps |= ceilings
        result.skipped += copy_skips
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sdpa-"))
        gpu_ref = None
        if opts.workers and peers.missing("torch_sdpa", gpu_arch) is None:  # torch sees this GPU
            gpu_ref = GpuReference(opts.timeout_s)
            stack.callback(gpu_ref.close)
            gpu_ref.start()
        cases = Cases(Path(tmp), list(opts.shapes), opts.seeds, opts.distributions, gpu_ref)
        stack.callback(cases.close)
        checker = stack.enter_context(ThreadPoolExecutor(2, thread_name_prefix="sdpa-check"))
        sampler = nvml_sampler(1)  # GPU 0's clock and power while each case is timed (driver/clocks.py)
        if sampler is not None:
            stack.callback(sampler.stop)
        for shape_name, _case in opts.shapes:
            records, skipped = _run_shape(opts, exe_dir, dev, gates, git_sha, here_t, shape_name, pool, cases,
                                          checker, tiers_t, not_offered, sampler, ceilings.get(COPY_CEILING))
            cases.release(shape_name)
            result.records += records
            result.skipped += skipped
    result.skipped += [Skip(suite="sdpa", impl=tier_skip(t), reason=why) for t, why in not_offered.items()]
    return result
