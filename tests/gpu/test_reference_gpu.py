"""The float64 SDPA reference on the GPU (driver/reference/sdpa_gpu.py) is the numpy reference's
function: the same inputs give the same outputs up to float64 summation order (a few ulps), on every
input distribution, at odd sizes and at a shape large enough to take the GPU path's row blocks.
Skipped with the reason where torch cannot see a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from driver.reference import sdpa as ref
from driver.reference import sdpa_gpu


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="the GPU reference runs on torch; torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.mark.parametrize("distribution", sorted(ref.DISTRIBUTIONS))
@pytest.mark.parametrize("shape", [(1, 2, 129, 64), (2, 3, 77, 128)])
def test_gpu_reference_equals_numpy_reference(torch, shape, distribution):
    q, k, v, ks, vs = ref.make_inputs(shape, 1, distribution)
    want = ref.reference(q, k, v, ks, vs)
    got = sdpa_gpu.reference(torch, q, k, v, ks, vs)
    assert got.dtype == np.float64 and got.shape == want.shape
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-12 * scale, (np.abs(got - want).max(), scale)


def test_gpu_reference_row_blocks(torch, monkeypatch):
    """Blocks of rows and of heads (a smaller block size forces both paths) change nothing."""
    shape = (1, 4, 1000, 64)
    q, k, v, ks, vs = ref.make_inputs(shape, 0, "large_logits_8")
    want = ref.reference(q, k, v, ks, vs)
    for block in (1000 * 1000 * 2, 1000 * 300):  # two heads at a time; 300 rows at a time
        monkeypatch.setattr(sdpa_gpu, "_BLOCK_ELEMS", block)
        got = sdpa_gpu.reference(torch, q, k, v, ks, vs)
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
