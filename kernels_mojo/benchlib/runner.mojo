# Per-size benchmark + check for our kernels; benchlib/upstream.mojo runs
# upstream comm.allreduce with the same timing, checking and JSON line.
#
# Timing (--timing):
#   device (default): one sample per iteration, device time from CUDA events on
#     rank 0's stream (the NCCL peer is timed the same way). Before each
#     iteration a one-thread kernel holds rank 0's stream for HOLD_NS (or twice
#     the longest host enqueue of the warmup launches, where longer) so the
#     host has queued every rank's launch before the start event fires (host
#     launch latency is not timed). Peers' kernels are already waiting at the
#     barrier when rank 0 starts (the steady state of back-to-back
#     collectives). Rank 0 finishes only after every peer has passed the end
#     barrier (1stage, cp.async) or the middle barrier (2stage: after it, a
#     rank only copies its peers' finished slices). An iteration whose launches
#     took the host longer than the hold is counted in `hold_overruns`. Every
#     stream is synchronized after every iteration.
#   host: host wall clock (perf_counter_ns) around `batch` iterations launched
#     back to back on every GPU, then synchronizing every context; one sample is
#     that time / batch (nccl-tests' method for batch > 1).
# The samples, after `warmup` untimed iterations, go into the line as they are
# (`samples_us`); the driver computes p50/p90/min/mean from them (driver/stats.py).

from std.collections import Array
from std.sys import size_of, stderr
from std.sys.defines import get_defined_string
from std.time import global_perf_counter_ns, perf_counter_ns
from std.utils.numerics import nan
from max.gpu.host import DeviceBuffer, DeviceContext, HostBuffer

from allreduce.dispatch import (
    AR_CPASYNC_STAGES,
    LaunchCounts,
    allreduce_rank,
    kernel_exists,
    launch_2stage_ce,
    CeEvents,
    kernel_name,
    max_grid_blocks,
    push_slot_packs,
    refusal,
    scratch_elements,
    select_kernel,
)
from allreduce.kernels import (
    KERNEL_ID_NONE,
    KERNEL_ID_1STAGE,
    KERNEL_ID_2STAGE,
    KERNEL_ID_NOOP,
    KERNEL_ID_PUSH,
    KERNEL_ID_2STAGE_PUSH,
    KERNEL_ID_PUSHFLAG,
    KERNEL_ID_BULK,
    KERNEL_ID_2STAGE_CE,
    PUSH_SENTINEL,
    ElemPtr,
    KernelIdPtr,
    PushPtr,
    cpasync_kernel_id,
    push_region_words,
)
from allreduce.signal import SIGNAL_BUFFER_WORDS, SignalPtr

from .cli import EXIT_BAD_INPUT, EXIT_NO_GPU, BenchConfig, coded_error
from .check import CheckResult, RefPtr, check_rank_output, compare_runs, corrupt_element, fill_rank_inputs
from .stats import json_fixed3, json_number, json_samples, json_string


def sync_all(ctxs: List[DeviceContext]) raises:
    for i in range(len(ctxs)):
        ctxs[i].synchronize()


def timed_iterations[
    launch_all: def() raises capturing -> None
](ctxs: List[DeviceContext], warmup: Int, iters: Int, batch: Int) raises -> List[Float64]:
    """Run `warmup` untimed then `iters` timed iterations in back-to-back
    batches of `batch`; microseconds per iteration, one sample per batch.
    Also prints the mean of the host launch phase alone to stderr (diagnostic)."""
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
    var launch_total = Float64(0)
    for x in launch_samples:
        launch_total += x
    var launch_mean = launch_total / Float64(max(len(launch_samples), 1))
    print(String("timing-detail: host_launch_mean_us=", json_fixed3(launch_mean)), file=stderr)
    return samples^


comptime HOLD_NS = 100_000
"""How long the hold kernel keeps rank 0's stream busy before a device-timed
iteration, at least (100 us; the host queues 2-8 launches in 10-40 us)."""
comptime HOLD_MAX_NS = 10_000_000
"""The longest hold device_timed_iterations stretches to (10 ms)."""


def hold_stream_k(hold_ns: Int64):
    """One thread spins on the global timer for `hold_ns` (not an allreduce)."""
    var t0 = global_perf_counter_ns()
    while Int64(global_perf_counter_ns() - t0) < hold_ns:
        pass


struct DeviceSamples(Movable):
    var samples_us: List[Float64]
    var hold_overruns: Int

    def __init__(out self, var samples_us: List[Float64], hold_overruns: Int):
        self.samples_us = samples_us^
        self.hold_overruns = hold_overruns


def device_timed_iterations[
    launch_all: def() raises capturing -> None
](ctxs: List[DeviceContext], warmup: Int, iters: Int) raises -> DeviceSamples:
    """Per-iteration device times (see the header): one sample per iteration. The hold is HOLD_NS, or twice
    the longest host enqueue of the warmup launches where that is longer (2stage_ce enqueues every rank's
    copies and event waits from one thread: a few hundred microseconds on 4 GPUs), at most HOLD_MAX_NS."""
    sync_all(ctxs)
    var hold_ns = HOLD_NS
    for _ in range(warmup):
        var t0 = perf_counter_ns()
        launch_all()
        hold_ns = max(hold_ns, 2 * (Int(perf_counter_ns()) - Int(t0)))
        sync_all(ctxs)
    hold_ns = min(hold_ns, HOLD_MAX_NS)
    var samples = List[Float64](capacity=iters)
    var overruns = 0
    var launched_ns = 0

    def one_iteration() raises {mut launched_ns, imm}:
        var t0 = perf_counter_ns()
        launch_all()
        launched_ns = Int(perf_counter_ns()) - Int(t0)

    for _ in range(iters):
        ctxs[0].enqueue_function[hold_stream_k](Int64(hold_ns), grid_dim=1, block_dim=1)
        var ns = ctxs[0].execution_time(one_iteration, 1)
        sync_all(ctxs)
        if launched_ns >= hold_ns:
            overruns += 1
        samples.append(Float64(ns) / 1000.0)
    return DeviceSamples(samples^, overruns)


def timing_samples[
    launch_all: def() raises capturing -> None
](cfg: BenchConfig, ctxs: List[DeviceContext]) raises -> DeviceSamples:
    """Samples by the method --timing asks for (host: 0 overruns by definition)."""
    if cfg.timing == "device":
        return device_timed_iterations[launch_all](ctxs, cfg.warmup, cfg.iters)
    return DeviceSamples(timed_iterations[launch_all](ctxs, cfg.warmup, cfg.iters, cfg.batch), 0)


def requested_kernel_id(cfg: BenchConfig) -> Int32:
    if cfg.kernel == "1stage":
        return KERNEL_ID_1STAGE
    if cfg.kernel == "2stage":
        return KERNEL_ID_2STAGE
    if cfg.kernel == "1stage_push":
        return KERNEL_ID_PUSH
    if cfg.kernel == "2stage_push":
        return KERNEL_ID_2STAGE_PUSH
    if cfg.kernel == "1stage_pushflag":
        return KERNEL_ID_PUSHFLAG
    if cfg.kernel == "1stage_bulk":
        return KERNEL_ID_BULK
    if cfg.kernel == "2stage_ce":
        return KERNEL_ID_2STAGE_CE
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


def _json_bool_or_null(known: Bool, value: Bool) -> String:
    if not known:
        return "null"
    return "true" if value else "false"


def check_fields(check: CheckResult, ours: Bool) -> String:
    """The check's part of the JSON line (docs/ALLREDUCE.md): `wrong` (the elements failing a property
    required of the impl), the bound, rank agreement and run-to-run sameness, each with its first
    failing element. `ours`: same bits every run is required (it counts in `wrong`)."""
    var s = String(',"max_abs_err":', json_number(check.max_abs_err))
    s += String(',"wrong":', check.wrong(ours))
    s += String(',"out_of_bound":', check.out_of_bound)
    s += String(',"max_err_over_bound":', json_number(check.max_err_over_bound))
    if check.oob_element >= 0:
        s += String(',"out_of_bound_first":{"rank":', check.oob_rank, ',"element":', check.oob_element,
                    ',"value":', json_number(check.oob_value), ',"reference":', json_number(check.oob_reference),
                    ',"bound":', json_number(check.oob_bound), "}")
    else:
        s += ',"out_of_bound_first":null'
    s += String(',"rank_mismatch":', check.rank_mismatch)
    if check.mismatch_element >= 0:
        s += String(',"rank_mismatch_first":{"rank":', check.mismatch_rank, ',"element":', check.mismatch_element,
                    ',"value":', json_number(check.mismatch_value), ',"rank0_value":',
                    json_number(check.mismatch_rank0_value), "}")
    else:
        s += ',"rank_mismatch_first":null'
    s += String(',"same_bits_every_run":', _json_bool_or_null(check.runs_compared > 0, check.run_to_run_mismatch == 0))
    s += String(',"runs_compared":', check.runs_compared)
    s += String(',"run_to_run_mismatch":', check.run_to_run_mismatch)
    return s


# This executable's name, every line's "impl" ("ours", "upstream"): the build passes it (-D IMPL_NAME=...,
# driver/targets.py Target.impl), and the driver refuses a line whose impl is not the one it asked for. A build
# without it says "unnamed".
comptime IMPL_NAME = get_defined_string["IMPL_NAME", "unnamed"]()


def json_record(
    cfg: BenchConfig,
    kernel_selected: String,
    kernel_confirmed: String,
    num_bytes: Int,
    num_elements: Int,
    samples_us: List[Float64],
    check: CheckResult,
    checked: Bool,
    checked_iters: Int,
    hold_overruns: Int = 0,
    timed: Bool = True,
) -> String:
    var requested = cfg.kernel if cfg.impl == "ours" else "upstream"
    var s = String("{")
    s += String('"suite":"allreduce","impl":', json_string(String(IMPL_NAME)))
    s += String(',"kernel_requested":', json_string(requested))
    s += String(',"kernel_selected":', json_string(kernel_selected))
    s += String(',"kernel_confirmed":', json_string(kernel_confirmed))
    s += String(',"dtype":', json_string(cfg.dtype))
    s += String(',"ngpus":', cfg.ngpus)
    s += String(',"bytes":', num_bytes)
    s += String(',"elements":', num_elements)
    s += String(',"iters":', cfg.iters)
    s += String(',"warmup":', cfg.warmup)
    s += String(',"batch":', cfg.batch if cfg.timing == "host" else 1)
    s += String(',"timing":', json_string(cfg.timing))
    s += String(',"timed":', "true" if timed else "false")
    s += String(',"hold_overruns":', hold_overruns)
    s += String(',"samples_us":', json_samples(samples_us))
    s += check_fields(check, cfg.impl == "ours")
    s += String(',"checked":', "true" if checked else "false")
    s += String(',"checked_iters":', checked_iters)
    s += "}"
    return s


struct SizeBuffers[dtype: DType](Movable):
    """Per-size device inputs/outputs and host staging (one entry per rank), and
    for the check: the float64 reference sums and sums of magnitudes, and rank
    0's output of each kernel's first checked launch on these inputs
    (`first_outs`, keyed by `first_ids`: the bits every later launch of that
    kernel must reproduce)."""

    var inputs: List[DeviceBuffer[Self.dtype]]
    var outputs: List[DeviceBuffer[Self.dtype]]
    var host: List[HostBuffer[Self.dtype]]
    var refs: List[Float64]
    var abs_sums: List[Float64]
    var first_outs: List[List[Scalar[Self.dtype]]]
    var first_ids: List[Int32]
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
        self.abs_sums = List[Float64](length=num_elements if want_refs else 0, fill=0.0)
        self.first_outs = List[List[Scalar[Self.dtype]]]()
        self.first_ids = List[Int32]()
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        var abs_ptr = self.abs_sums.unsafe_ptr().as_unsafe_any_origin()
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
                abs_ptr,
                want_refs,
            )
            ctxs[r].enqueue_copy(self.inputs[r], self.host[r])
        sync_all(ctxs)

    def poison_outputs(mut self, ctxs: List[DeviceContext]) raises:
        for r in range(len(ctxs)):
            self.outputs[r].enqueue_fill(nan[Self.dtype]())
        sync_all(ctxs)

    def _first_index(self, kernel_id: Int32) -> Int:
        for i in range(len(self.first_ids)):
            if self.first_ids[i] == kernel_id:
                return i
        return -1

    def _same_bits_as_first(mut self, mut result: CheckResult, kernel_id: Int32) raises:
        """Rank 0's output (in host[0]) against the first checked launch of the
        same kernel on these inputs; that first launch keeps its own. Kernels
        are compared with themselves only: each sums in a fixed order, not all
        in the same one (2stage_ce on 3+ GPUs adds in its rounds' order)."""
        var n = self.num_elements
        var rank0 = self.host[0].unsafe_ptr().as_unsafe_any_origin()
        var i = self._first_index(kernel_id)
        if i < 0:
            var first = List[Scalar[Self.dtype]](length=n, fill=0)
            for e in range(n):
                first[e] = rank0.unsafe_load(e)
            self.first_outs.append(first^)
            self.first_ids.append(kernel_id)
            return
        compare_runs[Self.dtype](result, rank0, self.first_outs[i].unsafe_ptr().as_unsafe_any_origin(), n)

    def check(
        mut self, ctxs: List[DeviceContext], corrupt_element_index: Int = -1, kernel_id: Int32 = KERNEL_ID_NONE
    ) raises -> CheckResult:
        """Copy every rank's output to host and check every element: the bound,
        rank agreement, and rank 0's bits against the first checked launch of
        the same kernel (`kernel_id`, the one launched; upstream: NONE).
        `corrupt_element_index` >= 0 (--debug-corrupt-element): rank 1's element
        is moved out of its bound after the copy, before the check."""
        var result = CheckResult()
        var n = self.num_elements
        if n == 0:
            return result^
        var ngpus = len(ctxs)
        # rank 0's output stays in host[0]; other ranks go through host[1].
        ctxs[0].enqueue_copy(self.host[0], self.outputs[0])
        ctxs[0].synchronize()
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        var abs_ptr = self.abs_sums.unsafe_ptr().as_unsafe_any_origin()
        var rank0 = self.host[0].unsafe_ptr().as_unsafe_any_origin()
        check_rank_output[Self.dtype](result, rank0, 0, rank0, refs_ptr, abs_ptr, n, ngpus)
        self._same_bits_as_first(result, kernel_id)
        for r in range(1, ngpus):
            ctxs[r].enqueue_copy(self.host[1], self.outputs[r])
            ctxs[r].synchronize()
            var out_r = self.host[1].unsafe_ptr().as_unsafe_any_origin()
            if r == 1 and corrupt_element_index >= 0:
                var shift = corrupt_element[Self.dtype](out_r, corrupt_element_index, refs_ptr, abs_ptr, ngpus)
                print(String("debug: rank 1 element ", corrupt_element_index, " moved by ", shift,
                             " (4x its bound) before the check"), file=stderr)
            check_rank_output[Self.dtype](result, out_r, r, rank0, refs_ptr, abs_ptr, n, ngpus)
        if result.out_of_bound > 0 or result.rank_mismatch > 0 or result.run_to_run_mismatch > 0:
            print(
                String(
                    "check: ", result.out_of_bound, " elements out of bound, ",
                    result.rank_mismatch, " elements differ from rank 0, ",
                    result.run_to_run_mismatch, " elements of rank 0 differ from the first checked launch",
                ),
                file=stderr,
            )
        return result^

    def same_bits_after_timing(
        mut self, ctxs: List[DeviceContext], kernel_id: Int32 = KERNEL_ID_NONE
    ) raises -> CheckResult:
        """The last timed launch (of `kernel_id`) ran on the checked inputs: rank
        0's output against that kernel's first checked launch, bit for bit
        (nothing else; nothing when no checked launch ran that kernel)."""
        var result = CheckResult()
        if self.num_elements == 0 or self._first_index(kernel_id) < 0:
            return result^
        ctxs[0].enqueue_copy(self.host[0], self.outputs[0])
        ctxs[0].synchronize()
        self._same_bits_as_first(result, kernel_id)
        if result.run_to_run_mismatch > 0:
            print(String("check: ", result.run_to_run_mismatch, " elements of rank 0 after the timed launches differ",
                         " from the first checked launch"), file=stderr)
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


struct Lane[dtype: DType, ngpus: Int](Movable):
    """Everything one independent stream of allreduces needs on every rank:
    contexts (one stream each, and a second context per rank whose stream
    issues 2stage_ce's copies), signal buffers (zeroed once), kernel-id words,
    inputs/outputs/references, the 2stage scratch and the 1stage_push receive
    regions for the current size. The push regions start all-sentinel at every
    set_size, with the call count (whose parity is the push generation) at 0
    on every rank."""

    var ctxs: List[DeviceContext]
    var copy_ctxs: List[DeviceContext]
    var ce_events: CeEvents
    var signals: List[DeviceBuffer[DType.uint32]]
    var kid_words: List[DeviceBuffer[DType.int32]]
    var scratch: List[DeviceBuffer[Self.dtype]]
    var push_rx: List[DeviceBuffer[DType.uint32]]
    var push_slots: Int
    var push_calls: Int
    var pushflag_calls: Int
    var bufs: SizeBuffers[Self.dtype]

    def __init__(out self, var ctxs: List[DeviceContext]) raises:
        self.signals = List[DeviceBuffer[DType.uint32]]()
        self.kid_words = List[DeviceBuffer[DType.int32]]()
        self.scratch = List[DeviceBuffer[Self.dtype]]()
        self.push_rx = List[DeviceBuffer[DType.uint32]]()
        self.push_slots = 0
        self.push_calls = 0
        self.pushflag_calls = 0
        self.copy_ctxs = List[DeviceContext]()
        for r in range(Self.ngpus):
            self.copy_ctxs.append(DeviceContext(device_id=r))
            self.signals.append(ctxs[r].enqueue_create_buffer[DType.uint32](SIGNAL_BUFFER_WORDS))
            self.signals[r].enqueue_fill(0)
            self.kid_words.append(ctxs[r].enqueue_create_buffer[DType.int32](1))
        sync_all(ctxs)
        self.ce_events = CeEvents(ctxs, self.copy_ctxs)
        self.bufs = SizeBuffers[Self.dtype](ctxs, 0, 0, False)
        self.ctxs = ctxs^

    def set_size(mut self, n: Int, seed: Int, want_refs: Bool) raises:
        """(Re)allocate inputs, outputs, scratch and push regions for n elements."""
        self.scratch = List[DeviceBuffer[Self.dtype]]()
        self.push_rx = List[DeviceBuffer[DType.uint32]]()
        self.bufs = SizeBuffers[Self.dtype](self.ctxs, n, seed, want_refs)
        self.push_slots = push_slot_packs[Self.dtype](n)
        self.push_calls = 0
        self.pushflag_calls = 0
        for r in range(Self.ngpus):
            self.scratch.append(
                self.ctxs[r].enqueue_create_buffer[Self.dtype](scratch_elements[Self.dtype](n, Self.ngpus))
            )
            var words = max(1, push_region_words(Self.ngpus, self.push_slots))
            self.push_rx.append(self.ctxs[r].enqueue_create_buffer[DType.uint32](words))
            self.push_rx[r].enqueue_fill(PUSH_SENTINEL)
        sync_all(self.ctxs)

    def launch(mut self, requested: Int32, grid_cap: Int, hang_rank: Int) raises -> Int32:
        """Launch one allreduce on every rank (select + launch in one path);
        returns the kernel id launched."""
        var n = self.bufs.num_elements
        var sig_ptrs = Array[SignalPtr, Self.ngpus](fill=self.signals[0].unsafe_ptr().as_unsafe_any_origin())
        var in_ptrs = Array[ElemPtr[Self.dtype], Self.ngpus](fill=self.bufs.inputs[0].unsafe_ptr().as_unsafe_any_origin())
        var scratch_ptrs = Array[ElemPtr[Self.dtype], Self.ngpus](fill=self.scratch[0].unsafe_ptr().as_unsafe_any_origin())
        var rx_ptrs = Array[PushPtr, Self.ngpus](fill=self.push_rx[0].unsafe_ptr().as_unsafe_any_origin())
        var out_ptrs = Array[ElemPtr[Self.dtype], Self.ngpus](fill=self.bufs.outputs[0].unsafe_ptr().as_unsafe_any_origin())
        for r in range(Self.ngpus):
            out_ptrs[r] = self.bufs.outputs[r].unsafe_ptr().as_unsafe_any_origin()
            rx_ptrs[r] = self.push_rx[r].unsafe_ptr().as_unsafe_any_origin()
            sig_ptrs[r] = self.signals[r].unsafe_ptr().as_unsafe_any_origin()
            in_ptrs[r] = self.bufs.inputs[r].unsafe_ptr().as_unsafe_any_origin()
            scratch_ptrs[r] = self.scratch[r].unsafe_ptr().as_unsafe_any_origin()
        var counts = LaunchCounts(self.push_calls, self.pushflag_calls)
        # Selection and launch in one code path: the kernel chosen here is the one every rank launches.
        var selected = requested
        if selected == KERNEL_ID_NONE:
            selected = select_kernel(n * size_of[Self.dtype](), Self.ngpus, Self.dtype)
        if selected == KERNEL_ID_2STAGE_CE:  # enqueued for all ranks together (its cross-GPU events)
            if hang_rank >= 0:
                raise Error("--debug-hang-rank: 2stage_ce has no barrier to skip; use another --kernel")
            var kid_ptrs = Array[KernelIdPtr, Self.ngpus](fill=self.kid_words[0].unsafe_ptr().as_unsafe_any_origin())
            for r in range(Self.ngpus):
                kid_ptrs[r] = self.kid_words[r].unsafe_ptr().as_unsafe_any_origin()
            launch_2stage_ce[Self.dtype, Self.ngpus](
                self.ctxs, self.copy_ctxs, self.ce_events, in_ptrs, out_ptrs, scratch_ptrs, kid_ptrs, n, grid_cap
            )
            return selected
        for r in range(Self.ngpus):
            _ = allreduce_rank[Self.dtype, Self.ngpus](
                selected,
                self.ctxs[r],
                r,
                in_ptrs,
                out_ptrs,
                scratch_ptrs,
                sig_ptrs,
                rx_ptrs,
                self.push_slots,
                counts,
                self.kid_words[r].unsafe_ptr().as_unsafe_any_origin(),
                n,
                grid_cap,
                debug_skip_barrier=(r == hang_rank),
            )
        # Every rank launched the same kernel once: move the counts its next call depends on.
        if n > 0:
            if selected == KERNEL_ID_PUSH:
                self.push_calls += 1
            elif selected == KERNEL_ID_PUSHFLAG:
                self.pushflag_calls += 1
        return selected

    def reset_kernel_ids(mut self) raises:
        _reset_kernel_ids(self.ctxs, self.kid_words)

    def confirmed(self) raises -> String:
        return _read_kernel_ids(self.ctxs, self.kid_words)


def _alternation() -> List[Int32]:
    """Every kernel built into this binary, in the order --alternate cycles them."""
    var ids = List[Int32]()
    ids.append(KERNEL_ID_1STAGE)
    ids.append(KERNEL_ID_2STAGE)
    ids.append(KERNEL_ID_PUSH)
    ids.append(KERNEL_ID_2STAGE_PUSH)
    ids.append(KERNEL_ID_PUSHFLAG)
    ids.append(KERNEL_ID_2STAGE_CE)
    if kernel_exists(KERNEL_ID_BULK):
        ids.append(KERNEL_ID_BULK)
    comptime for stages in range(2, 5):
        if kernel_exists(cpasync_kernel_id[stages]()):
            ids.append(cpasync_kernel_id[stages]())
    return ids^


def _hold_memory(ctxs: List[DeviceContext], fraction: Float64) raises -> List[DeviceBuffer[DType.uint8]]:
    """Memory-pressure filler: take `fraction` of each GPU's free memory."""
    var fillers = List[DeviceBuffer[DType.uint8]]()
    for r in range(len(ctxs)):
        var info = ctxs[r].get_memory_info()
        var nbytes = Int(Float64(Int(info[0])) * fraction)
        fillers.append(ctxs[r].enqueue_create_buffer[DType.uint8](max(1, nbytes)))
        fillers[r].enqueue_fill(0xA5)
        print(String("stress: GPU ", r, " holds a ", nbytes // (1024 * 1024), " MiB filler (", Int(fraction * 100),
                     "% of the ", Int(info[0]) // (1024 * 1024), " MiB free)"), file=stderr)
    sync_all(ctxs)
    return fillers^


def run_ours[dtype: DType, ngpus: Int](cfg: BenchConfig, ctxs: List[DeviceContext]) raises:
    """Benchmark (and with --check-iters, soak) our kernels at every size in
    cfg; one JSON line per size.

    Stress switches (all checked element by element, every launch):
      --alternate 1      cycle every kernel built in, back to back, so a stale
                         flag or signal left by one kernel would corrupt the next
      --refresh-every N  fresh random inputs (new seed) every N checked launches
      --lanes K          K independent allreduces in flight at once, each on
                         its own stream per GPU with its own buffers and signals
                         (grid cap divided by K so every block stays resident)
      --mem-pressure F   a filler holds fraction F of each GPU's free memory
    """
    var fillers = List[DeviceBuffer[DType.uint8]]()
    if cfg.mem_pressure > 0:
        fillers = _hold_memory(ctxs, cfg.mem_pressure)
    var lanes = List[Lane[dtype, ngpus]]()
    var grid_cap = max_grid_blocks(ctxs[0])
    for r in range(ngpus):
        grid_cap = min(grid_cap, max_grid_blocks(ctxs[r]))
    if cfg.max_blocks > 0:
        grid_cap = min(grid_cap, cfg.max_blocks)
    for lane in range(cfg.lanes):
        var lane_ctxs = List[DeviceContext]()
        for r in range(ngpus):
            if lane == 0:
                lane_ctxs.append(ctxs[r])
            else:
                lane_ctxs.append(DeviceContext(device_id=r))
        lanes.append(Lane[dtype, ngpus](lane_ctxs^))
    var lane_grid_cap = max(1, grid_cap // cfg.lanes)

    var requested = requested_kernel_id(cfg)
    if requested != KERNEL_ID_NONE:  # a forced kernel must allow every size asked for, before anything runs
        for i in range(len(cfg.sizes_bytes)):
            var why = refusal(requested, cfg.sizes_bytes[i])
            if why:
                raise coded_error(EXIT_BAD_INPUT, String(why, " (--kernel ", cfg.kernel, ", --sizes ",
                                                          cfg.sizes_bytes[i], ", --dtype ", cfg.dtype, ", --ngpus ",
                                                          ngpus, ")"))
    var cycle = _alternation()
    # The noop diagnostic computes nothing, so there is nothing to check.
    var do_check = cfg.check and requested != KERNEL_ID_NOOP
    for size_idx in range(len(cfg.sizes_bytes)):
        var num_bytes = cfg.sizes_bytes[size_idx]
        var n = num_bytes // size_of[dtype]()
        for lane in range(cfg.lanes):
            lanes[lane].set_size(n, cfg.seed + lane, do_check)

        var selected = KERNEL_ID_NONE

        @always_inline
        @__parameter
        def launch_all() raises:
            selected = lanes[0].launch(requested, grid_cap, cfg.debug_hang_rank)

        var check = CheckResult()
        var confirmed = String("none")
        var alternating = cfg.alternate and requested == KERNEL_ID_NONE
        if do_check:
            # --check-iters > 1 is the soak: every one of these launches is
            # poisoned first and checked element by element afterwards.
            for it in range(cfg.check_iters):
                if cfg.refresh_every > 0 and it > 0 and it % cfg.refresh_every == 0:
                    for lane in range(cfg.lanes):
                        lanes[lane].set_size(n, cfg.seed + 7919 * it + lane, True)
                var want = requested
                if alternating:
                    want = cycle[it % len(cycle)]
                for lane in range(cfg.lanes):
                    lanes[lane].bufs.poison_outputs(lanes[lane].ctxs)
                    lanes[lane].reset_kernel_ids()
                var launched = List[Int32]()
                for lane in range(cfg.lanes):
                    var cap = grid_cap if cfg.lanes == 1 else lane_grid_cap
                    selected = lanes[lane].launch(want, cap, cfg.debug_hang_rank)
                    launched.append(selected)
                for lane in range(cfg.lanes):
                    sync_all(lanes[lane].ctxs)
                for lane in range(cfg.lanes):
                    var ran = lanes[lane].confirmed()
                    if alternating:
                        if n > 0 and ran != kernel_name(want):
                            print(String("alternate: launch ", it, " lane ", lane, " asked for ", kernel_name(want),
                                         ", the GPU reports ", ran), file=stderr)
                            confirmed = "mismatch"
                        elif it == 0:
                            confirmed = "alternate"
                    elif it == 0 and lane == 0:
                        confirmed = ran
                    elif ran != confirmed:
                        confirmed = "mismatch"
                    check.merge(lanes[lane].bufs.check(lanes[lane].ctxs, cfg.debug_corrupt_element, launched[lane]))

        # A wrong kernel is never timed: the line reports the check and no timing.
        if do_check and (check.wrong(True) > 0 or confirmed == "mismatch"):
            print(String("not timed: ", check.wrong(True), " wrong elements, kernel confirmed: ", confirmed),
                  file=stderr)
            print(json_record(cfg, kernel_name(selected), confirmed, n * size_of[dtype](), n, List[Float64](),
                              check, do_check, cfg.check_iters * cfg.lanes, 0, timed=False))
            continue
        lanes[0].reset_kernel_ids()
        var timing = timing_samples[launch_all](cfg, ctxs)
        var confirmed_timed = lanes[0].confirmed()
        if do_check:  # the timed launches reduced lane 0's checked inputs: the same bits again
            check.merge(lanes[0].bufs.same_bits_after_timing(lanes[0].ctxs, selected))
        if alternating:
            if n == 0 and confirmed == "none":
                confirmed = "alternate"
        elif do_check and confirmed_timed != confirmed:
            print(String("kernel id changed between checked and timed runs: ", confirmed, " vs ", confirmed_timed), file=stderr)
            confirmed = "mismatch"
        elif not do_check:
            confirmed = confirmed_timed
        var selected_name = String("alternate") if alternating else kernel_name(selected)
        if not alternating and selected == KERNEL_ID_NONE:
            selected_name = kernel_name(select_kernel(num_bytes, ngpus, dtype))
        print(json_record(cfg, selected_name, confirmed, n * size_of[dtype](), n, timing.samples_us, check, do_check,
                          cfg.check_iters * cfg.lanes if do_check else 0, timing.hold_overruns))
    # Keep-alives for what `launch_all` captures. A @__parameter closure
    # captures by reference but its calls do not count as uses for ASAP
    # destruction: once the last named use of a captured local has passed, its
    # stack slot can be reused while the closure still reads it. Commit 872a62c
    # dropped the last named use of grid_cap inside the size loop; from the
    # second size on, launch_all then read a garbage grid cap, and 16 MiB
    # (4096 blocks, beyond the 1024-block signal layout) hung on 2x H200
    # (2026-11-22: bisected to the host code; reverted in 0edb130; the log is in
    # experiments/2026-11-22-start-barrier-ordering).
    _ = grid_cap
    _ = requested
    _ = lanes^
    _ = fillers^


struct ContextCache(Movable):
    """The process's DeviceContexts, one per GPU, opened on first need and kept:
    a one-shot run opens the GPUs of its one case; a `--serve` worker keeps
    them across requests (a 2-GPU request after a 4-GPU one reuses the first
    two). P2P is enabled once per process (`p2p_enabled`): by
    DeviceContext.enable_all_peer_access() here (it covers every GPU pair
    present, as in the one-shot run), or by the caller (upstream_bench:
    comm.sync.enable_p2p) who then sets the flag. Per-request buffers are not
    held here: they live and die inside run_ours / run_upstream."""

    var ctxs: List[DeviceContext]
    var num_devices: Int  # -1 until asked
    var p2p_enabled: Bool

    def __init__(out self):
        self.ctxs = List[DeviceContext]()
        self.num_devices = -1
        self.p2p_enabled = False

    def open(mut self, ngpus: Int, enable_peer_access: Bool = True) raises -> List[DeviceContext]:
        """The contexts of GPUs 0..ngpus-1, opening those not open yet. Raises
        coded_error: 4 without a GPU, 2 for bad configs (more GPUs than
        present, a pair without P2P access, enabling P2P failed).
        `enable_peer_access` False leaves enabling P2P to the caller
        (upstream_bench uses upstream's own comm.sync.enable_p2p)."""
        if self.num_devices < 0:
            self.num_devices = DeviceContext.number_of_devices()
        var ndev = self.num_devices
        if ndev == 0:
            raise coded_error(EXIT_NO_GPU, "no GPU: no devices found")
        if ngpus > ndev:
            raise coded_error(EXIT_BAD_INPUT, String("--ngpus ", ngpus, " exceeds the ", ndev, " GPU(s) present"))
        try:
            for i in range(len(self.ctxs), ngpus):
                self.ctxs.append(DeviceContext(device_id=i))
        except e:
            raise coded_error(EXIT_NO_GPU, String("no GPU: ", e))
        var no_access_from = -1
        var no_access_to = -1
        try:
            for i in range(ngpus):
                for j in range(ngpus):
                    if no_access_from < 0 and i != j and not self.ctxs[i].can_access(self.ctxs[j]):
                        no_access_from = i
                        no_access_to = j
        except e:
            raise coded_error(EXIT_BAD_INPUT, String("enabling P2P access failed: ", e))
        if no_access_from >= 0:
            raise coded_error(EXIT_BAD_INPUT, String("no P2P access from GPU ", no_access_from, " to GPU ",
                                                      no_access_to, " (NVLink/PCIe peer access required)"))
        if enable_peer_access and not self.p2p_enabled:
            try:
                DeviceContext.enable_all_peer_access()
            except e:
                raise coded_error(EXIT_BAD_INPUT, String("enabling P2P access failed: ", e))
            self.p2p_enabled = True
        var out = List[DeviceContext]()
        for i in range(ngpus):
            out.append(self.ctxs[i])
        return out^
