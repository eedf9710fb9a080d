"""The one estimator: every timing statistic the driver reports, from an executable's raw samples.

Every runner and peer prints its raw samples (`samples_us`: cold, one per launch; hot, one per batch, the batch's
time divided by its launches) and no statistic of its own; `parse.parse_lines` summarizes them here, so ours and
every peer are summarized by the same function (docs/TIMING.md, "One estimator").

The definition (`ESTIMATOR`, numpy's default "linear" method, Hyndman and Fan's type 7): over the n samples sorted,
x_0 <= ... <= x_{n-1}, the q-th percentile is x_lo + (x_hi - x_lo) * f at position p = q / 100 * (n - 1),
lo = floor(p), hi = min(lo + 1, n - 1), f = p - lo. For an even count the p50 is the mean of the two middle
samples: it favours neither the lower nor the upper one, where the nearest-rank p50 (lower median) and
`sorted[n // 2]` (upper median) each lean one order statistic one way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

# The name every timing record carries in `estimator` (records.AllreduceLine, records.SdpaLine).
Estimator = Literal["numpy-linear"]
ESTIMATOR: Estimator = "numpy-linear"
_METHOD = "linear"  # np.percentile's method for ESTIMATOR


class Summary(NamedTuple):
    """What the driver reports of one sample set (microseconds; all 0 for no samples)."""

    p50_us: float
    p90_us: float
    min_us: float
    mean_us: float
    std_us: float  # population standard deviation
    spread: float  # (p90 - p50) / p50: how far the slow tail reaches past the median (0 when p50 is 0)
    samples: int


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values` by ESTIMATOR; 0 for none."""
    if not len(values):
        return 0.0
    import numpy as np  # here, not at import: records.py imports this module on every path

    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method=_METHOD))


def summarize(samples_us: Sequence[float]) -> Summary:
    """p50, p90, min, mean, std and spread of one executable's raw samples, by ESTIMATOR."""
    if not len(samples_us):
        return Summary(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    import numpy as np

    t = np.asarray(samples_us, dtype=np.float64)
    p50, p90 = (float(x) for x in np.percentile(t, [50, 90], method=_METHOD))
    return Summary(p50_us=p50, p90_us=p90, min_us=float(t.min()), mean_us=float(t.mean()), std_us=float(t.std()),
                   spread=(p90 - p50) / p50 if p50 > 0 else 0.0, samples=len(t))


def spread(p50s: Sequence[float]) -> float:
    """(max - min) / p50 of several rounds' p50s (the interleaved rounds' stop rule); 0 with fewer than two."""
    if len(p50s) < 2:
        return 0.0
    mid = percentile(p50s, 50)
    return (max(p50s) - min(p50s)) / mid if mid > 0 else 0.0


def check_samples(value: object) -> list[float]:
    """An executable's `samples_us` as a list of finite non-negative numbers, or ValueError saying what is wrong."""
    if not isinstance(value, list):
        raise ValueError("samples_us is not a list")  # noqa: TRY004 (the line parser turns ValueError into malformed output)
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0:
            raise ValueError(f"samples_us holds {x!r}, not a finite non-negative time")
    return [float(x) for x in value]
