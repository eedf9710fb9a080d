"""SDPA on the GPU: both variants against the float64 reference, every shape and seed."""

from __future__ import annotations

import numpy as np
import pytest

from driver import thresholds
from driver.config import SDPA_SHAPES
from driver.errors import ConfigError
from driver.gates import sdpa_correctness
from driver.launch import launch
from driver.parse import launch_lines
from driver.records import SdpaLine
from driver.suites import sdpa
from driver.verify import sdpa_errors

GATES = thresholds.load().sdpa


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape_name", list(SDPA_SHAPES))
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_variant_matches_reference(exe_dir, tmp_path, impl, shape_name, seed):
    shape = SDPA_SHAPES[shape_name]
    files, expected = sdpa.prepare_case(tmp_path, shape, seed)
    out = tmp_path / "out.npy"
    cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out), "--iters", "3", "--warmup", "1"]
    (line,) = launch_lines(cmd, SdpaLine, what=impl, timeout_s=120)
    assert line.impl == impl and line.shape == list(shape)
    got = np.load(out)
    assert got.shape == shape and got.dtype == np.float16
    m = sdpa_errors(got, expected, bad_err=GATES.bad_err, what=impl)
    verdict = sdpa_correctness(m, GATES)
    assert verdict.passed, (verdict.reasons, m)


def test_bad_inputs_give_one_error_and_exit_2(exe_dir, tmp_path):
    files = sdpa.write_inputs(tmp_path, (1, 2, 128, 64), 0)
    exe = str(exe_dir / "sdpa_fp8_cpasync")
    base = sdpa.file_args(files) + ["--out", str(tmp_path / "o.npy")]
    np.save(tmp_path / "k_bad.npy", np.zeros((1, 2, 64, 64), np.uint8))
    np.save(tmp_path / "q96.npy", np.zeros((1, 2, 128, 96), np.float16))
    np.save(tmp_path / "q_f32.npy", np.zeros((1, 2, 128, 64), np.float32))
    np.save(tmp_path / "q_s0.npy", np.zeros((1, 2, 0, 64), np.float16))
    cases = {
        "shape mismatch": [a if a != str(files["k"]) else str(tmp_path / "k_bad.npy") for a in base],
        "head dim 96": [a if a != str(files["q"]) else str(tmp_path / "q96.npy") for a in base],
        "q float32": [a if a != str(files["q"]) else str(tmp_path / "q_f32.npy") for a in base],
        "S = 0": [a if a != str(files["q"]) else str(tmp_path / "q_s0.npy") for a in base],
        "missing file": [a if a != str(files["v"]) else str(tmp_path / "nope.npy") for a in base],
    }
    for name, args in cases.items():
        with pytest.raises(ConfigError):
            launch([exe, *args], what=name, timeout_s=60)
