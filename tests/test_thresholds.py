"""The thresholds file is validated by pydantic: a misspelt field is an error."""

import pytest

from driver import thresholds
from driver.errors import ConfigError


def test_repo_thresholds_load():
    t = thresholds.load()
    assert t.build.max_registers_per_thread == 128
    assert t.sdpa.max_abs_err == 0.06


def test_build_gates_per_kernel_family():
    """The Hopper kernel has its own resource gates; every other kernel keeps the seed gates."""
    b = thresholds.load().build
    hopper = b.for_entry("_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_6TraitsILi64ELb1ELi0ELb0EEEEEv")
    assert (hopper.max_registers_per_thread, hopper.max_smem_bytes_per_block, hopper.max_spill_bytes) == (168, 232448, 0)
    seed = b.for_entry("_ZN8sdpa_fp819sdpa_fp8_fwd_kernelINS_3CfgILi64ELi64ELi4ELi1ELb1EEELi0EEEvPK6__half")
    assert (seed.max_registers_per_thread, seed.max_smem_bytes_per_block) == (128, 65536)
    assert b.smem_limit("wgmma_fp8_sm90") == b.smem_limit("wgmma_sm90") == 232448
    fp8 = b.for_entry("_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_9Fp8TraitsILi128ELb1ELi0ELb0EEEEEvNS_8TileMapsE")
    assert (fp8.max_registers_per_thread, fp8.max_smem_bytes_per_block, fp8.max_spill_bytes) == (168, 232448, 0)
    assert b.smem_limit("mma_sync_sm80") == b.smem_limit(None) == 65536


def test_misspelt_field_is_rejected(tmp_path):
    text = thresholds.paths.thresholds_file().read_text().replace("max_abs_err = 0.06", "max_abs_error = 0.06")
    bad = tmp_path / "t.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match="max_abs_error"):
        thresholds.load(bad)


def test_not_toml_and_missing_file(tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text("version = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        thresholds.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        thresholds.load(tmp_path / "missing.toml")
