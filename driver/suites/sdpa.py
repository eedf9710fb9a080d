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
from driver.suites.common import Samples, SuiteResult, interleaved, ratio_verdict, telemetry_flags
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


def _shape(
    opts: RunOptions, exe_dir: Path, dev: DeviceInfo, gates: Thresholds, git_sha: str, have_torch: bool,
    shape_name: str, shape: tuple[int, int, int, int],
) -> tuple[list[ArchivedRecord], list[Skip]]:
    """Every seed checked against the reference; the first seed also timed in interleaved rounds."""
    before = device.probe().gpus[:1]
    checks: dict[tuple[str, int], list[dict[str, float]]] = {}
    per_seed: dict[int, Samples[SdpaLine]] = {}
    for seed in opts.seeds:
        first = seed == opts.seeds[0]
        with tempfile.TemporaryDirectory(prefix="sdpa-") as tmp:
            folder = Path(tmp)
            files, expected = prepare_case(folder, shape, seed)
            outs = {impl: folder / f"out_{impl}.npy" for impl in VARIANTS}
            cmds = {
                impl: [str(exe_dir / exe), *file_args(files), "--out", str(outs[impl]), *timing_args(opts)]
                for impl, exe in VARIANTS.items()
            }
            if have_torch and first:
                cmds["torch_sdpa"] = [sys.executable, "-m", "driver.peers.torch_sdpa", *file_args(files), *timing_args(opts)]

            def check(impl: str, _line: SdpaLine) -> None:
                if impl in VARIANTS:
                    checks.setdefault((impl, seed), []).append(error_metrics(np.load(outs[impl]), expected, gates.sdpa))

            per_seed[seed] = interleaved(
                cmds, SdpaLine, rounds=opts.rounds if first else 1, min_rounds=min(2, opts.rounds) if first else 1,
                target_spread=gates.noise.target_spread, timeout_s=opts.timeout_s, key=lambda ln: ln.impl,
                on_line=check, label=f"sdpa {shape_name} seed {seed}", peers=frozenset({"torch_sdpa"}),
            )
    after = device.probe().gpus[:1]
    timed = {impl: per_seed[opts.seeds[0]].representative(impl)[0] for impl in per_seed[opts.seeds[0]].by_key}
    perf = _performance(shape_name, timed, gates)
    records = []
    for seed, samples in per_seed.items():
        for impl in samples.by_key:
            line, p50s = samples.representative(impl)
            if impl in VARIANTS:
                runs = checks[(impl, seed)]
                metrics = {k: max(m[k] for m in runs) for k in runs[0]}
                verdict = correctness(metrics, gates.sdpa)
                if line.smem_bytes > gates.build.max_smem_bytes_per_block:  # dynamic smem: only the runner knows
                    verdict = Verdict(status="fail", reasons=[*verdict.reasons, f"{line.smem_bytes} B shared memory "
                                      f"per block > {gates.build.max_smem_bytes_per_block}"])
            else:
                metrics, verdict = {}, Verdict(status="skip", reasons=["peer: timed only"])
            records.append(
                ArchivedRecord(
                    suite="sdpa", impl=impl, kernel=VARIANTS.get(impl, impl), config=f"{shape_name}/seed{seed}",
                    device=dev.kind, git_sha=git_sha, seed=seed, passed=verdict.passed or impl not in VARIANTS,
                    correctness=verdict, performance=perf.get(impl) if seed == opts.seeds[0] else None,
                    measurement=line, round_p50_us=p50s, telemetry_before=before, telemetry_after=after,
                    flags=telemetry_flags(before, after), **metrics,
                )
            )
    failures = per_seed[opts.seeds[0]].peer_failures
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
