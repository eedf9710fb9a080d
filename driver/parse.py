"""Parse: the one parser for every kernel executable's output.

Each stdout line is one JSON object validated against its record model; NaN,
infinity, missing or extra fields, and truncated lines are all rejected.

A timing line (AllreduceLine, SdpaLine) carries its executable's raw samples (`samples_us`) and no statistic:
`with_statistics` computes p50, p90, min, mean (SDPA: std) and what follows from the p50 (algbw and busbw, TF/s)
with driver/stats.py, the one estimator for ours and every peer, and names it (`estimator`, `samples`). A line
that brings its own statistics next to its samples is refused: no executable's estimate reaches a record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from driver import stats
from driver.config import AttnCase
from driver.errors import KernelFailed
from driver.launch import launch
from driver.records import AllreduceLine, SdpaLine

M = TypeVar("M", bound=BaseModel)


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


# What the driver computes from a timing line's samples: never taken from the executable.
DRIVER_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    AllreduceLine: ("p50_us", "p90_us", "min_us", "mean_us", "algbw_gbps", "busbw_gbps", "estimator", "samples"),
    SdpaLine: ("p50_us", "p90_us", "mean_us", "std_us", "min_us", "tflops", "estimator", "samples"),
}


def with_statistics(data: dict, model: type[BaseModel]) -> dict:
    """A timing line's fields with the driver's statistics of its `samples_us` (driver/stats.py) and what follows
    from its p50. A line without samples (an older capture, null or absent) is returned as it is; ValueError for
    one that brings its own statistics, or samples that are not a list of finite non-negative times."""
    computed = DRIVER_FIELDS.get(model)
    if computed is None or data.get("samples_us") is None:  # an older line (or its record, dumped): as it is
        return data
    own = [k for k in computed if k in data]
    if own:
        raise ValueError(f"the line brings its own {', '.join(own)}: the driver computes them from samples_us "
                         "(rebuild the executables: python -m driver build)")
    s = stats.summarize(stats.check_samples(data["samples_us"]))
    out = {**data, "p50_us": s.p50_us, "p90_us": s.p90_us, "min_us": s.min_us, "mean_us": s.mean_us,
           "estimator": stats.ESTIMATOR, "samples": s.samples}
    if model is AllreduceLine:
        nbytes, ngpus = data.get("bytes"), data.get("ngpus")
        if isinstance(nbytes, int) and isinstance(ngpus, int) and ngpus >= 1:  # else validation names them
            algbw = nbytes / (s.p50_us * 1e-6) / 1e9 if s.p50_us > 0 else 0.0
            out |= {"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (ngpus - 1) / ngpus}
    else:
        case = line_case(data)
        flops = float(case.flops()) if case else 0.0  # else validation names what is wrong with the shapes
        out |= {"std_us": s.std_us, "tflops": flops / (s.p50_us * 1e-6) / 1e12 if s.p50_us > 0 else 0.0}
    return out


def _dims(value: object) -> tuple[int, int, int, int] | None:
    if isinstance(value, list) and len(value) == 4 and all(isinstance(x, int) and not isinstance(x, bool)
                                                           for x in value):
        return tuple(value)  # type: ignore[return-value]
    return None


def line_case(data: dict) -> AttnCase | None:
    """The case an SDPA line says it ran: q_shape, kv_shape and causal (runners and peers since 2026-11-28); a
    line before them names only `shape`, the square case. Its TF/s counts the unmasked work (AttnCase.flops: 4 B
    Hq D times the keys each query row sees). None where the shapes are malformed."""
    q = _dims(data["q_shape"] if data.get("q_shape") is not None else data.get("shape"))
    kv = _dims(data["kv_shape"]) if data.get("kv_shape") is not None else q
    causal = data.get("causal", False)
    if q is None or kv is None or not isinstance(causal, bool) or (causal and q[2] > kv[2]):
        return None
    return AttnCase(q, kv, causal)


def parse_lines(stdout: str, model: type[M], *, what: str) -> list[M]:
    records: list[M] = []
    for lineno, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line, parse_constant=_reject_constant)
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            records.append(model.model_validate(with_statistics(data, model)))
        except (ValueError, TypeError, ValidationError, RecursionError) as exc:  # ([[[...: too deep)
            first = str(exc).splitlines()
            brief = "; ".join(s.strip() for s in first[:3])
            raise KernelFailed(f"malformed output from {what}, line {lineno}: {brief}", f"line: {line[:200]!r}") from None
    if not records:
        raise KernelFailed(f"{what} printed no result line")
    return records


def launch_lines(cmd: Sequence[str], model: type[M], *, what: str, timeout_s: float) -> list[M]:
    """Run a kernel executable or peer (the one launcher) and read its result lines (the one parser)."""
    return parse_lines(launch(cmd, what=what, timeout_s=timeout_s).stdout, model, what=what)
