"""GPU tests: skipped with the stated reason where no NVIDIA GPU is usable."""

from __future__ import annotations

import pytest

from driver import build, device, paths
from driver.suites import sdpa
from driver.suites.sdpa import HOPPER_FP16_KERNEL, HOPPER_KERNEL
from driver.workers import Pool, served
from tests.conftest import gpu_skip_reason

_REASON = gpu_skip_reason()
HOPPER_BY_TIER = {"fp16": HOPPER_FP16_KERNEL, "fp8": HOPPER_KERNEL}


def hopper_only(precision: str, exe_dir) -> str:
    """The Hopper kernel of a tier; the test skips where it does not run."""
    why = sdpa.hopper_not_offered(device.arch_of(0), exe_dir.name)
    if why:
        pytest.skip(why)
    return HOPPER_BY_TIER[precision]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            item.add_marker(pytest.mark.xdist_group("gpu"))  # under `-n`: one worker runs them, one at a time
            if _REASON:
                item.add_marker(pytest.mark.skip(reason=_REASON))


@pytest.fixture(scope="session")
def gpu():
    return device.probe()


@pytest.fixture(scope="session")
def exe_dir():
    """The executables for this GPU's arch, built by `nox -s test` (or carried in build/)."""
    arch = device.arch_of(0)
    meta = build.load_meta()
    if arch not in meta.archs:
        pytest.fail(f"no build for {arch}: run `python -m driver build --arch {arch}`")
    return paths.build_dir() / arch


@pytest.fixture(scope="session")
def workers():
    """One long-lived worker per executable for the whole GPU session (driver/workers.py): a test that
    checks or times many cases pays one process start and CUDA context, not one per case. The hang
    tests still run their case as its own process (`launch_lines`), so a killed worker costs no other
    test its worker."""
    with Pool() as pool:
        yield pool


def serve_lines(pool: Pool, cmd: list[str], model, *, what: str, timeout_s: float):
    """`launch_lines(cmd, ...)`, but on `cmd[0]`'s long-lived worker."""
    return pool.run(served(cmd[:1], cmd[1:]), model, what=what, timeout_s=timeout_s)
