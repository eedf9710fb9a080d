"""The SDPA suite: both FP8 variants against a float64 reference; PyTorch, cuDNN FP8 and FlashAttention
as the peers (driver/peers/), in the same rounds and timing modes, their outputs checked against the same
reference (reported, not gated)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from driver import device, peers
from driver.errors import KernelFailed
from driver.gates import sdpa_correctness, sdpa_runner_resources
from driver.options import RunOptions
from driver.parse import launch_lines
from driver.records import ArchivedRecord, DeviceInfo, SdpaLine, Skip, Verdict
from driver.reference import sdpa as ref
from driver.suites.common import Samples, SuiteResult, check_mode, interleaved, progress, telemetry_flags
from driver.thresholds import Thresholds
from driver.verify import SdpaErrors, sdpa_errors

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
    q, k, v, k_scale, v_scale = ref.make_inputs(shape, seed)
    files = {name: folder / f"{name}.npy" for name in ("q", "k", "v", "scales")}
    np.save(files["q"], q)
    np.save(files["k"], k)
    np.save(files["v"], v)
    np.save(files["scales"], np.array([k_scale, v_scale], dtype=np.float32))
    return files, ref.reference(q, k, v, k_scale, v_scale) if with_reference else None


def timing_args(opts: RunOptions, mode: str) -> list[str]:
    """The same flags for our runners and every SDPA peer (README "How we time")."""
    return ["--iters", str(opts.iters), "--warmup", str(opts.warmup), "--timing", mode, "--batch", str(opts.batch)]


def file_args(files: dict[str, Path]) -> list[str]:
    return [a for name in ("q", "k", "v", "scales") for a in (f"--{name}", str(files[name]))]


CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--no-spin"]  # a check-only run: one output launch, nothing timed


def _check_only(exe: Path, files: dict[str, Path], out: Path, expected: np.ndarray, gates: Thresholds,
                timeout_s: float, what: str) -> tuple[SdpaLine, SdpaErrors]:
    cmd = [str(exe), *file_args(files), "--out", str(out), *CHECK_ARGS]
    (line,) = launch_lines(cmd, SdpaLine, what=what, timeout_s=timeout_s)
    return line, sdpa_errors(np.load(out), expected, bad_err=gates.sdpa.bad_err, what=f"{what} output")


def _shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, peer_impls: tuple[str, ...],
    shape_name: str, shape: tuple[int, int, int, int],
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """Every seed of every variant checked against the reference first (one launch each, nothing
    timed); then the first seed's inputs timed in every mode asked for, in interleaved rounds with
    the peers (`peer_impls`, those this host can run) in the same mode, for the variants that were
    correct on every seed, each timed run's output (ours and the peers') checked again. A variant
    with wrong results is never timed; a peer's error is reported, not gated."""
    before = device.probe().gpus[:1]
    modes = opts.modes("sdpa")
    checks: dict[tuple[str, int], list[SdpaErrors]] = {}
    check_lines: dict[tuple[str, int], SdpaLine] = {}
    peer_checks: dict[str, list[SdpaErrors]] = {}  # every timed round's output of each peer, both modes
    peer_unchecked: dict[str, str] = {}
    samples: Samples[SdpaLine] | None = None
    timed_seed = opts.seeds[0]
    with tempfile.TemporaryDirectory(prefix="sdpa-") as tmp:
        cases = {}
        for seed in opts.seeds:
            folder = Path(tmp) / f"seed{seed}"
            folder.mkdir()
            files, expected = prepare_case(folder, shape, seed)
            cases[seed] = files, expected, {impl: folder / f"out_{impl}.npy" for impl in (*VARIANTS, *peer_impls)}
            for impl, exe in VARIANTS.items():
                what = f"sdpa {shape_name} seed {seed} {impl} (check)"
                progress(what)
                line, metrics = _check_only(exe_dir / exe, files, cases[seed][2][impl], expected, gates,
                                            opts.timeout_s, what)
                check_lines[(impl, seed)] = line
                checks[(impl, seed)] = [metrics]
        files, expected, outs = cases[timed_seed]
        correct = [impl for impl in VARIANTS
                   if all(sdpa_correctness(checks[(impl, seed)][0], gates.sdpa).passed for seed in opts.seeds)]
        cmds: dict[tuple[str, str], list[str]] = {}
        for mode in modes:  # ours then the peers, per mode: A B C D E, A B C D E, ...
            for impl in correct:
                cmds[(impl, mode)] = [str(exe_dir / VARIANTS[impl]), *file_args(files), "--out", str(outs[impl]),
                                      *timing_args(opts, mode)]
            for impl in peer_impls if correct else ():
                cmds[(impl, mode)] = peers.command(impl, *file_args(files), "--out", str(outs[impl]),
                                                   *timing_args(opts, mode))

        def check(cmd_key: tuple[str, str], _line: SdpaLine) -> None:
            impl = cmd_key[0]
            what = f"sdpa {shape_name} seed {timed_seed} {impl} output"
            if impl in VARIANTS:
                checks[(impl, timed_seed)].append(sdpa_errors(np.load(outs[impl]), expected,
                                                              bad_err=gates.sdpa.bad_err, what=what))
                return
            try:  # a peer's output is checked the same way; if it is malformed, its record says so
                peer_checks.setdefault(impl, []).append(
                    sdpa_errors(np.load(outs[impl]), expected, bad_err=gates.sdpa.bad_err, what=what))
            except (KernelFailed, OSError, ValueError) as exc:
                peer_unchecked[impl] = exc.one_line() if isinstance(exc, KernelFailed) else f"{what}: {exc}"

        def key(cmd_key: tuple[str, str], line: SdpaLine) -> tuple[str, str]:
            check_mode(f"sdpa {shape_name} {cmd_key[0]}", cmd_key[1], line.timing)
            return (line.impl, cmd_key[1])

        if cmds:
            samples = interleaved(
                cmds, SdpaLine, rounds=opts.rounds, min_rounds=min(2, opts.rounds),
                target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s, key=key,
                on_line=check, label=f"sdpa {shape_name} seed {timed_seed}",
                peers=frozenset(k for k in cmds if peers.is_peer(k[0])),
            )
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
            reasons = ["peer: its error against the float64 reference is reported, not gated"
                       if m else f"peer: output not checked: {peer_unchecked.get(impl, 'no output')}"]
            reasons += [f"precision: {line.precision}"] if line.precision else []
            records.append(record(impl, timed_seed, line, p50s, mode, passed=False,
                                  correctness=Verdict(status="not_measured", reasons=reasons),
                                  **(errors(m) if m else {})))
    failures = samples.peer_failures if samples is not None else {}
    return records, [Skip(suite="sdpa", impl=impl, reason=f"{shape_name} {mode}: {why}")
                     for (impl, mode), why in failures.items()]


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
    for shape_name, shape in opts.shapes:
        records, skipped = _shape(opts, exe_dir, dev, gates, git_sha, tuple(here), shape_name, shape)
        result.records += records
        result.skipped += skipped
    return result
