# upstream_probe: which call shapes of max-core 26.7's upstream
# `comm.allreduce` work on this machine (diagnostic, not part of the bench).
#
# At fa9f7b2 (2026-11-22) every call with >0 elements in benchlib/runner.mojo's run_upstream faulted on
# 2x H200 (compute-sanitizer: `allreduce_1stage_float32` writes to 0xab + 16*t,
# i.e. the kernel's OUTPUT pointer is garbage). Suspect: modular/modular#6759,
# a TrivialRegisterPassable struct > 16 bytes passed by value across a host
# function call arrives corrupted. Each case below varies one thing:
#
#   dynamic              runner's shape: TileTensors with a runtime row_major(n),
#                        default output lambda, called from a plain helper
#                        function through a closure (expected to fault).
#   dynamic_direct       upstream test_allreduce.mojo's shape: same tensors,
#                        `allreduce` called straight in the function body (no
#                        closure, no helper).
#   dynamic_explicit     runtime shape + explicit output lambda capturing a
#                        StaticTuple of the N output TileTensors (upstream
#                        test's custom-epilogue shape; what runner's
#                        --upstream-epilogue explicit did).
#   dynamic_explicit_ptr runtime shape + explicit output lambda per rank that
#                        captures ONE raw 8-byte output pointer.
#   static               TileTensors with a compile-time shape row_major[N]()
#                        (each TileTensor is just a pointer), default lambda.
#   static_explicit      static shape + StaticTuple-capturing explicit lambda.
#   static_explicit_ptr  static shape + single-pointer-capturing lambda.
#   kernel_direct        no `allreduce` host function at all: upstream's own
#                        `_allreduce_1stage_kernel` launched by this file with
#                        enqueue_function (static shape, 1-stage only, lambda
#                        capturing one raw pointer).
#
# Usage: upstream_probe NGPUS --case NAME [--size small|large] [--iters 20]
#        upstream_probe --list
# small = 65536 float32 elements (256 KiB), large = 4194304 (16 MiB).
# stdout: one JSON line {case, ngpus, n_elements, ok, max_abs_err, wrong,
# p50_us, ...}; progress markers on stderr (the last one shows where a fault
# hit). Exit: 0 ok, 1 wrong results or error, 2 bad usage, 4 no GPU; a GPU
# fault aborts the process (rc 134) before any JSON line.

from std.collections import Array
from std.math import ceildiv, isinf, isnan, sin
from std.sys import argv, exit, size_of, stderr
from std.time import perf_counter_ns
from std.utils import IndexList, StaticTuple
from std.utils.numerics import inf, nan
from max.gpu.host import DeviceBuffer, DeviceContext, HostBuffer
from layout import Coord, TileTensor, coord_to_index_list, row_major
from layout.tile_layout import TensorLayout
from comm import Signal, group_start, group_end
from comm.sync import enable_p2p, init_signal_buffer, is_p2p_enabled
from comm.allreduce import allreduce, _allreduce_1stage_kernel

comptime dtype = DType.float32
comptime SMALL_N = 65536
comptime LARGE_N = 4194304
comptime WARMUP = 3
comptime CASES = (
    "dynamic",
    "dynamic_direct",
    "dynamic_explicit",
    "dynamic_explicit_ptr",
    "static",
    "static_explicit",
    "static_explicit_ptr",
    "kernel_direct",
)

comptime ElemPtr = Pointer[Scalar[dtype], MutAnyOrigin]
comptime SigPtr = Pointer[Signal, MutAnyOrigin]


def note(msg: String):
    print(String("probe: ", msg), file=stderr)


def sync_all(ctxs: List[DeviceContext]) raises:
    for i in range(len(ctxs)):
        ctxs[i].synchronize()


# ---------------------------------------------------------------- buffers ---


struct Bufs[ngpus: Int](Movable):
    """Inputs, outputs, signal buffers and host staging, one per rank, plus
    the float64 reference sum."""

    var inputs: List[DeviceBuffer[dtype]]
    var outputs: List[DeviceBuffer[dtype]]
    var signals: List[DeviceBuffer[DType.uint8]]
    var host: List[HostBuffer[dtype]]
    var refs: List[Float64]
    var in_ptrs: List[Pointer[Scalar[dtype], MutUntrackedOrigin]]
    var out_ptrs: List[Pointer[Scalar[dtype], MutUntrackedOrigin]]
    var sig_list: List[Pointer[Signal, MutUntrackedOrigin]]
    var n: Int

    def __init__(out self, ctxs: List[DeviceContext], n: Int) raises:
        self.n = n
        self.inputs = List[DeviceBuffer[dtype]]()
        self.outputs = List[DeviceBuffer[dtype]]()
        self.signals = List[DeviceBuffer[DType.uint8]]()
        self.host = List[HostBuffer[dtype]]()
        self.refs = List[Float64](length=n, fill=0.0)
        self.in_ptrs = List[Pointer[Scalar[dtype], MutUntrackedOrigin]]()
        self.out_ptrs = List[Pointer[Scalar[dtype], MutUntrackedOrigin]]()
        self.sig_list = List[Pointer[Signal, MutUntrackedOrigin]]()
        for r in range(Self.ngpus):
            self.inputs.append(ctxs[r].enqueue_create_buffer[dtype](n))
            self.outputs.append(ctxs[r].enqueue_create_buffer[dtype](n))
            self.host.append(ctxs[r].enqueue_create_host_buffer[dtype](n))
            self.signals.append(
                ctxs[r].enqueue_create_buffer[DType.uint8](
                    size_of[Signal]() + Self.ngpus * size_of[dtype]() * n
                )
            )
        sync_all(ctxs)
        for r in range(Self.ngpus):
            self.in_ptrs.append(
                rebind[Pointer[Scalar[dtype], MutUntrackedOrigin]](self.inputs[r].unsafe_ptr())
            )
            self.out_ptrs.append(
                rebind[Pointer[Scalar[dtype], MutUntrackedOrigin]](self.outputs[r].unsafe_ptr())
            )
            self.sig_list.append(
                rebind[Pointer[Signal, MutUntrackedOrigin]](
                    self.signals[r].unsafe_ptr().unsafe_bitcast[Signal]()
                )
            )
            init_signal_buffer(self.signals[r], ctxs[r])
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        for r in range(Self.ngpus):
            # input[r][i] = (r+1) * sin(0.01*i + r): different on every rank
            # and every element, never constant.
            var h = self.host[r].unsafe_ptr().as_unsafe_any_origin()
            for i in range(n):
                var x = Float32(
                    Float64(r + 1) * sin(0.01 * Float64(i) + Float64(r))
                )
                h.unsafe_store(i, x)
                refs_ptr.unsafe_store(
                    i, refs_ptr.unsafe_load(i) + x.cast[DType.float64]()
                )
            ctxs[r].enqueue_copy(self.inputs[r], self.host[r])
        sync_all(ctxs)

    def in_ptr(self, r: Int) -> ElemPtr:
        return rebind[ElemPtr](self.in_ptrs[r])

    def out_ptr(self, r: Int) -> ElemPtr:
        return rebind[ElemPtr](self.out_ptrs[r])

    def sig_ptrs(self) -> Array[SigPtr, Self.ngpus]:
        var a = Array[SigPtr, Self.ngpus](uninitialized=True)
        for r in range(Self.ngpus):
            a[r] = rebind[SigPtr](self.sig_list[r])
        return a^

    def poison(mut self, ctxs: List[DeviceContext]) raises:
        for r in range(Self.ngpus):
            self.outputs[r].enqueue_fill(nan[dtype]())
        sync_all(ctxs)

    def check(mut self, ctxs: List[DeviceContext]) raises -> Tuple[Float64, Int]:
        """(max |out - ref| over all ranks, inf if any output is NaN/inf;
        elements out of tolerance |err| <= 1e-5 * ngpus + 1e-5 * |ref|)."""
        var max_err = Float64(0)
        var wrong = 0
        var refs_ptr = self.refs.unsafe_ptr().as_unsafe_any_origin()
        for r in range(Self.ngpus):
            ctxs[r].enqueue_copy(self.host[r], self.outputs[r])
            ctxs[r].synchronize()
            var h = self.host[r].unsafe_ptr().as_unsafe_any_origin()
            for i in range(self.n):
                var g = h.unsafe_load(i).cast[DType.float64]()
                var ref_v = refs_ptr.unsafe_load(i)
                var err = abs(g - ref_v)
                if isnan(err) or isinf(err):
                    # poison (NaN) left in place, or garbage
                    wrong += 1
                    max_err = inf[DType.float64]()
                    continue
                if not (err <= 1e-5 * Float64(Self.ngpus) + 1e-5 * abs(ref_v)):
                    wrong += 1
                if err > max_err:
                    max_err = err
        return (max_err, wrong)


struct Result(Copyable, Movable):
    var max_err: Float64
    var wrong: Int
    var samples: List[Float64]

    def __init__(out self):
        self.max_err = 0
        self.wrong = -1
        self.samples = List[Float64]()

    def p50(self) -> Float64:
        if len(self.samples) == 0:
            return nan[DType.float64]()
        var s = self.samples.copy()
        sort(s)
        return s[len(s) // 2]


def _fmt(x: Float64) -> String:
    if isnan(x) or isinf(x):
        return "null"
    return String(x)


def report(name: String, ngpus: Int, n: Int, res: Result, error: String) raises:
    var ok = error.byte_length() == 0 and res.wrong == 0
    var s = String('{"case":"', name, '","ngpus":', ngpus, ',"n_elements":', n)
    s += String(',"ok":', "true" if ok else "false")
    s += String(',"max_abs_err":', _fmt(res.max_err) if res.wrong >= 0 else "null")
    s += String(',"wrong":', res.wrong)
    s += String(',"p50_us":', _fmt(res.p50()))
    s += String(',"iters":', len(res.samples))
    s += String(',"p2p":', "true" if is_p2p_enabled() else "false")
    if error.byte_length() > 0:
        s += String(',"error":"', error.replace('"', "'"), '"')
    s += "}"
    print(s)


struct Loop(Movable):
    """Iteration bookkeeping shared by every case: iteration 0 runs on
    poisoned outputs and is checked, then WARMUP untimed, then `iters` timed
    (host wall clock around launch-all + synchronize-all)."""

    var it: Int
    var iters: Int
    var t0: Int
    var res: Result

    def __init__(out self, iters: Int):
        self.it = 0
        self.iters = iters
        self.t0 = 0
        self.res = Result()

    def total(self) -> Int:
        return 1 + WARMUP + self.iters

    def before[ngpus: Int](mut self, mut b: Bufs[ngpus], ctxs: List[DeviceContext]) raises:
        if self.it == 0:
            b.poison(ctxs)
            note("first launch (checked)")
        self.t0 = perf_counter_ns()

    def after[ngpus: Int](mut self, mut b: Bufs[ngpus], ctxs: List[DeviceContext]) raises:
        sync_all(ctxs)
        var t1 = perf_counter_ns()
        if self.it == 0:
            note("first launch synchronized; checking")
            var c = b.check(ctxs)
            self.res.max_err = c[0]
            self.res.wrong = c[1]
        elif self.it > WARMUP:
            self.res.samples.append(Float64(Int(t1) - Int(self.t0)) / 1000.0)
        self.it += 1


# ------------------------------------------------------------ tensor sets ---


comptime DynLayout = type_of(row_major(Int(1)))


def dyn_inputs[ngpus: Int](b: Bufs[ngpus]) -> Array[TileTensor[dtype, DynLayout, ImmutAnyOrigin], ngpus]:
    var a = Array[TileTensor[dtype, DynLayout, ImmutAnyOrigin], ngpus](uninitialized=True)
    for r in range(ngpus):
        a[r] = TileTensor(
            rebind[Pointer[Scalar[dtype], ImmutAnyOrigin]](b.in_ptr(r)),
            row_major(b.n),
        )
    return a^


def dyn_outputs[ngpus: Int](b: Bufs[ngpus]) -> Array[TileTensor[dtype, DynLayout, MutAnyOrigin], ngpus]:
    var a = Array[TileTensor[dtype, DynLayout, MutAnyOrigin], ngpus](uninitialized=True)
    for r in range(ngpus):
        a[r] = TileTensor(b.out_ptr(r), row_major(b.n))
    return a^


comptime StatLayout[N: Int] = type_of(row_major[N]())


def stat_inputs[ngpus: Int, N: Int](b: Bufs[ngpus]) -> Array[TileTensor[dtype, StatLayout[N], ImmutAnyOrigin], ngpus]:
    var a = Array[TileTensor[dtype, StatLayout[N], ImmutAnyOrigin], ngpus](uninitialized=True)
    for r in range(ngpus):
        a[r] = TileTensor(
            rebind[Pointer[Scalar[dtype], ImmutAnyOrigin]](b.in_ptr(r)),
            row_major[N](),
        )
    return a^


def stat_outputs[ngpus: Int, N: Int](b: Bufs[ngpus]) -> Array[TileTensor[dtype, StatLayout[N], MutAnyOrigin], ngpus]:
    var a = Array[TileTensor[dtype, StatLayout[N], MutAnyOrigin], ngpus](uninitialized=True)
    for r in range(ngpus):
        a[r] = TileTensor(b.out_ptr(r), row_major[N]())
    return a^


# ------------------------------------------------------------------ cases ---


def _launch_default[
    ngpus: Int, L: TensorLayout
](
    in_t: Array[TileTensor[dtype, L, ImmutAnyOrigin], ngpus],
    out_t: Array[TileTensor[dtype, L, MutAnyOrigin], ngpus],
    sigs: Array[SigPtr, ngpus],
    ctxs: List[DeviceContext],
) raises:
    """runner.mojo's _upstream_launch_all, verbatim in shape."""
    group_start()
    comptime for r in range(ngpus):
        allreduce[ngpus=ngpus](in_t, out_t[r], sigs, ctxs[r])
    group_end()


def case_dynamic[ngpus: Int](ctxs: List[DeviceContext], n: Int, iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, n)
    var in_t = dyn_inputs(b)
    var out_t = dyn_outputs(b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)

    @always_inline
    @__parameter
    def launch_all() raises:
        _launch_default[ngpus](in_t, out_t, sigs, ctxs)

    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        launch_all()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_dynamic_direct[ngpus: Int](ctxs: List[DeviceContext], n: Int, iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, n)
    var in_t = dyn_inputs(b)
    var out_t = dyn_outputs(b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            allreduce[ngpus=ngpus](in_t, out_t[r], sigs, ctxs[r])
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_dynamic_explicit[ngpus: Int](ctxs: List[DeviceContext], n: Int, iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, n)
    var in_t = dyn_inputs(b)
    var out_t = dyn_outputs(b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    comptime OutT = TileTensor[dtype, DynLayout, MutAnyOrigin]
    var outs = StaticTuple[OutT, ngpus]()
    for r in range(ngpus):
        outs[r] = TileTensor(b.out_ptr(r), row_major(n))

    @always_inline
    @__parameter
    @__copy_capture(outs)
    def outputs_lambda[
        input_index: Int, _dtype: DType, _width: SIMDLength, *, _alignment: Int
    ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
        outs[input_index].store_linear[width=_width, alignment=_alignment](
            rebind[IndexList[1]](coord_to_index_list(coords)),
            rebind[SIMD[dtype, _width]](val),
        )

    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            allreduce[ngpus=ngpus, output_lambda=outputs_lambda[input_index=r, ...]](
                in_t, out_t[r].layout, sigs, ctxs[r]
            )
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_dynamic_explicit_ptr[ngpus: Int](ctxs: List[DeviceContext], n: Int, iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, n)
    var in_t = dyn_inputs(b)
    var out_t = dyn_outputs(b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            var op = b.out_ptr(r)

            @always_inline
            @__parameter
            @__copy_capture(op)
            def ptr_lambda[
                _dtype: DType, _width: SIMDLength, *, _alignment: Int
            ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
                var idx = rebind[IndexList[1]](coord_to_index_list(coords))[0]
                op.unsafe_store[width=_width, alignment=_alignment](
                    idx, rebind[SIMD[dtype, _width]](val)
                )

            allreduce[ngpus=ngpus, output_lambda=ptr_lambda](in_t, out_t[r].layout, sigs, ctxs[r])
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_static[ngpus: Int, N: Int](ctxs: List[DeviceContext], iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, N)
    var in_t = stat_inputs[ngpus, N](b)
    var out_t = stat_outputs[ngpus, N](b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            allreduce[ngpus=ngpus](in_t, out_t[r], sigs, ctxs[r])
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_static_explicit[ngpus: Int, N: Int](ctxs: List[DeviceContext], iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, N)
    var in_t = stat_inputs[ngpus, N](b)
    var out_t = stat_outputs[ngpus, N](b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    comptime OutT = TileTensor[dtype, StatLayout[N], MutAnyOrigin]
    var outs = StaticTuple[OutT, ngpus]()
    for r in range(ngpus):
        outs[r] = TileTensor(b.out_ptr(r), row_major[N]())

    @always_inline
    @__parameter
    @__copy_capture(outs)
    def outputs_lambda[
        input_index: Int, _dtype: DType, _width: SIMDLength, *, _alignment: Int
    ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
        outs[input_index].store_linear[width=_width, alignment=_alignment](
            rebind[IndexList[1]](coord_to_index_list(coords)),
            rebind[SIMD[dtype, _width]](val),
        )

    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            allreduce[ngpus=ngpus, output_lambda=outputs_lambda[input_index=r, ...]](
                in_t, out_t[r].layout, sigs, ctxs[r]
            )
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_static_explicit_ptr[ngpus: Int, N: Int](ctxs: List[DeviceContext], iters: Int) raises -> Result:
    var b = Bufs[ngpus](ctxs, N)
    var in_t = stat_inputs[ngpus, N](b)
    var out_t = stat_outputs[ngpus, N](b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        group_start()
        comptime for r in range(ngpus):
            var op = b.out_ptr(r)

            @always_inline
            @__parameter
            @__copy_capture(op)
            def ptr_lambda[
                _dtype: DType, _width: SIMDLength, *, _alignment: Int
            ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
                var idx = rebind[IndexList[1]](coord_to_index_list(coords))[0]
                op.unsafe_store[width=_width, alignment=_alignment](
                    idx, rebind[SIMD[dtype, _width]](val)
                )

            allreduce[ngpus=ngpus, output_lambda=ptr_lambda](in_t, out_t[r].layout, sigs, ctxs[r])
        group_end()
        lp.after(b, ctxs)
    return lp.res.copy()


def case_kernel_direct[ngpus: Int, N: Int](ctxs: List[DeviceContext], iters: Int) raises -> Result:
    """Upstream's 1-stage kernel, launched here (the `allreduce` host function
    is not involved). Grid as upstream's _allreduce_p2p computes it on sm_90:
    BLOCK_SIZE 256, at most 216 blocks."""
    comptime BLOCK = 256
    comptime simd_width = 4  # float32, 16-byte vectors on sm_90
    var grid = min(max(ceildiv(N // simd_width, BLOCK), 1), 216)
    var b = Bufs[ngpus](ctxs, N)
    var in_t = stat_inputs[ngpus, N](b)
    var out_t = stat_outputs[ngpus, N](b)
    var sigs = b.sig_ptrs()
    sync_all(ctxs)
    var lp = Loop(iters)
    while lp.it < lp.total():
        lp.before(b, ctxs)
        comptime for r in range(ngpus):
            var op = b.out_ptr(r)

            @always_inline
            @__parameter
            @__copy_capture(op)
            def ptr_lambda[
                _dtype: DType, _width: SIMDLength, *, _alignment: Int
            ](coords: Coord, val: SIMD[_dtype, _width]) -> None:
                var idx = rebind[IndexList[1]](coord_to_index_list(coords))[0]
                op.unsafe_store[width=_width, alignment=_alignment](
                    idx, rebind[SIMD[dtype, _width]](val)
                )

            comptime kernel = _allreduce_1stage_kernel[
                dtype,
                ngpus,
                StatLayout[N],
                TileTensor[dtype, StatLayout[N], ImmutAnyOrigin].Engine,
                StatLayout[N],
                BLOCK_SIZE=BLOCK,
                output_lambda=ptr_lambda,
            ]
            ctxs[r].enqueue_function[kernel](
                out_t[r].layout,
                in_t,
                sigs,
                Int32(N),
                Int32(r),
                grid_dim=grid,
                block_dim=BLOCK,
            )
        lp.after(b, ctxs)
    return lp.res.copy()


# ------------------------------------------------------------------- main ---


def run_case[ngpus: Int](name: String, large: Bool, ctxs: List[DeviceContext], iters: Int) raises -> Int:
    """Run one case; returns the element count it used (the JSON is printed
    by the caller)."""
    var n = LARGE_N if large else SMALL_N
    var res: Result
    if name == "dynamic":
        res = case_dynamic[ngpus](ctxs, n, iters)
    elif name == "dynamic_direct":
        res = case_dynamic_direct[ngpus](ctxs, n, iters)
    elif name == "dynamic_explicit":
        res = case_dynamic_explicit[ngpus](ctxs, n, iters)
    elif name == "dynamic_explicit_ptr":
        res = case_dynamic_explicit_ptr[ngpus](ctxs, n, iters)
    elif name == "static":
        res = case_static[ngpus, LARGE_N](ctxs, iters) if large else case_static[ngpus, SMALL_N](ctxs, iters)
    elif name == "static_explicit":
        res = case_static_explicit[ngpus, LARGE_N](ctxs, iters) if large else case_static_explicit[ngpus, SMALL_N](ctxs, iters)
    elif name == "static_explicit_ptr":
        res = case_static_explicit_ptr[ngpus, LARGE_N](ctxs, iters) if large else case_static_explicit_ptr[ngpus, SMALL_N](ctxs, iters)
    elif name == "kernel_direct":
        res = case_kernel_direct[ngpus, LARGE_N](ctxs, iters) if large else case_kernel_direct[ngpus, SMALL_N](ctxs, iters)
    else:
        raise Error(String("unknown case '", name, "'"))
    report(name, ngpus, n, res, "")
    return 0 if res.wrong == 0 else 1


def usage():
    print(
        "usage: upstream_probe NGPUS(2|4) --case NAME [--size small|large] [--iters N]\n"
        "       upstream_probe --list",
        file=stderr,
    )
    exit(2)


def main():
    var args = argv()
    var ngpus = 0
    var name = String("")
    var large = False
    var iters = 20
    var i = 1
    try:
        while i < len(args):
            var a = String(args[i])
            if a == "--list":
                comptime for c in range(len(CASES)):
                    print(CASES[c])
                return
            elif a == "--case" and i + 1 < len(args):
                name = String(args[i + 1])
                i += 1
            elif a == "--size" and i + 1 < len(args):
                var s = String(args[i + 1])
                if s != "small" and s != "large":
                    usage()
                large = s == "large"
                i += 1
            elif a == "--iters" and i + 1 < len(args):
                iters = atol(String(args[i + 1]))
                i += 1
            else:
                ngpus = atol(a)
            i += 1
    except:
        usage()
    if (ngpus != 2 and ngpus != 4) or name.byte_length() == 0:
        usage()

    var ctxs = List[DeviceContext]()
    try:
        var ndev = DeviceContext.number_of_devices()
        if ndev < ngpus:
            print(String("error: need ", ngpus, " GPUs, found ", ndev), file=stderr)
            exit(4)
        for r in range(ngpus):
            ctxs.append(DeviceContext(device_id=r))
    except e:
        print(String("error: no GPU: ", e), file=stderr)
        exit(4)

    var n_for_report = LARGE_N if large else SMALL_N
    try:
        # upstream test_allreduce.mojo's way (sets the flag is_p2p_enabled reads).
        var p2p = enable_p2p()
        note(String("case=", name, " ngpus=", ngpus, " n=", n_for_report, " enable_p2p=", p2p,
                    " is_p2p_enabled=", is_p2p_enabled()))
        var rc: Int
        if ngpus == 2:
            rc = run_case[2](name, large, ctxs, iters)
        else:
            rc = run_case[4](name, large, ctxs, iters)
        exit(rc)
    except e:
        var res = Result()
        try:
            report(name, ngpus, n_for_report, res, String(e))
        except:
            print(String("error: ", e), file=stderr)
        exit(1)
