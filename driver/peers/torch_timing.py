"""The two timing modes, for every peer that runs through PyTorch (and any torch-driven launch).

cold: each launch timed alone by its own CUDA event pair. The launches are queued behind a
    spin kernel (`torch.cuda._sleep`) long enough for the host to enqueue a whole chunk, so the
    events time the device and not Python dispatch. With `flush_bytes`, a write of that many
    bytes (at least the L2 size: `l2_flush_bytes`) runs before each sample, outside the timed
    interval, so every launch starts with a cold L2.
hot: `launches` calls captured once in a CUDA graph and replayed; each replay is timed by one
    event pair and gives one sample, total / launches. If the callable cannot be captured,
    `GraphCaptureFailed` says why: the caller records the mode as skipped with that reason and
    never substitutes another method.

Both return per-launch times in microseconds, one per sample. `torch` is passed in so this
module imports nothing heavy at import time (the driver imports it on CPU boxes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

HOLD_CHUNK = 20  # cold: samples queued behind one spin kernel
SPIN_CLOCK_HZ = 2e9  # _sleep counts SM clock cycles; H100/H200 run at <= 2 GHz, so this over-holds
HOT_HOLD_S = 50e-6  # hot: spin before each replay (the SDPA runners' timing.cuh holds as long)


class GraphCaptureFailed(RuntimeError):
    """The callable cannot run inside a CUDA graph capture; str() is the reason, one line."""


def l2_flush_bytes(torch, device_index: int = 0) -> int:
    """Twice the device's L2 size (a write of at least the L2 size evicts everything in it)."""
    props = torch.cuda.get_device_properties(device_index)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return max(2 * l2, 64 << 20)


def _host_enqueue_s(torch, fn: Callable[[], object], flush, reps: int) -> float:
    """Median host time to enqueue one sample (flush + events + fn), measured unsynchronized."""
    import time

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    costs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
        costs.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    costs.sort()
    return max(costs[len(costs) // 2], 5e-6)


def time_cold(torch, fn: Callable[[], object], *, iters: int, warmup: int, flush_bytes: int = 0,
              hold: bool = True) -> list[float]:
    """Per-launch device time in us, each launch alone (see the module docstring)."""
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda") if flush_bytes > 0 else None
    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    per_sample_s = _host_enqueue_s(torch, fn, flush, reps=5)
    times: list[float] = []
    while len(times) < iters:
        chunk = min(HOLD_CHUNK, iters - len(times))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(chunk)]
        if hold:  # three times the measured enqueue cost of the chunk, capped at 0.2 s
            torch.cuda._sleep(int(min(3 * per_sample_s * chunk, 0.2) * SPIN_CLOCK_HZ))
        for start, end in events:
            if flush is not None:
                flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times += [start.elapsed_time(end) * 1e3 for start, end in events]
    return times


def capture(torch, fn: Callable[[], object], launches: int):
    """A CUDA graph of `launches` calls of fn, or GraphCaptureFailed with the reason."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on a side stream, as torch's graph docs require
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
    except Exception as exc:  # any capture failure is a reason to report, not a crash
        with contextlib.suppress(Exception):  # the capture's own error is the one to report
            torch.cuda.synchronize()
        first = (str(exc).strip().splitlines() or ["(no message)"])[0]
        raise GraphCaptureFailed(f"CUDA graph capture failed: {type(exc).__name__}: {first}") from exc
    torch.cuda.synchronize()
    return graph


def time_hot(torch, fn: Callable[[], object], *, iters: int, warmup: int, launches: int = 20,
             hold: bool = True, before_sample: Callable[[], object] | None = None) -> list[float]:
    """Per-launch time in us from graph replays of `launches` back-to-back calls, one sample per
    replay, `max(iters // launches, 5)` samples. `before_sample` (e.g. a cross-rank barrier) runs
    on the host before each sample is queued."""
    return time_graph(torch, capture(torch, fn, launches), launches=launches, iters=iters, warmup=warmup,
                      hold=hold, before_sample=before_sample)


def time_graph(torch, graph, *, launches: int, iters: int, warmup: int, hold: bool = True,
               before_sample: Callable[[], object] | None = None) -> list[float]:
    """time_hot's replay loop for a graph already captured (by `capture`): for callers that must
    agree on the capture first, e.g. every rank of a collective."""
    for _ in range(max(warmup // launches, 1)):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    for _ in range(max(iters // launches, 5)):
        if before_sample is not None:
            before_sample()
        if hold:  # the replay's own launch latency is not timed
            torch.cuda._sleep(int(HOT_HOLD_S * SPIN_CLOCK_HZ))
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return times
