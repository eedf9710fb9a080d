"""The typed, frozen options every GPU command runs from, parsed once from the CLI."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from driver.config import BENCH_SDPA_SEEDS, BENCH_SDPA_SHAPES, DEFAULT_TIMING, SDPA_SHAPES
from driver.records import Record, TimingMode


class RunOptions(Record):
    suites: tuple[str, ...] = ("allreduce", "sdpa")
    sizes_bytes: tuple[int, ...] = (256 << 10, 16 << 20)
    dtypes: tuple[str, ...] = ("float32",)
    ngpus: tuple[int, ...] | None = None  # None: every supported count the host has
    shapes: tuple[tuple[str, tuple[int, int, int, int]], ...] = tuple((n, SDPA_SHAPES[n]) for n in BENCH_SDPA_SHAPES)
    seeds: tuple[int, ...] = BENCH_SDPA_SEEDS
    iters: int = Field(default=100, gt=0)
    warmup: int = Field(default=10, ge=0)
    batch: int = Field(default=10, gt=0)
    timing: tuple[TimingMode, ...] | None = None  # None: each suite's default (config.DEFAULT_TIMING)
    kernel: str = "auto"
    arch: str | None = None  # None: the arch of GPU 0
    rounds: int = Field(default=3, gt=0)
    timeout_s: float = Field(default=300.0, gt=0)
    thresholds: Path | None = None
    build: bool = True
    sizes_given: bool = False  # --sizes on the command line (the sweep has its own default)
    write_windows: bool = False  # sweep --write: the measured windows go to kernels_mojo/dispatch_windows.json
    stress_parts: tuple[str, ...] = ("allreduce", "sdpa", "sanitizers", "profile")
    soak_minutes: float = Field(default=0.0, ge=0)  # stress: soak each config at least this long (besides iters)

    def modes(self, suite: str) -> tuple[str, ...]:
        """The timing modes `suite` runs, in order: --timing if given, else the suite's default."""
        return self.timing or DEFAULT_TIMING.get(suite, ("cold",))
