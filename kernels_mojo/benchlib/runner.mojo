# Per-size benchmark + check for our kernels and for upstream comm.allreduce,
# sharing one timing method and one checking method.
#
# Timing: host wall clock (perf_counter_ns) around `batch` iterations launched
# back to back on every GPU, then synchronizing every context; one sample is
# that time / batch. batch = 1 times each iteration alone (launch + sync
# latency included); batch > 1 is nccl-tests' method (launches pipelined, the
# sync paid once per batch). p50/p90/min/mean over ceil(iters / batch) samples
# after `warmup` untimed iterations.

from std.collections import Array
from std.sys import size_of, stderr
from std.time import perf_counter_ns
from std.utils.numerics import nan
from max.gpu.host import DeviceBuffer, DeviceContext, HostBuffer
from layout import Coord, TileTensor, coord_to_index_list, row_major
from layout.tile_layout import TensorLayout
from std.utils import IndexList, StaticTuple
from comm import Signal, group_start, group_end
from comm.sync import init_signal_buffer, is_p2p_enabled
from comm.allreduce import allreduce as upstream_allreduce

from allreduce.dispatch import (
    AR_CPASYNC_STAGES,
    allreduce_rank,
    kernel_name,
    max_grid_blocks,
    scratch_elements,
    select_kernel,
)
from allreduce.kernels import (
    KERNEL_ID_NONE,
    KERNEL_ID_1STAGE,
    KERNEL_ID_2STAGE,
    KERNEL_ID_NOOP,
    ElemPtr,
    KernelIdPtr,
    cpasync_kernel_id,
)
from allreduce.signal import SIGNAL_BUFFER_WORDS, SignalPtr

from .cli import BenchConfig
from .check import CheckResult, RefPtr, check_rank_output, fill_rank_inputs
from .stats import TimingStats, json_fixed3, json_number, json_string


def sync_all(ctxs: List[DeviceContext]) raises:
    for i in range(len(ctxs)):
        ctxs[i].synchronize()


def timed_iterations[
    launch_all: def() raises capturing -> None
](ctxs: List[DeviceContext], warmup: Int, iters: Int, batch: Int) raises -> List[Float64]:
    """Run `warmup` untimed then `iters` timed iterations in back-to-back
    batches of `batch`; microseconds per iteration, one sample per batch.
    Also prints the p50 of the host launch phase alone to stderr (diagnostic)."""
    sync_all(ctxs)
    for _ in range(warmup):
        launch_all()
        sync_all(ctxs)
    var nsamples = (iters + batch - 1) // batch
    var samples = List[Float64](capacity=nsamples)
    var launch_samples = List[Float64](capacity=nsamples)
    for _ in range(nsamples):
        var t0 = perf_counter_ns()
        for _ in range(batch):
            launch_all()
        var t_launched = perf_counter_ns()
        sync_all(ctxs)
        var t1 = perf_counter_ns()
        samples.append(Float64(Int(t1) - Int(t0)) / 1000.0 / Float64(batch))
        launch_samples.append(Float64(Int(t_launched) - Int(t0)) / 1000.0 / Float64(batch))
    var launch_stats = TimingStats(launch_samples^)
    print(String("timing-detail: host_launch_p50_us=", json_fixed3(launch_stats.p50_us)), file=stderr)
    return samples^


def requested_kernel_id(cfg: BenchConfig) -> Int32:
    if cfg.kernel == "1stage":
        return KERNEL_ID_1STAGE
    if cfg.kernel == "2stage":
        return KERNEL_ID_2STAGE
    if cfg.kernel == "noop":
        return KERNEL_ID_NOOP
    if cfg.kernel == "1stage_cpasync":
        var s = cfg.stages if cfg.stages != 0 else AR_CPASYNC_STAGES
        if s == 2:
            return cpasync_kernel_id[2]()
        if s == 3:
            return cpasync_kernel_id[3]()
        return cpasync_kernel_id[4]()
    return KERNEL_ID_NONE


def json_record(
    cfg: BenchConfig,
    kernel_selected: String,
    kernel_confirmed: String,
    num_bytes: Int,
    num_elements: Int,
    stats: TimingStats,
    check: CheckResult,
    checked: Bool,
    checked_iters: Int,
) -> String:
    var algbw = Float64(0)
    if stats.p50_us > 0:
        algbw = Float64(num_bytes) / (stats.p50_us * 1e-6) / 1e9
    var busbw = algbw * 2.0 * Float64(cfg.ngpus - 1) / Float64(cfg.ngpus)
    var requested = cfg.kernel if cfg.impl == "ours" else "upstream"
    var s = String("{")
    s += String('"suite":"allreduce","impl":', json_string(cfg.impl))
    s += String(',"kernel_requested":', json_string(requested))
    s += String(',"kernel_selected":', json_string(kernel_selected))
    s += String(',"kernel_confirmed":', json_string(kernel_confirmed))
    s += String(',"dtype":', json_string(cfg.dtype))
    s += String(',"ngpus":', cfg.ngpus)
    s += String(',"bytes":', num_bytes)
    s += String(',"elements":', num_elements)
    s += String(',"iters":', cfg.iters)
    s += String(',"warmup":', cfg.warmup)
    s += String(',"batch":', cfg.batch)
    s += String(',"p50_us":', json_fixed3(stats.p50_us))
    s += String(',"p90_us":', json_fixed3(stats.p90_us))
    s += String(',"min_us":', json_fixed3(stats.min_us))
    s += String(',"mean_us":', json_fixed3(stats.mean_us))
    s += String(',"algbw_gbps":', json_fixed3(algbw))
    s += String(',"busbw_gbps":', json_fixed3(busbw))
    s += String(',"max_abs_err":', json_number(check.max_abs_err))
    s += String(',"wrong":', check.wrong)
    s += String(',"checked":', "true" if checked else "false")
    s += String(',"checked_iters":', checked_iters)
    s += "}"
    return s


struct SizeBuffers[dtype: DType](Movable):
    """Per-size device inputs/outputs and host staging (one entry per rank)."""

    var inputs: List[DeviceBuffer[Self.dtype]]
    var outputs: List[DeviceBuffer[Self.dtype]]
    var host: List[HostBuffer[Self.dtype]]
    var refs: List[Float64]
    var num_elements: Int

    def __init__(
        out self, ctxs: List[DeviceContext], num_elements: Int, seed: Int, want_refs: Bool
    ) raises:
        self.num_elements = num_elements
        var alloc_elems = max(1, num_elements)
        self.inputs = List[DeviceBuffer[Self.dtype]]()
        self.outputs = List[DeviceBuffer[Self.dtype]]()
        self.host = List[HostBuffer[Self.dtype]]()
        self.refs = List[Float64](length=num_elements if want_refs else 0, fill=0.0)
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        for r in range(len(ctxs)):
            self.inputs.append(ctxs[r].enqueue_create_buffer[Self.dtype](alloc_elems))
            self.outputs.append(ctxs[r].enqueue_create_buffer[Self.dtype](alloc_elems))
            self.host.append(ctxs[r].enqueue_create_host_buffer[Self.dtype](alloc_elems))
        sync_all(ctxs)
        for r in range(len(ctxs)):
            fill_rank_inputs[Self.dtype](
                self.host[r].unsafe_ptr().as_unsafe_any_origin(),
                num_elements,
                seed,
                r,
                refs_ptr,
                want_refs,
            )
            ctxs[r].enqueue_copy(self.inputs[r], self.host[r])
        sync_all(ctxs)

    def poison_outputs(mut self, ctxs: List[DeviceContext]) raises:
        for r in range(len(ctxs)):
            self.outputs[r].enqueue_fill(nan[Self.dtype]())
        sync_all(ctxs)

    def check(mut self, ctxs: List[DeviceContext]) raises -> CheckResult:
        """Copy every rank's output to host and check every element."""
        var result = CheckResult()
        var n = self.num_elements
        if n == 0:
            return result^
        var ngpus = len(ctxs)
        # rank 0's output stays in host[0]; other ranks go through host[1].
        ctxs[0].enqueue_copy(self.host[0], self.outputs[0])
        ctxs[0].synchronize()
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        var rank0 = self.host[0].unsafe_ptr().as_unsafe_any_origin()
        check_rank_output[Self.dtype](result, rank0, rank0, refs_ptr, n, ngpus)
        for r in range(1, ngpus):
            ctxs[r].enqueue_copy(self.host[1], self.outputs[r])
            ctxs[r].synchronize()
            check_rank_output[Self.dtype](
                result,
                self.host[1].unsafe_ptr().as_unsafe_any_origin(),
                rank0,
                refs_ptr,
                n,
                ngpus,
            )
        if result.wrong > 0:
            print(
                String(
                    "check: ", result.out_of_tolerance, " elements out of tolerance, ",
                    result.not_bitwise_identical, " elements differ from rank 0",
                ),
                file=stderr,
            )
        return result^


def _read_kernel_ids(
    ctxs: List[DeviceContext], words: List[DeviceBuffer[DType.int32]]
) raises -> String:
    """Name of the kernel every rank's device word reports ('mismatch' if the
    ranks disagree, 'none' if no kernel ran)."""
    var first = Int32(-1)
    var same = True
    for r in range(len(ctxs)):
        var v: Int32
        with words[r].map_to_host() as h:
            v = h[0]
        if r == 0:
            first = v
        elif v != first:
            same = False
    if not same:
        return "mismatch"
    return kernel_name(first)


def _reset_kernel_ids(
    ctxs: List[DeviceContext], words: List[DeviceBuffer[DType.int32]]
) raises:
    for r in range(len(ctxs)):
        words[r].enqueue_fill(KERNEL_ID_NONE)
    sync_all(ctxs)


def run_ours[dtype: DType, ngpus: Int](cfg: BenchConfig, ctxs: List[DeviceContext]) raises:
    """Benchmark our kernels at every size in cfg; one JSON line per size."""
    # Persistent per-rank state: signal buffers (zeroed once) and the
    # kernel-id words.
    var signals = List[DeviceBuffer[DType.uint32]]()
    var kid_words = List[DeviceBuffer[DType.int32]]()
    var grid_cap = max_grid_blocks(ctxs[0])
    for r in range(ngpus):
        signals.append(ctxs[r].enqueue_create_buffer[DType.uint32](SIGNAL_BUFFER_WORDS))
        signals[r].enqueue_fill(0)
        kid_words.append(ctxs[r].enqueue_create_buffer[DType.int32](1))
        grid_cap = min(grid_cap, max_grid_blocks(ctxs[r]))
    sync_all(ctxs)
    var sig_ptrs = Array[SignalPtr, ngpus](fill=signals[0].unsafe_ptr().as_unsafe_any_origin())
    for r in range(ngpus):
        sig_ptrs[r] = signals[r].unsafe_ptr().as_unsafe_any_origin()

    var requested = requested_kernel_id(cfg)
    # The noop diagnostic computes nothing, so there is nothing to check.
    var do_check = cfg.check and requested != KERNEL_ID_NOOP
    for size_idx in range(len(cfg.sizes_bytes)):
        var num_bytes = cfg.sizes_bytes[size_idx]
        var n = num_bytes // size_of[dtype]()
        var bufs = SizeBuffers[dtype](ctxs, n, cfg.seed, do_check)
        var scratch = List[DeviceBuffer[dtype]]()
        for r in range(ngpus):
            scratch.append(ctxs[r].enqueue_create_buffer[dtype](scratch_elements[dtype](n, ngpus)))
        sync_all(ctxs)
        var in_ptrs = Array[ElemPtr[dtype], ngpus](fill=bufs.inputs[0].unsafe_ptr().as_unsafe_any_origin())
        var scratch_ptrs = Array[ElemPtr[dtype], ngpus](fill=scratch[0].unsafe_ptr().as_unsafe_any_origin())
        var out_ptrs = Array[ElemPtr[dtype], ngpus](fill=bufs.outputs[0].unsafe_ptr().as_unsafe_any_origin())
        var kid_ptrs = Array[KernelIdPtr, ngpus](fill=kid_words[0].unsafe_ptr().as_unsafe_any_origin())
        for r in range(ngpus):
            in_ptrs[r] = bufs.inputs[r].unsafe_ptr().as_unsafe_any_origin()
            scratch_ptrs[r] = scratch[r].unsafe_ptr().as_unsafe_any_origin()
            out_ptrs[r] = bufs.outputs[r].unsafe_ptr().as_unsafe_any_origin()
            kid_ptrs[r] = kid_words[r].unsafe_ptr().as_unsafe_any_origin()

        var selected = KERNEL_ID_NONE

        @always_inline
        @__parameter
        def launch_all() raises:
            for r in range(ngpus):
                selected = allreduce_rank[dtype, ngpus](
                    requested,
                    ctxs[r],
                    r,
                    in_ptrs,
                    out_ptrs[r],
                    scratch_ptrs,
                    sig_ptrs,
                    kid_ptrs[r],
                    n,
                    grid_cap,
                    debug_skip_barrier=(r == cfg.debug_hang_rank),
                )

        var check = CheckResult()
        var confirmed = String("none")
        if do_check:
            # --check-iters > 1 is the soak: every one of these launches is
            # poisoned first and checked element by element afterwards.
            for it in range(cfg.check_iters):
                bufs.poison_outputs(ctxs)
                _reset_kernel_ids(ctxs, kid_words)
                launch_all()
                sync_all(ctxs)
                var ran = _read_kernel_ids(ctxs, kid_words)
                if it == 0:
                    confirmed = ran
                elif ran != confirmed:
                    confirmed = "mismatch"
                check.merge(bufs.check(ctxs))

        _reset_kernel_ids(ctxs, kid_words)
        var samples = timed_iterations[launch_all](ctxs, cfg.warmup, cfg.iters, cfg.batch)
        var confirmed_timed = _read_kernel_ids(ctxs, kid_words)
        if do_check and confirmed_timed != confirmed:
            print(String("kernel id changed between checked and timed runs: ", confirmed, " vs ", confirmed_timed), file=stderr)
            confirmed = "mismatch"
        elif not do_check:
            confirmed = confirmed_timed
        if selected == KERNEL_ID_NONE:
            selected = select_kernel(num_bytes, ngpus, dtype)
        var stats = TimingStats(samples^)
        print(json_record(cfg, kernel_name(selected), confirmed, n * size_of[dtype](), n, stats, check, do_check,
                          cfg.check_iters if do_check else 0))


def run_upstream[dtype: DType, ngpus: Int](cfg: BenchConfig, ctxs: List[DeviceContext]) raises:
    """Benchmark max-core's comm.allreduce with the same timing and checks."""
    print(String("upstream: is_p2p_enabled=", is_p2p_enabled()), file=stderr)
    for size_idx in range(len(cfg.sizes_bytes)):
        var num_bytes = cfg.sizes_bytes[size_idx]
        var n = num_bytes // size_of[dtype]()
        var bufs = SizeBuffers[dtype](ctxs, n, cfg.seed, cfg.check)
        var signals = List[DeviceBuffer[DType.uint8]]()
        var rank_sigs = Array[Pointer[Signal, MutAnyOrigin], ngpus](uninitialized=True)
        for r in range(ngpus):
            signals.append(
                ctxs[r].enqueue_create_buffer[DType.uint8](
                    size_of[Signal]() + ngpus * size_of[dtype]() * max(1, n)
                )
            )
            init_signal_buffer(signals[r], ctxs[r])
            rank_sigs[r] = signals[r].unsafe_ptr().unsafe_bitcast[Signal]().as_unsafe_any_origin()
        sync_all(ctxs)
        comptime InT = TileTensor[dtype, type_of(row_major(n)), ImmutAnyOrigin]
        comptime OutT = TileTensor[dtype, type_of(row_major(n)), MutAnyOrigin]
        var in_t = Array[InT, ngpus](uninitialized=True)
        var out_t = Array[OutT, ngpus](uninitialized=True)
        for r in range(ngpus):
            in_t[r] = TileTensor(
                rebind[Pointer[Scalar[dtype], ImmutAnyOrigin]](bufs.inputs[r].unsafe_ptr()),
                row_major(n),
            )
            out_t[r] = TileTensor(bufs.outputs[r], row_major(n))
        var explicit = cfg.upstream_epilogue == "explicit"

        @always_inline
        @__parameter
        def launch_all() raises:
            if explicit:
                _upstream_launch_all_explicit_epilogue[dtype, ngpus](
                    in_t, out_t, rank_sigs, ctxs
                )
            else:
                _upstream_launch_all[dtype, ngpus](in_t, out_t, rank_sigs, ctxs)

        var check = CheckResult()
        if cfg.check:
            bufs.poison_outputs(ctxs)
            launch_all()
            sync_all(ctxs)
            check = bufs.check(ctxs)
        var samples = timed_iterations[launch_all](ctxs, cfg.warmup, cfg.iters, cfg.batch)
        var stats = TimingStats(samples^)
        print(json_record(cfg, "upstream", "upstream", n * size_of[dtype](), n, stats, check, cfg.check,
                          1 if cfg.check else 0))


def _upstream_launch_all[
    dtype: DType, ngpus: Int, L: TensorLayout
](
    in_t: Array[TileTensor[dtype, L, ImmutAnyOrigin], ngpus],
    out_t: Array[TileTensor[dtype, L, MutAnyOrigin], ngpus],
    rank_sigs: Array[Pointer[Signal, MutAnyOrigin], ngpus],
    ctxs: List[DeviceContext],
) raises:
    """Upstream call shape, in a plain function (not inside a closure)."""
    group_start()
    comptime for r in range(ngpus):
        upstream_allreduce[ngpus=ngpus](in_t, out_t[r], rank_sigs, ctxs[r])
    group_end()


def _upstream_launch_all_explicit_epilogue[
    dtype: DType, ngpus: Int, L: TensorLayout
](
    in_t: Array[TileTensor[dtype, L, ImmutAnyOrigin], ngpus],
    out_t: Array[TileTensor[dtype, L, MutAnyOrigin], ngpus],
    rank_sigs: Array[Pointer[Signal, MutAnyOrigin], ngpus],
    ctxs: List[DeviceContext],
) raises:
    """Same, with an explicit output epilogue writing each rank's output (the
    shape upstream's own test_allreduce uses for custom epilogues)."""
    comptime OutT = TileTensor[dtype, L, MutAnyOrigin]
    var outs = StaticTuple[OutT, ngpus]()
    for r in range(ngpus):
        outs[r] = out_t[r]

    @always_inline
    @__parameter
    @__copy_capture(outs)
    def outputs_lambda[
        input_index: Int,
        _dtype: DType,
        _width: SIMDLength,
        *,
        _alignment: Int,
    ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
        outs[input_index].store_linear[width=_width, alignment=_alignment](
            rebind[IndexList[1]](coord_to_index_list(coords)),
            rebind[SIMD[dtype, _width]](val),
        )

    group_start()
    comptime for r in range(ngpus):
        upstream_allreduce[
            ngpus=ngpus, output_lambda=outputs_lambda[input_index=r, ...]
        ](in_t, out_t[r].layout, rank_sigs, ctxs[r])
    group_end()
