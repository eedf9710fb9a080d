"""CUDA_VISIBLE_DEVICES decides the GPUs a run plans for (NVML alone ignores it), read as CUDA reads it."""

import pytest

from driver import device
from driver.errors import NoGPU


class FakeNvml:
    """Four GPUs, handles 'h0'..'h3', UUIDs GPU-aaaa0000.. GPU-dddd0000."""

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-" + "abcd"[int(h[1])] * 4 + "0000"


@pytest.mark.parametrize(("env", "expected"), [
    (None, ["h0", "h1", "h2", "h3"]),
    ("0,1", ["h0", "h1"]),
    ("2, 3", ["h2", "h3"]),
    ("3,0", ["h3", "h0"]),
    ("1,7,2", ["h1"]),  # the list ends at the first entry that names no GPU, as in CUDA
    ("GPU-cccc,0", ["h2", "h0"]),  # a UUID prefix
    ("dddd0000", ["h3"]),
    ("1,1", ["h1"]),
])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert device.visible_handles(FakeNvml()) == expected


@pytest.mark.parametrize("env", ["", "9", "GPU-ffff", "-1"])
def test_no_visible_gpu_is_one_clear_error(monkeypatch, env):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    with pytest.raises(NoGPU, match="CUDA_VISIBLE_DEVICES"):
        device.visible_handles(FakeNvml())
