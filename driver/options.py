"""The typed, frozen options every GPU command runs from, parsed once from the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from driver.config import (
    BENCH_SDPA_DISTRIBUTIONS,
    BENCH_SDPA_SEEDS,
    BENCH_SDPA_SHAPES,
    DEFAULT_PRECISIONS,
    DEFAULT_TIMING,
    SDPA_CASES,
    AttnCase,
)
from driver.records import Precision, Record, TimingMode


class RunOptions(Record):
    suites: tuple[str, ...] = ("allreduce", "sdpa")
    sizes_bytes: tuple[int, ...] = (256 << 10, 16 << 20)
    dtypes: tuple[str, ...] = ("float32",)
    ngpus: tuple[int, ...] | None = None  # None: every supported count the host has
    # SDPA cases (--shapes): the name runs call each by, and the case (config.AttnCase). A (B, H, S, D) given in
    # place of a case is its square case.
    shapes: tuple[tuple[str, AttnCase], ...] = tuple((n, SDPA_CASES[n]) for n in BENCH_SDPA_SHAPES)
    # stress: the SDPA cases every sanitizer runs (--sanitizer-shapes); None: config.SANITIZED_SHAPES
    sanitizer_shapes: tuple[tuple[str, AttnCase], ...] | None = None
    seeds: tuple[int, ...] = BENCH_SDPA_SEEDS
    precisions: tuple[Precision, ...] = DEFAULT_PRECISIONS  # SDPA precision tiers (--precision)
    distributions: tuple[str, ...] = BENCH_SDPA_DISTRIBUTIONS  # SDPA input distributions checked (--distributions)
    q_terms: Literal["auto", "1", "2"] = "auto"  # the fp8 tier's E4M3 terms of Q (--q-terms; config.Q_TERMS)
    iters: int = Field(default=100, gt=0)
    warmup: int = Field(default=10, ge=0)
    batch: int = Field(default=10, gt=0)
    timing: tuple[TimingMode, ...] | None = None  # None: each suite's default (config.DEFAULT_TIMING)
    kernel: str = "auto"
    # bench --peers/--variants: names among driver/registry.py's (None: all); a family none of whose names is
    # given runs all of its own (registry.select). What is left out is a Skip: its gates are listed, not measured.
    peers: tuple[str, ...] | None = None
    variants: tuple[str, ...] | None = None
    arch: str | None = None  # None: the arch of GPU 0
    rounds: int = Field(default=3, gt=0)
    timeout_s: float = Field(default=300.0, gt=0)
    thresholds: Path | None = None
    build: bool = True
    workers: bool = True  # False (--no-workers): one process per case, as before long-lived workers
    sizes_given: bool = False  # --sizes on the command line (the sweep has its own default)
    write_windows: bool = False  # sweep --write: the measured windows go to kernels_mojo/dispatch_windows.json
    stress_parts: tuple[str, ...] = ("allreduce", "sdpa", "sanitizers", "profile")
    soak_minutes: float = Field(default=0.0, ge=0)  # stress: soak each config at least this long (besides iters)
    strict: bool = False  # --strict: a speed gate marked known that passed (XPASS) fails the run (exit 8)

    @field_validator("shapes", "sanitizer_shapes", mode="before")
    @classmethod
    def _cases(cls, value: object) -> object:
        if isinstance(value, tuple | list):
            return tuple((item[0], AttnCase.of(item[1])) if isinstance(item, tuple | list) and len(item) == 2
                         else item for item in value)
        return value

    def modes(self, suite: str) -> tuple[str, ...]:
        """The timing modes `suite` runs, in order: --timing if given, else the suite's default."""
        return self.timing or DEFAULT_TIMING.get(suite, ("cold",))


class SubmitOptions(Record):
    """`python -m driver submit`: the Slurm job array to make, parsed once from the CLI."""

    suites: tuple[Literal["bench", "stress"], ...]
    partitions: tuple[str, ...]
    gpus: tuple[int, ...] | None = None  # None: every GPU of a node of each partition's GPU type
    time_limit_s: int = Field(gt=0)  # each task's Slurm time limit (sbatch --time, whole minutes)
    shared_dir: Path  # a folder the nodes see at the same path: bundle, job script, logs, run folders
    pythons: tuple[str, ...] = ("3.11", "3.12", "3.13")  # the nodes' python3 versions the bundle carries
    node_python: str = "python3"
    sbatch_args: tuple[str, ...] = ()  # site options passed to sbatch as they are (--account, --qos, ...)
    driver_args: tuple[str, ...] = ()  # bench/stress arguments every task runs with
    poll_s: float = Field(default=10.0, gt=0)
    watch: bool = True
