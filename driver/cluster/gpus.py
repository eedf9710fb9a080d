"""GPU type -> the arch the bundle is built for: the one table the cluster run needs.

Slurm names a partition's GPUs by their GRES type (`Gres=gpu:h100:8` in slurm.conf, or
`gpu:nvidia_h100_80gb_hbm3:8` where the type was auto-detected through NVML). A type
matches an entry when the entry is the whole type or one of its `_`/`-`-separated words;
anything else is refused by name, before anything is built or submitted.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from driver.config import SUPPORTED_ARCHS
from driver.errors import ConfigError
from driver.records import Record


class GpuKind(Record):
    gpu_type: str = Field(pattern=r"^[a-z0-9]+$")
    arch: Literal[SUPPORTED_ARCHS]  # type: ignore[valid-type]


# Only GPUs of an arch the kernels are built for (config.SUPPORTED_ARCHS); sm_86 parts (A10, A40) are not.
_TABLE = {
    "h100": "sm_90", "h200": "sm_90", "gh200": "sm_90", "h800": "sm_90", "h20": "sm_90",
    "l40s": "sm_89", "l40": "sm_89", "l4": "sm_89",
    "a100": "sm_80", "a800": "sm_80", "a30": "sm_80",
}
GPU_KINDS: dict[str, GpuKind] = {t: GpuKind(gpu_type=t, arch=a) for t, a in _TABLE.items()}


def arch_of(gpu_type: str) -> str:
    """`h100` or `nvidia_h100_80gb_hbm3` -> `sm_90`; ConfigError for a type not in the table."""
    name = gpu_type.strip().lower()
    if name in GPU_KINDS:
        return GPU_KINDS[name].arch
    hits = {w for w in re.split(r"[_\-\s]+", name) if w in GPU_KINDS}
    if len(hits) == 1:
        return GPU_KINDS[hits.pop()].arch
    known = ", ".join(GPU_KINDS)
    if hits:
        raise ConfigError(f"GPU type {gpu_type!r} names more than one known GPU ({', '.join(sorted(hits))})",
                          f"known types: {known}")
    raise ConfigError(f"unknown GPU type {gpu_type!r}",
                      f"known types: {known}; add it to driver/cluster/gpus.py with its sm arch")
