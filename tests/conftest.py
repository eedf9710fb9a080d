"""Shared fixtures: a throwaway bench_results/, the real build, GPU detection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def results_dir(tmp_path, monkeypatch) -> Path:
    """Point bench_results/ at an empty temporary folder for this test."""
    out = tmp_path / "bench_results"
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(out))
    return out


def run_driver(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """`python -m driver ARGS` exactly as a user runs it."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "driver", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def gpu_skip_reason() -> str | None:
    """None where an NVIDIA GPU is usable, else the reason GPU tests are skipped."""
    from driver import device
    from driver.errors import NoGPU

    try:
        device.probe()
    except NoGPU as exc:
        return f"no GPU on this machine: {exc.message}"
    return None


def one_line(text: str) -> str:
    """The one non-empty line a refused command printed, asserted to be the only one and no traceback."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    """`python -m driver ARGV` in this process (so that a test can stub the stages behind it): exit code, stdout,
    stderr."""
    from driver import cli

    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def no_work(monkeypatch, results_dir):
    """Any build, GPU run or Slurm plan reached is a test failure: bad input must stop before them (and the
    results folder is a temporary one, should it not)."""
    from driver import bench, build
    from driver.cluster import submit

    def reached(*_a, **_k):
        raise AssertionError("bad input reached the build / run stage")

    monkeypatch.setattr(bench, "run", reached)
    monkeypatch.setattr(build, "build_all", reached)
    monkeypatch.setattr(submit, "plan", reached)
