"""The SDPA peers on a CPU: bad input is one `error:` line and exit 2 before torch is imported (so it
holds on hosts without torch too), and the driver turns that into one configuration-error line; the
cuDNN peer's quantization helpers; the FlashAttention peer's availability reason. The peers on a GPU:
tests/gpu/test_sdpa_peers_gpu.py and experiments/2026-11-23-sdpa-peers/."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from driver.errors import ConfigError
from driver.launch import launch
from driver.peers import cudnn_sdpa, flash_sdpa, sdpa_io
from driver.reference import sdpa as ref
from driver.suites import sdpa
from tests.conftest import ROOT

PEER_MODULES = ("torch_sdpa", "cudnn_sdpa", "flash_sdpa")


def _peer(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"driver.peers.{module}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _files(folder, shape=(1, 2, 64, 64), **override) -> dict:
    """The runners' four input files for `shape` (seed 0) in `folder`, with some arrays replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    files = sdpa.write_inputs(folder, shape, 0)
    for name, array in override.items():
        np.save(files[name], array)
    return files


def _bad_cases(tmp_path) -> dict[str, tuple[dict, str, str]]:
    """case -> (input files, what the error line must say, twice)."""
    ok = _files(tmp_path / "ok")
    _, _, v, _, _ = ref.make_inputs((1, 2, 64, 64), 0)
    empty = np.zeros((1, 2, 0, 64))
    (tmp_path / "text.npy").write_text("not an array")
    return {
        "missing file": ({**ok, "k": tmp_path / "nope.npy"}, "K input file", "does not exist"),
        "head dim 96": (_files(tmp_path / "d96", (1, 2, 16, 96)), "head dim 96", "supported: 64, 128"),
        "shapes disagree": (_files(tmp_path / "dis", v=v[:, :, :32]), "Q, K and V shapes disagree", "[1, 2, 32, 64]"),
        "S = 0": (_files(tmp_path / "s0", q=empty.astype(np.float16), k=empty.astype(np.uint8),
                         v=empty.astype(np.uint8)), "S = 0", "[1, 2, 0, 64]"),
        "not npy": ({**ok, "q": tmp_path / "text.npy"}, "Q input file", "is not a .npy array"),
        "bad scales": (_files(tmp_path / "sc", scales=np.array([1.0, -2.0], dtype=np.float32)),
                       "scales must hold two positive finite floats", "[ 1., -2.]"),
    }


@pytest.mark.parametrize("module", PEER_MODULES)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, module):
    for case, (files, *needles) in _bad_cases(tmp_path).items():
        proc = _peer(module, *sdpa.file_args(files))
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == sdpa_io.EXIT_BAD_INPUT, (case, proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, proc.stderr)
        assert all(n in lines[0] for n in needles), (case, lines[0])
        assert not proc.stdout, case


@pytest.mark.parametrize("args, needle", [(["--timing", "warm"], "invalid choice: 'warm'"),
                                          (["--iters", "0"], "--iters and --batch must be >= 1"),
                                          (["--batch", "x"], "invalid int value")])
def test_bad_flags_are_one_error_line_and_exit_2(tmp_path, args, needle):
    proc = _peer("cudnn_sdpa", *sdpa.file_args(_files(tmp_path / "in")), *args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr


def test_the_driver_reports_a_peers_bad_input_as_one_configuration_error(tmp_path):
    _, k, _, _, _ = ref.make_inputs((1, 2, 64, 64), 0)
    files = _files(tmp_path / "in", k=k[:, :1])
    cmd = [sys.executable, "-m", "driver.peers.torch_sdpa", *sdpa.file_args(files)]
    with pytest.raises(ConfigError) as err:
        launch(cmd, what="sdpa small seed 0 torch_sdpa", timeout_s=120)
    line = err.value.one_line()
    assert "\n" not in line and line.startswith("configuration error: sdpa small seed 0 torch_sdpa rejected its input")
    assert "Q, K and V shapes disagree: Q [1, 2, 64, 64], K [1, 1, 64, 64]" in line


def test_good_inputs_load(tmp_path):
    files = _files(tmp_path / "in", (2, 3, 77, 128))
    case = sdpa_io.load_case(*(str(files[n]) for n in ("q", "k", "v", "scales")))
    q, _, v, ks, vs = ref.make_inputs((2, 3, 77, 128), 0)
    assert case.shape == (2, 3, 77, 128)
    np.testing.assert_array_equal(case.q, q)
    np.testing.assert_array_equal(case.v_u8, v)
    assert case.k_scale == pytest.approx(ks, rel=1e-7) and case.v_scale == pytest.approx(vs, rel=1e-7)


def test_cudnn_q_is_quantized_exactly_as_k_and_v():
    """make_inputs' own recipe (scale = float32(amax / 448), encode(x / scale)) applied to Q."""
    q, _, _, _, _ = ref.make_inputs((1, 2, 64, 64), 3)
    codes, scale = cudnn_sdpa.quantize_q(q)
    amax = float(np.abs(q.astype(np.float64)).max())
    assert scale == float(np.float32(amax / ref.E4M3_MAX))
    np.testing.assert_array_equal(codes, ref.encode_e4m3_sim(q.astype(np.float64) / scale))
    back = ref.decode_e4m3_sim(codes) * scale
    normal = np.abs(q) >= 2.0**-6 * scale
    rel = np.abs(back - q)[normal] / np.abs(q.astype(np.float64))[normal]
    assert rel.max() <= 2.0**-4 + 1e-6  # half an ulp of a 3-bit mantissa (Q itself is fp16)
    assert np.abs(ref.decode_e4m3_sim(codes)).max() == ref.E4M3_MAX  # the largest |Q| maps to the top code


def test_cudnn_output_scale_keeps_the_output_bound_in_range():
    _, _, v, _, vs = ref.make_inputs((1, 2, 64, 64), 0)
    s = cudnn_sdpa.output_scale(v, vs)
    amax = float(np.abs(ref.decode_e4m3_sim(v)).max()) * vs
    assert np.log2(s) == int(np.log2(s))  # a power of two: descaling is exact
    assert amax * s <= ref.E4M3_MAX < 2 * amax * s


def test_flash_peer_says_why_it_is_missing(monkeypatch):
    monkeypatch.setattr(flash_sdpa, "_found", lambda module: module == "torch")
    assert flash_sdpa.missing() == flash_sdpa.UNAVAILABLE
    assert "flash-attn 2.8.3.post2 is source only" in flash_sdpa.UNAVAILABLE
    monkeypatch.setattr(flash_sdpa, "_found", lambda module: module in ("torch", "flash_attn"))
    assert flash_sdpa.missing() is None
    monkeypatch.setattr(flash_sdpa, "_found", lambda module: False)
    assert flash_sdpa.missing() == "torch is not installed on this host"


def test_cudnn_gates_are_optional_only_where_cudnn_fp8_cannot_run():
    from driver import thresholds

    limits = thresholds.load(None)
    gate = "sdpa/speed/best-vs-cudnn_fp8/cold/long_d128"
    for kind in ("1xH100", "2xH200", "8xH200", "1xGH200"):
        assert limits.optional_reason(gate, kind) is None, kind
    for kind in ("1xA100-SXM4-80GB", "1xL40S", "1xL4", "2xA10", "1xGeForce"):
        assert "needs sm_90" in limits.optional_reason(gate, kind), kind
    assert limits.optional_reason("sdpa/speed/best-vs-torch_sdpa/cold/mission", "1xL40S") is None


def test_mapped_kv_load_the_same_values(tmp_path):
    """`mmap_kv` (the torch peer's): K and V mapped, not read, and the same values as a plain load."""
    files = _files(tmp_path / "in", (1, 4, 9, 64))
    paths = tuple(str(files[n]) for n in ("q", "k", "v", "scales"))
    plain, mapped = sdpa_io.load_case(*paths), sdpa_io.load_case(*paths, mmap_kv=True)
    assert isinstance(mapped.k_u8, np.memmap) and not isinstance(mapped.q, np.memmap)
    np.testing.assert_array_equal(plain.k_u8, mapped.k_u8)
    np.testing.assert_array_equal(plain.v_u8, mapped.v_u8)


def test_memo_drops_the_oldest_entries_to_fit_its_bytes(tmp_path, monkeypatch):
    """A served peer keeps what it made per input set until the declared bytes would pass the budget: the
    oldest go first, before the new one is made; a rewritten file is made again."""
    monkeypatch.setattr(sdpa_io, "_MEMO", {})
    monkeypatch.setattr(sdpa_io, "_MEMO_BYTES", 100)
    made: list[str] = []
    files = {}
    for name in "abc":
        files[name] = tmp_path / name
        files[name].write_bytes(name.encode())

    def get(name: str, nbytes: int) -> object:
        return sdpa_io.memo("x", (str(files[name]),), lambda: made.append(name) or name, nbytes)

    assert get("a", 60) == "a" and get("a", 60) == "a" and made == ["a"]
    assert get("b", 30) == "b" and made == ["a", "b"]  # 90 <= 100: both kept
    assert get("c", 30) == "c" and made == ["a", "b", "c"]  # 120 > 100: a dropped first
    assert get("b", 30) == "b" and made == ["a", "b", "c"]
    assert get("a", 60) == "a" and made == ["a", "b", "c", "a"]  # made again: b dropped, then c
    files["a"].write_bytes(b"aa")  # rewritten: another key
    get("a", 60)
    assert made[-1] == "a" and len(made) == 5
