"""GPU tests: skipped with the stated reason where no NVIDIA GPU is usable."""

from __future__ import annotations

import pytest

from driver import build, device, paths
from tests.conftest import gpu_skip_reason

_REASON = gpu_skip_reason()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
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
