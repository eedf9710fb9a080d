"""The cuDNN FP8 peer on a GPU: cuDNN reads every E4M3 code as decode_e4m3_sim does, and its attention
at the mission shape is within the seed's error gate of the float64 reference, in both timing modes,
saying its tier (fp8) and its arithmetic. Skipped with the reason where the peer cannot run (no torch, no cudnn-frontend,
a GPU older than sm_90). The same calls ran in experiments/2026-11-23-sdpa-peers/ on an H100."""

from __future__ import annotations

import numpy as np
import pytest

from driver import device, peers, thresholds
from driver.parse import launch_lines
from driver.records import SdpaLine
from driver.suites import sdpa
from driver.verify import sdpa_errors

MISSION = (1, 8, 512, 64)


@pytest.fixture(scope="module")
def why_not():
    return peers.missing("cudnn_fp8", device.arch_of(0))


def test_cudnn_decodes_every_e4m3_code_as_we_do(why_not):
    if why_not:
        pytest.skip(why_not)
    import torch

    from driver.peers import cudnn_sdpa

    check = cudnn_sdpa.decode_check(torch, cudnn_sdpa.import_cudnn())
    assert check["torch_float8_e4m3fn_matches"]
    assert check["cudnn_codes_checked"] == 254 and check["cudnn_mismatches"] == 0, check


@pytest.mark.parametrize("mode", ["cold", "hot"])
def test_cudnn_fp8_at_the_mission_shape(why_not, tmp_path, mode):
    if why_not:
        pytest.skip(why_not)
    files, expected = sdpa.prepare_case(tmp_path, MISSION, 0)
    out = tmp_path / "o.npy"
    cmd = peers.command("cudnn_fp8", *sdpa.file_args(files), "--out", str(out), "--iters", "20", "--timing", mode)
    (line,) = launch_lines(cmd, SdpaLine, what=f"cudnn_fp8 {mode}", timeout_s=300)
    assert line.impl == "cudnn_fp8" and line.timing == mode and line.p50_us > 0
    assert line.precision == "fp8" and "q e4m3" in line.arithmetic and "cuDNN" in line.peer_version
    errs = sdpa_errors(np.load(out), expected, bad_err=thresholds.load().sdpa.bad_err)
    assert errs.max_abs_err is not None and errs.max_abs_err < thresholds.load().sdpa.max_abs_err
    assert 0 < errs.rel_l2 < 0.1  # E4M3 Q, P and O: about 4.5% on an H100, against fp16's 0.05%


def test_the_gpu_decode_of_the_fp16_peers_is_the_cpu_decode_bit_for_bit(monkeypatch):
    """sdpa_io.decode_fp16_on_gpu (the torch and FlashAttention peers' K/V) against the float64 CPU decode rounded
    to fp16 (what the peers did on the CPU before 2026-11-29): every code, two scales, across slice boundaries."""
    import torch

    from driver.peers import sdpa_io
    from driver.reference.sdpa import decode_e4m3_sim

    monkeypatch.setattr(sdpa_io, "_DECODE_SLICE", 1000)
    rng = np.random.default_rng(0)
    codes = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, 4 * 2 * 513 * 4 - 256,
                                                                         dtype=np.uint8)]).reshape(4, 2, 513, 4)
    dev = torch.device("cuda", 0)
    for scale in (1.0, float(np.float32(3.7 / 448))):
        want = (decode_e4m3_sim(codes) * scale).astype(np.float16)
        got = sdpa_io.decode_fp16_on_gpu(torch, codes, scale, dev).cpu().numpy()
        assert got.shape == codes.shape
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
