"""The SDPA suite: both FP8 variants against a float64 reference, PyTorch as the peer."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

from driver import device
from driver.options import RunOptions
from driver.records import ArchivedRecord, DeviceInfo, SdpaLine, Skip, Verdict
from driver.reference import sdpa as ref
from driver.launch import launch
from driver.parse import parse_lines
from driver.suites.common import Samples, SuiteResult, interleaved, progress, ratio_verdict, telemetry_flags
from driver.thresholds import SdpaGates, Thresholds

VARIANTS = {"baseline": "sdpa_fp8_baseline", "cpasync": "sdpa_fp8_cpasync"}


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


def error_metrics(out: np.ndarray, expected: np.ndarray, gates: SdpaGates) -> dict[str, float]:
    err = np.abs(out.astype(np.float64) - expected)
    finite = np.isfinite(err)
    err = np.where(finite, err, np.inf)
    return {
        "max_abs_err": float(err.max()) if err.size else 0.0,
        "bad_frac": float(np.mean(err > gates.bad_err)) if err.size else 0.0,
        "rel_l2": float(np.linalg.norm(np.where(finite, err, 0)) / max(np.linalg.norm(expected), 1e-30)),
    }


def correctness(m: dict[str, float], gates: SdpaGates) -> Verdict:
    reasons = []
    if not np.isfinite(m["max_abs_err"]):
        reasons.append("output holds NaN or infinity")
    elif m["max_abs_err"] > gates.max_abs_err:
        reasons.append(f"max_abs_err {m['max_abs_err']:.4g} > {gates.max_abs_err}")
    if m["bad_frac"] > gates.max_bad_frac:
        reasons.append(f"{m['bad_frac']:.2%} of elements off by > {gates.bad_err} (max {gates.max_bad_frac:.1%})")
    return Verdict(status="fail" if reasons else "pass", reasons=reasons)


def timing_args(opts: RunOptions) -> list[str]:
    return ["--iters", str(opts.iters), "--warmup", str(opts.warmup)]


def file_args(files: dict[str, Path]) -> list[str]:
    return [a for name in ("q", "k", "v", "scales") for a in (f"--{name}", str(files[name]))]


def _performance(shape_name: str, lines: dict[str, SdpaLine], gates: Thresholds) -> dict[str, Verdict]:
    """Per impl, the speedup gates that name it for this shape."""
    out: dict[str, list[Verdict]] = {}
    ours = {k: v for k, v in lines.items() if k in VARIANTS}
    for g in gates.sdpa.speedup:
        if g.shape != shape_name:
            continue
        impl = min(ours, key=lambda k: ours[k].p50_us) if g.impl == "best" and ours else g.impl
        if impl not in lines or g.peer not in lines:
            out.setdefault(impl, []).append(Verdict(status="skip", reasons=[f"{g.peer} not measured"]))
            continue
        out.setdefault(impl, []).append(
            ratio_verdict(f"p50 vs {g.peer}", ours_us=lines[impl].p50_us, peer_us=lines[g.peer].p50_us,
                          min_ratio=g.min_ratio, noise=gates.noise.min_rel_noise)
        )
    return {k: Verdict.combine(v) for k, v in out.items()}


CHECK_ARGS = ["--iters", "1", "--warmup", "0", "--no-spin"]  # a check-only run: one output launch, nothing timed


def _check_only(exe: Path, files: dict[str, Path], out: Path, expected: np.ndarray, gates: Thresholds,
                timeout_s: float, what: str) -> tuple[SdpaLine, dict[str, float]]:
    cmd = [str(exe), *file_args(files), "--out", str(out), *CHECK_ARGS]
    (line,) = parse_lines(launch(cmd, what=what, timeout_s=timeout_s).stdout, SdpaLine, what=what)
    return line, error_metrics(np.load(out), expected, gates.sdpa)


def _shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, have_torch: bool,
    shape_name: str, shape: tuple[int, int, int, int],
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """Every seed checked against the reference first (one launch per variant, nothing timed); then
    the first seed's correct variants are timed in interleaved rounds with the peer, each timed
    run's output checked again. A variant with wrong results is never timed."""
    before = device.probe().gpus[:1]
    checks: dict[tuple[str, int], list[dict[str, float]]] = {}
    check_lines: dict[tuple[str, int], SdpaLine] = {}
    samples: Samples[SdpaLine] | None = None
    timed_seed = opts.seeds[0]
    with tempfile.TemporaryDirectory(prefix="sdpa-") as tmp:
        for seed in opts.seeds:
            folder = Path(tmp) / f"seed{seed}"
            folder.mkdir()
            files, expected = prepare_case(folder, shape, seed)
            outs = {impl: folder / f"out_{impl}.npy" for impl in VARIANTS}
            for impl, exe in VARIANTS.items():
                what = f"sdpa {shape_name} seed {seed} {impl} (check)"
                progress(what)
                line, metrics = _check_only(exe_dir / exe, files, outs[impl], expected, gates, opts.timeout_s, what)
                check_lines[(impl, seed)] = line
                checks[(impl, seed)] = [metrics]
            if seed != timed_seed:
                continue
            correct = [impl for impl in VARIANTS if correctness(checks[(impl, seed)][0], gates.sdpa).passed]
            cmds = {
                impl: [str(exe_dir / VARIANTS[impl]), *file_args(files), "--out", str(outs[impl]), *timing_args(opts)]
                for impl in correct
            }
            if have_torch and cmds:
                cmds["torch_sdpa"] = [sys.executable, "-m", "driver.peers.torch_sdpa", *file_args(files), *timing_args(opts)]

            def check(impl: str, _line: SdpaLine, seed: int = seed, expected: np.ndarray = expected) -> None:
                if impl in VARIANTS:
                    checks[(impl, seed)].append(error_metrics(np.load(outs[impl]), expected, gates.sdpa))

            if cmds:
                samples = interleaved(
                    cmds, SdpaLine, rounds=opts.rounds, min_rounds=min(2, opts.rounds),
                    target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s, key=lambda ln: ln.impl,
                    on_line=check, label=f"sdpa {shape_name} seed {seed}", peers=frozenset({"torch_sdpa"}),
                )
    after = device.probe().gpus[:1]
    timed_keys = samples.by_key if samples is not None else {}
    timed = {impl: samples.representative(impl)[0] for impl in timed_keys} if samples is not None else {}
    perf = _performance(shape_name, timed, gates)
    records = []
    for seed in opts.seeds:
        for impl in VARIANTS:
            runs = checks[(impl, seed)]
            metrics = {k: max(m[k] for m in runs) for k in runs[0]}
            verdict = correctness(metrics, gates.sdpa)
            was_timed = seed == timed_seed and impl in timed_keys
            line, p50s = samples.representative(impl) if was_timed else (check_lines[(impl, seed)], [])
            smem_limit = gates.build.smem_limit(line.kernel)  # dynamic smem: only the runner knows
            if line.smem_bytes > smem_limit:
                verdict = Verdict(status="fail", reasons=[*verdict.reasons, f"{line.smem_bytes} B shared memory "
                                  f"per block > {smem_limit} ({line.kernel or 'default'} gate)"])
            if seed == timed_seed and not was_timed:
                verdict = Verdict(status=verdict.status, reasons=[*verdict.reasons, "not timed: wrong results"])
            records.append(
                ArchivedRecord(
                    suite="sdpa", impl=impl, kernel=VARIANTS[impl], config=f"{shape_name}/seed{seed}",
                    device=dev.kind, git_sha=git_sha, seed=seed, passed=verdict.passed, correctness=verdict,
                    performance=perf.get(impl) if was_timed else None, measurement=line, round_p50_us=p50s,
                    telemetry_before=before, telemetry_after=after, flags=telemetry_flags(before, after), **metrics,
                )
            )
    if "torch_sdpa" in timed_keys:
        line, p50s = samples.representative("torch_sdpa")
        records.append(ArchivedRecord(
            suite="sdpa", impl="torch_sdpa", kernel="torch_sdpa", config=f"{shape_name}/seed{timed_seed}",
            device=dev.kind, git_sha=git_sha, seed=timed_seed, passed=True,
            correctness=Verdict(status="skip", reasons=["peer: timed only"]), performance=None, measurement=line,
            round_p50_us=p50s, telemetry_before=before, telemetry_after=after, flags=telemetry_flags(before, after),
        ))
    failures = samples.peer_failures if samples is not None else {}
    return records, [Skip(suite="sdpa", impl=impl, reason=f"{shape_name}: {why}") for impl, why in failures.items()]


def run(opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str) -> SuiteResult:
    result = SuiteResult()
    have_torch = importlib.util.find_spec("torch") is not None
    if not have_torch:
        result.skipped.append(Skip(suite="sdpa", impl="torch_sdpa", reason="torch is not installed on this host"))
    for shape_name, shape in opts.shapes:
        records, skipped = _shape(opts, exe_dir, dev, gates, git_sha, have_torch, shape_name, shape)
        result.records += records
        result.skipped += skipped
    return result
