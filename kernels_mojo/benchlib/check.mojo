# Input generation and output checking for allreduce_bench and upstream_bench.
#
# Inputs: per-rank seeded 64-bit LCG mapped to [-1, 1) (24 random bits), then
# rounded to the element type; different on every rank, never constant.
# Reference per element: the float64 sum s of the rounded inputs x_r, and
# a_sum = sum_r |x_r| next to it (both exact: at most 8 multiples of 2^-23
# below 1 in magnitude need at most 26 significant bits).
#
# Three separate properties (docs/ALLREDUCE.md has the derivation):
#   bound:            |out - s| <= gamma_{n-1} * a_sum, gamma_k = k*u / (1 - k*u),
#                     u the unit roundoff of the element type (fp32 2^-24,
#                     bf16 2^-8, fp16 2^-11), n the number of ranks. Any
#                     summation order with a rounding to the element type at
#                     every step stays inside it (Higham, Accuracy and
#                     Stability of Numerical Algorithms, 2nd ed., section 4.2),
#                     and so does a float32 accumulation rounded once at the
#                     end (n >= 2). NaN and infinity are always out of bound.
#   rank agreement:   every rank's output has rank 0's bits (rank r vs rank 0
#                     for every r: by transitivity, every pair of ranks agrees).
#   same bits every run (ours): rank 0's output of every launch on the same
#                     inputs has the first checked launch's bits.

from std.math import isnan, isinf
from std.utils.numerics import inf
from max.algorithm import parallelize


comptime ElemHostPtr[dtype: DType] = Pointer[Scalar[dtype], MutAnyOrigin]
comptime RefPtr = Pointer[Float64, MutAnyOrigin]


def _rank_state(seed: Int, rank: Int) -> UInt64:
    var s = UInt64(seed) * 0x9E3779B97F4A7C15 + UInt64(rank + 1) * 0xBF58476D1CE4E5B9
    s ^= s >> 31
    return s


# Host work on every element (fill, check, run-to-run compare) runs in chunks of this many elements on all
# CPU cores (a 256 MiB bfloat16 check on one core took seconds per launch); every result is the same as one
# pass in element order: chunks are disjoint, and their findings are folded in chunk order.
comptime CHUNK_ELEMENTS = 1 << 18

comptime _LCG_MUL: UInt64 = 6364136223846793005
comptime _LCG_ADD: UInt64 = 1442695040888963407


def lcg_jump(state: UInt64, steps: Int) -> UInt64:
    """The LCG's state after `steps` more steps, in O(log steps): the affine map x -> a*x + c composed with
    itself by squaring (mod 2^64, as the step itself)."""
    var mul: UInt64 = _LCG_MUL
    var add: UInt64 = _LCG_ADD
    var acc_mul: UInt64 = 1
    var acc_add: UInt64 = 0
    var k = steps
    while k > 0:
        if k & 1:
            acc_mul = acc_mul * mul
            acc_add = acc_add * mul + add
        add = add * mul + add
        mul = mul * mul
        k >>= 1
    return acc_mul * state + acc_add


def _chunks(num_elements: Int, chunk: Int) -> Int:
    return (num_elements + chunk - 1) // chunk


def fill_rank_inputs[
    dtype: DType
](
    host: ElemHostPtr[dtype],
    num_elements: Int,
    seed: Int,
    rank: Int,
    refs: RefPtr,
    abs_sums: RefPtr,
    accumulate_refs: Bool,
    chunk: Int = CHUNK_ELEMENTS,
):
    """Write rank `rank`'s inputs into `host`; when `accumulate_refs`, add them
    into `refs` and their magnitudes into `abs_sums` (both float64, zeroed
    before rank 0). Element i takes the LCG's (i+1)-th state whatever `chunk`."""
    var state0 = _rank_state(seed, rank)

    def fill_chunk(c: Int) {var host, var refs, var abs_sums, var state0, var chunk, var num_elements,
                            var accumulate_refs} -> None:
        var lo = c * chunk
        var hi = min(lo + chunk, num_elements)
        var state = lcg_jump(state0, lo)
        for i in range(lo, hi):
            state = state * _LCG_MUL + _LCG_ADD
            var bits = (state >> 40).cast[DType.float32]()  # 24 bits
            var x = (bits * Float32(1.0 / 8388608.0) - 1.0).cast[dtype]()
            host.unsafe_store(i, x)
            if accumulate_refs:
                var x64 = x.cast[DType.float64]()
                refs.unsafe_store(i, refs.unsafe_load(i) + x64)
                abs_sums.unsafe_store(i, abs_sums.unsafe_load(i) + abs(x64))

    parallelize(fill_chunk, _chunks(num_elements, chunk))


def unit_roundoff[dtype: DType]() -> Float64:
    """u = 2^-p for a p-bit significand: float32 2^-24, bfloat16 2^-8, float16 2^-11."""
    comptime if dtype == DType.bfloat16:
        return 1.0 / 256.0
    elif dtype == DType.float16:
        return 1.0 / 2048.0
    else:
        return 1.0 / 16777216.0


def sum_bound_factor[dtype: DType](ngpus: Int) -> Float64:
    """gamma_{n-1} = (n-1)u / (1 - (n-1)u): the bound is this times sum_r |x_r|."""
    var ku = Float64(ngpus - 1) * unit_roundoff[dtype]()
    return ku / (1.0 - ku)


struct CheckResult(Copyable, Movable):
    """What the check found, over every rank and every checked launch folded in.
    A `first_*` element index is -1 until something was found."""

    var max_abs_err: Float64
    """Largest |out - s| over all ranks (inf if any output is NaN/inf)."""
    var max_err_over_bound: Float64
    """Largest |out - s| / bound (inf where the bound is 0 and the error not)."""
    var out_of_bound: Int
    """Elements (summed over ranks and launches) outside the bound, NaN/inf included."""
    var oob_rank: Int
    var oob_element: Int
    var oob_value: Float64
    var oob_reference: Float64
    var oob_bound: Float64
    var rank_mismatch: Int
    """Elements of ranks 1..n-1 (summed over launches) whose bits differ from rank 0's."""
    var mismatch_rank: Int
    var mismatch_element: Int
    var mismatch_value: Float64
    var mismatch_rank0_value: Float64
    var runs_compared: Int
    """Launches whose rank-0 output was compared bitwise with the first checked launch's."""
    var run_to_run_mismatch: Int
    """Elements of those outputs whose bits differed from the first launch's."""

    def __init__(out self):
        self.max_abs_err = 0
        self.max_err_over_bound = 0
        self.out_of_bound = 0
        self.oob_rank = -1
        self.oob_element = -1
        self.oob_value = 0
        self.oob_reference = 0
        self.oob_bound = 0
        self.rank_mismatch = 0
        self.mismatch_rank = -1
        self.mismatch_element = -1
        self.mismatch_value = 0
        self.mismatch_rank0_value = 0
        self.runs_compared = 0
        self.run_to_run_mismatch = 0

    def wrong(self, with_run_to_run: Bool) -> Int:
        """Elements failing a property required of the impl: the bound and rank
        agreement always; same bits every run only where asked (ours)."""
        return self.out_of_bound + self.rank_mismatch + (self.run_to_run_mismatch if with_run_to_run else 0)

    def merge(mut self, other: CheckResult):
        """Fold another checked run into this one (soak: every result counts;
        the first element found stays the first)."""
        self.max_abs_err = max(self.max_abs_err, other.max_abs_err)
        self.max_err_over_bound = max(self.max_err_over_bound, other.max_err_over_bound)
        if self.oob_element < 0 and other.oob_element >= 0:
            self.oob_rank = other.oob_rank
            self.oob_element = other.oob_element
            self.oob_value = other.oob_value
            self.oob_reference = other.oob_reference
            self.oob_bound = other.oob_bound
        self.out_of_bound += other.out_of_bound
        if self.mismatch_element < 0 and other.mismatch_element >= 0:
            self.mismatch_rank = other.mismatch_rank
            self.mismatch_element = other.mismatch_element
            self.mismatch_value = other.mismatch_value
            self.mismatch_rank0_value = other.mismatch_rank0_value
        self.rank_mismatch += other.rank_mismatch
        self.runs_compared += other.runs_compared
        self.run_to_run_mismatch += other.run_to_run_mismatch


def _bits_equal[dtype: DType](a: Scalar[dtype], b: Scalar[dtype]) -> Bool:
    return a.to_bits() == b.to_bits()


def _check_range[
    dtype: DType
](
    mut result: CheckResult,
    out_host: ElemHostPtr[dtype],
    rank: Int,
    rank0_host: ElemHostPtr[dtype],
    refs: RefPtr,
    abs_sums: RefPtr,
    lo: Int,
    hi: Int,
    factor: Float64,
):
    """check_rank_output on elements lo..hi-1, in order."""
    for i in range(lo, hi):
        var got = out_host.unsafe_load(i)
        var g = got.cast[DType.float64]()
        var r = refs.unsafe_load(i)
        var bound = factor * abs_sums.unsafe_load(i)
        var err = abs(g - r)
        if isnan(g) or isinf(g):
            err = inf[DType.float64]()
        var ratio = Float64(0)
        if err > 0:
            ratio = err / bound if bound > 0 else inf[DType.float64]()
        if err > result.max_abs_err:
            result.max_abs_err = err
        if ratio > result.max_err_over_bound:
            result.max_err_over_bound = ratio
        if not (err <= bound):
            if result.oob_element < 0:
                result.oob_rank = rank
                result.oob_element = i
                result.oob_value = g
                result.oob_reference = r
                result.oob_bound = bound
            result.out_of_bound += 1
        if rank != 0:
            var mine = rank0_host.unsafe_load(i)
            if not _bits_equal[dtype](got, mine):
                if result.mismatch_element < 0:
                    result.mismatch_rank = rank
                    result.mismatch_element = i
                    result.mismatch_value = g
                    result.mismatch_rank0_value = mine.cast[DType.float64]()
                result.rank_mismatch += 1


def check_rank_output[
    dtype: DType
](
    mut result: CheckResult,
    out_host: ElemHostPtr[dtype],
    rank: Int,
    rank0_host: ElemHostPtr[dtype],
    refs: RefPtr,
    abs_sums: RefPtr,
    num_elements: Int,
    ngpus: Int,
    chunk: Int = CHUNK_ELEMENTS,
):
    """Check EVERY element of rank `rank`'s output against the bound and (ranks
    1..n-1) bitwise against rank 0's output. Chunks are checked in parallel and
    folded into `result` in element order, so the first element found is the
    lowest, as in one pass."""
    var factor = sum_bound_factor[dtype](ngpus)
    var n_chunks = _chunks(num_elements, chunk)
    var parts = List[CheckResult]()
    for _ in range(n_chunks):
        parts.append(CheckResult())
    var parts_ptr = parts.unsafe_ptr().as_unsafe_any_origin()

    def check_chunk(c: Int) {var parts_ptr, var out_host, var rank, var rank0_host, var refs, var abs_sums,
                             var chunk, var num_elements, var factor} -> None:
        var lo = c * chunk
        _check_range[dtype](parts_ptr[c], out_host, rank, rank0_host, refs, abs_sums, lo,
                            min(lo + chunk, num_elements), factor)

    parallelize(check_chunk, n_chunks)
    for c in range(n_chunks):
        result.merge(parts[c])


def compare_runs[
    dtype: DType
](
    mut result: CheckResult,
    out_host: ElemHostPtr[dtype],
    first_host: ElemHostPtr[dtype],
    num_elements: Int,
    chunk: Int = CHUNK_ELEMENTS,
):
    """One more launch's rank-0 output against the first checked launch's, bit for bit."""
    result.runs_compared += 1
    var n_chunks = _chunks(num_elements, chunk)
    var counts = List[Int](length=n_chunks, fill=0)
    var counts_ptr = counts.unsafe_ptr().as_unsafe_any_origin()

    def compare_chunk(c: Int) {var counts_ptr, var out_host, var first_host, var chunk, var num_elements} -> None:
        var lo = c * chunk
        var differ = 0
        for i in range(lo, min(lo + chunk, num_elements)):
            if not _bits_equal[dtype](out_host.unsafe_load(i), first_host.unsafe_load(i)):
                differ += 1
        counts_ptr[c] = differ

    parallelize(compare_chunk, n_chunks)
    for c in range(n_chunks):
        result.run_to_run_mismatch += counts[c]


def corrupt_element[
    dtype: DType
](host: ElemHostPtr[dtype], element: Int, refs: RefPtr, abs_sums: RefPtr, ngpus: Int) -> Float64:
    """--debug-corrupt-element: move one output element by 4x its bound (by 1
    where the bound is 0) so the check must find it; returns the shift."""
    var bound = sum_bound_factor[dtype](ngpus) * abs_sums.unsafe_load(element)
    var shift = 4.0 * bound if bound > 0 else 1.0
    var old = host.unsafe_load(element).cast[DType.float64]()
    host.unsafe_store(element, (old + shift).cast[dtype]())
    return shift
