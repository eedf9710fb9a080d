"""GPU discovery and telemetry through NVML (nvidia-ml-py).

Read before and after each config: clocks, temperature, power, throttle reasons,
and whether other processes share the GPUs, so a number can be trusted or not.
"""

from __future__ import annotations

import os
import re

import psutil

from driver.errors import NoGPU
from driver.records import DeviceInfo, GpuInfo


def start_nvml():
    """pynvml, initialised (the caller shuts it down); NoGPU with what to do where it cannot start."""
    try:
        import pynvml
    except ImportError:
        raise NoGPU("nvidia-ml-py is not installed, so no GPU can be found", "pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NoGPU(f"NVML cannot start ({exc}): this machine has no usable NVIDIA GPU or driver") from None
    return pynvml


def nvml_query(fn, *args, default=None):
    """fn(*args), or `default` where NVML does not support that query on this part."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVML raises per-field "not supported" errors of several kinds on some parts
        return default


def throttle_names(nv, mask: int | None) -> list[str]:
    """The clock-event reasons set in `mask` (nvmlDeviceGetCurrentClocksEventReasons), by the short names records use."""
    if not mask:
        return []
    # nvidia-ml-py's names (until 2026-11-27 this table lacked their `nvml` prefix, so no reason was ever named
    # and every record's throttle_reasons was empty)
    names = {
        "nvmlClocksEventReasonGpuIdle": "idle",
        "nvmlClocksEventReasonApplicationsClocksSetting": "app_clocks",
        "nvmlClocksEventReasonSwPowerCap": "sw_power_cap",
        "nvmlClocksEventReasonHwSlowdown": "hw_slowdown",
        "nvmlClocksEventReasonSwThermalSlowdown": "sw_thermal",
        "nvmlClocksEventReasonHwThermalSlowdown": "hw_thermal",
        "nvmlClocksEventReasonHwPowerBrakeSlowdown": "power_brake",
        "nvmlClocksEventReasonSyncBoost": "sync_boost",
    }
    return sorted({label for attr, label in names.items() if hasattr(nv, attr) and mask & getattr(nv, attr)})


def visible_handles(nv) -> list:
    """The NVML handles of the GPUs a CUDA process started from here sees, in CUDA's order: every GPU, or
    those CUDA_VISIBLE_DEVICES names (indices or UUIDs, read as CUDA reads it: the list ends at the first
    entry that names no GPU). NVML itself ignores the variable, so without this a run told to use 2 of 4
    GPUs would plan for 4 and its executables would refuse."""
    count = nv.nvmlDeviceGetCount()
    every = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return every
    uuids = []
    for h in every:
        uuid = nvml_query(nv.nvmlDeviceGetUUID, h, default="")
        uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
    shown: list = []
    for token in (t.strip() for t in env.split(",")):
        if re.fullmatch(r"[0-9]{1,9}", token) and int(token) < count:  # ASCII: `²`.isdigit() too
            pick = int(token)
        else:
            named = [i for i, u in enumerate(uuids) if token and u and u.startswith(token if token.startswith("GPU-")
                                                                                   else f"GPU-{token}")]
            if len(named) != 1:
                break
            pick = named[0]
        if every[pick] in shown:
            break
        shown.append(every[pick])
    if not shown:
        raise NoGPU(f"CUDA_VISIBLE_DEVICES={env!r} leaves none of this host's {count} GPU(s) visible",
                    "unset it, or name GPUs by index (0,1) or UUID (nvidia-smi -L)")
    return shown


def _this_run_pids() -> set[int]:
    """The driver and every process it started (the long-lived workers, their ranks): not "other"."""
    me = psutil.Process()
    pids = {me.pid}
    try:
        pids |= {c.pid for c in me.children(recursive=True)}
    except psutil.Error:
        pass
    return pids


def probe() -> DeviceInfo:
    nv = start_nvml()
    try:
        if nv.nvmlDeviceGetCount() == 0:
            raise NoGPU("NVML reports 0 GPUs")
        ours = _this_run_pids()
        gpus = []
        for i, h in enumerate(visible_handles(nv)):  # i: the CUDA device ordinal the executables use
            name = nv.nvmlDeviceGetName(h)
            procs = nvml_query(nv.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []
            power_mw = nvml_query(nv.nvmlDeviceGetPowerUsage, h)
            gpus.append(
                GpuInfo(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else name,
                    memory_mib=nv.nvmlDeviceGetMemoryInfo(h).total >> 20,
                    sm_clock_mhz=nvml_query(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    mem_clock_mhz=nvml_query(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                    temperature_c=nvml_query(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    power_w=round(power_mw / 1000, 1) if power_mw is not None else None,
                    throttle_reasons=throttle_names(nv, nvml_query(nv.nvmlDeviceGetCurrentClocksEventReasons, h)),
                    other_processes=sum(1 for p in procs if p.pid not in ours),
                )
            )
        driver = nv.nvmlSystemGetDriverVersion()
        return DeviceInfo(driver_version=driver.decode() if isinstance(driver, bytes) else driver, gpus=gpus)
    finally:
        nvml_query(nv.nvmlShutdown)


def arch_of(gpu_index: int = 0) -> str:
    """`sm_90` for an H100/H200: the arch the bench builds and runs."""
    nv = start_nvml()
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(visible_handles(nv)[gpu_index])
        return f"sm_{major}{minor}"
    finally:
        nvml_query(nv.nvmlShutdown)


def require_gpus(dev: DeviceInfo, ngpus: tuple[int, ...] | None) -> None:
    """Before anything is launched: every GPU count asked for (--ngpus) is present, else NoGPU naming the
    GPUs this host has. None (no --ngpus): the suites take the counts present."""
    present = len(dev.gpus)
    too_many = [n for n in ngpus or () if n > present]
    if too_many:
        names = ", ".join(f"GPU{g.index} {g.name}" for g in dev.gpus)
        fits = [n for n in ngpus if n <= present]
        raise NoGPU(f"--ngpus {max(too_many)} asked for, but this host has {present} GPU(s): {names}",
                    f"use --ngpus {','.join(map(str, fits))}" if fits else "leave --ngpus out to run every count present")
