"""Where a run's wall time went: seconds per phase (build, each worker's start-up, checks, timing,
reference, report), archived as `results.json.gz`'s `phases_s` beside `wall_s`.

Phases are summed per name over the run. `timed(name)` measures a block on the critical path;
`add(name, s)` records time measured elsewhere (a worker's start-up, a reference computed on a
background thread: such time overlaps the rest and is not part of the critical path, which the
name says, e.g. "reference (background)")."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_phases: dict[str, float] = {}
_t0 = time.perf_counter()


def reset() -> None:
    global _t0
    with _lock:
        _phases.clear()
        _t0 = time.perf_counter()


def add(name: str, seconds: float) -> None:
    with _lock:
        _phases[name] = _phases.get(name, 0.0) + max(seconds, 0.0)


@contextmanager
def timed(name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - start)


def wall_s() -> float:
    return time.perf_counter() - _t0


def snapshot() -> dict[str, float]:
    """Every phase so far, rounded to milliseconds, in the order first seen."""
    with _lock:
        return {k: round(v, 3) for k, v in _phases.items()}


def one_line(wall: float, phases_s: dict[str, float]) -> str:
    """`wall 93.2 s: build 2.1, startup sdpa_fp8_baseline 0.4, ...` (COMPARE.md, the progress log)."""
    parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(phases_s.items(), key=lambda kv: -kv[1]))
    return f"wall {wall:.1f} s" + (f": {parts}" if parts else "")
