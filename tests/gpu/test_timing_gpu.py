"""The two timing modes on the GPU: our SDPA runner, the torch SDPA peer and the NCCL peer each
time cold and hot as asked and say so in their line (docs/TIMING.md)."""

from __future__ import annotations

import pytest

from driver import device, peers
from driver.config import PRECISIONS
from driver.errors import KernelFailed
from driver.parse import launch_lines
from driver.records import AllreduceLine, SdpaLine
from driver.suites import sdpa

NO_TORCH = peers.missing("torch_sdpa")
MISSION = (1, 8, 512, 64)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return sdpa.write_inputs(tmp_path_factory.mktemp("timing"), MISSION, 0)


def _sdpa_line(cmd: list[str], what: str) -> SdpaLine:
    (line,) = launch_lines(cmd, SdpaLine, what=what, timeout_s=300)
    return line


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", ["cold", "hot"])
def test_runner_times_the_mode_asked_for(exe_dir, inputs, tmp_path, mode, precision):
    if precision == "fp8" and (why := sdpa.fp8_not_offered(device.arch_of(0), exe_dir.name)):
        pytest.skip(why)
    cmd = [str(exe_dir / "sdpa_fp8_cpasync"), *sdpa.file_args(inputs), "--out", str(tmp_path / "o.npy"),
           "--iters", "40", "--warmup", "5", "--timing", mode, "--batch", "8", "--precision", precision]
    line = _sdpa_line(cmd, f"cpasync {precision} {mode}")
    assert line.timing == mode and line.precision == precision
    assert line.hold_overruns is not None
    assert 0 < line.min_us <= line.p50_us <= line.p90_us
    if mode == "cold":
        assert line.batch == 1 and line.l2_flush_bytes >= 64 << 20
    else:
        assert line.batch == 8 and line.l2_flush_bytes == 0


@pytest.mark.skipif(NO_TORCH is not None, reason=str(NO_TORCH))
@pytest.mark.parametrize("mode", ["cold", "hot"])
def test_torch_peer_times_the_mode_asked_for(inputs, mode):
    cmd = [*peers.command("torch_sdpa"), *sdpa.file_args(inputs), "--iters", "40", "--warmup", "5",
           "--timing", mode, "--batch", "8"]
    line = _sdpa_line(cmd, f"torch_sdpa {mode}")
    assert line.impl == "torch_sdpa" and line.timing == mode
    assert 0 < line.min_us <= line.p50_us
    assert (line.batch, line.l2_flush_bytes > 0) == ((1, True) if mode == "cold" else (8, False))


@pytest.mark.skipif(NO_TORCH is not None, reason=str(NO_TORCH))
@pytest.mark.parametrize("mode, method", [("cold", "device"), ("hot", "graph"), ("device", "device")])
def test_nccl_peer_times_the_mode_asked_for(mode, method):
    if len(device.probe().gpus) < 2:
        pytest.skip("the NCCL peer needs 2 GPUs")
    cmd = peers.command("nccl", "--sizes", "256K", "--ngpus", "2", "--iters", "40", "--warmup", "5", "--timing", mode,
                        "--batch", "8")
    try:
        (line,) = launch_lines(cmd, AllreduceLine, what=f"nccl {mode}", timeout_s=300)
    except KernelFailed as exc:
        pytest.fail(exc.one_line())
    assert line.timing == method and line.wrong == 0
    assert line.batch == (8 if method == "graph" else 1)
    assert line.p50_us > 0
