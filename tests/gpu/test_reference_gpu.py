"""The SDPA inputs and the float64 reference on the GPU (driver/reference/sdpa_gpu.py) are the numpy functions:
- inputs: the generator of driver/reference/inputs.py on torch makes the same bytes as numpy, for every distribution,
  at square, GQA and decode shapes, through its chunked and two-pass paths, and through the worker's one-shot command;
- reference: the same outputs up to float64 summation order (a few ulps), with the head groups and the causal mask,
  at odd sizes and at shapes large enough to take the row and head blocks;
- K and V of 2^31 elements each (B 64, Hkv 8, Skv 32768, D 128): made in seconds, their last elements the numpy
  generator's (no index wraps past 2^31), and reference rows of the first and the last groups numpy's.
Skipped with the reason where torch cannot see a GPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from driver.records import InputsLine
from driver.reference import inputs, sdpa_gpu
from driver.reference import sdpa as ref


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="the GPU inputs and reference run on torch; torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.fixture(scope="module")
def cuda(torch):
    return inputs.TorchBackend(torch, "cuda")


def _gpu_inputs(be, q_shape, kv_shape, seed, dist):
    target = inputs.make(be, q_shape, kv_shape, seed, dist, inputs.in_memory(q_shape, kv_shape))
    return target.q.reshape(q_shape), target.k.reshape(kv_shape), target.v.reshape(kv_shape), target.k_scale, \
        target.v_scale


def _same(got, want) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(got[:3], want[:3])) and tuple(got[3:]) == tuple(want[3:])


SHAPES = [((1, 2, 129, 64), (1, 2, 129, 64)), ((2, 8, 5, 128), (2, 2, 77, 128)), ((3, 32, 1, 128), (3, 8, 1000, 128))]


@pytest.mark.parametrize("distribution", sorted(ref.DISTRIBUTIONS))
@pytest.mark.parametrize("q_shape, kv_shape", SHAPES)
def test_gpu_inputs_are_the_cpu_inputs_bit_for_bit(cuda, q_shape, kv_shape, distribution):
    assert _same(_gpu_inputs(cuda, q_shape, kv_shape, 2, distribution),
                 ref.make_inputs(q_shape, kv_shape, 2, distribution))


def test_gpu_chunks_and_two_pass_path_make_the_same_bytes(cuda, monkeypatch):
    want = ref.make_inputs((2, 8, 5, 128), (2, 2, 77, 128), 3, "sink")
    monkeypatch.setitem(inputs.CHUNK_ELEMS, "torch", 1024)
    monkeypatch.setitem(inputs.KEEP_ELEMS, "torch", 4096)
    assert _same(_gpu_inputs(cuda, (2, 8, 5, 128), (2, 2, 77, 128), 3, "sink"), want)


def test_gpu_encode_and_normals_are_numpys(cuda, torch):
    """The encoder on every code, the midpoints and the doubles either side, zeros, subnormal doubles and past 448;
    and 2^22 normals from one stream (ln, the square root, sin, cos: each a float64 pipeline on the GPU)."""
    pos = ref.decode_e4m3_sim(np.arange(0x7F, dtype=np.uint8))
    mids = (pos[1:] + pos[:-1]) / 2
    x = np.concatenate([pos, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                        [5e-324, 1e-310, 448.0, 449.0, 464.0, 1e300, np.inf]])
    x = np.concatenate([x, -x, [-0.0], np.random.default_rng(0).standard_normal(1 << 20) * 100])
    got = inputs.encode_e4m3(cuda, torch.as_tensor(x, device="cuda")).cpu().numpy()
    np.testing.assert_array_equal(got, ref.encode_e4m3_sim(x))
    z = inputs.normals(cuda, 9, inputs.STREAM_V, 4 << 20, 1 << 22).cpu().numpy()
    np.testing.assert_array_equal(z, inputs.normals(inputs.NUMPY, 9, inputs.STREAM_V, 4 << 20, 1 << 22))


def test_the_workers_make_inputs_command_writes_the_cpu_files(tmp_path):
    cmd = [sys.executable, "-m", "driver.reference.sdpa_gpu", "--make-inputs", str(tmp_path), "--q-shape", "2,8,3,64",
           "--kv-shape", "2,2,300,64", "--seed", "1", "--distribution", "outlier_channels"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    line = InputsLine.model_validate(json.loads(res.stdout.strip().splitlines()[-1]))
    want = ref.make_inputs((2, 8, 3, 64), (2, 2, 300, 64), 1, "outlier_channels")
    for name, arr in zip("qkv", want[:3]):
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), arr)
    assert (line.k_scale, line.v_scale) == want[3:] and "philox" in line.generator and "cuda" in line.generator


@pytest.mark.parametrize("distribution", sorted(ref.DISTRIBUTIONS))
@pytest.mark.parametrize("shape", [(1, 2, 129, 64), (2, 3, 77, 128)])
def test_gpu_reference_equals_numpy_reference(torch, shape, distribution):
    q, k, v, ks, vs = ref.make_inputs(shape, 1, distribution)
    want = ref.reference(q, k, v, ks, vs)
    got = sdpa_gpu.reference(torch, q, k, v, ks, vs)
    assert got.dtype == np.float64 and got.shape == want.shape
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-12 * scale, (np.abs(got - want).max(), scale)


@pytest.mark.parametrize("q_shape, kv_shape, causal", [
    ((2, 8, 5, 128), (2, 2, 77, 128), True), ((2, 8, 5, 128), (2, 2, 77, 128), False),
    ((3, 32, 1, 128), (3, 8, 1000, 128), True), ((1, 4, 300, 64), (1, 4, 300, 64), True),
    ((1, 32, 16, 128), (1, 1, 513, 128), True)])
def test_gpu_reference_with_groups_and_the_causal_mask(torch, q_shape, kv_shape, causal, monkeypatch):
    arrays = ref.make_inputs(q_shape, kv_shape, 0, "large_logits_8")
    want = ref.reference(*arrays, causal=causal)
    scale = np.abs(want).max()
    assert np.abs(sdpa_gpu.reference(torch, *arrays, causal=causal) - want).max() <= 1e-12 * scale
    monkeypatch.setattr(sdpa_gpu, "_BLOCK_ELEMS", 40 * kv_shape[2])  # rows in blocks of 40
    monkeypatch.setattr(sdpa_gpu, "_KV_ELEMS", kv_shape[2] * kv_shape[3])  # one head a block
    assert np.abs(sdpa_gpu.reference(torch, *arrays, causal=causal) - want).max() <= 1e-12 * scale


def test_gpu_reference_row_blocks(torch, monkeypatch):
    """Blocks of rows and of heads (a smaller block size forces both paths) change nothing."""
    shape = (1, 4, 1000, 64)
    q, k, v, ks, vs = ref.make_inputs(shape, 0, "large_logits_8")
    want = ref.reference(q, k, v, ks, vs)
    for block in (1000 * 1000 * 2, 1000 * 300):  # two heads at a time; 300 rows at a time
        monkeypatch.setattr(sdpa_gpu, "_BLOCK_ELEMS", block)
        got = sdpa_gpu.reference(torch, q, k, v, ks, vs)
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


BIG_Q, BIG_KV = (64, 32, 1, 128), (64, 8, 32768, 128)  # K and V of 2^31 elements each


def test_kv_of_2_31_elements_made_on_the_gpu_and_referenced(torch, cuda, tmp_path):
    n = math.prod(BIG_KV)
    assert n == 1 << 31
    t0 = time.perf_counter()
    files, (ks, vs) = inputs.write_files(cuda, tmp_path, BIG_Q, BIG_KV, 0, "normal")
    made_s = time.perf_counter() - t0
    print(f"TIMING: inputs of q {list(BIG_Q)} k/v {list(BIG_KV)} on the GPU: {made_s:.2f} s", flush=True)
    k, v = np.load(files["k"], mmap_mode="r"), np.load(files["v"], mmap_mode="r")
    assert k.shape == BIG_KV and v.shape == BIG_KV
    # the last and some middle elements are the numpy generator's with the same scale: nothing wrapped at 2^31
    for start in (0, (1 << 31) - (1 << 16), (1 << 30) + 4096):
        for arr, stream, scale in ((k, inputs.STREAM_K, ks), (v, inputs.STREAM_V, vs)):
            z = inputs.normals(inputs.NUMPY, 0, stream, start, 1 << 16)
            np.testing.assert_array_equal(arr.reshape(-1)[start:start + (1 << 16)], ref.encode_e4m3_sim(z / scale))
    # the scale is the whole tensor's amax: some code is the top one, none past it
    assert 0x7E in (np.asarray(k[-1]) & 0x7F) or 0x7E in (np.asarray(k[0]) & 0x7F) or np.abs(
        ref.decode_e4m3_sim(np.asarray(k[::7]))).max() >= 416.0
    q = np.load(files["q"])
    t0 = time.perf_counter()
    got = sdpa_gpu.reference(torch, q, np.load(files["k"]), np.load(files["v"]), ks, vs, causal=True)
    print(f"TIMING: reference of that case on the GPU (with its transfers): {time.perf_counter() - t0:.2f} s",
          flush=True)
    assert got.shape == BIG_Q and np.isfinite(got).all()
    for b, h in ((0, 0), (31, 5), (63, 7)):  # groups of query heads 4h..4h+3, the last one past element 2^31 - 2^22
        want = ref.reference(q[b:b + 1, 4 * h:4 * h + 4], np.asarray(k[b:b + 1, h:h + 1]),
                             np.asarray(v[b:b + 1, h:h + 1]), ks, vs, causal=True)
        assert np.abs(got[b:b + 1, 4 * h:4 * h + 4] - want).max() <= 1e-12 * np.abs(want).max()
