"""Parse: the one parser for every kernel executable's output.

Each stdout line is one JSON object validated against its record model; NaN,
infinity, missing or extra fields, and truncated lines are all rejected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from driver.errors import KernelFailed
from driver.launch import launch

M = TypeVar("M", bound=BaseModel)


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def parse_lines(stdout: str, model: type[M], *, what: str) -> list[M]:
    records: list[M] = []
    for lineno, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line, parse_constant=_reject_constant)
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            records.append(model.model_validate(data))
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
