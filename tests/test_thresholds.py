"""The thresholds file is validated by pydantic: a misspelt field is an error."""

import pytest

from driver import thresholds
from driver.errors import ConfigError


def test_repo_thresholds_load():
    t = thresholds.load()
    assert t.build.max_registers_per_thread == 128
    assert t.sdpa.max_abs_err == 0.06


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
