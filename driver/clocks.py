"""SM clock and power while each case is timed, so that a speedup can be read as cycles or as clocks.

An H100 SXM is held at 700 W: a kernel that spends more energy per tile runs at a lower SM clock, and two
implementations timed side by side can differ in clock as much as in cycles (experiments/2026-11-27-sdpa-clocks:
the fp8 tier at (1,16,8192,128) ran capped at 1890 MHz where cuDNN FP8 ran at 1980). The telemetry read before and
after a config (device.probe) sees an idle GPU. So a thread of the driver reads NVML every few milliseconds
while a suite times (ClockSampler), the rounds record when each case ran (common.Samples.windows), and each timed
record gets the summary of its windows' samples (summarize -> records.ClockSummary).

Only samples drawn at >= BUSY_FRAC of the enforced power limit count: between launches a GPU runs the L2 flush,
the hold kernel, uploads, or nothing, at full clock and low power, and those samples would read as the kernel's
clock. A case too short to draw MIN_BUSY such samples gets no clock (None), never a guess.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from driver.records import ClockSummary

PERIOD_S = 0.002  # between two reads of every GPU
BUSY_FRAC = 0.4  # of the enforced power limit: a sample at or above it counts (280 W on a 700 W part)
MIN_BUSY = 5  # fewer counted samples than this: no clock for the record


@dataclass(frozen=True)
class ClockSample:
    t: float  # time.time()
    sm_mhz: float
    power_w: float
    power_capped: bool  # the clock is held back by the power cap
    thermal: bool  # ... by heat (software or hardware thermal slowdown)


Reader = Callable[[], list[ClockSample]]  # one sample per GPU, in the suite's GPU order


class ClockSampler:
    """Reads every GPU `period_s` apart on a daemon thread until stop(); between() gives one GPU's samples in a
    time window. `read` raising stops the sampling (what was read is kept): telemetry never fails a run."""

    def __init__(self, read: Reader, power_limit_w: list[float | None], period_s: float = PERIOD_S,
                 close: Callable[[], None] | None = None):
        self.read, self.power_limit_w, self.period_s, self._close = read, power_limit_w, period_s, close
        self.samples: list[list[ClockSample]] = [[] for _ in power_limit_w]
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clock-sampler", daemon=True)

    def start(self) -> ClockSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._close is not None:
            self._close()
            self._close = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for gpu, sample in enumerate(self.read()[: len(self.samples)]):
                    self.samples[gpu].append(sample)
            except Exception as exc:  # noqa: BLE001 - NVML fails in many ways; the run goes on without clocks
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.period_s)

    def between(self, windows: Iterable[tuple[float, float]], gpu: int = 0) -> list[ClockSample]:
        spans = list(windows)
        return [s for s in list(self.samples[gpu]) if any(t0 <= s.t <= t1 for t0, t1 in spans)]

    def summary(self, windows: Iterable[tuple[float, float]], gpu: int = 0) -> ClockSummary:
        return summarize(self.between(windows, gpu), self.power_limit_w[gpu])


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(samples: list[ClockSample], power_limit_w: float | None, busy_frac: float = BUSY_FRAC,
              min_busy: int = MIN_BUSY) -> ClockSummary:
    """The busy samples' SM clock (p50, p10), power (p50) and the shares held back by power or heat. Without a
    known power limit every sample counts as busy (busy_w 0)."""
    busy_w = busy_frac * power_limit_w if power_limit_w else 0.0
    busy = [s for s in samples if s.power_w >= busy_w]
    head = {"samples": len(samples), "busy_samples": len(busy), "busy_w": round(busy_w, 1),
            "power_limit_w": power_limit_w}
    if len(busy) < min_busy:
        return ClockSummary(**head)
    return ClockSummary(
        **head,
        sm_mhz_p50=_percentile([s.sm_mhz for s in busy], 50),
        sm_mhz_p10=_percentile([s.sm_mhz for s in busy], 10),
        power_w_p50=round(_percentile([s.power_w for s in busy], 50), 1),
        power_cap_frac=round(sum(s.power_capped for s in busy) / len(busy), 3),
        thermal_frac=round(sum(s.thermal for s in busy) / len(busy), 3),
    )


def nvml_sampler(gpu_count: int, period_s: float = PERIOD_S) -> ClockSampler | None:
    """A started sampler of the first `gpu_count` GPUs this process's CUDA sees (device.visible_handles), or None
    where NVML cannot start (then records carry no clock). Power is NVML's instantaneous reading where the driver
    has it (NVML_FI_DEV_POWER_INSTANT), else its averaged one."""
    from driver import device  # NVML only where a suite runs

    try:
        nv = device.start_nvml()
        handles = device.visible_handles(nv)[:gpu_count]
    except Exception:  # noqa: BLE001 - no NVML: no clocks, the run goes on
        return None
    limits = [device.nvml_query(nv.nvmlDeviceGetEnforcedPowerLimit, h) for h in handles]
    instant_field = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)

    def power_mw(h) -> float:
        if instant_field is not None:
            got = device.nvml_query(nv.nvmlDeviceGetFieldValues, h, [instant_field])
            if got and got[0].nvmlReturn == 0:
                return float(got[0].value.uiVal)
        return float(nv.nvmlDeviceGetPowerUsage(h))

    def read() -> list[ClockSample]:
        now, out = time.time(), []
        for h in handles:
            # the reasons named as the before/after telemetry names them (device.throttle_names)
            reasons = device.throttle_names(nv, nv.nvmlDeviceGetCurrentClocksEventReasons(h))
            out.append(ClockSample(t=now, sm_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                                   power_w=power_mw(h) / 1000, power_capped="sw_power_cap" in reasons,
                                   thermal="sw_thermal" in reasons or "hw_thermal" in reasons))
        return out

    return ClockSampler(read, [lim / 1000 if lim else None for lim in limits], period_s,
                        close=lambda: device.nvml_query(nv.nvmlShutdown)).start()
