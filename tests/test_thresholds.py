"""The thresholds file is validated by pydantic: a misspelt field is an error."""

import re
import tomllib

import pytest

from driver import thresholds
from driver.errors import ConfigError

# Real PTX entries of the build: the Hopper kernel (fp16 Fp16Traits and FP8 Fp8Traits) and the mma_sync one.
HOPPER_F16 = "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp16TraitsILi64ELb1ELi0ELb0EEEEEv"
HOPPER_FP8 = "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_9Fp8TraitsILi128ELb1ELi0ELb0EEEEEvNS_8TileMapsE"
MMA_SYNC = "_ZN8sdpa_fp819sdpa_fp8_fwd_kernelINS_3CfgILi64ELi64ELi4ELi1ELb1EEELi0EEEvPK6__half"


def _holds(loaded, raw) -> bool:
    """Every value of the TOML text is in the loaded model (which adds defaults the file leaves out)."""
    if isinstance(raw, dict):
        return all(_holds(loaded[k], v) for k, v in raw.items())
    if isinstance(raw, list):
        return len(loaded) == len(raw) and all(_holds(a, b) for a, b in zip(loaded, raw))
    return loaded == raw


def test_repo_thresholds_load_every_value_of_the_file():
    raw = tomllib.loads(thresholds.paths.thresholds_file().read_text())
    assert _holds(thresholds.load().model_dump(mode="json"), raw)


def test_build_gates_per_kernel_family():
    """The Hopper kernel has its own resource gates; every other kernel keeps the seed gates."""
    b = thresholds.load().build
    assert b.kernels, "thresholds.toml names no kernel family"
    for entry in (HOPPER_F16, HOPPER_FP8):
        family = b.for_entry(entry)
        assert family in b.kernels and family.pattern in entry
        assert family is next(k for k in b.kernels if k.pattern in entry)  # the first family that matches
        # within what an sm_90 SM gives one block: 227 KiB of shared memory, 255 registers a thread
        assert family.max_smem_bytes_per_block <= 227 * 1024 and family.max_registers_per_thread <= 255
    assert b.for_entry(MMA_SYNC) is b  # no family: the [build] defaults
    for k in b.kernels:
        assert b.smem_limit(k.kernel) == k.max_smem_bytes_per_block
    assert b.smem_limit("mma_sync_sm80") == b.smem_limit(None) == b.max_smem_bytes_per_block


def _refused_after(tmp_path, pattern: str, repl: str, error: str) -> None:
    """The repo's thresholds file with one line edited (`pattern`, exactly one match) does not load: `error`."""
    text, n = re.subn(pattern, repl, thresholds.paths.thresholds_file().read_text(), flags=re.MULTILINE)
    assert n == 1
    bad = tmp_path / "t.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=error):
        thresholds.load(bad)


def test_misspelt_field_is_rejected(tmp_path):
    _refused_after(tmp_path, r"^max_abs_err =", "max_abs_error =", "max_abs_error")


def test_not_toml_and_missing_file(tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text("version = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        thresholds.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        thresholds.load(tmp_path / "missing.toml")


def test_a_serialized_wgmma_is_allowed_only_where_named_with_a_reason(tmp_path):
    """thresholds.toml names the diagnostic entries whose wgmma ptxas may serialize; no other entry (nor the
    [build] defaults) allows it, and an entry without its reason does not load."""
    b = thresholds.load().build
    ablation = "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp8Traits3ILi64ELb1ELi1EEEEEvNS_8TileMapsE"
    timed = "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp8Traits3ILi64ELb1ELi0EEEEEvNS_8TileMapsE"
    ok = b.for_entry(ablation).serialized_ok(ablation)
    assert ok is not None and "ablation" in ok.reason
    assert b.for_entry(timed).serialized_ok(timed) is None and b.for_entry(HOPPER_F16).serialized_ok(HOPPER_F16) is None
    assert b.serialized_ok(ablation) is None  # the defaults
    _refused_after(tmp_path, r'^reason = "the cpasync build.*$', "", "reason")
