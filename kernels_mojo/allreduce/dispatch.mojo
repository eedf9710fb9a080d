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
#   Every size window has a per-GPU-count form, NAME_{2,4,8}GPU, which the
#   measured sweep writes (`python -m driver sweep --ngpus N --write` rewrites
#   only N's) and which wins over the shared NAME for that count where
#   defined; the shared NAME (or its default) serves a count without one.
#   AR_CPASYNC_MIN_BYTES   1stage_cpasync for MIN <= bytes <= MAX (takes
#   AR_CPASYNC_MAX_BYTES   precedence over the 1stage/2stage rule). Default:
#                          empty window (MIN=1 > MAX=0): PROVISIONAL, no
#                          measured gain yet; to be replaced by measured sweep.
#                          Per count: AR_CPASYNC_{MIN,MAX}_BYTES_{2,4,8}GPU
#                          (each wins over its shared define on its own).
#   AR_CPASYNC_STAGES      pipeline depth used by auto selection (2, 3 or 4;
#                          default 3). Per count: AR_CPASYNC_STAGES_{2,4,8}GPU
#                          (the sweep's best stage count inside that count's
#                          window).
#   AR_MAX_BLOCKS          grid cap (default 216, upstream's sm_90 value);
#                          additionally capped at 2 blocks per SM.
#   AR_BLOCK_THREADS       threads per block, 1stage/2stage (default 256).
#   AR_1STAGE_VECS_PER_THREAD  1stage's grid gives each thread at least this
#                          many 16-byte vectors (below the grid cap; default 2):
#                          every block exchanges flags with every peer at its
#                          start and end, so a grid larger than the data needs
#                          costs barrier time. 2 GPUs, 4x H200, device timing,
#                          p50 of 3 rounds, forced 1stage (2026-11-27,
#                          experiments/2026-11-23-allreduce-mid-sizes): 1 MiB
#                          fp32 11.36 us at 132 blocks against 12.10 at 264
#                          (216: 12.06; upstream 11.39); 2 MiB 14.62 at 176,
#                          14.78 at 216, 15.20 at 132. Value 2 gives 128 blocks
#                          at 1 MiB and the cap from 2 MiB on.
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
#                          (not measured there). Per count:
#                          AR_PUSH_MAX_BYTES_{2,4,8}GPU (0: no push window
#                          for that count). 2x H200, fp32, device
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
#   AR_2STAGE_PUSH_MIN_BYTES_{2,4,8}GPU / AR_2STAGE_PUSH_MAX_BYTES_{2,4,8}GPU,
#   AR_PUSHFLAG_MIN_BYTES_{2,4,8}GPU / AR_PUSHFLAG_MAX_BYTES_{2,4,8}GPU,
#   AR_BULK_MIN_BYTES_{2,4,8}GPU / AR_BULK_MAX_BYTES_{2,4,8}GPU
#                          size windows (per GPU count only; no shared form)
#                          of the store-based two-shot, the flagged one-shot
#                          push and the cp.async.bulk pipeline; checked in
#                          that order after 1stage_push and before cp.async.
#                          Default: empty (MIN=1 > MAX=0) for every count
#                          (before 2026-11-26 only the _2GPU ones existed and
#                          4 and 8 GPUs never took these kernels; an empty
#                          default keeps that). The device-timed sweep on 2x H200
#                          (2026-11-23, fp32/bf16/fp16, 8 KiB-256 MiB, at
#                          fefa9a2, bench_results/20261123T103555Z-fefa9a24-2xH200)
#                          gives 1stage_pushflag 64-256 MiB (256 MiB 752.6 us
#                          vs 806.5, 64 MiB 197.5 vs 208.6) and the other two
#                          none: 2stage_push 0.87-0.93x, bulk 0.99-1.01x
#                          (experiments/2026-11-23-allreduce-pushflag-bounds).
#                          kernels_mojo/dispatch_windows.json holds what that
#                          sweep justifies; `python -m driver sweep` rewrites it.
#   AR_2STAGE_CE_MIN_BYTES_{2,4,8}GPU / AR_2STAGE_CE_MAX_BYTES_{2,4,8}GPU
#                          size window of the copy-engine two-shot (checked
#                          right after 1stage_push, before 2stage_push).
#                          Default: empty for every count.
#   AR_CE_LAST_SPLIT_PCT_{2,4,8}GPU
#                          2stage_ce: percent of each part in the second of
#                          the two copies that the last reduce-scatter round
#                          is cut into (0..99; 0: one copy), so that only that
#                          share's add is left exposed. Default 50 on 2 GPUs,
#                          25 on 4 and 8.
#   AR_CE_AG_SPLIT_{2,4,8}GPU
#                          2stage_ce: 1 = the all-gather is cut at the same
#                          point, its first piece copied while the second is
#                          added. Default 1 on 2 GPUs (there this is the even
#                          two-piece schedule, 374-375 GB/s at 256 MiB on
#                          4x H200's GPUs 0-1), 0 on 4 and 8. On 4 GPUs, 256 MiB
#                          fp32 (experiments/2026-11-26-ce-allreduce-incremental,
#                          4x H200, the prototype): split 25, no all-gather split
#                          1108.1 us p50 (363.4 GB/s), p90 1127.6; 12.5: 1127.3;
#                          25 with the all-gather split: 1139.3; the two-piece
#                          schedule before it (3/4 + 1/4 in every phase): 1157.4,
#                          p90 1257.2.
#   AR_BULK_STAGES         tiles in flight per block in 1stage_bulk (2..8;
#                          default 4).
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
from max.gpu.host.info import GPUInfo
from max.gpu.host import (
    DeviceContext,
    DeviceEvent,
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
    KERNEL_ID_2STAGE_PUSH,
    KERNEL_ID_PUSHFLAG,
    KERNEL_ID_BULK,
    KERNEL_ID_2STAGE_CE,
    ar_ce_add_k,
    ar_2stage_push_k,
    ar_pushflag_k,
    ar_bulk_k,
    bulk_shared_bytes,
    push_scratch_packs,
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
# Per-GPU-count cp.async window and stage count (sweep --write); -1 = not
# measured: the shared define above (or its default) applies.
comptime AR_CPASYNC_MIN_BYTES_2GPU = get_defined_int["AR_CPASYNC_MIN_BYTES_2GPU", -1]()
comptime AR_CPASYNC_MIN_BYTES_4GPU = get_defined_int["AR_CPASYNC_MIN_BYTES_4GPU", -1]()
comptime AR_CPASYNC_MIN_BYTES_8GPU = get_defined_int["AR_CPASYNC_MIN_BYTES_8GPU", -1]()
comptime AR_CPASYNC_MAX_BYTES_2GPU = get_defined_int["AR_CPASYNC_MAX_BYTES_2GPU", -1]()
comptime AR_CPASYNC_MAX_BYTES_4GPU = get_defined_int["AR_CPASYNC_MAX_BYTES_4GPU", -1]()
comptime AR_CPASYNC_MAX_BYTES_8GPU = get_defined_int["AR_CPASYNC_MAX_BYTES_8GPU", -1]()
comptime AR_CPASYNC_STAGES_2GPU = get_defined_int["AR_CPASYNC_STAGES_2GPU", -1]()
comptime AR_CPASYNC_STAGES_4GPU = get_defined_int["AR_CPASYNC_STAGES_4GPU", -1]()
comptime AR_CPASYNC_STAGES_8GPU = get_defined_int["AR_CPASYNC_STAGES_8GPU", -1]()
comptime AR_MAX_BLOCKS = get_defined_int["AR_MAX_BLOCKS", 216]()
comptime AR_BLOCK_THREADS = get_defined_int["AR_BLOCK_THREADS", 256]()
comptime AR_1STAGE_VECS_PER_THREAD = get_defined_int["AR_1STAGE_VECS_PER_THREAD", 2]()
comptime AR_CPASYNC_BLOCK_THREADS = get_defined_int[
    "AR_CPASYNC_BLOCK_THREADS", 128
]()
comptime AR_UNROLL = get_defined_int["AR_UNROLL", 4]()
comptime AR_START_ORDERING = get_defined_int["AR_START_ORDERING", ORDER_ACQUIRE]()
comptime AR_END_ORDERING = get_defined_int["AR_END_ORDERING", ORDER_RELAXED]()
comptime AR_PUSH_MAX_BYTES_DEFINED = is_defined["AR_PUSH_MAX_BYTES"]()
comptime AR_PUSH_MAX_BYTES = get_defined_int["AR_PUSH_MAX_BYTES", 0]()
comptime AR_PUSH_MAX_BYTES_2GPU_DEFAULT = 1 * MIB
# Per-GPU-count push windows (sweep --write); -1 = not measured: the shared
# define above (or its per-count default) applies.
comptime AR_PUSH_MAX_BYTES_2GPU = get_defined_int["AR_PUSH_MAX_BYTES_2GPU", -1]()
comptime AR_PUSH_MAX_BYTES_4GPU = get_defined_int["AR_PUSH_MAX_BYTES_4GPU", -1]()
comptime AR_PUSH_MAX_BYTES_8GPU = get_defined_int["AR_PUSH_MAX_BYTES_8GPU", -1]()
comptime AR_PUSH_REGION_MAX_BYTES = get_defined_int["AR_PUSH_REGION_MAX_BYTES", 256 * MIB]()
comptime AR_LEAN_BARRIERS = get_defined_int["AR_LEAN_BARRIERS", 1]() != 0
comptime AR_2STAGE_PUSH_MIN_BYTES_2GPU = get_defined_int["AR_2STAGE_PUSH_MIN_BYTES_2GPU", 1]()
comptime AR_2STAGE_PUSH_MAX_BYTES_2GPU = get_defined_int["AR_2STAGE_PUSH_MAX_BYTES_2GPU", 0]()
comptime AR_2STAGE_PUSH_MIN_BYTES_4GPU = get_defined_int["AR_2STAGE_PUSH_MIN_BYTES_4GPU", 1]()
comptime AR_2STAGE_PUSH_MAX_BYTES_4GPU = get_defined_int["AR_2STAGE_PUSH_MAX_BYTES_4GPU", 0]()
comptime AR_2STAGE_PUSH_MIN_BYTES_8GPU = get_defined_int["AR_2STAGE_PUSH_MIN_BYTES_8GPU", 1]()
comptime AR_2STAGE_PUSH_MAX_BYTES_8GPU = get_defined_int["AR_2STAGE_PUSH_MAX_BYTES_8GPU", 0]()
comptime AR_PUSHFLAG_MIN_BYTES_2GPU = get_defined_int["AR_PUSHFLAG_MIN_BYTES_2GPU", 1]()
comptime AR_PUSHFLAG_MAX_BYTES_2GPU = get_defined_int["AR_PUSHFLAG_MAX_BYTES_2GPU", 0]()
comptime AR_PUSHFLAG_MIN_BYTES_4GPU = get_defined_int["AR_PUSHFLAG_MIN_BYTES_4GPU", 1]()
comptime AR_PUSHFLAG_MAX_BYTES_4GPU = get_defined_int["AR_PUSHFLAG_MAX_BYTES_4GPU", 0]()
comptime AR_PUSHFLAG_MIN_BYTES_8GPU = get_defined_int["AR_PUSHFLAG_MIN_BYTES_8GPU", 1]()
comptime AR_PUSHFLAG_MAX_BYTES_8GPU = get_defined_int["AR_PUSHFLAG_MAX_BYTES_8GPU", 0]()
comptime AR_BULK_MIN_BYTES_2GPU = get_defined_int["AR_BULK_MIN_BYTES_2GPU", 1]()
comptime AR_BULK_MAX_BYTES_2GPU = get_defined_int["AR_BULK_MAX_BYTES_2GPU", 0]()
comptime AR_BULK_MIN_BYTES_4GPU = get_defined_int["AR_BULK_MIN_BYTES_4GPU", 1]()
comptime AR_BULK_MAX_BYTES_4GPU = get_defined_int["AR_BULK_MAX_BYTES_4GPU", 0]()
comptime AR_BULK_MIN_BYTES_8GPU = get_defined_int["AR_BULK_MIN_BYTES_8GPU", 1]()
comptime AR_BULK_MAX_BYTES_8GPU = get_defined_int["AR_BULK_MAX_BYTES_8GPU", 0]()
comptime AR_BULK_STAGES = get_defined_int["AR_BULK_STAGES", 4]()
comptime AR_2STAGE_CE_MIN_BYTES_2GPU = get_defined_int["AR_2STAGE_CE_MIN_BYTES_2GPU", 1]()
comptime AR_2STAGE_CE_MAX_BYTES_2GPU = get_defined_int["AR_2STAGE_CE_MAX_BYTES_2GPU", 0]()
comptime AR_2STAGE_CE_MIN_BYTES_4GPU = get_defined_int["AR_2STAGE_CE_MIN_BYTES_4GPU", 1]()
comptime AR_2STAGE_CE_MAX_BYTES_4GPU = get_defined_int["AR_2STAGE_CE_MAX_BYTES_4GPU", 0]()
comptime AR_2STAGE_CE_MIN_BYTES_8GPU = get_defined_int["AR_2STAGE_CE_MIN_BYTES_8GPU", 1]()
comptime AR_2STAGE_CE_MAX_BYTES_8GPU = get_defined_int["AR_2STAGE_CE_MAX_BYTES_8GPU", 0]()
comptime AR_CE_LAST_SPLIT_PCT_2GPU = get_defined_int["AR_CE_LAST_SPLIT_PCT_2GPU", 50]()
comptime AR_CE_LAST_SPLIT_PCT_4GPU = get_defined_int["AR_CE_LAST_SPLIT_PCT_4GPU", 25]()
comptime AR_CE_LAST_SPLIT_PCT_8GPU = get_defined_int["AR_CE_LAST_SPLIT_PCT_8GPU", 25]()
comptime AR_CE_AG_SPLIT_2GPU = get_defined_int["AR_CE_AG_SPLIT_2GPU", 1]()
comptime AR_CE_AG_SPLIT_4GPU = get_defined_int["AR_CE_AG_SPLIT_4GPU", 0]()
comptime AR_CE_AG_SPLIT_8GPU = get_defined_int["AR_CE_AG_SPLIT_8GPU", 0]()
comptime AR_BULK_BLOCK_THREADS = 256
comptime AR_PUSH_UNROLL = 2
"""Packs per thread per chunk row in 2stage_push."""
comptime AR_PUSHFLAG_BLOCK_THREADS = get_defined_int["AR_PUSHFLAG_BLOCK_THREADS", 512]()
comptime AR_PUSHFLAG_UNROLL = get_defined_int["AR_PUSHFLAG_UNROLL", 4]()
comptime AR_PUSHFLAG_BLOCKS_PER_SM = get_defined_int["AR_PUSHFLAG_BLOCKS_PER_SM", 2]()
"""1stage_pushflag's shape: a chunk (one flag) is block_threads x unroll 16-byte packs (32 KiB by
default) and the grid is blocks_per_sm x SMs (264 on H100/H200), not AR_MAX_BLOCKS. Each block pushes
a chunk, releases its flag, then reduces the chunk before, so a flag's round trip stalls only its own
block and the other block on the SM keeps the link fed. The kernel's launch bounds (two blocks of
block_threads per SM) hold it to 64 registers at 512 threads. 2x H200, fp32, 2026-11-23
(experiments/2026-11-23-allreduce-pushflag-bounds): 256 MiB 752 us (357 GB/s, 1.07x 1stage and
upstream) at unroll 4 against 757 at unroll 2; 16 MiB 61.7 against 58.8 (outside its window). Before the
launch bounds, unroll 4 took 128 registers (one block per SM, 865 us); 256-thread blocks x 4 per SM
762 us, one 1024-thread block per SM 851 us, the first shape (256 threads, 8 KiB chunks, 216 blocks)
967 us (experiments/2026-11-23-allreduce-push-tuned, -allreduce-link)."""



def _stages_ok(stages: Int) -> Bool:
    """A per-GPU-count stage count: -1 (not given) or 2, 3 or 4."""
    return stages == -1 or (stages >= 2 and stages <= 4)


@always_inline
def _check_defines():
    comptime assert AR_CPASYNC_STAGES >= 2 and AR_CPASYNC_STAGES <= 4, (
        "AR_CPASYNC_STAGES must be 2, 3 or 4"
    )
    comptime assert _stages_ok(AR_CPASYNC_STAGES_2GPU) and _stages_ok(AR_CPASYNC_STAGES_4GPU) and _stages_ok(
        AR_CPASYNC_STAGES_8GPU
    ), "AR_CPASYNC_STAGES_{2,4,8}GPU must be 2, 3 or 4"
    comptime assert AR_MAX_BLOCKS >= 1 and AR_MAX_BLOCKS <= MAX_BLOCKS, (
        "AR_MAX_BLOCKS must be in [1, 1024]"
    )
    comptime assert AR_UNROLL in (1, 2, 4, 8), "AR_UNROLL must be 1, 2, 4 or 8"
    comptime assert AR_PUSHFLAG_UNROLL in (1, 2, 4, 8), "AR_PUSHFLAG_UNROLL must be 1, 2, 4 or 8"
    comptime assert AR_PUSHFLAG_BLOCK_THREADS >= 32 and AR_PUSHFLAG_BLOCK_THREADS <= 512, (
        "AR_PUSHFLAG_BLOCK_THREADS must be in [32, 512] (the kernel's launch bounds ask for two blocks per SM)"
    )
    comptime assert AR_PUSHFLAG_BLOCKS_PER_SM >= 1 and AR_PUSHFLAG_BLOCKS_PER_SM <= 4, (
        "AR_PUSHFLAG_BLOCKS_PER_SM must be 1..4"
    )
    comptime assert AR_1STAGE_VECS_PER_THREAD >= 1 and AR_1STAGE_VECS_PER_THREAD <= 64, (
        "AR_1STAGE_VECS_PER_THREAD must be in [1, 64]"
    )
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
    comptime assert max(AR_PUSH_MAX_BYTES_2GPU, AR_PUSH_MAX_BYTES_4GPU, AR_PUSH_MAX_BYTES_8GPU) <= AR_PUSH_REGION_MAX_BYTES, (
        "AR_PUSH_MAX_BYTES_{2,4,8}GPU must not exceed AR_PUSH_REGION_MAX_BYTES"
    )
    comptime assert max(AR_PUSHFLAG_MAX_BYTES_2GPU, AR_PUSHFLAG_MAX_BYTES_4GPU, AR_PUSHFLAG_MAX_BYTES_8GPU) <= (
        AR_PUSH_REGION_MAX_BYTES
    ), "the 1stage_pushflag window must not exceed AR_PUSH_REGION_MAX_BYTES"
    comptime assert AR_BULK_STAGES >= 2 and AR_BULK_STAGES <= 8, "AR_BULK_STAGES must be in [2, 8]"
    comptime assert (
        AR_CE_LAST_SPLIT_PCT_2GPU >= 0 and AR_CE_LAST_SPLIT_PCT_2GPU < 100
        and AR_CE_LAST_SPLIT_PCT_4GPU >= 0 and AR_CE_LAST_SPLIT_PCT_4GPU < 100
        and AR_CE_LAST_SPLIT_PCT_8GPU >= 0 and AR_CE_LAST_SPLIT_PCT_8GPU < 100
    ), "AR_CE_LAST_SPLIT_PCT_{2,4,8}GPU must be in [0, 100)"
    comptime assert (
        AR_CE_AG_SPLIT_2GPU >= 0 and AR_CE_AG_SPLIT_2GPU <= 1
        and AR_CE_AG_SPLIT_4GPU >= 0 and AR_CE_AG_SPLIT_4GPU <= 1
        and AR_CE_AG_SPLIT_8GPU >= 0 and AR_CE_AG_SPLIT_8GPU <= 1
    ), "AR_CE_AG_SPLIT_{2,4,8}GPU must be 0 or 1"


comptime CPASYNC_AVAILABLE = get_gpu_target().is_nvidia_gpu()
"""cp.async (sm_80+) kernels exist only when building for an NVIDIA target."""

comptime BULK_AVAILABLE = get_gpu_target().is_nvidia_gpu() and GPUInfo.from_target[get_gpu_target()]().compute >= 9.0
"""cp.async.bulk and mbarrier transaction counts need sm_90."""

comptime SUPPORTED_NGPUS = (2, 4, 8)


def kernel_name(kernel_id: Int32) -> String:
    if kernel_id == KERNEL_ID_1STAGE:
        return "1stage"
    if kernel_id == KERNEL_ID_2STAGE:
        return "2stage"
    if kernel_id == KERNEL_ID_PUSH:
        return "1stage_push"
    if kernel_id == KERNEL_ID_2STAGE_PUSH:
        return "2stage_push"
    if kernel_id == KERNEL_ID_PUSHFLAG:
        return "1stage_pushflag"
    if kernel_id == KERNEL_ID_BULK:
        return "1stage_bulk"
    if kernel_id == KERNEL_ID_2STAGE_CE:
        return "2stage_ce"
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
    if kernel_id == KERNEL_ID_2STAGE_PUSH or kernel_id == KERNEL_ID_PUSHFLAG or kernel_id == KERNEL_ID_2STAGE_CE:
        return True
    if kernel_id == KERNEL_ID_BULK:
        return BULK_AVAILABLE
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


@always_inline
def _of_count(ngpus: Int, v2: Int, v4: Int, v8: Int) -> Int:
    """The per-GPU-count define of `ngpus` (-1: none for this count)."""
    if ngpus == 2:
        return v2
    if ngpus == 4:
        return v4
    if ngpus == 8:
        return v8
    return -1


def push_max_bytes(ngpus: Int) -> Int:
    var own = _of_count(ngpus, AR_PUSH_MAX_BYTES_2GPU, AR_PUSH_MAX_BYTES_4GPU, AR_PUSH_MAX_BYTES_8GPU)
    if own >= 0:
        return own
    comptime if AR_PUSH_MAX_BYTES_DEFINED:
        return AR_PUSH_MAX_BYTES
    return AR_PUSH_MAX_BYTES_2GPU_DEFAULT if ngpus == 2 else 0


def cpasync_min_bytes(ngpus: Int) -> Int:
    var own = _of_count(ngpus, AR_CPASYNC_MIN_BYTES_2GPU, AR_CPASYNC_MIN_BYTES_4GPU, AR_CPASYNC_MIN_BYTES_8GPU)
    return own if own >= 0 else AR_CPASYNC_MIN_BYTES


def cpasync_max_bytes(ngpus: Int) -> Int:
    var own = _of_count(ngpus, AR_CPASYNC_MAX_BYTES_2GPU, AR_CPASYNC_MAX_BYTES_4GPU, AR_CPASYNC_MAX_BYTES_8GPU)
    return own if own >= 0 else AR_CPASYNC_MAX_BYTES


def cpasync_stages(ngpus: Int) -> Int:
    var own = _of_count(ngpus, AR_CPASYNC_STAGES_2GPU, AR_CPASYNC_STAGES_4GPU, AR_CPASYNC_STAGES_8GPU)
    return own if own >= 0 else AR_CPASYNC_STAGES


@always_inline
def _in_window(num_bytes: Int, ngpus: Int, lo2: Int, hi2: Int, lo4: Int, hi4: Int, lo8: Int, hi8: Int) -> Bool:
    """Whether `num_bytes` lies in this GPU count's window [lo, hi] (none for an unsupported count)."""
    if ngpus != 2 and ngpus != 4 and ngpus != 8:
        return False
    return num_bytes >= _of_count(ngpus, lo2, lo4, lo8) and num_bytes <= _of_count(ngpus, hi2, hi4, hi8)


def select_kernel(num_bytes: Int, ngpus: Int, dtype: DType) -> Int32:
    """The runtime choice among the kernels that exist. `dtype` is accepted so
    windows can become dtype-specific; all three dtypes use 16-byte vectors.
    Every window is the one of `ngpus` (its _{2,4,8}GPU define, else the
    shared define, else the default)."""
    _ = dtype
    _check_defines()
    if num_bytes > 0 and num_bytes <= push_max_bytes(ngpus):
        return KERNEL_ID_PUSH
    if _in_window(num_bytes, ngpus, AR_2STAGE_CE_MIN_BYTES_2GPU, AR_2STAGE_CE_MAX_BYTES_2GPU,
                  AR_2STAGE_CE_MIN_BYTES_4GPU, AR_2STAGE_CE_MAX_BYTES_4GPU,
                  AR_2STAGE_CE_MIN_BYTES_8GPU, AR_2STAGE_CE_MAX_BYTES_8GPU):
        return KERNEL_ID_2STAGE_CE
    if _in_window(num_bytes, ngpus, AR_2STAGE_PUSH_MIN_BYTES_2GPU, AR_2STAGE_PUSH_MAX_BYTES_2GPU,
                  AR_2STAGE_PUSH_MIN_BYTES_4GPU, AR_2STAGE_PUSH_MAX_BYTES_4GPU,
                  AR_2STAGE_PUSH_MIN_BYTES_8GPU, AR_2STAGE_PUSH_MAX_BYTES_8GPU):
        return KERNEL_ID_2STAGE_PUSH
    if _in_window(num_bytes, ngpus, AR_PUSHFLAG_MIN_BYTES_2GPU, AR_PUSHFLAG_MAX_BYTES_2GPU,
                  AR_PUSHFLAG_MIN_BYTES_4GPU, AR_PUSHFLAG_MAX_BYTES_4GPU,
                  AR_PUSHFLAG_MIN_BYTES_8GPU, AR_PUSHFLAG_MAX_BYTES_8GPU):
        return KERNEL_ID_PUSHFLAG
    if BULK_AVAILABLE and _in_window(num_bytes, ngpus, AR_BULK_MIN_BYTES_2GPU, AR_BULK_MAX_BYTES_2GPU,
                                     AR_BULK_MIN_BYTES_4GPU, AR_BULK_MAX_BYTES_4GPU,
                                     AR_BULK_MIN_BYTES_8GPU, AR_BULK_MAX_BYTES_8GPU):
        return KERNEL_ID_BULK
    if CPASYNC_AVAILABLE and num_bytes >= cpasync_min_bytes(ngpus) and num_bytes <= cpasync_max_bytes(ngpus):
        var stages = cpasync_stages(ngpus)
        comptime for s in range(2, 5):
            if stages == s:
                return cpasync_kernel_id[s]()
    if num_bytes <= one_stage_max_bytes(ngpus):
        return KERNEL_ID_1STAGE
    return KERNEL_ID_2STAGE


def scratch_elements[dtype: DType](num_elements: Int, ngpus: Int) -> Int:
    """Elements of the per-rank peer-visible scratch every kernel can use
    (the largest need: 2stage one slice, 2stage_push a slot per rank of a
    slice, 1stage_pushflag two generations of a slot per rank of the message);
    at least 1."""
    comptime V = vector_width[dtype]()
    var packs = (num_elements + V - 1) // V
    var need = slice_vectors[dtype](num_elements, ngpus) * V
    need = max(need, push_scratch_packs(packs, ngpus, True) * V)
    if whole_message_scratch[dtype](num_elements):
        need = max(need, push_scratch_packs(packs, ngpus, False) * V)
    return max(1, need)


def whole_message_scratch[dtype: DType](num_elements: Int) -> Bool:
    """Whether the runner gives 1stage_pushflag, whose scratch holds 2 x ngpus
    whole messages per rank, room for this message: up to
    AR_PUSH_REGION_MAX_BYTES, as for 1stage_push's regions."""
    return num_elements * size_of[dtype]() <= AR_PUSH_REGION_MAX_BYTES


def push_slot_packs[dtype: DType](num_elements: Int) -> Int:
    """16-byte packs per source rank in a push receive region for this message
    (0: larger than AR_PUSH_REGION_MAX_BYTES, so no region; push is refused)."""
    if num_elements * size_of[dtype]() > AR_PUSH_REGION_MAX_BYTES:
        return 0
    return max(1, (num_elements + vector_width[dtype]() - 1) // vector_width[dtype]())


def refusal(kernel_id: Int32, num_bytes: Int) -> String:
    """Why `kernel_id` cannot run a message of `num_bytes` per rank in this
    binary (empty when it can). The runner checks every forced kernel and
    size with it before running anything; the launch path checks again."""
    if not kernel_exists(kernel_id):
        return String("kernel ", kernel_name(kernel_id), " (id ", kernel_id, ") is not built into this binary")
    if (kernel_id == KERNEL_ID_PUSH or kernel_id == KERNEL_ID_PUSHFLAG) and (
        num_bytes > AR_PUSH_REGION_MAX_BYTES
    ):
        var what = "receive region" if kernel_id == KERNEL_ID_PUSH else "scratch"
        return String(kernel_name(kernel_id), ": no ", what, " for ", num_bytes, " bytes per rank (at most ",
                      AR_PUSH_REGION_MAX_BYTES, " bytes, AR_PUSH_REGION_MAX_BYTES); use 1stage, 2stage or 2stage_push")
    return String("")


def max_grid_blocks(ctx: DeviceContext) raises -> Int:
    """Grid cap for this device: AR_MAX_BLOCKS and at most 2 blocks per SM."""
    var sms = Int(ctx.get_attribute(DeviceAttribute.MULTIPROCESSOR_COUNT))
    return max(1, min(AR_MAX_BLOCKS, 2 * sms, MAX_BLOCKS))


@always_inline
def pushflag_unroll[ngpus: Int]() -> Int:
    """Packs per thread per chunk in 1stage_pushflag: AR_PUSHFLAG_UNROLL on 2 GPUs, halved on 3-4 and
    quartered above (its reduction holds unroll x ngpus packs in registers, and its launch bounds leave
    64 registers at 512 threads: ptxas fits unroll x ngpus = 8 without spilling)."""
    comptime if ngpus > 4:
        return max(1, AR_PUSHFLAG_UNROLL // 4)
    comptime if ngpus > 2:
        return max(1, AR_PUSHFLAG_UNROLL // 2)
    return AR_PUSHFLAG_UNROLL


def _grid_for(work_items: Int, block_threads: Int, grid_cap: Int) -> Int:
    return max(1, min((work_items + block_threads - 1) // block_threads, grid_cap))


@fieldwise_init
struct LaunchCounts(TrivialRegisterPassable):
    """Per-lane launch counts the host keeps identically for every rank (all
    ranks launch the same sequence): `push` (1stage_push calls since its
    regions were filled; parity = generation), `pushflag` (1stage_pushflag
    calls since its scratch was allocated; parity = generation). 16 bytes."""

    var push: Int
    var pushflag: Int


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
    outputs: Array[ElemPtr[dtype], ngpus],
    scratch: Array[ElemPtr[dtype], ngpus],
    sigs: Array[SignalPtr, ngpus],
    push_rx: Array[PushPtr, ngpus],
    push_slots: Int,
    calls: LaunchCounts,
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
    var why = refusal(kernel_id, num_elements * size_of[dtype]())
    if why:
        raise Error(why)
    if num_elements == 0:
        return
    if kernel_id == KERNEL_ID_2STAGE_CE:
        raise Error("2stage_ce is enqueued for all ranks at once (launch_2stage_ce), not one rank at a time")
    var n = Int64(num_elements)
    var r = Int32(rank)
    var skip = Int32(1) if debug_skip_barrier else Int32(0)
    var num_vectors_or_one = max(1, num_elements // V)
    var output = outputs[rank]
    var push_generation = calls.push

    if kernel_id == KERNEL_ID_1STAGE:
        comptime k = ar_oneshot_k[
            dtype, ngpus, AR_UNROLL, start_ra, end_ra, AR_LEAN_BARRIERS
        ]
        ctx.enqueue_function[k](
            inputs[0 % ngpus], inputs[1 % ngpus], inputs[2 % ngpus], inputs[3 % ngpus], inputs[4 % ngpus], inputs[5 % ngpus], inputs[6 % ngpus], inputs[7 % ngpus],
            output,
            sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
            kernel_id_out, n, r, skip,
            grid_dim=_grid_for(num_vectors_or_one, AR_BLOCK_THREADS * AR_1STAGE_VECS_PER_THREAD, grid_cap),
            block_dim=AR_BLOCK_THREADS,
        )
    elif kernel_id == KERNEL_ID_PUSH:
        if push_slots * V < num_elements:
            raise Error(String("1stage_push: the receive regions hold ", push_slots, " packs, not ", num_elements, " elements"))
        comptime k = ar_push_k[dtype, ngpus]
        ctx.enqueue_function[k](
            inputs[rank],
            output,
            push_rx[0 % ngpus], push_rx[1 % ngpus], push_rx[2 % ngpus], push_rx[3 % ngpus], push_rx[4 % ngpus], push_rx[5 % ngpus], push_rx[6 % ngpus], push_rx[7 % ngpus],
            kernel_id_out, n, Int64(push_slots), Int32(push_generation % 2), r, skip,
            grid_dim=_grid_for((num_elements + V - 1) // V, AR_BLOCK_THREADS, grid_cap),
            block_dim=AR_BLOCK_THREADS,
        )
    elif kernel_id == KERNEL_ID_2STAGE_PUSH or kernel_id == KERNEL_ID_PUSHFLAG:
        var packs = (num_elements + V - 1) // V
        var rows_per_rank = packs
        if kernel_id == KERNEL_ID_2STAGE_PUSH:
            rows_per_rank = (packs + ngpus - 1) // ngpus
        var grid = _grid_for(rows_per_rank, AR_BLOCK_THREADS * AR_PUSH_UNROLL, grid_cap)
        if kernel_id == KERNEL_ID_PUSHFLAG:
            # its own grid (AR_PUSHFLAG_BLOCKS_PER_SM per SM) unless --max-blocks asked for fewer
            var sms = Int(ctx.get_attribute(DeviceAttribute.MULTIPROCESSOR_COUNT))
            var cap = min(AR_PUSHFLAG_BLOCKS_PER_SM * sms, MAX_BLOCKS)
            if grid_cap < min(AR_MAX_BLOCKS, 2 * sms):
                cap = min(cap, grid_cap)
            grid = _grid_for(rows_per_rank, AR_PUSHFLAG_BLOCK_THREADS * pushflag_unroll[ngpus](), cap)
        if kernel_id == KERNEL_ID_2STAGE_PUSH:
            comptime k = ar_2stage_push_k[dtype, ngpus, AR_PUSH_UNROLL]
            ctx.enqueue_function[k](
                inputs[rank],
                outputs[0 % ngpus], outputs[1 % ngpus], outputs[2 % ngpus], outputs[3 % ngpus], outputs[4 % ngpus], outputs[5 % ngpus], outputs[6 % ngpus], outputs[7 % ngpus],
                scratch[0 % ngpus], scratch[1 % ngpus], scratch[2 % ngpus], scratch[3 % ngpus], scratch[4 % ngpus], scratch[5 % ngpus], scratch[6 % ngpus], scratch[7 % ngpus],
                sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
                kernel_id_out, n, Int32(0), r, skip,
                grid_dim=grid,
                block_dim=AR_BLOCK_THREADS,
            )
        else:
            comptime k = ar_pushflag_k[dtype, ngpus, pushflag_unroll[ngpus](), AR_PUSHFLAG_BLOCK_THREADS]
            ctx.enqueue_function[k](
                inputs[rank],
                outputs[0 % ngpus], outputs[1 % ngpus], outputs[2 % ngpus], outputs[3 % ngpus], outputs[4 % ngpus], outputs[5 % ngpus], outputs[6 % ngpus], outputs[7 % ngpus],
                scratch[0 % ngpus], scratch[1 % ngpus], scratch[2 % ngpus], scratch[3 % ngpus], scratch[4 % ngpus], scratch[5 % ngpus], scratch[6 % ngpus], scratch[7 % ngpus],
                sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
                kernel_id_out, n, Int32(calls.pushflag % 2), r, skip,
                grid_dim=grid,
                block_dim=AR_PUSHFLAG_BLOCK_THREADS,
            )
    elif kernel_id == KERNEL_ID_BULK:
        comptime if BULK_AVAILABLE:
            comptime bt = AR_BULK_BLOCK_THREADS
            comptime smem = bulk_shared_bytes[AR_BULK_STAGES, ngpus, bt]()
            comptime k = ar_bulk_k[dtype, ngpus, AR_BULK_STAGES, bt, start_ra, end_ra, AR_LEAN_BARRIERS]
            ctx.enqueue_function[k](
                inputs[0 % ngpus], inputs[1 % ngpus], inputs[2 % ngpus], inputs[3 % ngpus], inputs[4 % ngpus], inputs[5 % ngpus], inputs[6 % ngpus], inputs[7 % ngpus],
                output,
                sigs[0 % ngpus], sigs[1 % ngpus], sigs[2 % ngpus], sigs[3 % ngpus], sigs[4 % ngpus], sigs[5 % ngpus], sigs[6 % ngpus], sigs[7 % ngpus],
                kernel_id_out, n, r, skip,
                grid_dim=_grid_for(num_vectors_or_one, bt * (2 if ngpus == 2 else 1), grid_cap),
                block_dim=bt,
                shared_mem_bytes=smem,
                func_attribute=FuncAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES(UInt32(smem)),
            )
        else:
            raise Error("1stage_bulk needs sm_90 (cp.async.bulk); not built into this binary")
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


@always_inline
def ce_last_split_pct(ngpus: Int) -> Int:
    """AR_CE_LAST_SPLIT_PCT_<ngpus>GPU: percent of a part in the second copy of 2stage_ce's last
    reduce-scatter round (0: that round is one copy; also for a count without a define, which is refused
    before any launch)."""
    return max(
        0,
        _of_count(
            ngpus,
            AR_CE_LAST_SPLIT_PCT_2GPU,
            AR_CE_LAST_SPLIT_PCT_4GPU,
            AR_CE_LAST_SPLIT_PCT_8GPU,
        ),
    )


@always_inline
def ce_ag_split(ngpus: Int) -> Bool:
    """AR_CE_AG_SPLIT_<ngpus>GPU: 2stage_ce's all-gather is cut where the last round is (when it is cut)."""
    return (
        _of_count(
            ngpus, AR_CE_AG_SPLIT_2GPU, AR_CE_AG_SPLIT_4GPU, AR_CE_AG_SPLIT_8GPU
        )
        > 0
    )


@always_inline
def ce_cut(num_elements: Int, part: Int, v: Int, j: Int, second_pct: Int) -> Int:
    """Where 2stage_ce cuts rank j's part (part: elements per part, a multiple of the vector width v): the
    first piece is [lo, cut), the second [cut, hi), lo and hi the part's bounds clipped to the message. The
    second piece holds second_pct percent of the part's vectors, rounded down (0: cut == hi, no second
    piece); cut - lo is whole vectors."""
    var lo = min(num_elements, j * part)
    var hi = min(num_elements, (j + 1) * part)
    var vecs = (hi - lo + v - 1) // v
    return min(hi, lo + (vecs - vecs * second_pct // 100) * v)


struct CeEvents(Movable):
    """2stage_ce's CUDA events for one set of streams (a compute and a copy stream per rank), created once
    and recorded again by every call: a wait enqueued earlier keeps the record it saw, so reusing them is
    safe, and a call then creates nothing (24 events per call on 4 GPUs before 2026-11-26)."""

    var start: List[DeviceEvent]  # [r]: rank r's compute stream reached the call
    var done: List[DeviceEvent]  # [r]: rank r's copy stream finished the call's copies
    # [r * ngpus + i]: rank r's reduce-scatter copies are done up to round i + 1 (i < ngpus - 2), or up to
    # the last round's first piece (i = ngpus - 2) or its second (i = ngpus - 1)
    var copied: List[DeviceEvent]
    var reduced: List[DeviceEvent]  # [r * 2 + p]: rank r's add of the last round's piece p is done

    def __init__(out self, ctxs: List[DeviceContext], copy_ctxs: List[DeviceContext]) raises:
        self.start = List[DeviceEvent]()
        self.done = List[DeviceEvent]()
        self.copied = List[DeviceEvent]()
        self.reduced = List[DeviceEvent]()
        for r in range(len(ctxs)):
            self.start.append(ctxs[r].create_event())
            self.done.append(copy_ctxs[r].create_event())
            for _ in range(len(ctxs)):
                self.copied.append(copy_ctxs[r].create_event())
            for _ in range(2):
                self.reduced.append(ctxs[r].create_event())


@always_inline  # see launch_kernel: no by-value Array across a call
def launch_2stage_ce[
    dtype: DType, ngpus: Int
](
    ctxs: List[DeviceContext],
    copy_ctxs: List[DeviceContext],
    events: CeEvents,
    inputs: Array[ElemPtr[dtype], ngpus],
    outputs: Array[ElemPtr[dtype], ngpus],
    scratch: Array[ElemPtr[dtype], ngpus],
    kernel_id_outs: Array[KernelIdPtr, ngpus],
    num_elements: Int,
    grid_cap: Int,
) raises:
    """Enqueue one 2stage_ce allreduce on every rank (kernels.mojo: ar_ce_add_k): `ctxs[r]` is rank r's
    compute stream (the caller's), `copy_ctxs[r]` a second stream of the same GPU that issues its copies.
    Everything is ordered by CUDA events, several of them waited for on another GPU; each is recorded before
    any wait for it is enqueued, which is why all ranks are enqueued here together, step by step, and
    never one rank at a time (a wait on an event not yet recorded does not wait). The events are the
    caller's (`CeEvents`, made once per set of streams) and are recorded again by every call.
    - A rank copies into a peer only after the peer's compute stream reached this call (`start`), so the
      peer's earlier work on its scratch and output is done.
    - Rank r's compute stream ends this call only after every rank's copy stream is done (`done`): every
      peer's all-gather into r's output has landed, and r's own copies have finished reading its input."""
    _check_defines()
    var why = refusal(KERNEL_ID_2STAGE_CE, num_elements * size_of[dtype]())
    if why:
        raise Error(why)
    if num_elements == 0:
        return
    comptime V = vector_width[dtype]()
    comptime L = ngpus - 1  # the last round
    comptime add_last_k = ar_ce_add_k[dtype, ngpus, 2, AR_UNROLL]  # output (2 GPUs: input) + round L
    var n = num_elements
    var part = ((n + V - 1) // V + ngpus - 1) // ngpus * V
    var split = ce_last_split_pct(ngpus)
    var pieces = 2 if split > 0 else 1
    var ag_pieces = 2 if pieces == 2 and ce_ag_split(ngpus) else 1
    if len(events.start) != ngpus or len(events.copied) != ngpus * ngpus:
        raise Error(String("2stage_ce: events for ", len(events.start), " ranks, not ", ngpus))
    # part j is [lo[j], hi[j]), clipped to the message; piece p of `count` is [a, b) with
    # a = lo if p == 0 else cut, b = hi if p == count - 1 else cut (one rule for every cut piece below)
    var lo = List[Int](capacity=ngpus)
    var hi = List[Int](capacity=ngpus)
    var cut = List[Int](capacity=ngpus)
    for j in range(ngpus):
        lo.append(min(n, j * part))
        hi.append(min(n, (j + 1) * part))
        cut.append(ce_cut(n, part, V, j, split))
    for r in range(ngpus):
        ctxs[r].stream().record_event(events.start[r])
    for r in range(ngpus):
        for q in range(ngpus):
            copy_ctxs[r].stream().enqueue_wait_for(events.start[q])
    # reduce-scatter, round k: rank r -> rank j = (r + k) % ngpus, slot r of j's scratch; rounds before the
    # last in one copy, the last in `pieces` copies, an event after each
    for k in range(1, ngpus):
        var count = pieces if k == L else 1
        for r in range(ngpus):
            var j = (r + k) % ngpus
            for p in range(count):
                var a = lo[j] if p == 0 else cut[j]
                var b = hi[j] if p == count - 1 else cut[j]
                if b > a:
                    copy_ctxs[r].enqueue_copy(
                        scratch[j].unsafe_offset(r * part + a - lo[j]), inputs[r].unsafe_offset(a), b - a
                    )
                copy_ctxs[r].stream().record_event(events.copied[r * ngpus + k - 1 + p])
    # the adds on rank j: rounds 1..L-1 once they are in, then round L piece by piece
    for j in range(ngpus):
        comptime if ngpus > 2:
            comptime add_rounds_k = ar_ce_add_k[dtype, ngpus, ngpus - 1, AR_UNROLL]  # input + rounds 1..L-1
            for k in range(1, L):
                ctxs[j].stream().enqueue_wait_for(events.copied[((j - k + ngpus) % ngpus) * ngpus + k - 1])
            ctxs[j].enqueue_function[add_rounds_k](
                inputs[j], scratch[j], outputs[j], kernel_id_outs[j],
                Int64(lo[j]), Int64(hi[j] - lo[j]), Int64(part), Int64(j * part), Int32(j), Int32(1),
                grid_dim=_grid_for(max(1, (hi[j] - lo[j]) // V), AR_BLOCK_THREADS, grid_cap),
                block_dim=AR_BLOCK_THREADS,
            )
        var q = (j - L + ngpus) % ngpus
        var first_src = outputs[j] if ngpus > 2 else inputs[j]
        for p in range(pieces):
            var a = lo[j] if p == 0 else cut[j]
            var b = hi[j] if p == pieces - 1 else cut[j]
            ctxs[j].stream().enqueue_wait_for(events.copied[q * ngpus + L - 1 + p])
            ctxs[j].enqueue_function[add_last_k](
                first_src, scratch[j], outputs[j], kernel_id_outs[j],
                Int64(a), Int64(b - a), Int64(part), Int64(j * part), Int32(j), Int32(L),
                grid_dim=_grid_for(max(1, (b - a) // V), AR_BLOCK_THREADS, grid_cap),
                block_dim=AR_BLOCK_THREADS,
            )
            ctxs[j].stream().record_event(events.reduced[j * 2 + p])
    # all-gather, same rounds: rank r's reduced part into every peer's output, in `ag_pieces` pieces, each
    # after the add that wrote it (one piece: after the last add)
    for p in range(ag_pieces):
        for r in range(ngpus):
            var a = lo[r] if p == 0 else cut[r]
            var b = hi[r] if p == ag_pieces - 1 else cut[r]
            copy_ctxs[r].stream().enqueue_wait_for(events.reduced[r * 2 + (p if ag_pieces == 2 else pieces - 1)])
            if b > a:
                for k in range(1, ngpus):
                    var j = (r + k) % ngpus
                    copy_ctxs[r].enqueue_copy(outputs[j].unsafe_offset(a), outputs[r].unsafe_offset(a), b - a)
    for r in range(ngpus):
        copy_ctxs[r].stream().record_event(events.done[r])
    for r in range(ngpus):
        for q in range(ngpus):
            ctxs[r].stream().enqueue_wait_for(events.done[q])


@always_inline  # see launch_kernel: no by-value Array across a call
def allreduce_rank[
    dtype: DType, ngpus: Int
](
    requested_kernel_id: Int32,
    ctx: DeviceContext,
    rank: Int,
    inputs: Array[ElemPtr[dtype], ngpus],
    outputs: Array[ElemPtr[dtype], ngpus],
    scratch: Array[ElemPtr[dtype], ngpus],
    sigs: Array[SignalPtr, ngpus],
    push_rx: Array[PushPtr, ngpus],
    push_slots: Int,
    calls: LaunchCounts,
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
        outputs,
        scratch,
        sigs,
        push_rx,
        push_slots,
        calls,
        kernel_id_out,
        num_elements,
        grid_cap,
        debug_skip_barrier,
    )
    return kernel_id
