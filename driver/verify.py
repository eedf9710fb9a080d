"""Verify: one error-metrics function per suite, used by the pipeline and the tests alike.

Each takes what a kernel produced and what was asked of it, checks that the two describe
the same thing (shape and dtype for an SDPA output; dtype, GPU count and element count for
an allreduce line) and returns typed error metrics. A mismatch is malformed output
(KernelFailed), never a number: a wrong-shaped array must not broadcast into a small error.
What the metrics mean for pass or fail is decided in driver/gates.py.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt

from driver.config import ELEM_BYTES
from driver.errors import KernelFailed
from driver.records import AllreduceLine, Record

SDPA_OUT_DTYPE = np.float16  # what the runners write (and the torch peer computes in)


class SdpaErrors(Record):
    """One SDPA output against the float64 reference."""

    max_abs_err: NonNegativeFloat | None  # None: some output element is NaN or infinite (see nonfinite)
    bad_elements: NonNegativeInt  # elements off by more than bad_err; a non-finite element counts as bad
    bad_frac: float = Field(ge=0, le=1)  # bad_elements / elements
    rel_l2: NonNegativeFloat | None  # ||out - ref||_2 / ||ref||_2; None when any output element is non-finite
    # max|out - ref| / max|ref|: the worst element against the output's scale; None when non-finite (or ref = 0)
    max_abs_rel: NonNegativeFloat | None = None
    nonfinite: NonNegativeInt  # output elements that are NaN or infinite
    elements: NonNegativeInt

    @classmethod
    def worst(cls, runs: list[SdpaErrors]) -> SdpaErrors:
        """The worst of several checked runs of one config (a non-finite run dominates)."""
        def top(values: list[float | None]) -> float | None:
            return None if None in values else max(values)  # type: ignore[type-var]

        return cls(max_abs_err=top([r.max_abs_err for r in runs]), bad_elements=max(r.bad_elements for r in runs),
                   bad_frac=max(r.bad_frac for r in runs),
                   rel_l2=top([r.rel_l2 for r in runs]), max_abs_rel=top([r.max_abs_rel for r in runs]),
                   nonfinite=max(r.nonfinite for r in runs),
                   elements=max(r.elements for r in runs))


def sdpa_errors(out: np.ndarray, expected: np.ndarray, *, bad_err: float, what: str = "SDPA output") -> SdpaErrors:
    """Error of an SDPA output (float16, [B, H, S, D]) against the float64 reference of the same shape."""
    out = np.asarray(out)
    expected = np.asarray(expected, dtype=np.float64)
    if out.dtype != SDPA_OUT_DTYPE:
        raise KernelFailed(f"{what} is {out.dtype}, not {np.dtype(SDPA_OUT_DTYPE).name}")
    if out.shape != expected.shape:
        raise KernelFailed(f"{what} has shape {out.shape}, the reference {expected.shape}")
    got = out.astype(np.float64)
    finite = np.isfinite(got)
    nonfinite = int(got.size - np.count_nonzero(finite))
    err = np.where(finite, np.abs(got - expected), np.inf)
    bad = int(np.count_nonzero(err > bad_err))
    bad_frac = bad / err.size if err.size else 0.0
    if nonfinite:
        return SdpaErrors(max_abs_err=None, bad_elements=bad, bad_frac=bad_frac, rel_l2=None, nonfinite=nonfinite,
                          elements=got.size)
    denom = float(np.linalg.norm(expected))
    num = float(np.linalg.norm(got - expected))
    rel = num / denom if denom > 0 else (0.0 if num == 0 else None)
    worst = float(err.max()) if err.size else 0.0
    amax = float(np.abs(expected).max()) if expected.size else 0.0
    max_rel = worst / amax if amax > 0 else (0.0 if worst == 0 else None)
    return SdpaErrors(max_abs_err=worst, bad_elements=bad, bad_frac=bad_frac, rel_l2=rel, max_abs_rel=max_rel,
                      nonfinite=0, elements=got.size)


class AllreduceErrors(Record):
    """What the executable's own element-by-element check found, over every round of one config."""

    wrong: NonNegativeInt  # wrong elements over every line
    max_abs_err: NonNegativeFloat | None  # None: some round saw a NaN or infinite output
    nonfinite: bool  # some round saw a NaN or infinite output
    checked: bool  # every round (with elements) was checked


def allreduce_errors(lines: list[AllreduceLine], *, dtype: str, ngpus: int,
                     what: str = "allreduce") -> AllreduceErrors:
    """The check results of `lines` (one config's rounds), after making sure each line reports
    the dtype and GPU count asked for and an element count that fills its bytes."""
    for ln in lines:
        if ln.dtype != dtype or ln.ngpus != ngpus:
            raise KernelFailed(f"{what}: the executable reports {ln.dtype} x{ln.ngpus}, not {dtype} x{ngpus}")
        if ln.elements * ELEM_BYTES[ln.dtype] != ln.bytes:
            raise KernelFailed(f"{what}: {ln.elements} {ln.dtype} elements do not make {ln.bytes} bytes")
    errs = [ln.max_abs_err for ln in lines]
    return AllreduceErrors(wrong=sum(ln.wrong for ln in lines),
                           max_abs_err=None if None in errs else max(errs, default=0.0),  # type: ignore[type-var]
                           nonfinite=None in errs,
                           checked=all(ln.checked or ln.elements == 0 for ln in lines))
