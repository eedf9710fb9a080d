# Allreduce (sum) device kernels. One launch per rank; every rank reads its
# peers' buffers directly over NVLink (P2P). Element type: float32, bfloat16 or
# float16; 16-bit types accumulate in float32. Peers are always summed in rank
# order 0..ngpus-1, so every rank produces bitwise identical results.
#
# Every kernel writes its KERNEL_ID_* constant into a one-word device buffer
# (`kernel_id_out`) so the host can confirm which kernel actually ran.

from std.collections import Array
from std.memory import bitcast
from std.sys import size_of
from std.sys.defines import get_defined_int
from max.gpu import global_idx, thread_idx, block_idx, block_dim, grid_dim, MAX_THREADS_PER_BLOCK_METADATA
from std.utils.index import StaticTuple
from max.gpu.memory import (
    AddressSpace,
    async_copy,
    async_copy_commit_group,
    async_copy_wait_group,
    external_memory,
)

from std.atomic import Atomic, Ordering
from std.memory import stack_allocation
from std.sys._assembly import inlined_assembly
from max.gpu import barrier
from max.gpu.sync import (
    mbarrier_init,
    mbarrier_arrive_expect_tx_shared,
    mbarrier_try_wait_parity_shared,
)

from .signal import (
    MAX_GPUS,
    SignalPtr,
    cross_gpu_barrier,
    signal_peers,
    wait_peers,
    ORDER_RELEASE_ACQUIRE,
    PUSHED_BASE,
    RESULT_BASE,
    COUNTER_BASE,
)

# ---- kernel ids (also the values written to the device word) ----
comptime KERNEL_ID_NONE: Int32 = 0
"""No kernel ran (device word left at its reset value)."""
comptime KERNEL_ID_1STAGE: Int32 = 1
comptime KERNEL_ID_2STAGE: Int32 = 2
comptime KERNEL_ID_PUSH: Int32 = 3
comptime KERNEL_ID_2STAGE_PUSH: Int32 = 4
comptime KERNEL_ID_PUSHFLAG: Int32 = 5
"""1stage_pushflag: one-shot, every rank stores its input into its peers'
scratch, per-chunk flags (no barrier)."""
comptime KERNEL_ID_BULK: Int32 = 7
"""1stage_bulk: 1stage whose loads are cp.async.bulk copies into shared memory."""
comptime KERNEL_ID_2STAGE_CE: Int32 = 8
"""2stage_ce: two-shot whose data the copy engines move (reduce-scatter and all-gather copies in
permutation rounds); the SMs only add, in local memory. Id 6 was the removed one-shot 1stage_ce."""
comptime KERNEL_ID_NOOP: Int32 = 90
"""Diagnostic only (never auto-selected): records its id and returns; no
barrier, no data. Measures the launch + synchronize floor."""
comptime KERNEL_ID_CPASYNC_BASE: Int32 = 10
"""1stage_cpasync with S stages has id KERNEL_ID_CPASYNC_BASE + S."""


@always_inline
def cpasync_kernel_id[stages: Int]() -> Int32:
    return KERNEL_ID_CPASYNC_BASE + Int32(stages)


comptime VECTOR_BYTES = 16
"""Every vectorised access moves 16 bytes (one 128-bit load/store)."""


@always_inline
def vector_width[dtype: DType]() -> Int:
    return VECTOR_BYTES // size_of[dtype]()


comptime ElemPtr[dtype: DType] = Pointer[Scalar[dtype], MutAnyOrigin]
comptime KernelIdPtr = Pointer[Int32, MutAnyOrigin]


# ---- peer pointers as kernel arguments ----
# Every per-rank pointer reaches a kernel as its own scalar argument (slots
# 0..MAX_PEER_ARGS-1; slots >= ngpus are ignored), never as an Array/struct
# argument: Mojo 1.2 mis-passes by-value aggregates wider than 16 bytes across
# some call boundaries (modular/modular#6759), and Array[ptr, 4] is 32 bytes.
# The kernel rebuilds the Array in registers/local memory.
comptime MAX_PEER_ARGS = 8


@always_inline
def peer_array[
    T: TrivialRegisterPassable, ngpus: Int
](p0: T, p1: T, p2: T, p3: T, p4: T, p5: T, p6: T, p7: T) -> Array[T, ngpus]:
    comptime assert ngpus >= 1 and ngpus <= MAX_PEER_ARGS, "ngpus must be in [1, 8]"
    var a = Array[T, ngpus](fill=p0)
    comptime if ngpus > 1:
        a[1] = p1
    comptime if ngpus > 2:
        a[2] = p2
    comptime if ngpus > 3:
        a[3] = p3
    comptime if ngpus > 4:
        a[4] = p4
    comptime if ngpus > 5:
        a[5] = p5
    comptime if ngpus > 6:
        a[6] = p6
    comptime if ngpus > 7:
        a[7] = p7
    return a^


@always_inline
def _record_kernel_id(kernel_id_out: KernelIdPtr, kernel_id: Int32):
    if global_idx.x == 0:
        kernel_id_out.unsafe_store(kernel_id)


comptime AR_NC_LOADS = get_defined_int["AR_NC_LOADS", 0]() != 0
"""Experiment (default 0): 1stage/2stage read the ranks' inputs with non-coherent loads
(`ld.global.nc`, Mojo's `invariant=True`), as upstream comm.allreduce does. The inputs do not change
while a launch reads them: a peer wrote its input before its own launch (stream order), and the start
barrier orders this rank's reads after that launch began."""


@always_inline
def _sum_vector_at[
    dtype: DType, ngpus: Int, width: Int
](inputs: Array[ElemPtr[dtype], ngpus], elem_idx: Int) -> SIMD[dtype, width]:
    """Sum `width` elements at `elem_idx` over all ranks, in rank order."""
    comptime alignment = width * size_of[dtype]()
    var vals = Array[SIMD[dtype, width], ngpus](uninitialized=True)
    comptime for r in range(ngpus):
        vals[r] = inputs[r].unsafe_load[width=width, alignment=alignment, invariant=AR_NC_LOADS](
            elem_idx
        )
    var acc = vals[0].cast[DType.float32]()
    comptime for r in range(1, ngpus):
        acc += vals[r].cast[DType.float32]()
    return acc.cast[dtype]()


@always_inline
def _reduce_vectors[
    dtype: DType, ngpus: Int, unroll: Int, write_scratch: Bool
](
    inputs: Array[ElemPtr[dtype], ngpus],
    output: ElemPtr[dtype],
    scratch_out: ElemPtr[dtype],
    first_vector: Int,
    count: Int,
    tid: Int,
    stride: Int,
):
    """Grid-strided over j in [0, count): reduce vector first_vector + j from
    all ranks into output (and into scratch_out at j when write_scratch).
    Thread `tid` always handles exactly j = tid + k * stride (k = 0, 1, ...);
    `unroll` only groups those into batches whose loads are all issued before
    any sum, for more bytes in flight. Sums are in rank order either way."""
    comptime V = vector_width[dtype]()
    var j = tid
    comptime if unroll > 1:
        while j + (unroll - 1) * stride < count:
            var vals = Array[SIMD[dtype, V], unroll * ngpus](uninitialized=True)
            comptime for u in range(unroll):
                comptime for r in range(ngpus):
                    vals[u * ngpus + r] = inputs[r].unsafe_load[
                        width=V, alignment=VECTOR_BYTES, invariant=AR_NC_LOADS
                    ]((first_vector + j + u * stride) * V)
            comptime for u in range(unroll):
                var acc = vals[u * ngpus].cast[DType.float32]()
                comptime for r in range(1, ngpus):
                    acc += vals[u * ngpus + r].cast[DType.float32]()
                var res = acc.cast[dtype]()
                output.unsafe_store[alignment=VECTOR_BYTES](
                    (first_vector + j + u * stride) * V, res
                )
                comptime if write_scratch:
                    scratch_out.unsafe_store[alignment=VECTOR_BYTES](
                        (j + u * stride) * V, res
                    )
            j += unroll * stride
    while j < count:
        var res = _sum_vector_at[dtype, ngpus, V](inputs, (first_vector + j) * V)
        output.unsafe_store[alignment=VECTOR_BYTES]((first_vector + j) * V, res)
        comptime if write_scratch:
            scratch_out.unsafe_store[alignment=VECTOR_BYTES](j * V, res)
        j += stride


@always_inline
def _scalar_tail[
    dtype: DType, ngpus: Int
](
    inputs: Array[ElemPtr[dtype], ngpus],
    output: ElemPtr[dtype],
    first_elem: Int,
    num_elements: Int,
):
    """Grid-strided scalar reduce of elements [first_elem, num_elements)."""
    var stride = Int(grid_dim.x) * Int(block_dim.x)
    for e in range(first_elem + Int(global_idx.x), num_elements, stride):
        output.unsafe_store(e, _sum_vector_at[dtype, ngpus, 1](inputs, e))


# --------------------------------------------------------------------------
# 1stage (one-shot): start barrier, every rank reduces the whole buffer from
# all peers into its own output, end barrier (so no rank returns while a peer
# may still read its input). Barrier orderings: see AR_START_ORDERING /
# AR_END_ORDERING in dispatch.mojo; `lean_barriers` (AR_LEAN_BARRIERS) drops
# the block barrier before the start barrier's flag exchange and the one after
# the end barrier's, which order nothing.
# --------------------------------------------------------------------------
def ar_oneshot_k[
    dtype: DType,
    ngpus: Int,
    unroll: Int,
    start_ordering: Int,
    end_ordering: Int,
    lean_barriers: Bool,
](
    in0: ElemPtr[dtype], in1: ElemPtr[dtype], in2: ElemPtr[dtype], in3: ElemPtr[dtype], in4: ElemPtr[dtype], in5: ElemPtr[dtype], in6: ElemPtr[dtype], in7: ElemPtr[dtype],
    output: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    my_rank: Int32,
    debug_skip_barrier: Int32,
):
    comptime V = vector_width[dtype]()
    _record_kernel_id(kernel_id_out, KERNEL_ID_1STAGE)
    var inputs = peer_array[ElemPtr[dtype], ngpus](in0, in1, in2, in3, in4, in5, in6, in7)
    var sigs = peer_array[SignalPtr, ngpus](sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    cross_gpu_barrier[ngpus, start_ordering, lead=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )

    var num_vectors = n // V
    var stride = Int(grid_dim.x) * Int(block_dim.x)
    _reduce_vectors[dtype, ngpus, unroll, False](
        inputs, output, output, 0, num_vectors, Int(global_idx.x), stride
    )
    _scalar_tail[dtype, ngpus](inputs, output, num_vectors * V, n)

    cross_gpu_barrier[ngpus, end_ordering, trail=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )


# --------------------------------------------------------------------------
# 2stage: reduce-scatter then all-gather.
#   The 16-byte vectors are split into ngpus contiguous slices of
#   `slice_vectors(n)` vectors; rank p owns slice p.
#   Stage 1: rank p reduces its slice from all peers' inputs, writes it to its
#            own output and to its own scratch buffer (peer-visible). The scalar
#            tail (< one vector) is reduced by every rank directly.
#   Barrier (release/acquire): scratch slices are complete and every peer has
#            finished reading this rank's input.
#   Stage 2: rank r copies slice p from rank p's scratch for every p != r.
#   No end barrier: inputs are safe after the middle barrier, outputs are
#   local, and scratch reuse is ordered by the next launch's start barrier
#   (`end_ordering` is accepted only for a uniform signature).
#   Stage 2 uses the same (thread, element) mapping as stage 1, so a block only
#   reads scratch entries written by the same-numbered block of the peer, which
#   is exactly what the per-block barrier orders. Scratch reuse by the next
#   launch is ordered by that launch's start barrier (a peer's next launch can
#   only start after its current one finished reading).
# --------------------------------------------------------------------------
@always_inline
def slice_vectors[dtype: DType](num_elements: Int, ngpus: Int) -> Int:
    """Vectors per rank slice in the 2stage kernel (last slice may be short)."""
    var num_vectors = num_elements // vector_width[dtype]()
    return (num_vectors + ngpus - 1) // ngpus


def ar_twoshot_k[
    dtype: DType,
    ngpus: Int,
    unroll: Int,
    start_ordering: Int,
    end_ordering: Int,
    lean_barriers: Bool,
](
    in0: ElemPtr[dtype], in1: ElemPtr[dtype], in2: ElemPtr[dtype], in3: ElemPtr[dtype], in4: ElemPtr[dtype], in5: ElemPtr[dtype], in6: ElemPtr[dtype], in7: ElemPtr[dtype],
    output: ElemPtr[dtype],
    scr0: ElemPtr[dtype], scr1: ElemPtr[dtype], scr2: ElemPtr[dtype], scr3: ElemPtr[dtype], scr4: ElemPtr[dtype], scr5: ElemPtr[dtype], scr6: ElemPtr[dtype], scr7: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    my_rank: Int32,
    debug_skip_barrier: Int32,
):
    comptime V = vector_width[dtype]()
    _record_kernel_id(kernel_id_out, KERNEL_ID_2STAGE)
    var inputs = peer_array[ElemPtr[dtype], ngpus](in0, in1, in2, in3, in4, in5, in6, in7)
    var scratch = peer_array[ElemPtr[dtype], ngpus](scr0, scr1, scr2, scr3, scr4, scr5, scr6, scr7)
    var sigs = peer_array[SignalPtr, ngpus](sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    var num_vectors = n // V
    var part = slice_vectors[dtype](n, ngpus)
    var stride = Int(grid_dim.x) * Int(block_dim.x)
    var tid = Int(global_idx.x)

    cross_gpu_barrier[ngpus, start_ordering, lead=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )

    # Stage 1: reduce-scatter into own slice.
    var my_start = rank * part
    var my_len = max(0, min(part, num_vectors - my_start))
    _reduce_vectors[dtype, ngpus, unroll, True](
        inputs, output, scratch[rank], my_start, my_len, tid, stride
    )
    _scalar_tail[dtype, ngpus](inputs, output, num_vectors * V, n)

    cross_gpu_barrier[ngpus, ORDER_RELEASE_ACQUIRE](sigs, rank, debug_skip_barrier)

    # Stage 2: all-gather the other slices from the peers' scratch buffers
    # (same j = tid + k * stride mapping as stage 1; `unroll` batches loads).
    comptime for k in range(1, ngpus):
        var p = (rank + k) % ngpus
        var p_len = max(0, min(part, num_vectors - p * part))
        var j = tid
        comptime if unroll > 1:
            while j + (unroll - 1) * stride < p_len:
                var vals = Array[SIMD[dtype, V], unroll](uninitialized=True)
                comptime for u in range(unroll):
                    vals[u] = scratch[p].unsafe_load[
                        width=V, alignment=VECTOR_BYTES
                    ]((j + u * stride) * V)
                comptime for u in range(unroll):
                    output.unsafe_store[alignment=VECTOR_BYTES](
                        (p * part + j + u * stride) * V, vals[u]
                    )
                j += unroll * stride
        while j < p_len:
            var v = scratch[p].unsafe_load[width=V, alignment=VECTOR_BYTES](
                j * V
            )
            output.unsafe_store[alignment=VECTOR_BYTES]((p * part + j) * V, v)
            j += stride


# --------------------------------------------------------------------------
# 1stage_cpasync_sS: 1stage with an S-stage cp.async pipeline. Each block walks
# tiles of `block_threads` vectors (tile t = block + k*grid); each thread
# stages its own 16-byte vector of every rank's input for tile k+S-1 into
# shared memory while it reduces tile k. A thread only ever reads the shared
# slots it filled itself, so cp.async.wait_group alone orders the pipeline (no
# block barrier inside the loop). Shared memory: S * ngpus * block_threads * 16
# bytes (dynamic).
# --------------------------------------------------------------------------
@always_inline
def cpasync_shared_bytes[stages: Int, ngpus: Int, block_threads: Int]() -> Int:
    return stages * ngpus * block_threads * VECTOR_BYTES


def ar_cpasync_k[
    dtype: DType,
    ngpus: Int,
    stages: Int,
    block_threads: Int,
    start_ordering: Int,
    end_ordering: Int,
    lean_barriers: Bool,
](
    in0: ElemPtr[dtype], in1: ElemPtr[dtype], in2: ElemPtr[dtype], in3: ElemPtr[dtype], in4: ElemPtr[dtype], in5: ElemPtr[dtype], in6: ElemPtr[dtype], in7: ElemPtr[dtype],
    output: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    my_rank: Int32,
    debug_skip_barrier: Int32,
):
    comptime assert stages >= 2 and stages <= 4, "stages must be 2, 3 or 4"
    comptime V = vector_width[dtype]()
    _record_kernel_id(kernel_id_out, cpasync_kernel_id[stages]())
    var inputs = peer_array[ElemPtr[dtype], ngpus](in0, in1, in2, in3, in4, in5, in6, in7)
    var sigs = peer_array[SignalPtr, ngpus](sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    cross_gpu_barrier[ngpus, start_ordering, lead=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )

    var smem = external_memory[
        Scalar[dtype], address_space=AddressSpace.SHARED, alignment=16
    ]()
    var tid = Int(thread_idx.x)
    var blk = Int(block_idx.x)
    var grid = Int(grid_dim.x)
    var num_vectors = n // V
    var num_tiles = (num_vectors + block_threads - 1) // block_threads
    var my_tiles = 0
    if blk < num_tiles:
        my_tiles = (num_tiles - blk + grid - 1) // grid

    @always_inline
    @__parameter
    def issue(k: Int):
        if k < my_tiles:
            var v = (blk + k * grid) * block_threads + tid
            if v < num_vectors:
                var slot = k % stages
                comptime for r in range(ngpus):
                    var dst = smem.unsafe_offset(
                        ((slot * ngpus + r) * block_threads + tid) * V
                    )
                    var src = inputs[r].unsafe_offset(v * V)
                    async_copy[VECTOR_BYTES](
                        src.unsafe_address_space_cast[AddressSpace.GLOBAL](),
                        dst,
                    )
        # Always commit (possibly empty) so group counting stays uniform.
        async_copy_commit_group()

    comptime for k in range(stages - 1):
        issue(k)

    for k in range(my_tiles):
        issue(k + stages - 1)
        async_copy_wait_group(Int32(stages - 1))
        var v = (blk + k * grid) * block_threads + tid
        if v < num_vectors:
            var slot = k % stages
            var acc = SIMD[DType.float32, V](0)
            comptime for r in range(ngpus):
                var x = smem.unsafe_load[width=V, alignment=VECTOR_BYTES](
                    ((slot * ngpus + r) * block_threads + tid) * V
                )
                comptime if r == 0:
                    acc = x.cast[DType.float32]()
                else:
                    acc += x.cast[DType.float32]()
            output.unsafe_store[alignment=VECTOR_BYTES](
                v * V, acc.cast[dtype]()
            )
    async_copy_wait_group(0)

    _scalar_tail[dtype, ngpus](inputs, output, num_vectors * V, n)

    cross_gpu_barrier[ngpus, end_ordering, trail=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )


# --------------------------------------------------------------------------
# 1stage_push: one-shot allreduce without any barrier (a Lamport-style
# protocol). Every rank owns a receive region in its own memory,
#   region[generation 0|1][source rank][pack]   (16-byte packs),
# which holds the sentinel word PUSH_SENTINEL everywhere it holds no data
# (filled once by the host, and restored by the reader after every read).
# Per 16-byte pack p of the message, a thread:
#   1. loads its own pack and turns every -0.0 into +0.0, so no data word
#      can ever equal the sentinel (fp32 -0.0 is 0x80000000; for 16-bit types
#      a 32-bit word is 0x80000000 only if its upper half is -0.0);
#   2. stores that pack into every peer's region at [gen][my_rank][p]
#      (16-byte volatile stores over NVLink);
#   3. for every peer q, spins on its own region at [gen][q][p] until no
#      32-bit word of the pack is the sentinel, then writes the sentinel back;
#   4. sums the packs in rank order 0..ngpus-1 (its own sanitized pack at its
#      own rank) in float32 and stores the result.
# Words are 32-bit aligned and written once per call, so a word the reader
# sees is either the sentinel or the final data: a pack with no sentinel word
# is complete even if the 16-byte store reached memory in pieces.
# Generations alternate per call (the host passes call_count % 2): a peer can
# only write generation g again two calls later, which needs this rank's
# pushes of the call in between, which are issued only after this kernel (and
# so every sentinel it wrote back) has finished. No start barrier (nothing is
# read from a peer's buffer, so a peer's next call cannot overwrite what this
# one still reads) and no end barrier (a rank finishes once it has every
# peer's data). Every -0.0 in the inputs contributes +0.0 (the sum differs
# from the plain one only where every term is -0.0: +0.0 instead of -0.0).
# Tail: the last pack is read and written element by element; the bytes past
# the end travel as zeros.
# --------------------------------------------------------------------------
comptime PUSH_SENTINEL: UInt32 = 0x80000000
"""fp32 -0.0; never a data word after `_drop_negative_zero`."""
comptime PushPtr = Pointer[UInt32, MutAnyOrigin]
comptime PUSH_GENERATIONS = 2


@always_inline
def push_region_words(ngpus: Int, slot_packs: Int) -> Int:
    """32-bit words of one rank's receive region for `slot_packs` packs per source rank."""
    return PUSH_GENERATIONS * ngpus * slot_packs * (VECTOR_BYTES // 4)


@always_inline
def _drop_negative_zero[dtype: DType, w: Int](v: SIMD[dtype, w]) -> SIMD[dtype, w]:
    comptime if size_of[dtype]() == 4:
        var b = bitcast[DType.uint32, w](v)
        return bitcast[dtype, w](b.eq(UInt32(0x80000000)).select(SIMD[DType.uint32, w](0), b))
    else:
        var b = bitcast[DType.uint16, w](v)
        return bitcast[dtype, w](b.eq(UInt16(0x8000)).select(SIMD[DType.uint16, w](0), b))


@always_inline
def _load_pack[dtype: DType](src: ElemPtr[dtype], pack: Int, n: Int) -> SIMD[dtype, vector_width[dtype]()]:
    comptime V = vector_width[dtype]()
    if (pack + 1) * V <= n:
        return src.unsafe_load[width=V, alignment=VECTOR_BYTES](pack * V)
    var v = SIMD[dtype, V](0)
    comptime for i in range(V):
        if pack * V + i < n:
            v[i] = src.unsafe_load(pack * V + i)
    return v


@always_inline
def _store_pack[dtype: DType](dst: ElemPtr[dtype], pack: Int, n: Int, v: SIMD[dtype, vector_width[dtype]()]):
    comptime V = vector_width[dtype]()
    if (pack + 1) * V <= n:
        dst.unsafe_store[alignment=VECTOR_BYTES](pack * V, v)
        return
    comptime for i in range(V):
        if pack * V + i < n:
            dst.unsafe_store(pack * V + i, v[i])


def ar_push_k[
    dtype: DType,
    ngpus: Int,
](
    input: ElemPtr[dtype],
    output: ElemPtr[dtype],
    rx0: PushPtr, rx1: PushPtr, rx2: PushPtr, rx3: PushPtr, rx4: PushPtr, rx5: PushPtr, rx6: PushPtr, rx7: PushPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    slot_packs: Int64,
    generation: Int32,
    my_rank: Int32,
    debug_skip_push: Int32,
):
    comptime V = vector_width[dtype]()
    comptime W = VECTOR_BYTES // 4
    _record_kernel_id(kernel_id_out, KERNEL_ID_PUSH)
    var rx = peer_array[PushPtr, ngpus](rx0, rx1, rx2, rx3, rx4, rx5, rx6, rx7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    var slot = Int(slot_packs)
    var num_packs = (n + V - 1) // V
    var gen_base = Int(generation) * ngpus * slot
    var stride = Int(grid_dim.x) * Int(block_dim.x)
    for p in range(Int(global_idx.x), num_packs, stride):
        var mine = _drop_negative_zero[dtype, V](_load_pack[dtype](input, p, n))
        if debug_skip_push == 0:
            var bits = bitcast[DType.uint32, W](mine)
            comptime for k in range(1, ngpus):
                var q = (rank + k) % ngpus
                rx[q].unsafe_store[alignment=VECTOR_BYTES, volatile=True]((gen_base + rank * slot + p) * W, bits)
        var acc = SIMD[DType.float32, V](0)
        comptime for q in range(ngpus):
            var v = mine
            if q != rank:
                var at = (gen_base + q * slot + p) * W
                var w = rx[rank].unsafe_load[width=W, alignment=VECTOR_BYTES, volatile=True](at)
                while w.eq(PUSH_SENTINEL).reduce_or():
                    w = rx[rank].unsafe_load[width=W, alignment=VECTOR_BYTES, volatile=True](at)
                rx[rank].unsafe_store[alignment=VECTOR_BYTES, volatile=True](at, SIMD[DType.uint32, W](PUSH_SENTINEL))
                v = bitcast[dtype, V](w)
            comptime if q == 0:
                acc = v.cast[DType.float32]()
            else:
                acc += v.cast[DType.float32]()
        _store_pack[dtype](output, p, n, acc.cast[dtype]())


# --------------------------------------------------------------------------
# 2stage_push and 1stage_pushflag: store-based (push) allreduce driven by
# per-chunk flags instead of barriers. Nothing is ever read from a peer's
# memory: every byte crosses the link as a store, and every rank reads only
# its own memory. The message is cut into 16-byte packs (the last one may be
# partial: it travels zero-padded and only its valid elements are stored).
#
# 2stage_push (reduce-scatter, then all-gather, both by stores): the packs are
# split into ngpus contiguous slices of `part` packs; rank p owns slice p.
#   push:   rank r stores its copy of slice p into rank p's scratch, slot r.
#   reduce: rank p sums slice p over ranks in rank order (its own input and
#           scratch slots) and stores the result into its own output and into
#           every peer's output.
# 1stage_pushflag (one-shot): rank r stores its whole input into every peer's
#   scratch, slot r of generation g; every rank then sums all ranks' copies in
#   rank order into its own output. Generations alternate per launch (the
#   host passes its count of 1stage_pushflag launches, the same on every
#   rank), so a peer's next launch never overwrites what this one still reads:
#   it can write generation g again only two launches later, after receiving
#   this rank's pushes of the launch in between, which are issued only after
#   this whole launch has finished (stream order). A per-block count would not
#   do: with another grid size in between, a block's rows change.
#
# Work: rows of R = block_threads * unroll packs per slice; block b handles
# rows b, b + grid, ... (its chunks k = 0, 1, ...). Flags: per (block, source
# rank) cumulative chunk counts in the signal buffer (signal.mojo: PUSHED_BASE,
# RESULT_BASE), compared against base + k + 1, where base (COUNTER_BASE) counts
# the chunks the block handled in all earlier push launches: the same number
# on every rank because every rank launches the same sequence on the same grid.
# Block b only ever waits for block b of its peers, so the grid must be
# co-resident as for the barrier kernels.
# Pipeline per block: push chunk k and flag it, then wait for the peers'
# chunk k-1 and reduce it (2stage_push: then flag its results), so the stores
# of one chunk are in flight while the previous one is reduced.
# Safety without a start or end barrier:
#   scratch (2stage_push): a peer's next launch stores into it only after it
#   has received all of this rank's results, each sent after this rank read
#   the scratch rows it reduced. Outputs: a peer stores into this rank's
#   output only after receiving this rank's pushes of the same launch, so this
#   launch (and all earlier work on the output) has started; the launch ends
#   only after every peer's results arrived (the result flags).
# --------------------------------------------------------------------------
@always_inline
def push_scratch_packs(num_packs: Int, ngpus: Int, twoshot: Bool) -> Int:
    """16-byte packs of scratch one rank needs (2stage_push: a slot per rank of
    one slice; 1stage_pushflag: two generations of a slot per rank of the whole
    message)."""
    if twoshot:
        return ngpus * ((num_packs + ngpus - 1) // ngpus)
    return 2 * ngpus * num_packs


def ar_2stage_push_k[
    dtype: DType,
    ngpus: Int,
    unroll: Int,
](
    input: ElemPtr[dtype],
    out0: ElemPtr[dtype], out1: ElemPtr[dtype], out2: ElemPtr[dtype], out3: ElemPtr[dtype], out4: ElemPtr[dtype], out5: ElemPtr[dtype], out6: ElemPtr[dtype], out7: ElemPtr[dtype],
    scr0: ElemPtr[dtype], scr1: ElemPtr[dtype], scr2: ElemPtr[dtype], scr3: ElemPtr[dtype], scr4: ElemPtr[dtype], scr5: ElemPtr[dtype], scr6: ElemPtr[dtype], scr7: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    generation: Int32,
    my_rank: Int32,
    debug_skip: Int32,
):
    _pushsig_body[dtype, ngpus, unroll, True, 0](
        input,
        out0, out1, out2, out3, out4, out5, out6, out7,
        scr0, scr1, scr2, scr3, scr4, scr5, scr6, scr7,
        sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7,
        kernel_id_out, num_elements, generation, my_rank, debug_skip,
    )


# Launch bounds (CUDA's __launch_bounds__(block_threads, 2)): PTX `.maxntid` and `.minnctapersm 2`, so
# ptxas keeps the kernel within 65536 / (2 * block_threads) registers (64 at 512 threads) and two blocks
# fit on an SM (AR_PUSHFLAG_BLOCKS_PER_SM's default). Without them, unroll 4 took 128 registers (one
# block per SM). Mojo 1.2 names no constant for the second bound: the NVVM attribute is spelled out,
# quoted (an alias defined here would not be resolved where another module instantiates the kernel),
# with an MLIR integer as its value.
@__llvm_metadata(
    MAX_THREADS_PER_BLOCK_METADATA=StaticTuple[Int32, 1](Int32(block_threads)),
    `nvvm.minctasm`=__mlir_attr.`2 : i32`,
)
def ar_pushflag_k[
    dtype: DType,
    ngpus: Int,
    unroll: Int,
    block_threads: Int,
](
    input: ElemPtr[dtype],
    out0: ElemPtr[dtype], out1: ElemPtr[dtype], out2: ElemPtr[dtype], out3: ElemPtr[dtype], out4: ElemPtr[dtype], out5: ElemPtr[dtype], out6: ElemPtr[dtype], out7: ElemPtr[dtype],
    scr0: ElemPtr[dtype], scr1: ElemPtr[dtype], scr2: ElemPtr[dtype], scr3: ElemPtr[dtype], scr4: ElemPtr[dtype], scr5: ElemPtr[dtype], scr6: ElemPtr[dtype], scr7: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    generation: Int32,
    my_rank: Int32,
    debug_skip: Int32,
):
    _pushsig_body[dtype, ngpus, unroll, False, block_threads](
        input,
        out0, out1, out2, out3, out4, out5, out6, out7,
        scr0, scr1, scr2, scr3, scr4, scr5, scr6, scr7,
        sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7,
        kernel_id_out, num_elements, generation, my_rank, debug_skip,
    )


@always_inline
def _pushsig_body[
    dtype: DType,
    ngpus: Int,
    unroll: Int,
    twoshot: Bool,
    block_threads: Int,  # the launch's block size, or 0: read block_dim
](
    input: ElemPtr[dtype],
    out0: ElemPtr[dtype], out1: ElemPtr[dtype], out2: ElemPtr[dtype], out3: ElemPtr[dtype], out4: ElemPtr[dtype], out5: ElemPtr[dtype], out6: ElemPtr[dtype], out7: ElemPtr[dtype],
    scr0: ElemPtr[dtype], scr1: ElemPtr[dtype], scr2: ElemPtr[dtype], scr3: ElemPtr[dtype], scr4: ElemPtr[dtype], scr5: ElemPtr[dtype], scr6: ElemPtr[dtype], scr7: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    generation: Int32,
    my_rank: Int32,
    debug_skip: Int32,
):
    comptime V = vector_width[dtype]()
    comptime if twoshot:
        _record_kernel_id(kernel_id_out, KERNEL_ID_2STAGE_PUSH)
    else:
        _record_kernel_id(kernel_id_out, KERNEL_ID_PUSHFLAG)
    var outs = peer_array[ElemPtr[dtype], ngpus](out0, out1, out2, out3, out4, out5, out6, out7)
    var scr = peer_array[ElemPtr[dtype], ngpus](scr0, scr1, scr2, scr3, scr4, scr5, scr6, scr7)
    var sigs = peer_array[SignalPtr, ngpus](sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    var skip = debug_skip != 0
    var num_packs = (n + V - 1) // V
    var part = num_packs
    comptime if twoshot:
        part = (num_packs + ngpus - 1) // ngpus
    var bt = block_threads
    comptime if block_threads == 0:
        bt = Int(block_dim.x)
    var tid = Int(thread_idx.x)
    var blk = Int(block_idx.x)
    var grid = Int(grid_dim.x)
    var row = bt * unroll
    var rows = (part + row - 1) // row
    var chunks = 0
    if blk < rows:
        chunks = (rows - blk + grid - 1) // grid
    var counter = sigs[rank].unsafe_offset(COUNTER_BASE + blk * MAX_GPUS)
    var base = counter.unsafe_load(0)
    var gen = Int(generation) & 1
    # One-shot rows of whole packs (all but at most the last row) take a path without bounds checks,
    # through pointers set up once: srcs[q] = rank q's copy of the message here (this rank's input or
    # its scratch slot q), dsts[kk] = this rank's slot in peer (rank + kk)'s scratch.
    var srcs = Array[ElemPtr[dtype], ngpus](fill=input)
    var dsts = Array[ElemPtr[dtype], ngpus](fill=input)
    comptime if not twoshot:
        comptime for q in range(ngpus):
            if q != rank:
                srcs[q] = scr[rank].unsafe_offset((gen * ngpus + q) * num_packs * V)
        comptime for kk in range(1, ngpus):
            dsts[kk] = scr[(rank + kk) % ngpus].unsafe_offset((gen * ngpus + rank) * num_packs * V)
    var my_out = outs[rank]

    for k in range(chunks + 1):
        if k < chunks:
            # push chunk k: loads of every pack first, then the remote stores
            var i = blk + k * grid
            comptime if twoshot:
                comptime for kk in range(1, ngpus):
                    var p = (rank + kk) % ngpus
                    var vals = Array[SIMD[dtype, V], unroll](uninitialized=True)
                    comptime for u in range(unroll):
                        var o = i * row + u * bt + tid
                        var g = p * part + o
                        if o < part and g < num_packs:
                            vals[u] = _load_pack[dtype](input, g, n)
                    comptime for u in range(unroll):
                        var o = i * row + u * bt + tid
                        if o < part and p * part + o < num_packs and not skip:
                            scr[p].unsafe_store[alignment=VECTOR_BYTES]((rank * part + o) * V, vals[u])
            else:
                var vals = Array[SIMD[dtype, V], unroll](uninitialized=True)
                if (i + 1) * row * V <= n:
                    var first = (i * row + tid) * V
                    comptime for u in range(unroll):
                        vals[u] = input.unsafe_load[width=V, alignment=VECTOR_BYTES](first + u * bt * V)
                    if not skip:
                        comptime for kk in range(1, ngpus):
                            comptime for u in range(unroll):
                                dsts[kk].unsafe_store[alignment=VECTOR_BYTES](first + u * bt * V, vals[u])
                else:
                    # the last row: one pack at a time (a partial pack travels zero-padded)
                    for u in range(unroll):
                        var o = i * row + u * bt + tid
                        if o < num_packs and not skip:
                            var v = _load_pack[dtype](input, o, n)
                            comptime for kk in range(1, ngpus):
                                dsts[kk].unsafe_store[alignment=VECTOR_BYTES](o * V, v)
            signal_peers[ngpus](sigs, rank, PUSHED_BASE, base + UInt32(k + 1), skip)
        if k >= 1:
            # reduce chunk k - 1 once every peer has pushed it
            wait_peers[ngpus](sigs, rank, PUSHED_BASE, base + UInt32(k))
            var i = blk + (k - 1) * grid
            comptime if not twoshot:
                if (i + 1) * row * V <= n:
                    var first = (i * row + tid) * V
                    var vals = Array[SIMD[dtype, V], unroll * ngpus](uninitialized=True)
                    comptime for u in range(unroll):
                        comptime for q in range(ngpus):
                            vals[u * ngpus + q] = srcs[q].unsafe_load[width=V, alignment=VECTOR_BYTES](first + u * bt * V)
                    comptime for u in range(unroll):
                        var acc = vals[u * ngpus].cast[DType.float32]()
                        comptime for q in range(1, ngpus):
                            acc += vals[u * ngpus + q].cast[DType.float32]()
                        my_out.unsafe_store[alignment=VECTOR_BYTES](first + u * bt * V, acc.cast[dtype]())
                else:
                    for u in range(unroll):
                        var o = i * row + u * bt + tid
                        if o < num_packs:
                            var acc = _load_pack[dtype](srcs[0], o, n).cast[DType.float32]()
                            comptime for q in range(1, ngpus):
                                acc += _load_pack[dtype](srcs[q], o, n).cast[DType.float32]()
                            _store_pack[dtype](my_out, o, n, acc.cast[dtype]())
            else:
                # 2stage_push: rank p sums slice p (its input and the peers' scratch slots) and sends
                # the result to every output
                var vals = Array[SIMD[dtype, V], unroll * ngpus](uninitialized=True)
                comptime for u in range(unroll):
                    var o = i * row + u * bt + tid
                    var g = rank * part + o
                    if o < part and g < num_packs:
                        comptime for q in range(ngpus):
                            if q == rank:
                                vals[u * ngpus + q] = _load_pack[dtype](input, g, n)
                            else:
                                vals[u * ngpus + q] = scr[rank].unsafe_load[width=V, alignment=VECTOR_BYTES]((q * part + o) * V)
                comptime for u in range(unroll):
                    var o = i * row + u * bt + tid
                    var g = rank * part + o
                    if o < part and g < num_packs:
                        var acc = vals[u * ngpus].cast[DType.float32]()
                        comptime for q in range(1, ngpus):
                            acc += vals[u * ngpus + q].cast[DType.float32]()
                        var res = acc.cast[dtype]()
                        _store_pack[dtype](outs[rank], g, n, res)
                        if not skip:
                            comptime for kk in range(1, ngpus):
                                _store_pack[dtype](outs[(rank + kk) % ngpus], g, n, res)
            comptime if twoshot:
                signal_peers[ngpus](sigs, rank, RESULT_BASE, base + UInt32(k), skip)
    comptime if twoshot:
        wait_peers[ngpus](sigs, rank, RESULT_BASE, base + UInt32(chunks))
    barrier()  # every thread has read base before thread 0 moves it on
    if tid == 0:
        counter.unsafe_store(0, base + UInt32(chunks))


# --------------------------------------------------------------------------
# 1stage_bulk: 1stage whose loads are bulk asynchronous copies (cp.async.bulk,
# the Hopper copy unit) of whole tiles from every rank's input into shared
# memory, `stages` tiles in flight per block, each stage completing on its own
# mbarrier. Thread 0 issues; all threads wait on the stage's mbarrier, reduce
# the tile from shared memory, store the output; a block barrier then frees
# the stage and thread 0 refills it with the tile `stages` ahead. A tile is
# block_threads * bulk_unroll vectors per rank.
# --------------------------------------------------------------------------
@always_inline
def bulk_unroll[ngpus: Int]() -> Int:
    return 2 if ngpus == 2 else 1


@always_inline
def bulk_shared_bytes[stages: Int, ngpus: Int, block_threads: Int]() -> Int:
    return stages * ngpus * block_threads * bulk_unroll[ngpus]() * VECTOR_BYTES


def ar_bulk_k[
    dtype: DType,
    ngpus: Int,
    stages: Int,
    block_threads: Int,
    start_ordering: Int,
    end_ordering: Int,
    lean_barriers: Bool,
](
    in0: ElemPtr[dtype], in1: ElemPtr[dtype], in2: ElemPtr[dtype], in3: ElemPtr[dtype], in4: ElemPtr[dtype], in5: ElemPtr[dtype], in6: ElemPtr[dtype], in7: ElemPtr[dtype],
    output: ElemPtr[dtype],
    sig0: SignalPtr, sig1: SignalPtr, sig2: SignalPtr, sig3: SignalPtr, sig4: SignalPtr, sig5: SignalPtr, sig6: SignalPtr, sig7: SignalPtr,
    kernel_id_out: KernelIdPtr,
    num_elements: Int64,
    my_rank: Int32,
    debug_skip_barrier: Int32,
):
    comptime V = vector_width[dtype]()
    comptime U = bulk_unroll[ngpus]()
    comptime TILE = block_threads * U  # vectors per rank per tile
    comptime assert bulk_shared_bytes[stages, ngpus, block_threads]() <= 200 * 1024, "bulk pipeline exceeds shared memory"
    _record_kernel_id(kernel_id_out, KERNEL_ID_BULK)
    var inputs = peer_array[ElemPtr[dtype], ngpus](in0, in1, in2, in3, in4, in5, in6, in7)
    var sigs = peer_array[SignalPtr, ngpus](sig0, sig1, sig2, sig3, sig4, sig5, sig6, sig7)
    var n = Int(num_elements)
    var rank = Int(my_rank)
    cross_gpu_barrier[ngpus, start_ordering, lead=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )

    var smem = external_memory[
        Scalar[dtype], address_space=AddressSpace.SHARED, alignment=128
    ]()
    var bars = stack_allocation[
        stages, Int64, address_space=AddressSpace.SHARED, alignment=8
    ]()
    var tid = Int(thread_idx.x)
    var blk = Int(block_idx.x)
    var grid = Int(grid_dim.x)
    var num_vectors = n // V
    var num_tiles = (num_vectors + TILE - 1) // TILE
    var my_tiles = 0
    if blk < num_tiles:
        my_tiles = (num_tiles - blk + grid - 1) // grid
    if tid == 0:
        comptime for s in range(stages):
            mbarrier_init(bars.unsafe_offset(s), Int32(1))
        inlined_assembly["fence.mbarrier_init.release.cluster;", NoneType, constraints="", has_side_effect=True]()
    barrier()

    @always_inline
    @__parameter
    def issue(k: Int):
        var t = blk + k * grid
        var first = t * TILE
        var nvec = min(TILE, num_vectors - first)
        var s = k % stages
        var bytes = Int32(nvec * VECTOR_BYTES)
        mbarrier_arrive_expect_tx_shared(bars.unsafe_offset(s), bytes * Int32(ngpus))
        var bar_addr = UInt32(Int(bars.unsafe_offset(s)))
        comptime for r in range(ngpus):
            # max-core's cp_async_bulk_shared_cluster_global is limited to sm_100; the
            # instruction itself is sm_90 (PTX ISA 8.0), so it is spelled out here.
            inlined_assembly[
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
                NoneType,
                constraints="r,l,r,r,~{memory}",
                has_side_effect=True,
            ](
                UInt32(Int(smem.unsafe_offset((s * ngpus + r) * TILE * V))),
                UInt64(Int(inputs[r].unsafe_offset(first * V))),
                UInt32(bytes),
                bar_addr,
            )

    if tid == 0:
        for k in range(min(stages, my_tiles)):
            issue(k)
    for k in range(my_tiles):
        var s = k % stages
        mbarrier_try_wait_parity_shared(bars.unsafe_offset(s), Int32((k // stages) & 1), Int32(1000000))
        var first = (blk + k * grid) * TILE
        comptime for u in range(U):
            var j = u * block_threads + tid
            if first + j < num_vectors:
                var acc = smem.unsafe_load[width=V, alignment=VECTOR_BYTES]((s * ngpus * TILE + j) * V).cast[DType.float32]()
                comptime for r in range(1, ngpus):
                    acc += smem.unsafe_load[width=V, alignment=VECTOR_BYTES](((s * ngpus + r) * TILE + j) * V).cast[DType.float32]()
                output.unsafe_store[alignment=VECTOR_BYTES]((first + j) * V, acc.cast[dtype]())
        barrier()  # every thread is done with stage s
        if tid == 0 and k + stages < my_tiles:
            # the stage was read through the generic proxy; order that before the async refill
            inlined_assembly["fence.proxy.async.shared::cta;", NoneType, constraints="", has_side_effect=True]()
            issue(k + stages)

    _scalar_tail[dtype, ngpus](inputs, output, num_vectors * V, n)

    cross_gpu_barrier[ngpus, end_ordering, trail=not lean_barriers](
        sigs, rank, debug_skip_barrier
    )


# --------------------------------------------------------------------------
# 2stage_ce: a two-shot allreduce whose data the copy engines move; the SMs
# only add, in local memory (dispatch.launch_2stage_ce enqueues it for all
# ranks at once, ordered by CUDA events, several of them across GPUs).
# Rank j owns part j of the message (slice_vectors vectors; the last part
# also takes the scalar tail).
#   reduce-scatter, rounds k = 1..ngpus-1: every rank r copies its input's
#     part j = (r + k) % ngpus into rank j's scratch slot r, so that in each
#     round every rank sends to one rank and receives from one
#     (experiments/2026-11-26-ce-allreduce); the last round's copy may be cut
#     in two (AR_CE_LAST_SPLIT_PCT_<n>GPU);
#   ar_ce_add_k on rank j, twice: once rounds 1..ngpus-2 are in, its input
#     and those slots summed into its output (hidden behind the last round's
#     copy); then, per piece of the last round, the output plus that round's
#     slot (only the last piece's add is exposed;
#     experiments/2026-11-26-ce-allreduce-incremental). On 2 GPUs only the
#     second add runs, with the input in place of the output;
#   all-gather, same rounds: rank j copies its reduced part into every
#     peer's output (in two pieces where AR_CE_AG_SPLIT_<n>GPU, the first
#     while the second is added).
# Part j's sum is ((in_j + x_{j-1} + ... + x_{j-n+2}) + x_{j-n+1}), x_q being
# rank q's input, each add in fp32 and rounded to the dtype: a fixed order,
# so the same bits every run, and every rank holds the bits rank j made.
# --------------------------------------------------------------------------
def ar_ce_add_k[
    dtype: DType,
    ngpus: Int,
    nsrc: Int,
    unroll: Int,
](
    first_src: ElemPtr[dtype],
    scratch: ElemPtr[dtype],
    output: ElemPtr[dtype],
    kernel_id_out: KernelIdPtr,
    first_elem: Int64,
    count: Int64,
    slot_elems: Int64,
    part_first: Int64,
    my_rank: Int32,
    first_round: Int32,
):
    """Elements [first_elem, first_elem + count) of this rank's part, which
    starts at element part_first: first_src (the input, or the output for an
    add in place) plus the nsrc - 1 scratch slots of rounds first_round,
    first_round + 1, ... (the slot of round k is rank (my_rank - k) mod ngpus's,
    at that rank times slot_elems), summed in that order in fp32 into the
    output. first_elem, part_first and slot_elems are multiples of the vector
    width. Launched for every piece, also an empty one, so the id is recorded
    on every rank."""
    comptime V = vector_width[dtype]()
    _record_kernel_id(kernel_id_out, KERNEL_ID_2STAGE_CE)
    var rank = Int(my_rank)
    var first = Int(first_elem)
    var last = first + Int(count)
    var srcs = Array[ElemPtr[dtype], nsrc](fill=first_src)
    comptime for i in range(1, nsrc):
        var q = (rank - Int(first_round) - (i - 1) + 2 * ngpus) % ngpus
        srcs[i] = scratch.unsafe_offset(q * Int(slot_elems) - Int(part_first))
    var stride = Int(grid_dim.x) * Int(block_dim.x)
    var nvec = (last - first) // V
    _reduce_vectors[dtype, nsrc, unroll, False](
        srcs, output, output, first // V, nvec, Int(global_idx.x), stride
    )
    _scalar_tail[dtype, nsrc](srcs, output, first + nvec * V, last)


# --------------------------------------------------------------------------
# noop: diagnostic floor (launch + synchronize), writes only its kernel id.
# --------------------------------------------------------------------------
def ar_noop_k(kernel_id_out: KernelIdPtr):
    _record_kernel_id(kernel_id_out, KERNEL_ID_NOOP)
