# Host-only tests (no GPU needed): size parsing, kernel selection, kernel
# names, statistics, JSON number formatting, input generation and checking,
# argument lists and coded errors, the --serve protocol's lines.
# Run: mojo run -I kernels_mojo kernels_mojo/tests/test_host_logic.mojo

from std.testing import assert_equal, assert_true, assert_false
from allreduce.dispatch import (
    select_kernel, kernel_name, kernel_exists, one_stage_max_bytes, push_slot_packs, scratch_elements, whole_message_scratch,
)
from allreduce.kernels import (
    KERNEL_ID_1STAGE, KERNEL_ID_2STAGE, KERNEL_ID_PUSH, KERNEL_ID_2STAGE_PUSH, KERNEL_ID_PUSHFLAG, KERNEL_ID_BULK,
    cpasync_kernel_id, push_scratch_packs,
)
from benchlib.cli import parse_size_bytes, parse_arg_list, coded_error, case_status
from benchlib.serve import end_line, json_escape, split_request, take_line
from benchlib.stats import TimingStats, json_fixed3, json_number
from benchlib.check import CheckResult, fill_rank_inputs, check_rank_output


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


def test_new_kernels() raises:
    assert_equal(kernel_name(KERNEL_ID_2STAGE_PUSH), "2stage_push")
    assert_equal(kernel_name(KERNEL_ID_PUSHFLAG), "1stage_pushflag")
    assert_equal(kernel_name(KERNEL_ID_BULK), "1stage_bulk")
    assert_true(kernel_exists(KERNEL_ID_2STAGE_PUSH) and kernel_exists(KERNEL_ID_PUSHFLAG))
    assert_false(kernel_exists(Int32(6)))  # 1stage_ce (copy engine) lost the A/B and is not built
    # ids are distinct from every other kernel's
    var ids: List[Int32] = [KERNEL_ID_1STAGE, KERNEL_ID_2STAGE, KERNEL_ID_PUSH, KERNEL_ID_2STAGE_PUSH, KERNEL_ID_PUSHFLAG,
                            KERNEL_ID_BULK, cpasync_kernel_id[2](), cpasync_kernel_id[3](), cpasync_kernel_id[4]()]
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


def test_stats() raises:
    var s: List[Float64] = [5.0, 1.0, 3.0, 2.0, 4.0]
    var st = TimingStats(s^)
    assert_equal(st.p50_us, 3.0)
    assert_equal(st.min_us, 1.0)
    assert_equal(st.p90_us, 5.0)
    assert_equal(st.mean_us, 3.0)
    assert_equal(json_fixed3(7.7), "7.700")
    assert_equal(json_fixed3(0.0005), "0.001")
    assert_equal(json_number(Float64(0) / Float64(0)), "null")


def test_check() raises:
    comptime n = 1000
    var refs = List[Float64](length=n, fill=0.0)
    var a = List[BFloat16](length=n, fill=0)
    var b = List[BFloat16](length=n, fill=0)
    var rp = refs.unsafe_ptr().as_unsafe_any_origin()
    var ap = a.unsafe_ptr().as_unsafe_any_origin()
    var bp = b.unsafe_ptr().as_unsafe_any_origin()
    fill_rank_inputs[DType.bfloat16](ap, n, 7, 0, rp, True)
    fill_rank_inputs[DType.bfloat16](bp, n, 7, 1, rp, True)
    var differ = 0
    for i in range(n):
        if a[i] != b[i]:
            differ += 1
        assert_true(a[i] >= -1 and a[i] <= 1)
    assert_true(differ > n // 2)
    # out = a + b rounded once: must pass
    var out = List[BFloat16](length=n, fill=0)
    for i in range(n):
        out[i] = (a[i].cast[DType.float32]() + b[i].cast[DType.float32]()).cast[DType.bfloat16]()
    var op = out.unsafe_ptr().as_unsafe_any_origin()
    var r = CheckResult()
    check_rank_output[DType.bfloat16](r, op, op, rp, n, 2)
    assert_equal(r.wrong, 0)
    # a single wrong element must be caught, also as a bitwise mismatch
    var out2 = out.copy()
    out2[17] = out2[17] + 1
    var op2 = out2.unsafe_ptr().as_unsafe_any_origin()
    var r2 = CheckResult()
    check_rank_output[DType.bfloat16](r2, op2, op, rp, n, 2)
    assert_equal(r2.out_of_tolerance, 1)
    assert_equal(r2.not_bitwise_identical, 1)


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


def main() raises:
    test_sizes()
    test_arg_list_and_codes()
    test_serve_lines()
    test_names_and_selection()
    test_new_kernels()
    test_stats()
    test_check()
    print("test_host_logic: all passed")
