"""Verify: one error-metrics function per suite, used by the pipeline and the tests alike.

Each takes what a kernel produced and what was asked of it, checks that the two describe
the same thing (shape and dtype for an SDPA output; dtype, GPU count and element count for
an allreduce line) and returns typed error metrics. A mismatch is malformed output
(KernelFailed), never a number: a wrong-shaped array must not broadcast into a small error.
What the metrics mean for pass or fail is decided in driver/gates.py.
"""

from __future__ import annotations

import math

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
    # The reference's rms and largest magnitude (the scales rel_l2 and max_abs_rel divide by): the tiers' bounds add
    # the fp16 output's absolute rounding floor relative to them (thresholds.SdpaBound.at_scale)
    ref_rms: NonNegativeFloat | None = None
    ref_amax: NonNegativeFloat | None = None

    @classmethod
    def worst(cls, runs: list[SdpaErrors]) -> SdpaErrors:
        """The worst of several checked runs of one config (a non-finite run dominates)."""
        def top(values: list[float | None]) -> float | None:
            return None if None in values else max(values)  # type: ignore[type-var]

        def low(values: list[float | None]) -> float | None:  # the smallest scale: the loosest bound of the runs
            return None if None in values else min(values)  # type: ignore[type-var]

        return cls(max_abs_err=top([r.max_abs_err for r in runs]), bad_elements=max(r.bad_elements for r in runs),
                   bad_frac=max(r.bad_frac for r in runs),
                   rel_l2=top([r.rel_l2 for r in runs]), max_abs_rel=top([r.max_abs_rel for r in runs]),
                   nonfinite=max(r.nonfinite for r in runs),
                   elements=max(r.elements for r in runs),
                   ref_rms=low([r.ref_rms for r in runs]), ref_amax=low([r.ref_amax for r in runs]))


# Elements per block of the SDPA error pass: the float64 temporaries of one block (256 KiB each) stay in a core's L2,
# so the pass reads the output and the reference once from memory instead of a dozen times; at (4,32,4096,64) it
# took 0.06-0.3 s against 0.8-2.1 s for whole-array numpy on one core (2026-11-28, a 2-core EPYC VM, loaded).
ERROR_BLOCK_ELEMS = 1 << 15


def _blocks(n: int) -> range:
    return range(0, n, ERROR_BLOCK_ELEMS)


def abs_max(x: np.ndarray) -> float:
    """max |x| (0.0 for an empty array), block by block: no array-sized temporary."""
    flat = np.asarray(x).reshape(-1)
    return max((float(np.max(np.abs(flat[s:s + ERROR_BLOCK_ELEMS]))) for s in _blocks(flat.size)), default=0.0)


def sdpa_errors(out: np.ndarray, expected: np.ndarray, *, bad_err: float, what: str = "SDPA output") -> SdpaErrors:
    """Error of an SDPA output (float16, [B, H, S, D]) against the float64 reference of the same shape.

    One pass over both arrays in blocks of ERROR_BLOCK_ELEMS: every count and maximum is exact whatever the
    blocks; the two norms of rel_l2 are square roots of block sums of squares added exactly (math.fsum), which
    differs from a whole-array norm by float64 rounding only (a few ulps) and is the same on every run."""
    out = np.asarray(out)
    expected = np.asarray(expected, dtype=np.float64)
    if out.dtype != SDPA_OUT_DTYPE:
        raise KernelFailed(f"{what} is {out.dtype}, not {np.dtype(SDPA_OUT_DTYPE).name}")
    if out.shape != expected.shape:
        raise KernelFailed(f"{what} has shape {out.shape}, the reference {expected.shape}")
    got_flat, ref_flat = out.reshape(-1), expected.reshape(-1)
    nonfinite = bad = 0
    worst, amax = [], []
    err_sq, ref_sq = [], []
    for s in _blocks(got_flat.size):
        ref = ref_flat[s:s + ERROR_BLOCK_ELEMS]
        got = got_flat[s:s + ERROR_BLOCK_ELEMS]
        diff = got.astype(np.float64)
        diff -= ref
        err_sq.append(float(np.einsum("i,i->", diff, diff)))  # not BLAS: no threads per block
        ref_sq.append(float(np.einsum("i,i->", ref, ref)))
        err = np.abs(diff, out=diff)
        top = float(err.max())
        if not np.isfinite(top):  # a NaN or infinite output element: it counts as bad, with an infinite error
            finite = np.isfinite(got)
            nonfinite += int(finite.size - np.count_nonzero(finite))
            err = np.where(finite, err, np.inf)
            top = float(err.max())
        bad += int(np.count_nonzero(err > bad_err))
        worst.append(top)
        amax.append(float(np.max(np.abs(ref))))
    size = got_flat.size
    bad_frac = bad / size if size else 0.0
    if nonfinite:
        return SdpaErrors(max_abs_err=None, bad_elements=bad, bad_frac=bad_frac, rel_l2=None, nonfinite=nonfinite,
                          elements=size)
    denom = math.sqrt(math.fsum(ref_sq))
    num = math.sqrt(math.fsum(err_sq))
    rel = num / denom if denom > 0 else (0.0 if num == 0 else None)
    top = float(np.max(worst)) if worst else 0.0  # np.max: a NaN (of a NaN reference) stays NaN, as it did
    ref_amax = float(np.max(amax)) if amax else 0.0
    max_rel = top / ref_amax if ref_amax > 0 else (0.0 if top == 0 else None)
    return SdpaErrors(max_abs_err=top, bad_elements=bad, bad_frac=bad_frac, rel_l2=rel, max_abs_rel=max_rel,
                      nonfinite=0, elements=size, ref_rms=denom / math.sqrt(size) if size else 0.0, ref_amax=ref_amax)


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
