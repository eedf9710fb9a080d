# Input generation and output checking for allreduce_bench.
#
# Inputs: per-rank seeded 64-bit LCG mapped to [-1, 1) (24 random bits), then
# rounded to the element type; different on every rank, never constant.
# Reference: float64 sum over ranks (in rank order) of the rounded inputs.
# Tolerance per element, |out - ref| <= atol + rtol * |ref|:
#   float32:  atol = 1e-5 * ngpus, rtol = 1e-5
#   bfloat16: atol = 1e-3,         rtol = 2^-7  (one final rounding of an fp32 sum)
#   float16:  atol = 1e-4,         rtol = 2^-10

from std.math import isnan, isinf
from std.utils.numerics import inf


comptime ElemHostPtr[dtype: DType] = Pointer[Scalar[dtype], MutAnyOrigin]
comptime RefPtr = Pointer[Float64, MutAnyOrigin]


def _rank_state(seed: Int, rank: Int) -> UInt64:
    var s = UInt64(seed) * 0x9E3779B97F4A7C15 + UInt64(rank + 1) * 0xBF58476D1CE4E5B9
    s ^= s >> 31
    return s


def fill_rank_inputs[
    dtype: DType
](
    host: ElemHostPtr[dtype],
    num_elements: Int,
    seed: Int,
    rank: Int,
    refs: RefPtr,
    accumulate_refs: Bool,
):
    """Write rank `rank`'s inputs into `host`; add them into `refs` (float64)
    when `accumulate_refs` (refs must be zeroed before rank 0)."""
    var state = _rank_state(seed, rank)
    for i in range(num_elements):
        state = state * 6364136223846793005 + 1442695040888963407
        var bits = (state >> 40).cast[DType.float32]()  # 24 bits
        var x = (bits * Float32(1.0 / 8388608.0) - 1.0).cast[dtype]()
        host.unsafe_store(i, x)
        if accumulate_refs:
            refs.unsafe_store(i, refs.unsafe_load(i) + x.cast[DType.float64]())


def _tolerance[dtype: DType](ref_val: Float64, ngpus: Int) -> Float64:
    var mag = abs(ref_val)
    comptime if dtype == DType.bfloat16:
        return 1e-3 + mag * (1.0 / 128.0)
    elif dtype == DType.float16:
        return 1e-4 + mag * (1.0 / 1024.0)
    else:
        return 1e-5 * Float64(ngpus) + 1e-5 * mag


struct CheckResult(Copyable, Movable):
    var wrong: Int
    """Elements outside tolerance (summed over ranks) plus elements whose bits
    differ from rank 0's result."""
    var max_abs_err: Float64
    """Largest |out - ref| over all ranks (inf if any output is NaN/inf)."""
    var out_of_tolerance: Int
    var not_bitwise_identical: Int

    def __init__(out self):
        self.wrong = 0
        self.max_abs_err = 0
        self.out_of_tolerance = 0
        self.not_bitwise_identical = 0

    def merge(mut self, other: CheckResult):
        """Fold another checked run into this one (soak: every result counts)."""
        self.wrong += other.wrong
        self.max_abs_err = max(self.max_abs_err, other.max_abs_err)
        self.out_of_tolerance += other.out_of_tolerance
        self.not_bitwise_identical += other.not_bitwise_identical


def _bits_equal[dtype: DType](a: Scalar[dtype], b: Scalar[dtype]) -> Bool:
    return a.to_bits() == b.to_bits()


def check_rank_output[
    dtype: DType
](
    mut result: CheckResult,
    out_host: ElemHostPtr[dtype],
    rank0_host: ElemHostPtr[dtype],
    refs: RefPtr,
    num_elements: Int,
    ngpus: Int,
):
    """Compare EVERY element of one rank's output with the reference and,
    bitwise, with rank 0's output."""
    for i in range(num_elements):
        var got = out_host.unsafe_load(i)
        var g = got.cast[DType.float64]()
        var r = refs.unsafe_load(i)
        var err = abs(g - r)
        if isnan(g) or isinf(g):
            err = inf[DType.float64]()
        if not (err <= _tolerance[dtype](r, ngpus)):
            result.out_of_tolerance += 1
        if err > result.max_abs_err:
            result.max_abs_err = err
        if not _bits_equal[dtype](got, rank0_host.unsafe_load(i)):
            result.not_bitwise_identical += 1
    result.wrong = result.out_of_tolerance + result.not_bitwise_identical
