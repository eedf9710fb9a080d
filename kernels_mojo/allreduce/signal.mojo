# Cross-GPU barrier for the allreduce kernels.
#
# Every rank owns one signal buffer of `SIGNAL_BUFFER_WORDS` 32-bit words in its
# own device memory. All ranks hold pointers to all signal buffers (P2P).
#
#   words [0, FLAG_WORDS)             flags[block][src_rank]: the last epoch
#                                     that `src_rank`'s block `block`
#                                     announced to this rank (written by peers)
#   words [FLAG_WORDS, 2*FLAG_WORDS)  epochs[block][peer]: this rank's own
#                                     per-block, per-peer barrier counter
#                                     (written only by this rank)
#
# Barrier protocol (per thread block, after vLLM's custom allreduce): thread t
# (t < ngpus) bumps its epoch counter, stores the new epoch into peer t's
# flags[block][my_rank] (a system-scope release store, or a volatile store:
# see `ordering`), then spins on its own flags[block][t] (acquire or volatile
# loads) until the value is at least the epoch (signed wrap-around difference). Epochs only grow, so a flag
# left over from an earlier barrier or an earlier launch is always smaller than
# the epoch being waited for; a peer that already moved on to the next barrier
# has written a larger value, which also (correctly) passes. Flags are 32-bit;
# the buffer must be zeroed once before first use and never again.
#
# Requirement for the per-block protocol: every rank launches the same
# sequence of allreduce kernels with the same grid size.

from std.atomic import Atomic, Ordering
from max.gpu import block_idx, thread_idx, barrier

comptime MAX_GPUS = 8
"""Most ranks the signal layout has room for."""

comptime MAX_BLOCKS = 1024
"""Most thread blocks any allreduce launch may use (signal layout capacity)."""

comptime FLAG_WORDS = MAX_BLOCKS * MAX_GPUS

# Regions used by the data-flow (push) kernels, after
# the barrier's two regions (all in 32-bit words, all zeroed once with the rest):
comptime PUSHED_BASE = 2 * FLAG_WORDS
"""pushed[block][src_rank]: how many chunks `src_rank`'s block `block` has
stored into this rank's scratch, cumulative over launches (written by peers)."""
comptime RESULT_BASE = 3 * FLAG_WORDS
"""results[block][src_rank]: how many reduced chunks `src_rank`'s block
`block` has stored into this rank's output, cumulative (2stage_push)."""
comptime COUNTER_BASE = 4 * FLAG_WORDS
"""counters[block][0]: chunks this rank's block `block` handled in all earlier
push launches (the same on every rank: every rank launches the same sequence
with the same grid). Written only by this rank."""
comptime SIGNAL_BUFFER_WORDS = 5 * FLAG_WORDS
"""Size of one rank's signal buffer in UInt32 words (zero it once)."""

comptime SignalPtr = Pointer[UInt32, MutAnyOrigin]

# Barrier orderings (the `ordering` parameter of cross_gpu_barrier).
comptime ORDER_RELAXED = 0
"""Volatile 32-bit flag store and spin load: orders nothing by itself."""
comptime ORDER_ACQUIRE = 1
"""Volatile flag store, system-scope acquire spin load: this thread's later
loads are not performed before the peer's flag is seen (the reader's half)."""
comptime ORDER_RELEASE_ACQUIRE = 2
"""System-scope release store and acquire load: also publishes the block's
earlier writes (needs the block barrier before the store)."""


@always_inline
def cross_gpu_barrier[
    ngpus: Int,
    ordering: Int,
    lead: Bool = True,
    trail: Bool = True,
](
    sigs: Array[SignalPtr, ngpus],
    my_rank: Int,
    debug_skip: Int32,
):
    """Block-level barrier across `ngpus` GPUs; call from every thread.

    Parameters:
        ngpus: Number of ranks.
        ordering: ORDER_RELAXED, ORDER_ACQUIRE or ORDER_RELEASE_ACQUIRE.
        lead: Block barrier before the flag exchange: needed wherever the
            block's earlier writes or reads must be finished before peers
            are told (end and middle barriers); a start barrier has nothing
            before it to order.
        trail: Block barrier after the flag exchange: needed wherever the
            block's later accesses must wait for the peers (start and middle
            barriers); after an end barrier the block only exits.

    Args:
        sigs: Signal buffers of all ranks, indexed by rank.
        my_rank: This rank.
        debug_skip: Non-zero makes this rank skip the barrier entirely (its
            peers then wait forever). Only for watchdog tests.
    """
    comptime assert ordering >= ORDER_RELAXED and ordering <= ORDER_RELEASE_ACQUIRE, "unknown barrier ordering"
    comptime if lead:
        barrier()
    if debug_skip == 0 and thread_idx.x < ngpus:
        var peer = Int(thread_idx.x)
        var bid = Int(block_idx.x)
        var epoch_ptr = sigs[my_rank].unsafe_offset(
            FLAG_WORDS + bid * MAX_GPUS + peer
        )
        var epoch = epoch_ptr.unsafe_load() + 1
        epoch_ptr.unsafe_store(epoch)
        var to_peer = sigs[peer].unsafe_offset(bid * MAX_GPUS + my_rank)
        var from_peer = sigs[my_rank].unsafe_offset(bid * MAX_GPUS + peer)
        comptime if ordering == ORDER_RELEASE_ACQUIRE:
            Atomic[UInt32].store[ordering=Ordering.RELEASE](to_peer, epoch)
        else:
            to_peer.unsafe_store[volatile=True](epoch)
        comptime if ordering >= ORDER_ACQUIRE:
            while (
                Atomic[UInt32].load[ordering=Ordering.ACQUIRE](from_peer)
                - epoch
            ).cast[DType.int32]() < 0:
                pass
        else:
            while (from_peer.unsafe_load[volatile=True]() - epoch).cast[
                DType.int32
            ]() < 0:
                pass
    comptime if trail:
        barrier()


@always_inline
def _ahead_or_equal(seen: UInt32, wanted: UInt32) -> Bool:
    """`seen` is at least `wanted` (signed wrap-around difference)."""
    return (seen - wanted).cast[DType.int32]() >= 0


@always_inline
def signal_peers[
    ngpus: Int
](sigs: Array[SignalPtr, ngpus], my_rank: Int, region: Int, value: UInt32, skip: Bool):
    """Block barrier, then thread t (t < ngpus, t != my_rank) stores `value`
    into peer t's region[block][my_rank] with a system-scope release: every
    write the block made before (its remote stores included) is visible to
    the peer before the value is. Call from every thread."""
    barrier()
    var t = Int(thread_idx.x)
    if not skip and t < ngpus and t != my_rank:
        var dst = sigs[t].unsafe_offset(region + Int(block_idx.x) * MAX_GPUS + my_rank)
        Atomic[UInt32].store[ordering=Ordering.RELEASE](dst, value)


@always_inline
def wait_peers[
    ngpus: Int
](sigs: Array[SignalPtr, ngpus], my_rank: Int, region: Int, value: UInt32):
    """Thread t (t < ngpus, t != my_rank) spins with system-scope acquire loads
    until this rank's region[block][t] reaches `value`; then a block barrier,
    so the whole block may read what the peers published. Call from every
    thread."""
    var t = Int(thread_idx.x)
    if t < ngpus and t != my_rank:
        var src = sigs[my_rank].unsafe_offset(region + Int(block_idx.x) * MAX_GPUS + t)
        while not _ahead_or_equal(Atomic[UInt32].load[ordering=Ordering.ACQUIRE](src), value):
            pass
    barrier()
