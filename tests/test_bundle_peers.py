"""The bundle packs the peers' wheels (pyproject's `peers` group) where PyPI has one for a Python
version, and names the ones it could not; the driver's own packages stay required."""

from __future__ import annotations

import re
import tomllib

import pytest

from driver import bundle
from driver.errors import ToolchainMissing
from tests.conftest import ROOT


def test_peer_pins_come_from_pyproject_and_are_exact():
    pins = bundle.peer_pins()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pins == data["project"]["optional-dependencies"]["peers"]
    assert any(p.startswith("nvidia-cudnn-frontend==") for p in pins)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", p) for p in pins)


def test_a_peer_without_a_wheel_is_named_not_fatal(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_pip(site, py, pins, *, deps=True):
        calls.append((py, tuple(pins), deps))
        return "No matching distribution found" if any(p.startswith("nvidia-cudnn") for p in pins) else None

    monkeypatch.setattr(bundle, "_pip_target", fake_pip)
    missing = bundle._site(tmp_path, "3.9")
    assert list(missing) == [p for p in bundle.peer_pins() if p.startswith("nvidia-cudnn")]
    assert "that peer will be recorded as skipped" in capsys.readouterr().err
    assert calls[0][2] is True and all(deps is False for _, _, deps in calls[1:])  # peers: --no-deps


def test_the_drivers_own_packages_stay_required(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "_pip_target", lambda site, py, pins, deps=True: "network unreachable")
    with pytest.raises(ToolchainMissing, match="cannot fetch pydantic"):
        bundle._site(tmp_path, "3.12")


@pytest.mark.parametrize("args, pytest_args", [
    ([], ["tests/gpu"]),
    (["-q", "-x"], ["tests/gpu", "-q", "-x"]),
    (["-k", "sdpa", "-rs"], ["tests/gpu", "-k", "sdpa", "-rs"]),
    (["tests/gpu/test_timing_gpu.py", "-q"], ["tests/gpu/test_timing_gpu.py", "-q"]),
    (["-q", "tests/gpu/test_timing_gpu.py::test_one"], ["-q", "tests/gpu/test_timing_gpu.py::test_one"]),
])
def test_run_tests_runs_the_gpu_tests_or_only_the_ones_named(tmp_path, args, pytest_args):
    """The bundle's ./run-tests: every GPU test by default; where an argument names a test file (or file::test)
    of the bundle, that alone. Until 2026-11-28 it always added tests/gpu, so a partial re-run on a GPU host ran
    the whole suite again. Run through the real script, with a stand-in python that prints what it was asked."""
    import subprocess
    import sys

    (tmp_path / "site" / f"py{sys.version_info[0]}{sys.version_info[1]}").mkdir(parents=True)
    (tmp_path / "tests" / "gpu").mkdir(parents=True)
    (tmp_path / "tests" / "gpu" / "test_timing_gpu.py").write_text("")
    script = tmp_path / "run-tests"
    script.write_text(bundle.RUN_TESTS_SCRIPT)
    script.chmod(0o755)
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\nprintf "%s\\n" "$@"\n')
    stand_in.chmod(0o755)
    res = subprocess.run([str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(stand_in)}, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["-m", "pytest", *pytest_args]
