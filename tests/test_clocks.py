"""The clock and power while each case is timed (driver/clocks.py): which samples count, what the summary says,
that the rounds record when each case ran, that COMPARE.md shows it, and that NVML's clock event reasons are named.

The samples here are constructed (their clocks and watts are set by the tests, not read from a GPU); the
numbers echo experiments/2026-11-27-sdpa-clocks (1x H100, 700 W limit), where the method was first used."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time

import pynvml
import pytest

from driver import device, report
from driver.clocks import MIN_BUSY, ClockSample, ClockSampler, summarize
from driver.records import ClockSummary, SdpaLine
from driver.suites.common import interleaved
from tests.test_sdpa_report import _rec, _run


def _s(t: float, mhz: float, watts: float, capped: bool = False, thermal: bool = False) -> ClockSample:
    return ClockSample(t=t, sm_mhz=mhz, power_w=watts, power_capped=capped, thermal=thermal)


def test_only_busy_samples_count_and_the_summary_says_how_many():
    # A cold round: the kernel at 1890 MHz under the cap, the L2 flush and the hold kernel at 1980 MHz and low
    # power in between. Counting every sample would read 1980 MHz.
    kernel = [_s(i, 1890, 700, capped=True) for i in range(8)] + [_s(8, 1905, 690, capped=False)]
    between = [_s(10 + i, 1980, 125) for i in range(20)]
    c = summarize(kernel + between, power_limit_w=700.0)
    assert (c.samples, c.busy_samples, c.busy_w) == (29, 9, 280.0)
    assert c.sm_mhz_p50 == 1890 and c.sm_mhz_p10 == 1890
    assert c.power_w_p50 == 700 and c.power_cap_frac == pytest.approx(8 / 9, abs=1e-3) and c.thermal_frac == 0


def test_too_few_busy_samples_give_no_clock_rather_than_a_guess():
    c = summarize([_s(i, 1980, 700) for i in range(MIN_BUSY - 1)] + [_s(9, 1980, 100)], power_limit_w=700.0)
    assert c.busy_samples == MIN_BUSY - 1 and c.samples == MIN_BUSY
    assert c.sm_mhz_p50 is None and c.power_cap_frac is None


def test_without_a_power_limit_every_sample_counts():
    c = summarize([_s(i, 1500 + 10 * i, 50) for i in range(10)], power_limit_w=None)
    assert c.busy_w == 0 and c.busy_samples == 10 and c.sm_mhz_p50 in (1540, 1550) and c.sm_mhz_p10 == 1510


def test_the_sampler_reads_until_stopped_and_gives_a_window_of_one_gpu():
    clock = iter(range(10**6))
    lock = threading.Lock()

    def read() -> list[ClockSample]:
        with lock:
            t = float(next(clock))
        return [_s(t, 1980, 600), _s(t, 1700, 300)]  # two GPUs

    sampler = ClockSampler(read, [700.0, 700.0], period_s=0.0005).start()
    deadline = time.time() + 5
    while len(sampler.samples[1]) < 40 and time.time() < deadline:
        time.sleep(0.005)
    sampler.stop()
    n = len(sampler.samples[0])
    assert n >= 40 and len(sampler.samples[1]) == n and sampler.error is None
    assert [s.t for s in sampler.between([(3, 5), (10, 11)], gpu=1)] == [3, 4, 5, 10, 11]
    assert {s.sm_mhz for s in sampler.between([(0, 100)], gpu=1)} == {1700}
    assert sampler.summary([(0, 29)], gpu=0).busy_samples == 30
    time.sleep(0.01)
    assert len(sampler.samples[0]) == n  # stopped: nothing more read


def test_a_failing_read_stops_the_sampler_and_keeps_what_was_read():
    calls = []

    def read() -> list[ClockSample]:
        calls.append(1)
        if len(calls) > 3:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return [_s(len(calls), 1980, 600)]

    sampler = ClockSampler(read, [700.0], period_s=0.0005).start()
    deadline = time.time() + 5
    while sampler.error is None and time.time() < deadline:
        time.sleep(0.005)
    sampler.stop()
    assert len(sampler.samples[0]) == 3 and "NVMLError" in (sampler.error or "")


SDPA = {"suite": "sdpa", "shape": [1, 8, 512, 64], "iters": 10, "warmup": 1, "samples_us": [8.9, 9.0, 9.5],
        "timing": "cold"}


def _printer(impl: str, sleep_s: float) -> list[str]:
    line = json.dumps(json.dumps({**SDPA, "impl": impl}))
    return [sys.executable, "-c", f"import time; time.sleep({sleep_s}); print({line})"]


def test_the_rounds_record_when_each_case_ran():
    cmds = {("cpasync", "cold"): _printer("cpasync", 0.2), ("torch_sdpa", "cold"): _printer("torch_sdpa", 0.0)}
    t0 = time.time()
    samples = interleaved(cmds, SdpaLine, rounds=2, min_rounds=2, target_spread=0.0, timeout_s=60,
                          key=lambda k, ln: (ln.impl, k[1]))
    t1 = time.time()
    ours, peer = samples.windows[("cpasync", "cold")], samples.windows[("torch_sdpa", "cold")]
    assert len(ours) == len(peer) == 2
    spans = sorted(ours + peer)
    assert t0 <= spans[0][0] and spans[-1][1] <= t1
    assert all(a1 <= b0 for (_, a1), (b0, _) in itertools.pairwise(spans))  # one case at a time, in order
    assert all(b - a >= 0.2 for a, b in ours)  # the window holds the whole case


def test_compare_shows_the_clock_of_each_timed_record_and_nothing_without_one():
    capped = ClockSummary(samples=900, busy_samples=700, busy_w=280.0, power_limit_w=700.0, sm_mhz_p50=1890.0,
                          sm_mhz_p10=1785.0, power_w_p50=696.0, power_cap_frac=0.94, thermal_frac=0.0)
    free = ClockSummary(samples=1200, busy_samples=1000, busy_w=280.0, power_limit_w=700.0, sm_mhz_p50=1980.0,
                        sm_mhz_p10=1980.0, power_w_p50=532.0, power_cap_frac=0.0, thermal_frac=0.0)
    short = ClockSummary(samples=3, busy_samples=1, busy_w=280.0, power_limit_w=700.0)
    ours = _rec("cpasync", "fp8", "normal", "long_d128", 0, 3.7e-2, 5e-2, p50=627.6, mode="cold")
    peer = _rec("cudnn_fp8", "fp8", "normal", "long_d128", 0, 4.5e-2, 6e-2, p50=554.9, mode="cold")
    tiny = _rec("cpasync", "fp16", "normal", "mission", 0, 2e-4, 3e-4, p50=9.9, mode="cold")
    assert "## Clocks while timed" not in report.compare_markdown(_run([ours, peer]))
    md = report.compare_markdown(_run([ours.model_copy(update={"clock": capped}),
                                       peer.model_copy(update={"clock": free}),
                                       tiny.model_copy(update={"clock": short})]))
    table = md[md.index("## Clocks while timed"):]
    rows = [ln for ln in table.splitlines() if ln.startswith("| long_d128/seed0 |")]
    assert [c.strip() for c in rows[0].strip("|").split("|")][1:] == [
        "cpasync", "fp8", "cold", "627.60", "1890 (1785)", "696", "0.94", "280 / 700", "900 (700)"]
    assert "| 1980 (1980) | 532 | 0.00 |" in rows[1] and "cudnn_fp8" in rows[1]
    assert "too few busy samples" in next(ln for ln in table.splitlines() if ln.startswith("| mission/seed0 |"))


def test_nvml_clock_event_reasons_are_named():
    # nvidia-ml-py's own constants: the names were once looked up without their `nvml` prefix and never matched.
    mask = (pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonGpuIdle
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    assert device.throttle_names(pynvml, mask) == ["hw_thermal", "idle", "sw_power_cap"]
    assert device.throttle_names(pynvml, 0) == []


class _FakeNvml:
    """Two GPUs' answers in nvidia-ml-py's calling convention (its constants from the real module): GPU 0 under the
    power cap at 1890 MHz, GPU 1 free at 1980 MHz; power through the instantaneous field. Counts shutdowns."""

    def __init__(self):
        self.shutdowns = 0

    def __getattr__(self, name):  # the constants (NVML_CLOCK_SM, the clock event reasons, ...)
        return getattr(pynvml, name)

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetFieldValues(self, h, fields):
        value = type("V", (), {"uiVal": 696_000 if h == 0 else 532_000})()
        return [type("F", (), {"nvmlReturn": 0, "value": value})()]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return pynvml.nvmlClocksEventReasonSwPowerCap if h == 0 else 0

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == pynvml.NVML_CLOCK_SM
        return 1890 if h == 0 else 1980

    def nvmlShutdown(self):
        self.shutdowns += 1


def test_nvml_sampler_reads_each_gpu_through_the_device_helpers(monkeypatch):
    # The sampler's NVML path runs only on a GPU host in a bench; here a fake NVML stands in, so a renamed helper
    # or a wrong field fails on any machine.
    fake = _FakeNvml()
    monkeypatch.setattr(device, "start_nvml", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from driver.clocks import nvml_sampler

    sampler = nvml_sampler(2, period_s=0.001)
    assert sampler is not None
    deadline = time.time() + 5
    while min(len(s) for s in sampler.samples) < MIN_BUSY and time.time() < deadline:
        time.sleep(0.005)
    sampler.stop()
    assert sampler.error is None and fake.shutdowns == 1
    assert sampler.power_limit_w == [700.0, 700.0]
    everything = [(0.0, time.time())]
    capped, free = sampler.summary(everything, gpu=0), sampler.summary(everything, gpu=1)
    assert (capped.sm_mhz_p50, capped.power_w_p50, capped.power_cap_frac) == (1890, 696.0, 1.0)
    assert (free.sm_mhz_p50, free.power_w_p50, free.power_cap_frac) == (1980, 532.0, 0.0)
