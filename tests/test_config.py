"""Configure stage: every user string is validated before any work starts."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver import config, paths
from driver.errors import ConfigError


@pytest.mark.parametrize(
    "text, expected",
    [("256K", 262144), ("16M", 16 << 20), ("1G", 1 << 30), ("0", 0), ("7", 7), ("8k", 8192), ("16MB", 16 << 20)],
)
def test_parse_size_accepts_nccl_tests_suffixes(text, expected):
    assert config.parse_size(text) == expected


@pytest.mark.parametrize("text", ["256Q", "-1", "", "1.5M", "K", "16 M", "0x10", "99999G"])
def test_parse_size_rejects_malformed(text):
    with pytest.raises(ConfigError):
        config.parse_size(text)


def test_parse_sizes_list_and_empty_items():
    assert config.parse_sizes("256K,16M") == (262144, 16 << 20)
    for bad in ("", "256K,,16M", "256K,"):
        with pytest.raises(ConfigError):
            config.parse_sizes(bad)


@given(st.integers(min_value=0, max_value=config.MAX_SIZE_BYTES))
def test_format_size_round_trips(n):
    assert config.parse_size(config.format_size(n)) == n


@given(st.text(max_size=30))
def test_parse_sizes_never_raises_anything_but_config_error(text):
    try:
        sizes = config.parse_sizes(text)
    except ConfigError:
        return
    assert all(isinstance(s, int) and s >= 0 for s in sizes)


def test_archs_kernels_dtypes_ngpus():
    assert config.parse_archs("sm_90,sm_89") == ("sm_90", "sm_89")
    assert config.parse_kernel("1stage_cpasync_s3") == "1stage_cpasync_s3"
    assert config.parse_dtypes("bfloat16") == ("bfloat16",)
    assert config.parse_ngpus("2,4") == (2, 4)
    for fn, bad in [
        (config.parse_archs, "sm_999"),
        (config.parse_kernel, "1stage_cpasync_s5"),
        (config.parse_kernel, "3stage"),
        (config.parse_dtypes, "float64"),
        (config.parse_ngpus, "3"),
        (config.parse_suite, "gemm"),
    ]:
        with pytest.raises(ConfigError):
            fn(bad)


def test_shapes_named_and_explicit():
    square = config.AttnCase.of
    assert config.parse_shapes("mission,2x16x2048x64") == (
        ("mission", square((1, 8, 512, 64))),
        ("2x16x2048x64", square((2, 16, 2048, 64))),
    )
    for bad in ("1x8x512", "1x8x0x64", "1x8x512x96", "huge", "mission,,large"):
        with pytest.raises(ConfigError):
            config.parse_shapes(bad)


def test_soak_minutes():
    from driver.config import parse_minutes

    assert parse_minutes("0") == 0 and parse_minutes("2.5") == 2.5
    for bad in ("-1", "ten", "nan", "inf", ""):
        with pytest.raises(ConfigError, match="malformed --minutes"):
            parse_minutes(bad)


def test_a_suite_list_keeps_every_suite():
    """`--suite allreduce,sdpa` used to keep the first item only."""
    assert config.parse_suite("allreduce,sdpa") == ("allreduce", "sdpa")
    assert config.parse_suite("sdpa,allreduce") == ("sdpa", "allreduce")
    assert config.parse_suite("all") == ("allreduce", "sdpa")
    assert config.parse_suite("sdpa,all,sdpa") == ("sdpa", "allreduce", "sdpa", "sdpa")  # all = allreduce,sdpa
    assert config.fold(config.parse_suite("sdpa,all,sdpa"))[0] == ("sdpa", "allreduce")  # the CLI runs each once
    with pytest.raises(ConfigError, match="unknown suite 'gemm'"):
        config.parse_suite("allreduce,gemm")


def test_kernel_registry_flags():
    assert config.kernel_flags("1stage_cpasync_s3") == ["--kernel", "1stage_cpasync", "--stages", "3"]
    assert config.kernel_flags("1stage_push") == ["--kernel", "1stage_push"]
    # --kernel takes what the allreduce executable's own --kernel check takes (noop: its diagnostic launch floor)
    cli_mojo = (paths.ROOT / "kernels_mojo" / "benchlib" / "cli.mojo").read_text()
    check = cli_mojo[cli_mojo.index('elif opt == "--kernel":'):cli_mojo.index("cfg.kernel = val")]
    assert set(config.ALLREDUCE_KERNELS) == set(re.findall(r'val != "(\w+)"', check)) - {"noop"}
    assert config.kernel_flags("1stage_bulk") == ["--kernel", "1stage_bulk"]
    for name in (*config.ALLREDUCE_KERNELS, *config.ALLREDUCE_KERNEL_NAMES):
        assert config.parse_kernel(name) == name
