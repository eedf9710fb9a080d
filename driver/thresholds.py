"""Gates: the one versioned thresholds file, validated before anything runs."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveFloat, ValidationError

from driver import paths
from driver.errors import ConfigError
from driver.records import Record, TimingMode


class KernelGates(Record):
    """Resource gates for one kernel family, in place of [build]'s defaults.

    `pattern` picks its PTX entries (ptxas report); `kernel` is the name its runner prints in the
    JSON line, whose shared memory per block (dynamic + static: only the runner knows) is gated too.
    """

    kernel: str
    pattern: str
    max_registers_per_thread: int = Field(gt=0)
    max_smem_bytes_per_block: int = Field(gt=0)
    max_spill_bytes: int = Field(ge=0)


class BuildGates(Record):
    max_registers_per_thread: int = Field(gt=0)
    max_smem_bytes_per_block: int = Field(gt=0)
    max_spill_bytes: int = Field(ge=0)
    kernels: list[KernelGates] = Field(default_factory=list)

    def for_entry(self, name: str) -> KernelGates | BuildGates:
        """The gates for one PTX entry: its family's, else the defaults."""
        return next((k for k in self.kernels if k.pattern in name), self)

    def smem_limit(self, kernel: str | None) -> int:
        """Shared memory per block allowed for a runner's `kernel` (the defaults for any other)."""
        return next((k.max_smem_bytes_per_block for k in self.kernels if k.kernel == kernel),
                    self.max_smem_bytes_per_block)


class AllreduceSpeedup(Record):
    peer: Literal["upstream", "nccl"]
    timing: TimingMode  # the mode both sides are timed in; a run that did not time it fails the gate
    bytes: int = Field(ge=0)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    ngpus: int = 2
    min_ratio: PositiveFloat


class AllreduceGates(Record):
    max_wrong: int = Field(ge=0)
    speedup: list[AllreduceSpeedup] = Field(default_factory=list)


class SdpaSpeedup(Record):
    impl: Literal["baseline", "cpasync", "best"]
    peer: Literal["baseline", "cpasync", "torch_sdpa", "cudnn_fp8", "flash_attn"]
    timing: TimingMode  # the mode both sides are timed in; a run that did not time it fails the gate
    shape: str
    min_ratio: PositiveFloat


class SdpaGates(Record):
    max_abs_err: PositiveFloat
    bad_err: PositiveFloat
    max_bad_frac: float = Field(ge=0, le=1)
    speedup: list[SdpaSpeedup] = Field(default_factory=list)


class NoiseModel(Record):
    min_rel_noise: float = Field(ge=0, lt=1)
    target_spread: float = Field(gt=0, lt=1)


class Thresholds(Record):
    version: int
    build: BuildGates
    allreduce: AllreduceGates
    sdpa: SdpaGates
    noise: NoiseModel


def load(path: Path | None = None) -> Thresholds:
    path = path or paths.thresholds_file()
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read thresholds file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # a binary file, or text in another encoding
        raise ConfigError(f"thresholds file {path} is not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r})", "TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"thresholds file {path} is not valid TOML: {exc}") from None
    try:
        return Thresholds.model_validate(data)
    except ValidationError as exc:
        # A misspelt field shows up twice (unknown + missing): name the unknown one.
        errs = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        text = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errs)
        raise ConfigError(f"thresholds file {path}: {text}") from None
