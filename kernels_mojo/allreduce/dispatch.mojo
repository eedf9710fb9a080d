# Kernel availability, selection and launch for one rank.
#
# Rule that makes dispatch right by construction: compile time decides only
# which kernels EXIST in the binary (target is NVIDIA, stage count); the CHOICE
# among them is the plain runtime function `select_kernel`, and `allreduce_rank`
# calls it and launches the chosen kernel in one code path. No flag is set in
# one compile-time branch and read in another.
#
# Size windows are compile-time defines (`mojo build -D NAME=VALUE`):
#   AR_1STAGE_MAX_BYTES_{2,4,8}GPU  per-GPU-count crossover from the measured
#                          sweep; wins over AR_1STAGE_MAX_BYTES where defined.
#   AR_1STAGE_MAX_BYTES    1stage for bytes <= this, 2stage above (all ngpus).
#                          Default when not defined: 2 GiB for 2 GPUs, 512 KiB
#                          for 4 and 8 GPUs. PROVISIONAL, from upstream
#                          max-core comm.allreduce's sm_90 tuning table (2xH100:
#                          1stage wins at every measured size; 4/8xH100:
#                          crossover at 512 KiB); to be replaced by our
#                          measured sweep.
#   AR_CPASYNC_MIN_BYTES   1stage_cpasync for MIN <= bytes <= MAX (takes
#   AR_CPASYNC_MAX_BYTES   precedence over the 1stage/2stage rule). Default:
#                          empty window (MIN=1 > MAX=0): PROVISIONAL, no
#                          measured gain yet; to be replaced by measured sweep.
#   AR_CPASYNC_STAGES      pipeline depth used by auto selection (2, 3 or 4;
#                          default 3).
#   AR_MAX_BLOCKS          grid cap (default 216, upstream's sm_90 value);
#                          additionally capped at 2 blocks per SM.
#   AR_BLOCK_THREADS       threads per block, 1stage/2stage (default 256).
#   AR_CPASYNC_BLOCK_THREADS threads per block, cp.async kernel (default 128).
#   AR_UNROLL              vectors per thread whose loads are issued together
#                          in 1stage/2stage (1, 2, 4 or 8; default 4: on 2x
#                          H200, 2026-11-22, 1, 2 and 4 were within noise up to
#                          256 MiB; 4 was never clearly worse and gave the best
#                          1 GiB numbers; experiments/
#                          2026-11-22-allreduce-unroll-end-barrier).
#   AR_START_ORDERING      ordering of the start barrier (all kernels):
#                          0 relaxed (volatile flags), 1 acquire (volatile
#                          store, system-scope acquire spin load; default),
#                          2 release/acquire (system-scope release store).
#                          The start barrier publishes nothing written in
#                          the kernel: the inputs peers read were written
#                          before this rank's launch (stream order), and in
#                          2stage it only has to keep a rank from writing its
#                          scratch while a peer's previous launch may still
#                          read it (write-after-read). What it must give is
#                          the reader's half: no load of peer data is
#                          performed before the peer's flag is seen, which
#                          the acquire load gives and a volatile load alone
#                          does not promise. The release store put a
#                          system-scope fence in every block's critical path.
#                          2x H200, fp32, 1stage, device timing, 200 iters,
#                          p50 (2026-11-22, two rounds, with
#                          AR_LEAN_BARRIERS=1 for 1 and 0): 256 KiB 10.24 /
#                          10.08 us with 2 (no lean), 8.67 / 8.74 with 1,
#                          8.48 / 8.41 with 0; upstream in the same call
#                          8.45 / 8.41. Default 1: GPU tests (18 passed) in
#                          that call; soak in the stress run
#                          bench_results/20261122T150723Z-49c2cb74-2xH200.
#                          Data: experiments/2026-11-22-start-barrier-ordering.
#   AR_END_ORDERING        ordering of the end barrier (1stage, cpasync):
#                          0 relaxed (default), 1 acquire, 2 release/acquire.
#                          The end barrier only has to keep a rank from
#                          returning while a peer may still READ its input
#                          (write-after-read); every peer thread's loads have
#                          returned (their values were summed and stored)
#                          before the block barrier that precedes the flag
#                          store, so no release fence is needed there. The
#                          release fence after a block's output stores cost
#                          2-6 us per call on 2x H200 (256 KiB-4 MiB,
#                          experiments/2026-11-22-allreduce-unroll-end-barrier).
#                          The 2stage middle barrier, which publishes data
#                          written in the same kernel, is always
#                          release/acquire.
#   AR_PUSH_MAX_BYTES      1stage_push (no barriers; see kernels.mojo) for
#                          0 < bytes <= this, every GPU count (takes
#                          precedence over every other rule). Default when
#                          not defined: 1 MiB on 2 GPUs, none on 4 and 8
#                          (not measured there). 2x H200, fp32, device
#                          timing, 200 iterations, two rounds, upstream in
#                          the same call (2026-11-22; experiments/
#                          2026-11-22-push-kernel): push 5.73 /
#                          5.92 / 6.46 / 11.39 / 21.6 / 82.0 us at 8K / 64K /
#                          256K / 1M / 4M / 16M against 1stage 7.87 / 8.06 /
#                          8.70 / 11.97 / 21.1 / 58.7 and upstream 7.52 /
#                          7.90 / 8.35 / 11.52 / 20.4 / 59.8: it wins up to
#                          1 MiB and loses from 4 MiB.
#   AR_PUSH_REGION_MAX_BYTES largest message the runner gives a push receive
#                          region for (2 generations x ngpus x the message,
#                          per rank): default 256 MiB; a forced 1stage_push
#                          above it is refused with an error.
#   AR_LEAN_BARRIERS       1 (default): drop the block barrier in front of
#                          the start barrier's flag exchange (nothing before
#                          it needs ordering) and the one after the end
#                          barrier's (the block only exits), as vLLM and
#                          upstream do; 0: keep both. 2x H200, 2026-11-22
#                          (experiments/2026-11-22-start-barrier-ordering):
#                          256 KiB 8.83 / 8.67 us without, 8.67 / 8.74 with
#                          (within noise); kept for fewer instructions on the
#                          critical path.

from std.collections import Array
from std.sys import size_of
from std.sys.defines import get_defined_int, is_defined
from max.gpu.host import (
    DeviceContext,
    DeviceAttribute,
    FuncAttribute,
    get_gpu_target,
)

from .signal import MAX_BLOCKS, SignalPtr, ORDER_RELAXED, ORDER_ACQUIRE, ORDER_RELEASE_ACQUIRE
from .kernels import (
    KERNEL_ID_NONE,
    KERNEL_ID_1STAGE,
    KERNEL_ID_2STAGE,
    KERNEL_ID_PUSH,
    KERNEL_ID_CPASYNC_BASE,
    KERNEL_ID_NOOP,
    ElemPtr,
    KernelIdPtr,
    ar_oneshot_k,
    ar_twoshot_k,
    ar_cpasync_k,
    ar_noop_k,
    ar_push_k,
    PushPtr,
    cpasync_kernel_id,
    cpasync_shared_bytes,
    slice_vectors,
    vector_width,
)

comptime KIB = 1024
comptime MIB = 1024 * KIB
comptime GIB = 1024 * MIB

comptime AR_1STAGE_MAX_BYTES_DEFINED = is_defined["AR_1STAGE_MAX_BYTES"]()
comptime AR_1STAGE_MAX_BYTES = get_defined_int["AR_1STAGE_MAX_BYTES", 512 * KIB]()
comptime AR_1STAGE_MAX_BYTES_2GPU_DEFAULT = 2 * GIB
# Per-GPU-count crossovers written by the measured sweep (driver: sweep
# --write -> kernels_mojo/dispatch_windows.json); -1 = not measured.
comptime AR_1STAGE_MAX_BYTES_2GPU = get_defined_int["AR_1STAGE_MAX_BYTES_2GPU", -1]()
comptime AR_1STAGE_MAX_BYTES_4GPU = get_defined_int["AR_1STAGE_MAX_BYTES_4GPU", -1]()
comptime AR_1STAGE_MAX_BYTES_8GPU = get_defined_int["AR_1STAGE_MAX_BYTES_8GPU", -1]()
comptime AR_CPASYNC_MIN_BYTES = get_defined_int["AR_CPASYNC_MIN_BYTES", 1]()
comptime AR_CPASYNC_MAX_BYTES = get_defined_int["AR_CPASYNC_MAX_BYTES", 0]()
comptime AR_CPASYNC_STAGES = get_defined_int["AR_CPASYNC_STAGES", 3]()
comptime AR_MAX_BLOCKS = get_defined_int["AR_MAX_BLOCKS", 216]()
comptime AR_BLOCK_THREADS = get_defined_int["AR_BLOCK_THREADS", 256]()
comptime AR_CPASYNC_BLOCK_THREADS = get_defined_int[
    "AR_CPASYNC_BLOCK_THREADS", 128
]()
comptime AR_UNROLL = get_defined_int["AR_UNROLL", 4]()
comptime AR_START_ORDERING = get_defined_int["AR_START_ORDERING", ORDER_ACQUIRE]()
comptime AR_END_ORDERING = get_defined_int["AR_END_ORDERING", ORDER_RELAXED]()
comptime AR_PUSH_MAX_BYTES_DEFINED = is_defined["AR_PUSH_MAX_BYTES"]()
comptime AR_PUSH_MAX_BYTES = get_defined_int["AR_PUSH_MAX_BYTES", 0]()
comptime AR_PUSH_MAX_BYTES_2GPU_DEFAULT = 1 * MIB
comptime AR_PUSH_REGION_MAX_BYTES = get_defined_int["AR_PUSH_REGION_MAX_BYTES", 256 * MIB]()
comptime AR_LEAN_BARRIERS = get_defined_int["AR_LEAN_BARRIERS", 1]() != 0


@always_inline
def _check_defines():
    comptime assert AR_CPASYNC_STAGES >= 2 and AR_CPASYNC_STAGES <= 4, (
        "AR_CPASYNC_STAGES must be 2, 3 or 4"
    )
    comptime assert AR_MAX_BLOCKS >= 1 and AR_MAX_BLOCKS <= MAX_BLOCKS, (
        "AR_MAX_BLOCKS must be in [1, 1024]"
    )
    comptime assert AR_UNROLL in (1, 2, 4, 8), "AR_UNROLL must be 1, 2, 4 or 8"
    comptime assert AR_BLOCK_THREADS >= 32 and AR_BLOCK_THREADS <= 1024, (
        "AR_BLOCK_THREADS must be in [32, 1024]"
    )
    comptime assert AR_CPASYNC_BLOCK_THREADS >= 32 and AR_CPASYNC_BLOCK_THREADS <= 1024, (
        "AR_CPASYNC_BLOCK_THREADS must be in [32, 1024]"
    )
    comptime assert AR_START_ORDERING >= ORDER_RELAXED and AR_START_ORDERING <= ORDER_RELEASE_ACQUIRE, (
        "AR_START_ORDERING must be 0, 1 or 2"
    )
    comptime assert AR_PUSH_MAX_BYTES <= AR_PUSH_REGION_MAX_BYTES and AR_PUSH_MAX_BYTES_2GPU_DEFAULT <= AR_PUSH_REGION_MAX_BYTES, (
        "AR_PUSH_MAX_BYTES must not exceed AR_PUSH_REGION_MAX_BYTES"
    )
    comptime assert AR_END_ORDERING >= ORDER_RELAXED and AR_END_ORDERING <= ORDER_RELEASE_ACQUIRE, (
        "AR_END_ORDERING must be 0, 1 or 2"
    )


comptime CPASYNC_AVAILABLE = get_gpu_target().is_nvidia_gpu()
"""cp.async (sm_80+) kernels exist only when building for an NVIDIA target."""

comptime SUPPORTED_NGPUS = (2, 4, 8)


def kernel_name(kernel_id: Int32) -> String:
    if kernel_id == KERNEL_ID_1STAGE:
        return "1stage"
    if kernel_id == KERNEL_ID_2STAGE:
        return "2stage"
    if kernel_id == KERNEL_ID_PUSH:
        return "1stage_push"
    if kernel_id >= KERNEL_ID_CPASYNC_BASE + 2 and kernel_id <= KERNEL_ID_CPASYNC_BASE + 4:
        return String("1stage_cpasync_s", kernel_id - KERNEL_ID_CPASYNC_BASE)
    if kernel_id == KERNEL_ID_NONE:
        return "none"
    if kernel_id == KERNEL_ID_NOOP:
        return "noop"
    return String("unknown_", kernel_id)


def kernel_exists(kernel_id: Int32) -> Bool:
    if kernel_id == KERNEL_ID_1STAGE or kernel_id == KERNEL_ID_2STAGE or kernel_id == KERNEL_ID_PUSH:
        return True
    if kernel_id == KERNEL_ID_NOOP:
        return True
    if kernel_id >= KERNEL_ID_CPASYNC_BASE + 2 and kernel_id <= KERNEL_ID_CPASYNC_BASE + 4:
        return CPASYNC_AVAILABLE
    return False


def one_stage_max_bytes(ngpus: Int) -> Int:
    if ngpus == 2 and AR_1STAGE_MAX_BYTES_2GPU >= 0:
        return AR_1STAGE_MAX_BYTES_2GPU
    if ngpus == 4 and AR_1STAGE_MAX_BYTES_4GPU >= 0:
        return AR_1STAGE_MAX_BYTES_4GPU
    if ngpus == 8 and AR_1STAGE_MAX_BYTES_8GPU >= 0:
        return AR_1STAGE_MAX_BYTES_8GPU
    comptime if AR_1STAGE_MAX_BYTES_DEFINED:
        return AR_1STAGE_MAX_BYTES
    if ngpus == 2:
        return AR_1STAGE_MAX_BYTES_2GPU_DEFAULT
    return AR_1STAGE_MAX_BYTES


def push_max_bytes(ngpus: Int) -> Int:
    comptime if AR_PUSH_MAX_BYTES_DEFINED:
        return AR_PUSH_MAX_BYTES
    return AR_PUSH_MAX_BYTES_2GPU_DEFAULT if ngpus == 2 else 0


def select_kernel(num_bytes: Int, ngpus: Int, dtype: DType) -> Int32:
    """The runtime choice among the kernels that exist. `dtype` is accepted so
    windows can become dtype-specific; all three dtypes use 16-byte vectors."""
    _ = dtype
    _check_defines()
    if num_bytes > 0 and num_bytes <= push_max_bytes(ngpus):
        return KERNEL_ID_PUSH
    if (
        CPASYNC_AVAILABLE
        and num_bytes >= AR_CPASYNC_MIN_BYTES
        and num_bytes <= AR_CPASYNC_MAX_BYTES
    ):
        return cpasync_kernel_id[AR_CPASYNC_STAGES]()
    if num_bytes <= one_stage_max_bytes(ngpus):
        return KERNEL_ID_1STAGE
    return KERNEL_ID_2STAGE


def scratch_elements[dtype: DType](num_elements: Int, ngpus: Int) -> Int:
    """Elements of the per-rank peer-visible scratch the 2stage kernel needs
    (at least 1, so it can always be allocated)."""
    return max(1, slice_vectors[dtype](num_elements, ngpus) * vector_width[dtype]())


def push_slot_packs[dtype: DType](num_elements: Int) -> Int:
    """16-byte packs per source rank in a push receive region for this message
    (0: larger than AR_PUSH_REGION_MAX_BYTES, so no region; push is refused)."""
    if num_elements * size_of[dtype]() > AR_PUSH_REGION_MAX_BYTES:
        return 0
    return max(1, (num_elements + vector_width[dtype]() - 1) // vector_width[dtype]())


def max_grid_blocks(ctx: DeviceContext) raises -> Int:
    """Grid cap for this device: AR_MAX_BLOCKS and at most 2 blocks per SM."""
    var sms = Int(ctx.get_attribute(DeviceAttribute.MULTIPROCESSOR_COUNT))
    return max(1, min(AR_MAX_BLOCKS, 2 * sms, MAX_BLOCKS))


def _grid_for(work_items: Int, block_threads: Int, grid_cap: Int) -> Int:
    return max(1, min((work_items + block_threads - 1) // block_threads, grid_cap))


# Peer pointers reach the kernels as separate scalar arguments (see
# kernels.peer_array): Mojo 1.2 can corrupt a struct larger than two registers
# passed by value across a call in a GPU-enabled build (modular/modular#6759),
# and Array[ptr, 4] / Array[ptr, 8] are such structs; the 4-GPU run faulted
# with CUDA_ERROR_ILLEGAL_ADDRESS on 2026-11-22 while 2 GPUs (16-byte arrays)
# ran clean. The host functions are also inlined so no Array crosses a call.
@always_inline
def launch_kernel[
    dtype: DType, ngpus: Int
](
    kernel_id: Int32,
    ctx: DeviceContext,
    rank: Int,
    inputs: Array[ElemPtr[dtype], ngpus],
    output: ElemPtr[dtype],
    scratch: Array[ElemPtr[dtype], ngpus],
    sigs: Array[SignalPtr, ngpus],
    push_rx: Array[PushPtr, ngpus],
    push_slots: Int,
    push_generation: Int,
    kernel_id_out: KernelIdPtr,
    num_elements: Int,
    grid_cap: Int,
    debug_skip_barrier: Bool = False,
) raises:
    """Enqueue kernel `kernel_id` for `rank` on `ctx`. Launches nothing for 0
    elements. Raises for an id that does not exist in this binary."""
    comptime V = vector_width[dtype]()
    comptime start_ra = AR_START_ORDERING
    comptime end_ra = AR_END_ORDERING
    _check_defines()
    if not kernel_exists(kernel_id):
        raise Error(
            String("kernel ", kernel_name(kernel_id), " (id ", kernel_id, ") is not built into this binary")
        )
    if num_elements == 0:
        return
    var n = Int64(num_elements)
    var r = Int32(rank)
    var skip = Int32(1) if debug_skip_barrier else Int32(0)
    var num_vectors_or_one = max(1, num_elements // V)

    if kernel_id == KERNEL_ID_1STAGE:
        comptime k = ar_oneshot_k[
            dtype, ngpus, AR_UNROLL, start_ra, end_ra, AR_LEAN_BARRIERS
        ]
        ctx.enqueue_function[k](
            inputs[0 % ngpus], inputs[1 % ngpus], inputs[2 % ngpus], inputs[3 % ngpus], inputs[4 % ngpus], inputs[5 % ngpus], inputs[6 % ngpus], inputs[7 % ngpus],
            output,
            sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
            kernel_id_out, n, r, skip,
            grid_dim=_grid_for(num_vectors_or_one, AR_BLOCK_THREADS, grid_cap),
            block_dim=AR_BLOCK_THREADS,
        )
    elif kernel_id == KERNEL_ID_PUSH:
        if push_slots * V < num_elements:
            raise Error(
                String("1stage_push: no receive region for ", num_elements * size_of[dtype](), " bytes per rank (at most ",
                       AR_PUSH_REGION_MAX_BYTES, " bytes, AR_PUSH_REGION_MAX_BYTES); use 1stage or 2stage")
            )
        comptime k = ar_push_k[dtype, ngpus]
        ctx.enqueue_function[k](
            inputs[rank],
            output,
            push_rx[0 % ngpus], push_rx[1 % ngpus], push_rx[2 % ngpus], push_rx[3 % ngpus], push_rx[4 % ngpus], push_rx[5 % ngpus], push_rx[6 % ngpus], push_rx[7 % ngpus],
            kernel_id_out, n, Int64(push_slots), Int32(push_generation % 2), r, skip,
            grid_dim=_grid_for((num_elements + V - 1) // V, AR_BLOCK_THREADS, grid_cap),
            block_dim=AR_BLOCK_THREADS,
        )
    elif kernel_id == KERNEL_ID_NOOP:
        ctx.enqueue_function[ar_noop_k](
            kernel_id_out, grid_dim=1, block_dim=32
        )
    elif kernel_id == KERNEL_ID_2STAGE:
        comptime k = ar_twoshot_k[
            dtype, ngpus, AR_UNROLL, start_ra, end_ra, AR_LEAN_BARRIERS
        ]
        var part = max(1, slice_vectors[dtype](num_elements, ngpus))
        ctx.enqueue_function[k](
            inputs[0 % ngpus], inputs[1 % ngpus], inputs[2 % ngpus], inputs[3 % ngpus], inputs[4 % ngpus], inputs[5 % ngpus], inputs[6 % ngpus], inputs[7 % ngpus],
            output,
            scratch[0 % ngpus], scratch[1 % ngpus], scratch[2 % ngpus], scratch[3 % ngpus], scratch[4 % ngpus], scratch[5 % ngpus], scratch[6 % ngpus], scratch[7 % ngpus],
            sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
            kernel_id_out, n, r, skip,
            grid_dim=_grid_for(part, AR_BLOCK_THREADS, grid_cap),
            block_dim=AR_BLOCK_THREADS,
        )
    else:
        comptime if CPASYNC_AVAILABLE:
            comptime for stages in range(2, 5):
                if kernel_id == cpasync_kernel_id[stages]():
                    comptime bt = AR_CPASYNC_BLOCK_THREADS
                    comptime smem = cpasync_shared_bytes[stages, ngpus, bt]()
                    comptime k = ar_cpasync_k[
                        dtype, ngpus, stages, bt, start_ra, end_ra, AR_LEAN_BARRIERS
                    ]
                    ctx.enqueue_function[k](
                        inputs[0 % ngpus], inputs[1 % ngpus], inputs[2 % ngpus], inputs[3 % ngpus], inputs[4 % ngpus], inputs[5 % ngpus], inputs[6 % ngpus], inputs[7 % ngpus],
                        output,
                        sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
                        kernel_id_out, n, r, skip,
                        grid_dim=_grid_for(num_vectors_or_one, bt, grid_cap),
                        block_dim=bt,
                        shared_mem_bytes=smem,
                        func_attribute=FuncAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES(
                            UInt32(smem)
                        ),
                    )
                    return
        raise Error(String("no launch path for kernel id ", kernel_id))


@always_inline  # see launch_kernel: no by-value Array across a call
def allreduce_rank[
    dtype: DType, ngpus: Int
](
    requested_kernel_id: Int32,
    ctx: DeviceContext,
    rank: Int,
    inputs: Array[ElemPtr[dtype], ngpus],
    output: ElemPtr[dtype],
    scratch: Array[ElemPtr[dtype], ngpus],
    sigs: Array[SignalPtr, ngpus],
    push_rx: Array[PushPtr, ngpus],
    push_slots: Int,
    push_generation: Int,
    kernel_id_out: KernelIdPtr,
    num_elements: Int,
    grid_cap: Int,
    debug_skip_barrier: Bool = False,
) raises -> Int32:
    """Select (unless `requested_kernel_id` forces one) and launch, in one code
    path. Returns the id of the kernel launched (KERNEL_ID_NONE for 0
    elements is NOT returned: the selected id is returned even then, and
    nothing is launched)."""
    var kernel_id = requested_kernel_id
    if kernel_id == KERNEL_ID_NONE:
        kernel_id = select_kernel(num_elements * size_of[dtype](), ngpus, dtype)
    launch_kernel[dtype, ngpus](
        kernel_id,
        ctx,
        rank,
        inputs,
        output,
        scratch,
        sigs,
        push_rx,
        push_slots,
        push_generation,
        kernel_id_out,
        num_elements,
        grid_cap,
        debug_skip_barrier,
    )
    return kernel_id
