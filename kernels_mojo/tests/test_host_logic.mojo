# Host-only tests (no GPU needed): size parsing, kernel selection, kernel
# names, statistics, JSON number formatting, input generation and checking,
# argument lists and coded errors, the --serve protocol's lines.
# Run: mojo run -I kernels_mojo kernels_mojo/tests/test_host_logic.mojo

from std.testing import assert_equal, assert_true, assert_false
from allreduce.dispatch import (
    select_kernel, kernel_name, kernel_exists, one_stage_max_bytes, push_slot_packs, scratch_elements, whole_message_scratch,
    push_max_bytes, cpasync_min_bytes, cpasync_max_bytes, cpasync_stages, ce_cut, ce_last_split_pct, ce_ag_split,
    AR_CE_LAST_SPLIT_PCT_2GPU, AR_CE_LAST_SPLIT_PCT_4GPU, AR_CE_LAST_SPLIT_PCT_8GPU, AR_CE_AG_SPLIT_2GPU,
    AR_CE_AG_SPLIT_4GPU, AR_CE_AG_SPLIT_8GPU,
)
from allreduce.kernels import (
    KERNEL_ID_1STAGE, KERNEL_ID_2STAGE, KERNEL_ID_PUSH, KERNEL_ID_2STAGE_PUSH, KERNEL_ID_PUSHFLAG, KERNEL_ID_BULK,
    KERNEL_ID_2STAGE_CE, cpasync_kernel_id, push_scratch_packs,
)
from benchlib.cli import parse_size_bytes, parse_arg_list, coded_error, case_status
from benchlib.serve import end_line, json_escape, split_request, take_line
from benchlib.stats import json_fixed3, json_number, json_samples
from benchlib.check import (
    CheckResult, fill_rank_inputs, check_rank_output, compare_runs, corrupt_element, sum_bound_factor, unit_roundoff,
    lcg_jump,
)
from std.utils.numerics import nan


def test_sizes() raises:
    assert_equal(parse_size_bytes("256K"), 262144)
    assert_equal(parse_size_bytes("16M"), 16777216)
    assert_equal(parse_size_bytes("1G"), 1073741824)
    assert_equal(parse_size_bytes("28"), 28)
    assert_equal(parse_size_bytes("8K+28"), 8192 + 28)
    assert_equal(parse_size_bytes("0"), 0)
    var bad = False
    try:
        _ = parse_size_bytes("12X")
    except:
        bad = True
    assert_true(bad)


def test_names_and_selection() raises:
    assert_equal(kernel_name(KERNEL_ID_1STAGE), "1stage")
    assert_equal(kernel_name(KERNEL_ID_2STAGE), "2stage")
    assert_equal(kernel_name(cpasync_kernel_id[3]()), "1stage_cpasync_s3")
    assert_equal(Int(cpasync_kernel_id[2]()), 12)
    assert_true(kernel_exists(KERNEL_ID_1STAGE))
    assert_false(kernel_exists(Int32(99)))
    assert_equal(kernel_name(KERNEL_ID_PUSH), "1stage_push")
    assert_true(kernel_exists(KERNEL_ID_PUSH))
    # push receive regions: one 16-byte pack per 4 fp32 / 8 bf16 elements, a partial pack for the tail,
    # none above the 256 MiB default (a forced push is then refused).
    assert_equal(push_slot_packs[DType.float32](7), 2)
    assert_equal(push_slot_packs[DType.bfloat16](8 * 1024 + 1), 1025)
    assert_equal(push_slot_packs[DType.float32](64 * 1024 * 1024), 16 * 1024 * 1024)
    assert_equal(push_slot_packs[DType.float32](64 * 1024 * 1024 + 1), 0)
    # defaults (no -D): 2 GPUs -> 1stage_push up to 1 MiB, 1stage above; 4/8 GPUs -> 2stage > 512K
    assert_equal(kernel_name(select_kernel(256 * 1024, 2, DType.float32)), "1stage_push")
    assert_equal(kernel_name(select_kernel(1024 * 1024 + 16, 2, DType.float32)), "1stage")
    var k = select_kernel(256 * 1024, 4, DType.float32)
    assert_equal(kernel_name(k), "1stage")
    var k8 = select_kernel(16 * 1024 * 1024, 8, DType.float32)
    assert_equal(kernel_name(k8), "2stage" if one_stage_max_bytes(8) < 16 * 1024 * 1024 else "1stage")
    # no per-GPU-count define given: every count takes the shared default (push 1 MiB on 2 GPUs only,
    # empty cp.async window, 3 stages)
    assert_equal(push_max_bytes(2), 1024 * 1024)
    assert_equal(push_max_bytes(4), 0)
    for n in [2, 4, 8]:
        assert_true(cpasync_min_bytes(n) > cpasync_max_bytes(n))
        assert_equal(cpasync_stages(n), 3)


def test_new_kernels() raises:
    assert_equal(kernel_name(KERNEL_ID_2STAGE_PUSH), "2stage_push")
    assert_equal(kernel_name(KERNEL_ID_PUSHFLAG), "1stage_pushflag")
    assert_equal(kernel_name(KERNEL_ID_BULK), "1stage_bulk")
    assert_true(kernel_exists(KERNEL_ID_2STAGE_PUSH) and kernel_exists(KERNEL_ID_PUSHFLAG))
    assert_false(kernel_exists(Int32(6)))  # 1stage_ce (copy engine) lost the A/B and is not built
    # ids are distinct from every other kernel's
    var ids: List[Int32] = [KERNEL_ID_1STAGE, KERNEL_ID_2STAGE, KERNEL_ID_PUSH, KERNEL_ID_2STAGE_PUSH, KERNEL_ID_PUSHFLAG,
                            KERNEL_ID_BULK, KERNEL_ID_2STAGE_CE, cpasync_kernel_id[2](), cpasync_kernel_id[3](),
                            cpasync_kernel_id[4]()]
    assert_equal(kernel_name(KERNEL_ID_2STAGE_CE), "2stage_ce")
    assert_true(kernel_exists(KERNEL_ID_2STAGE_CE))
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            assert_true(ids[i] != ids[j])
    # scratch: 2stage_push a slot per rank of one slice (ceil), pushflag two generations of the whole message
    assert_equal(push_scratch_packs(9, 2, True), 10)
    assert_equal(push_scratch_packs(9, 4, True), 12)
    assert_equal(push_scratch_packs(9, 2, False), 36)
    # the runner's scratch holds every kernel's need: 7 fp32 = 2 packs -> pushflag 2*2*2 packs = 32 elements
    assert_equal(scratch_elements[DType.float32](7, 2), 32)
    # above AR_PUSH_REGION_MAX_BYTES (256 MiB) only the slice-sized needs remain
    var big = 64 * 1024 * 1024 + 4
    assert_false(whole_message_scratch[DType.float32](big))
    assert_equal(scratch_elements[DType.float32](big, 2), push_scratch_packs((big + 3) // 4, 2, True) * 4)
    assert_true(whole_message_scratch[DType.float32](64 * 1024 * 1024))


def test_2stage_ce_layout() raises:
    """2stage_ce's parts and their cut (ce_cut): rank j's part is [j * part, (j + 1) * part) clipped to the
    message, the parts tile [0, n) in rank order, the cut lies in the part and on a whole vector from its
    start, the second piece holds at most the asked percent of the part (rounded down to whole vectors, so
    less by under one vector per 100/pct) and none at 0, and ngpus slots of a part fit the runner's scratch
    (the copies write slot r of part j at r * part + (e - j * part))."""
    var counts: List[Int] = [1, 3, 4, 7, 8, 9, 31, 4096, 4099, 65536 + 5, 1048576 + 24]
    for ngpus in [2, 4, 8]:
        assert_true(ce_last_split_pct(ngpus) >= 0 and ce_last_split_pct(ngpus) < 100)
        for v in [4, 8]:
            for i in range(len(counts)):
                var n = counts[i]
                var part = ((n + v - 1) // v + ngpus - 1) // ngpus * v
                assert_true(part % v == 0 and part * ngpus >= n)
                var scratch = scratch_elements[DType.float32](n, ngpus) if v == 4 else scratch_elements[DType.bfloat16](n, ngpus)
                assert_true(part * ngpus <= scratch)
                for pct in [0, 10, 25, 50, 75, 99, ce_last_split_pct(ngpus)]:
                    var covered = 0
                    for j in range(ngpus):
                        var lo = min(n, j * part)
                        var hi = min(n, (j + 1) * part)
                        assert_equal(lo, covered)
                        var cut = ce_cut(n, part, v, j, pct)
                        assert_true(lo <= cut and cut <= hi)
                        assert_true((cut - lo) % v == 0 or cut == hi)
                        var vecs = (hi - lo + v - 1) // v
                        if pct == 0:
                            assert_equal(cut, hi)
                        else:  # the second piece: whole vectors, pct percent of the part's rounded down
                            assert_equal(vecs - (cut - lo + v - 1) // v, vecs * pct // 100)
                        covered = hi
                    assert_equal(covered, n)


def test_stats() raises:
    # The raw samples in the order timed, 3 decimals (no statistic: the driver computes them, driver/stats.py).
    var s: List[Float64] = [5.0, 1.0, 3.25, 2.0005, 4.0]
    assert_equal(json_samples(s), "[5.000,1.000,3.250,2.001,4.000]")
    assert_equal(json_samples(List[Float64]()), "[]")
    assert_equal(json_fixed3(7.7), "7.700")
    assert_equal(json_fixed3(0.0005), "0.001")
    assert_equal(json_number(Float64(0) / Float64(0)), "null")


def _bf16_sum_in_order(xs: List[List[BFloat16]], i: Int, order: List[Int]) -> BFloat16:
    """sum over ranks in `order`, rounded to bfloat16 after every addition (a
    float64 add of two bfloat16 values is exact, so each step rounds once)."""
    var acc = xs[order[0]][i]
    for k in range(1, len(order)):
        acc = (acc.cast[DType.float64]() + xs[order[k]][i].cast[DType.float64]()).cast[DType.bfloat16]()
    return acc


def test_check() raises:
    comptime n = 1000
    comptime ngpus = 4
    var refs = List[Float64](length=n, fill=0.0)
    var abs_sums = List[Float64](length=n, fill=0.0)
    var rp = refs.unsafe_ptr().as_unsafe_any_origin()
    var sp = abs_sums.unsafe_ptr().as_unsafe_any_origin()
    var xs = List[List[BFloat16]]()
    for r in range(ngpus):
        xs.append(List[BFloat16](length=n, fill=0))
        fill_rank_inputs[DType.bfloat16](xs[r].unsafe_ptr().as_unsafe_any_origin(), n, 7, r, rp, sp, True)
    var differ = 0
    for i in range(n):
        if xs[0][i] != xs[1][i]:
            differ += 1
        assert_true(xs[0][i] >= -1 and xs[0][i] <= 1)
        assert_true(abs_sums[i] >= abs(refs[i]))
    assert_true(differ > n // 2)
    assert_equal(unit_roundoff[DType.float32](), 1.0 / 16777216.0)
    assert_equal(sum_bound_factor[DType.float32](2), (1.0 / 16777216.0) / (1.0 - 1.0 / 16777216.0))
    assert_equal(sum_bound_factor[DType.bfloat16](4), (3.0 / 256.0) / (1.0 - 3.0 / 256.0))
    # Legal results of 4 ranks: rank order and reverse order, each rounded to
    # bfloat16 at every step, and a float32 accumulation rounded once.
    var forward = List[Int]()
    var backward = List[Int]()
    for r in range(ngpus):
        forward.append(r)
        backward.append(ngpus - 1 - r)
    var out_fwd = List[BFloat16](length=n, fill=0)
    var out_bwd = List[BFloat16](length=n, fill=0)
    var out_f32 = List[BFloat16](length=n, fill=0)
    for i in range(n):
        out_fwd[i] = _bf16_sum_in_order(xs, i, forward)
        out_bwd[i] = _bf16_sum_in_order(xs, i, backward)
        var acc = Float32(0)
        for r in range(ngpus):
            acc += xs[r][i].cast[DType.float32]()
        out_f32[i] = acc.cast[DType.bfloat16]()
    var fp = out_fwd.unsafe_ptr().as_unsafe_any_origin()
    var bp = out_bwd.unsafe_ptr().as_unsafe_any_origin()
    var cp = out_f32.unsafe_ptr().as_unsafe_any_origin()
    var one_rounding_exceeded = 0  # elements the old one-rounding tolerance (|ref|/128 + 1e-3) called wrong
    for i in range(n):
        if abs(out_fwd[i].cast[DType.float64]() - refs[i]) > abs(refs[i]) / 128.0 + 1e-3:
            one_rounding_exceeded += 1
    for p in [fp, bp, cp]:
        var r = CheckResult()
        check_rank_output[DType.bfloat16](r, p, 0, p, rp, sp, n, ngpus)
        assert_equal(r.out_of_bound, 0)
        assert_true(r.max_err_over_bound <= 1.0)
        assert_equal(r.rank_mismatch, 0)
    # ranks that round differently: inside the bound, but they disagree
    var both = CheckResult()
    check_rank_output[DType.bfloat16](both, fp, 0, fp, rp, sp, n, ngpus)
    check_rank_output[DType.bfloat16](both, bp, 1, fp, rp, sp, n, ngpus)
    assert_equal(both.out_of_bound, 0)
    var expect_mismatch = 0
    var first = -1
    for i in range(n):
        if out_fwd[i].to_bits() != out_bwd[i].to_bits():
            expect_mismatch += 1
            if first < 0:
                first = i
    assert_true(expect_mismatch > 0)
    assert_equal(both.rank_mismatch, expect_mismatch)
    assert_equal(both.mismatch_rank, 1)
    assert_equal(both.mismatch_element, first)
    assert_equal(both.mismatch_value, out_bwd[first].cast[DType.float64]())
    assert_equal(both.mismatch_rank0_value, out_fwd[first].cast[DType.float64]())
    assert_equal(both.wrong(False), expect_mismatch)
    # --debug-corrupt-element: one element 4x its bound away is out of bound (and a mismatch)
    var bad = out_fwd.copy()
    var badp = bad.unsafe_ptr().as_unsafe_any_origin()
    var shift = corrupt_element[DType.bfloat16](badp, 17, rp, sp, ngpus)
    assert_equal(shift, 4.0 * sum_bound_factor[DType.bfloat16](ngpus) * abs_sums[17])
    var r2 = CheckResult()
    check_rank_output[DType.bfloat16](r2, fp, 0, fp, rp, sp, n, ngpus)
    check_rank_output[DType.bfloat16](r2, badp, 1, fp, rp, sp, n, ngpus)
    assert_equal(r2.out_of_bound, 1)
    assert_equal(r2.oob_rank, 1)
    assert_equal(r2.oob_element, 17)
    assert_equal(r2.oob_reference, refs[17])
    assert_true(r2.max_err_over_bound > 2.0)
    assert_equal(r2.rank_mismatch, 1)
    assert_equal(r2.mismatch_element, 17)
    # NaN is always out of bound
    var nan_out = out_fwd.copy()
    nan_out[3] = nan[DType.bfloat16]()
    var r3 = CheckResult()
    check_rank_output[DType.bfloat16](r3, nan_out.unsafe_ptr().as_unsafe_any_origin(), 0, fp, rp, sp, n, ngpus)
    assert_equal(r3.out_of_bound, 1)
    assert_equal(r3.oob_element, 3)
    # run to run: the same bits pass, one flipped element is counted; merge keeps the first finding
    var r4 = CheckResult()
    compare_runs[DType.bfloat16](r4, fp, fp, n)
    assert_equal(r4.runs_compared, 1)
    assert_equal(r4.run_to_run_mismatch, 0)
    compare_runs[DType.bfloat16](r4, badp, fp, n)
    assert_equal(r4.runs_compared, 2)
    assert_equal(r4.run_to_run_mismatch, 1)
    assert_equal(r4.wrong(False), 0)
    assert_equal(r4.wrong(True), 1)
    r2.merge(r4)
    r2.merge(both)
    assert_equal(r2.mismatch_element, 17)
    assert_equal(r2.rank_mismatch, 1 + expect_mismatch)
    assert_equal(r2.run_to_run_mismatch, 1)
    print(String("test_check: ", one_rounding_exceeded, " of ", n, " legal 4-rank bf16 sums exceeded the old",
                 " one-rounding tolerance; ", expect_mismatch, " differ between the two orders"))


def test_chunked_host_work() raises:
    """Fill, check and run-to-run compare in small chunks (parallel) give one pass's results: the same
    inputs and references (the LCG jumped to each chunk's start), the same counts, and the lowest element
    as the first finding even when a later chunk also finds one."""
    comptime n = 1000
    comptime ngpus = 4
    assert_equal(lcg_jump(12345, 0), 12345)
    var stepped: UInt64 = 12345
    for _ in range(77):
        stepped = stepped * 6364136223846793005 + 1442695040888963407
    assert_equal(lcg_jump(12345, 77), stepped)
    var refs = List[Float64](length=n, fill=0.0)
    var sums = List[Float64](length=n, fill=0.0)
    var refs_c = List[Float64](length=n, fill=0.0)
    var sums_c = List[Float64](length=n, fill=0.0)
    var rp = refs.unsafe_ptr().as_unsafe_any_origin()
    var sp = sums.unsafe_ptr().as_unsafe_any_origin()
    var rpc = refs_c.unsafe_ptr().as_unsafe_any_origin()
    var spc = sums_c.unsafe_ptr().as_unsafe_any_origin()
    var xs = List[List[BFloat16]]()
    for r in range(ngpus):
        xs.append(List[BFloat16](length=n, fill=0))
        var xc = List[BFloat16](length=n, fill=0)
        fill_rank_inputs[DType.bfloat16](xs[r].unsafe_ptr().as_unsafe_any_origin(), n, 3, r, rp, sp, True, chunk=n)
        fill_rank_inputs[DType.bfloat16](xc.unsafe_ptr().as_unsafe_any_origin(), n, 3, r, rpc, spc, True, chunk=37)
        for i in range(n):
            assert_equal(xs[r][i].to_bits(), xc[i].to_bits())
    for i in range(n):
        assert_equal(refs[i], refs_c[i])
        assert_equal(sums[i], sums_c[i])
    var out = List[BFloat16](length=n, fill=0)
    for i in range(n):
        var acc = Float32(0)
        for r in range(ngpus):
            acc += xs[r][i].cast[DType.float32]()
        out[i] = acc.cast[DType.bfloat16]()
    var good = out.unsafe_ptr().as_unsafe_any_origin()
    var bad = out.copy()
    var badp = bad.unsafe_ptr().as_unsafe_any_origin()
    _ = corrupt_element[DType.bfloat16](badp, 901, rp, sp, ngpus)  # chunk 24 of 37 elements
    _ = corrupt_element[DType.bfloat16](badp, 40, rp, sp, ngpus)  # chunk 1
    var whole = CheckResult()
    var chunked = CheckResult()
    check_rank_output[DType.bfloat16](whole, badp, 2, good, rp, sp, n, ngpus, chunk=n)
    check_rank_output[DType.bfloat16](chunked, badp, 2, good, rp, sp, n, ngpus, chunk=37)
    assert_equal(whole.out_of_bound, 2)
    assert_equal(chunked.out_of_bound, 2)
    assert_equal(chunked.oob_element, 40)
    assert_equal(chunked.oob_rank, 2)
    assert_equal(chunked.oob_value, whole.oob_value)
    assert_equal(chunked.max_abs_err, whole.max_abs_err)
    assert_equal(chunked.max_err_over_bound, whole.max_err_over_bound)
    assert_equal(chunked.rank_mismatch, 2)
    assert_equal(chunked.mismatch_element, 40)
    var runs = CheckResult()
    compare_runs[DType.bfloat16](runs, badp, good, n, chunk=37)
    assert_equal(runs.run_to_run_mismatch, 2)


def test_arg_list_and_codes() raises:
    var cfg = parse_arg_list(split_request("--sizes\t8K+28,16M\t--dtype\tbfloat16\t--ngpus\t4\t--kernel\t2stage"))
    assert_equal(len(cfg.sizes_bytes), 2)
    assert_equal(cfg.sizes_bytes[0], 8192 + 28)
    assert_equal(cfg.dtype, "bfloat16")
    assert_equal(cfg.ngpus, 4)
    assert_equal(cfg.kernel, "2stage")
    assert_false(cfg.help)
    assert_true(parse_arg_list(split_request("--help\t--bogus")).help)
    assert_equal(len(parse_arg_list(List[String]()).sizes_bytes), 2)  # the defaults
    var msg = String()
    try:
        _ = parse_arg_list(split_request("--sizes\t7X"))
    except e:
        msg = String(e)
    assert_equal(msg, "malformed size: '7X' (use e.g. 256K, 16M, 1G or a byte count)")
    var upstream_kernel = False
    try:
        _ = parse_arg_list(split_request("--kernel\t1stage"), impl="upstream")
    except:
        upstream_kernel = True
    assert_true(upstream_kernel)
    # coded errors carry the one-shot exit code; any other error is a run failure (exit 1)
    var st = case_status(coded_error(4, "no GPU: no devices found"))
    assert_equal(st.code, 4)
    assert_equal(st.message, "no GPU: no devices found")
    var st2 = case_status(Error("CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert_equal(st2.code, 1)
    assert_equal(st2.message, "run failed: CUDA_ERROR_ILLEGAL_ADDRESS")


def test_serve_lines() raises:
    var args = split_request("--sizes\t\t256K")
    assert_equal(len(args), 3)
    assert_equal(args[1], "")
    assert_equal(json_escape('a"b\\c\nd\te\x01'), '"a\\"b\\\\c\\nd\\te\\u0001"')
    assert_equal(json_escape("café — ok"), "\"café — ok\"")  # UTF-8 copied through
    assert_equal(end_line(0, "ignored"), '{"worker_end":true,"rc":0,"error":""}')
    assert_equal(end_line(2, "bad 'x'"), '{"worker_end":true,"rc":2,"error":"bad \'x\'"}')
    var pending = List[UInt8]()
    for b in "a\tb\r\n\nlast".as_bytes():
        pending.append(b)
    assert_equal(take_line(pending, False).value(), "a\tb")
    assert_equal(take_line(pending, False).value(), "")
    assert_false(Bool(take_line(pending, False)))  # "last" has no newline yet
    assert_equal(take_line(pending, True).value(), "last")
    assert_false(Bool(take_line(pending, True)))


def test_2stage_ce_per_count_defines() raises:
    """2stage_ce's split defines are read per GPU count (dispatch._of_count, as the windows are); a count with no
    define (refused before any launch) gets no split."""
    assert_equal(ce_last_split_pct(2), AR_CE_LAST_SPLIT_PCT_2GPU)
    assert_equal(ce_last_split_pct(4), AR_CE_LAST_SPLIT_PCT_4GPU)
    assert_equal(ce_last_split_pct(8), AR_CE_LAST_SPLIT_PCT_8GPU)
    assert_equal(ce_ag_split(2), AR_CE_AG_SPLIT_2GPU != 0)
    assert_equal(ce_ag_split(4), AR_CE_AG_SPLIT_4GPU != 0)
    assert_equal(ce_ag_split(8), AR_CE_AG_SPLIT_8GPU != 0)
    for ngpus in [1, 3, 16]:
        assert_equal(ce_last_split_pct(ngpus), 0)
        assert_false(ce_ag_split(ngpus))


def main() raises:
    test_sizes()
    test_arg_list_and_codes()
    test_serve_lines()
    test_names_and_selection()
    test_new_kernels()
    test_2stage_ce_layout()
    test_2stage_ce_per_count_defines()
    test_stats()
    test_check()
    test_chunked_host_work()
    print("test_host_logic: all passed")
