"""The runners' .npy reader (kernels_cuda/sdpa_fp8/npy.h), run through a real runner on this machine: every input
file it cannot take is one `error:` line and exit 2 before any GPU is touched; a well-formed set gets past the reader
(here to the GPU check: exit 4 without a GPU, 0 or beyond with one)."""

from __future__ import annotations

import subprocess

import pytest

from driver import paths
from driver.suites import sdpa


def _runner():
    exe = paths.build_dir() / "sm_90" / "sdpa_fp8_cpasync"
    if not exe.exists():
        pytest.fail(f"{exe} is not built: run `python -m driver build --arch sm_90` (nox -s test does)")
    return exe


def _run(exe, files, tmp_path):
    return subprocess.run([str(exe), *sdpa.file_args(files), "--out", str(tmp_path / "o.npy"), "--iters", "1"],
                          capture_output=True, text=True, timeout=60, check=False)


def _damage(path, how):
    raw = path.read_bytes()
    if how == "one byte short":
        path.write_bytes(raw[:-1])
    elif how == "one byte long":
        path.write_bytes(raw + b"\0")
    elif how == "no magic":
        path.write_bytes(b"XNUMPY" + raw[6:])
    elif how == "header cut":
        path.write_bytes(raw[:40])
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.nvcc
@pytest.mark.parametrize("which", ["q", "k"])
@pytest.mark.parametrize("how, needle", [
    ("one byte short", "does not match header"),
    ("one byte long", "does not match header"),
    ("no magic", "not an .npy file"),
    ("header cut", "truncated header"),
    ("empty", "not an .npy file"),
])
def test_a_damaged_input_file_is_one_line_and_exit_2(tmp_path, which, how, needle):
    exe = _runner()
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    _damage(files[which], how)
    proc = _run(exe, files, tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and needle in line and str(files[which]) in line
    assert proc.stdout == ""


@pytest.mark.nvcc
def test_a_file_the_size_of_its_header_says_gets_past_the_reader(tmp_path):
    """The exact size is read whole: the run reaches the GPU (exit 4 here without one; with one, 0)."""
    exe = _runner()
    files = sdpa.write_inputs(tmp_path, (1, 2, 300, 64), 0)
    proc = _run(exe, files, tmp_path)
    assert proc.returncode in (0, 4), proc.stderr
    if proc.returncode == 4:
        assert proc.stderr.startswith("error: no GPU")
