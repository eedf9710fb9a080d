"""The split-KV decode kernel (kernels_cuda/sdpa_decode/) on the GPU: both tiers, both variants, against the float64
reference with the head groups and the bottom-right mask, within the tier's bounds, baseline and cpasync bit for
bit; what --kernel auto picks for decode-shaped cases; a soak on several streams (one workspace each). Since
2026-11-29 the same for the Hopper kernel's key chunks (kernels_cuda/sdpa_fp8_sm90, each tier's configuration for
these cases, which --kernel auto takes on sm_90 from 33 rows per K/V head in the fp16 tier, 17 in the fp8 tier)."""

from __future__ import annotations

import numpy as np
import pytest

from driver import thresholds
from driver.config import PRECISIONS
from driver.gates import sdpa_correctness
from driver.records import SdpaLine
from driver.suites import sdpa
from tests.gpu.conftest import hopper_only, serve_lines

GATES = thresholds.load().sdpa
DECODE = {"fp16": "decode_sm89", "fp8": "decode_fp8_sm89"}
# (q_shape, kv_shape, causal): one warp per key group (G * Sq <= 16), two (32 rows), four (64), more row blocks
# (128 rows), a partial last tile, a single key, head dims 64 and 128; the mask where it cuts tiles.
CASES = [
    ((2, 8, 1, 128), (2, 2, 1000, 128), False),
    ((1, 32, 4, 64), (1, 8, 4096, 64), True),
    ((2, 32, 1, 128), (2, 1, 777, 128), True),
    ((1, 16, 16, 128), (1, 4, 300, 128), True),
    ((1, 4, 32, 64), (1, 1, 100, 64), True),
    ((3, 6, 1, 64), (3, 3, 1, 64), False),
]
_CASES: dict = {}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    def get(case, seed=0):
        key = (case, seed)
        if key not in _CASES:
            folder = tmp_path_factory.mktemp("sdpa-decode-case")
            _CASES[key] = sdpa.prepare_case(folder, case, seed)
        return _CASES[key]
    return get


def run(exe_dir, workers, tmp_path, files, impl, precision, causal, *extra):
    out = tmp_path / f"out_{impl}_{precision}.npy"
    cmd = [str(exe_dir / sdpa.VARIANTS[impl]), *sdpa.file_args(files), "--out", str(out), "--iters", "2", "--warmup",
           "1", "--precision", precision, *(["--causal"] if causal else []), *extra]
    (line,) = serve_lines(workers, cmd, SdpaLine, what=f"{impl} {precision}", timeout_s=120)
    return line, np.load(out)


def check_variants(exe_dir, workers, tmp_path, cases, case, precision, kernel, *extra):
    """Both variants on `kernel` (and `extra` flags): the line names the kernel and the case, each output within the
    tier's bounds of the float64 reference, and the two outputs bit-identical."""
    files, expected = cases(case)
    got = {}
    for impl in sdpa.VARIANTS:
        line, out = run(exe_dir, workers, tmp_path, files, impl, precision, case[2], "--kernel", kernel, *extra)
        assert line.kernel == kernel and line.q_shape == list(case[0]) and line.kv_shape == list(case[1])
        m = sdpa.tier_errors(out, expected, GATES, precision, "normal", impl)
        verdict = sdpa_correctness(m, GATES, precision, "normal")
        assert verdict.passed, (verdict.reasons, m)
        got[impl] = out
    assert np.array_equal(got["baseline"].view(np.uint16), got["cpasync"].view(np.uint16))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1][1]}x{c[1][2]}-{c[2]}")
def test_decode_kernel_matches_reference_and_variants_agree(exe_dir, workers, tmp_path, cases, case, precision):
    check_variants(exe_dir, workers, tmp_path, cases, case, precision, DECODE[precision])


@pytest.mark.parametrize(("case", "split"), [(((1, 8, 4, 64), (1, 1, 4096, 64), True), "1"),
                                             (((2, 32, 1, 128), (2, 1, 8192, 128), False), "2")],
                         ids=["g8xsq4-d64-causal", "mqa-d128"])
def test_two_row_tiles_per_warp_match_reference_and_variants_agree(exe_dir, workers, tmp_path, cases, case, split):
    """The fp16 tier's two 16-row tiles per warp (kernels_cuda/sdpa_decode/plan.h: 17-32 rows, at least 16 tiles a key
    group): --split 1 and 2 give these cases 128-tile chunks on any GPU, so the kernel takes them whatever its SMs."""
    check_variants(exe_dir, workers, tmp_path, cases, case, "fp16", DECODE["fp16"], "--split", split)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_auto_takes_the_decode_kernel_for_few_rows(exe_dir, workers, tmp_path, cases, precision):
    """G * Sq <= 64, not square MHA: --kernel auto runs the decode kernel of the tier (on sm_89 builds too, where
    it is the fp8 tier's only kernel)."""
    case = CASES[1]
    files, _ = cases(case)
    line, _ = run(exe_dir, workers, tmp_path, files, "cpasync", precision, case[2])
    assert line.kernel == DECODE[precision]


@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_soak_on_four_streams_is_bitwise_stable(exe_dir, workers, tmp_path, cases, impl):
    """Launches in flight on four streams at once, each stream with its own chunk workspace and counters, every
    output bit-identical to the checked one."""
    case = CASES[1]
    files, _ = cases(case)
    line, _ = run(exe_dir, workers, tmp_path, files, impl, "fp16", case[2], "--kernel", "decode_sm89", "--soak", "100",
                  "--streams", "4")
    assert line.soak_launches == 100 and line.soak_mismatched_elements == 0


# The Hopper kernel's key chunks (fp16 tier, forced with --kernel wgmma_sm90 on decode-shaped cases): 64 rows with the
# mask over 8 chunks (head dim 128) and 2 (head dim 64), 32 rows (MQA) over chunks with a tail, 16 rows of one query head
# per K/V head (G 1), a single tile (one chunk: the block writes O).
KV_CASES = [
    ((1, 16, 16, 128), (1, 4, 4000, 128), True),
    ((1, 8, 16, 64), (1, 2, 1000, 64), True),
    ((2, 32, 1, 128), (2, 1, 3000, 128), False),
    ((1, 4, 16, 128), (1, 4, 2000, 128), False),
    ((3, 8, 8, 128), (3, 2, 100, 128), True),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", KV_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1][1]}x{c[1][2]}-{c[2]}")
def test_key_chunks_match_reference_and_variants_agree(exe_dir, workers, tmp_path, cases, case, precision):
    check_variants(exe_dir, workers, tmp_path, cases, case, precision, hopper_only(precision, exe_dir))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_auto_takes_key_chunks_from_33_rows_fp16_and_17_rows_fp8(exe_dir, workers, tmp_path, cases, precision):
    """--kernel auto on sm_90: 64 rows per K/V head run the Hopper kernel's key chunks in both tiers; 32 rows (MQA) the
    decode kernel in the fp16 tier and the key chunks in the fp8 tier; 16 rows the decode kernel in both."""
    kernel = hopper_only(precision, exe_dir)
    for case, hopper in ((KV_CASES[0], True), (CASES[2], precision == "fp8"), (CASES[1], False)):
        files, _ = cases(case)
        line, _ = run(exe_dir, workers, tmp_path, files, "cpasync", precision, case[2])
        assert line.kernel == (kernel if hopper else DECODE[precision]), case


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("impl", list(sdpa.VARIANTS))
def test_key_chunks_soak_on_four_streams_is_bitwise_stable(exe_dir, workers, tmp_path, cases, impl, precision):
    """Launches of the key chunks in flight on four streams, each stream with its own workspace and counters (the fp8
    tier's cpasync variant failed this while its split configuration had 3 K stages at head dim 128)."""
    kernel = hopper_only(precision, exe_dir)
    case = KV_CASES[0]
    files, _ = cases(case)
    line, _ = run(exe_dir, workers, tmp_path, files, impl, precision, case[2], "--kernel", kernel, "--soak", "100",
                  "--streams", "4")
    assert line.soak_launches == 100 and line.soak_mismatched_elements == 0
