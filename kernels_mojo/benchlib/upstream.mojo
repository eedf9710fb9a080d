# The upstream peer: max-core 26.7's comm.allreduce, timed, checked and printed
# exactly like our kernels (benchlib/runner.mojo), from its own executable
# (bin/upstream_bench.mojo).
#
# The call path is the one the upstream probe proved on 2x H200 on 2026-11-22
# (experiments/2026-11-22-upstream-call-shapes): P2P enabled
# through comm.sync.enable_p2p(), every tensor built from a raw pointer, the
# signal buffers initialised once per size with init_signal_buffer, and the
# per-rank calls made from a plain function inside group_start/group_end. The
# same calls made from inside allreduce_bench (built with our -D windows and
# kernels) faulted with CUDA_ERROR_ILLEGAL_ADDRESS (a garbage output address in
# upstream's 1-stage kernel), which is why upstream has its own executable.

from std.collections import Array
from std.sys import size_of, stderr
from max.gpu.host import DeviceBuffer, DeviceContext
from layout import TileTensor, row_major
from layout.tile_layout import TensorLayout
from comm import Signal, group_start, group_end
from comm.sync import enable_p2p, init_signal_buffer, is_p2p_enabled
from comm.allreduce import allreduce as upstream_allreduce

from .cli import BenchConfig
from .check import CheckResult
from .runner import SizeBuffers, json_record, sync_all, timing_samples

comptime SigPtr = Pointer[Signal, MutAnyOrigin]
comptime DynLayout = type_of(row_major(Int(1)))


def enable_upstream_p2p() raises:
    """Upstream's own P2P switch (what its is_p2p_enabled() reads)."""
    if not enable_p2p():
        raise Error("comm.sync.enable_p2p() failed: upstream needs P2P access between every pair of GPUs")
    print(String("upstream: is_p2p_enabled=", is_p2p_enabled()), file=stderr)


def _launch_all[
    dtype: DType, ngpus: Int, L: TensorLayout
](
    in_t: Array[TileTensor[dtype, L, ImmutAnyOrigin], ngpus],
    out_t: Array[TileTensor[dtype, L, MutAnyOrigin], ngpus],
    sigs: Array[SigPtr, ngpus],
    ctxs: List[DeviceContext],
) raises:
    """Upstream's call shape (MOJO_NOTES.md): one call per rank in a group."""
    group_start()
    comptime for r in range(ngpus):
        upstream_allreduce[ngpus=ngpus](in_t, out_t[r], sigs, ctxs[r])
    group_end()


struct UpstreamTensors[dtype: DType, ngpus: Int](Movable):
    """Raw per-rank pointers kept next to the buffers that own them (the
    probe's layout); the tensor Arrays are built from them on demand."""

    var in_ptrs: List[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]]
    var out_ptrs: List[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]]
    var sig_list: List[Pointer[Signal, MutUntrackedOrigin]]
    var n: Int

    def __init__(out self, bufs: SizeBuffers[Self.dtype], signals: List[DeviceBuffer[DType.uint8]]):
        self.n = bufs.num_elements
        self.in_ptrs = List[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]]()
        self.out_ptrs = List[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]]()
        self.sig_list = List[Pointer[Signal, MutUntrackedOrigin]]()
        for r in range(Self.ngpus):
            self.in_ptrs.append(rebind[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]](bufs.inputs[r].unsafe_ptr()))
            self.out_ptrs.append(rebind[Pointer[Scalar[Self.dtype], MutUntrackedOrigin]](bufs.outputs[r].unsafe_ptr()))
            self.sig_list.append(
                rebind[Pointer[Signal, MutUntrackedOrigin]](signals[r].unsafe_ptr().unsafe_bitcast[Signal]())
            )

    def inputs(self) -> Array[TileTensor[Self.dtype, DynLayout, ImmutAnyOrigin], Self.ngpus]:
        var a = Array[TileTensor[Self.dtype, DynLayout, ImmutAnyOrigin], Self.ngpus](uninitialized=True)
        for r in range(Self.ngpus):
            a[r] = TileTensor(rebind[Pointer[Scalar[Self.dtype], ImmutAnyOrigin]](self.in_ptrs[r]), row_major(self.n))
        return a^

    def outputs(self) -> Array[TileTensor[Self.dtype, DynLayout, MutAnyOrigin], Self.ngpus]:
        var a = Array[TileTensor[Self.dtype, DynLayout, MutAnyOrigin], Self.ngpus](uninitialized=True)
        for r in range(Self.ngpus):
            a[r] = TileTensor(rebind[Pointer[Scalar[Self.dtype], MutAnyOrigin]](self.out_ptrs[r]), row_major(self.n))
        return a^

    def sigs(self) -> Array[SigPtr, Self.ngpus]:
        var a = Array[SigPtr, Self.ngpus](uninitialized=True)
        for r in range(Self.ngpus):
            a[r] = rebind[SigPtr](self.sig_list[r])
        return a^


def run_upstream[dtype: DType, ngpus: Int](cfg: BenchConfig, ctxs: List[DeviceContext]) raises:
    """Benchmark max-core's comm.allreduce with our timing and checks; one JSON line per size."""
    for size_idx in range(len(cfg.sizes_bytes)):
        var num_bytes = cfg.sizes_bytes[size_idx]
        var n = num_bytes // size_of[dtype]()
        var bufs = SizeBuffers[dtype](ctxs, n, cfg.seed, cfg.check)
        var check = CheckResult()
        if n == 0:  # nothing to reduce: nothing is launched (as for our kernels)
            print(json_record(cfg, "upstream", "none", 0, 0, List[Float64](), check, cfg.check, 0))
            continue
        var signals = List[DeviceBuffer[DType.uint8]]()
        for r in range(ngpus):
            signals.append(
                ctxs[r].enqueue_create_buffer[DType.uint8](size_of[Signal]() + ngpus * size_of[dtype]() * n)
            )
        sync_all(ctxs)
        var t = UpstreamTensors[dtype, ngpus](bufs, signals)
        for r in range(ngpus):
            init_signal_buffer(signals[r], ctxs[r])
        sync_all(ctxs)

        # The tensor Arrays are rebuilt from `t` (kept alive below) on every call instead of being captured.
        # The earlier version captured stack Arrays whose only named uses were inside this closure; the
        # closure's calls do not keep a capture alive (see the keep-alives at the end of run_ours), so the
        # timed calls could read reused stack slots. That matches what was seen: the first (checked) call
        # correct, later calls CUDA_ERROR_MISALIGNED_ADDRESS / ILLEGAL_ADDRESS (2x H200, 2026-11-22, before a5d5278).
        # This version has run clean on 2x H200 in every bench since bench_results/20261122T144714Z-61c45080-2xH200.
        @always_inline
        @__parameter
        def launch_all() raises:
            _launch_all[dtype, ngpus](t.inputs(), t.outputs(), t.sigs(), ctxs)

        if cfg.check:
            bufs.poison_outputs(ctxs)
            print("upstream: checked launch", file=stderr)
            launch_all()
            sync_all(ctxs)
            check = bufs.check(ctxs, cfg.debug_corrupt_element)
            if check.wrong(False) > 0:  # a peer is timed anyway: its line says what was wrong (docs/ALLREDUCE.md)
                print(String("upstream: ", check.wrong(False), " wrong elements; timed anyway (a peer)"), file=stderr)
        print("upstream: timed launches", file=stderr)
        var timing = timing_samples[launch_all](cfg, ctxs)
        if cfg.check:  # recorded, not required of a peer
            check.merge(bufs.same_bits_after_timing(ctxs))
        print(json_record(cfg, "upstream", "upstream", n * size_of[dtype](), n, timing.samples_us, check, cfg.check,
                          1 if cfg.check else 0, timing.hold_overruns))
        # Keep the buffers alive to here: the tensors hold untracked raw pointers, so without these
        # lines Mojo may free the inputs/outputs right after their last named use (the check).
        _ = bufs^
        _ = signals^
        _ = t^
