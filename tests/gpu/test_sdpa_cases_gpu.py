"""The SDPA peers at cases beyond square MHA, on a GPU: grouped-query heads, Sq != Skv and the bottom-right causal
mask reach torch SDPA (enable_gqa, causal_lower_right), cuDNN's FP8 attention (K/V of their own head count,
diagonal_alignment BOTTOM_RIGHT) and FlashInfer, each output within its tier's bound of the float64 reference of
the same case and its line naming the case; and the copy bandwidth hbm_frac divides by. A peer that cannot run
here, or whose library refuses the case, is skipped with its own reason. The inputs and the float64 reference are
driver/reference's (numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from driver import device, peers, thresholds
from driver.config import AttnCase
from driver.errors import KernelFailed
from driver.parse import launch_lines
from driver.records import SDPA_PEER_PRECISION, CopyLine, SdpaLine
from driver.suites import sdpa
from driver.verify import sdpa_errors

LIMITS = thresholds.load()
# On 1x H200 (experiments/2026-11-28-sdpa-inference-peers: torch 2.11, cuDNN through cudnn-frontend 1.22.1) torch ran every one within its bound;
# cuDNN's FP8 attention ran mqa and refused the grouped decode ("No valid engine configs") and the bottom-right
# masks ("only supported on Blackwell architecture and newer"), skips with those words; each test takes a peer's
# start-up (a torch import), so the cases are few.
CASES = {
    "decode_gqa": AttnCase((2, 32, 1, 128), (2, 8, 4096, 128)),
    "chunk_gqa_causal": AttnCase((1, 32, 256, 128), (1, 8, 1024, 128), causal=True),
    "square_causal": AttnCase((1, 8, 512, 64), (1, 8, 512, 64), causal=True),
    "mqa": AttnCase((1, 16, 64, 64), (1, 1, 640, 64)),
}


@pytest.mark.parametrize("impl", ["torch_sdpa", "cudnn_fp8", "flashinfer"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_peer_runs_the_case_it_is_given(tmp_path, impl, name):
    why = peers.missing(impl, device.arch_of(0))
    if why:
        pytest.skip(why)
    case = CASES[name]
    files, expected = sdpa.prepare_case(tmp_path, case, 0)
    out = tmp_path / "o.npy"
    cmd = peers.command(impl, *sdpa.file_args(files), *sdpa.case_args(case), "--out", str(out), "--iters", "10")
    try:
        (line,) = launch_lines(cmd, SdpaLine, what=f"{impl} {name}", timeout_s=300)
    except KernelFailed as exc:  # the library's refusal of this case (exit 3), in its words
        pytest.skip(f"{impl} refuses {case.words()}: {exc.one_line()}")
    assert sdpa.line_case(line) == case and line.p50_us > 0
    tier = SDPA_PEER_PRECISION[impl]
    errs = sdpa_errors(np.load(out), expected, bad_err=1.0)
    bound = LIMITS.sdpa.bound(tier, "normal")
    assert errs.rel_l2 is not None and errs.rel_l2 <= bound.max_rel_l2, (line.arithmetic, errs)
    assert errs.max_abs_rel is not None and errs.max_abs_rel <= bound.max_abs_rel, (line.arithmetic, errs)


def test_the_copy_bandwidth_is_measured_cold_with_its_samples():
    why = peers.missing("hbm_copy", device.arch_of(0))
    if why:
        pytest.skip(why)
    (line,) = launch_lines(peers.command("hbm_copy", "--iters", "20"), CopyLine, what="hbm copy", timeout_s=300)
    assert line.timing == "cold" and len(line.samples_us) == 20 and line.l2_flush_bytes > 0
    gbps = sdpa.copy_gbps(line)
    assert 500 < gbps < 20000, gbps  # read + write of HBM: 4274 GB/s on an H200 (issue 50)
