"""Every option and file parser: a number is ASCII digits of a stated range, a list names each value once (a
repeat is folded, and said), one architecture per run, a thresholds file read strictly. Each fault is one line
and exit 2 through `cli.main`, before any build; every parse_* of config.py, and the executables' line parser,
either parse to a value within their documented constraints or raise their one error, whatever the text."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from driver import bench, build, config, device, registry, thresholds
from driver.errors import ConfigError, KernelFailed, NoGPU
from driver.parse import parse_lines
from driver.records import AllreduceLine, SdpaLine
from tests.conftest import one_line as _one_line
from tests.conftest import run_main as _main


@pytest.fixture
def ran(monkeypatch, results_dir) -> list:
    """bench.run replaced by a recorder: the options a command would run with."""
    seen: list = []
    monkeypatch.setattr(bench, "run", lambda opts, argv: seen.append(opts))
    monkeypatch.setattr(build, "build_all", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("built")))
    return seen


# ---------------------------------------------------------------- numbers: ASCII digits, a stated range

SUPERSCRIPT_TWO = "\u00b2"  # `²`: str.isdigit() says yes, int() says no
ARABIC_THREE = "\u0663"  # `٣`: \d and int() read it as 3

NUMBER_FAULTS = [
    (["bench", "--rounds", SUPERSCRIPT_TWO], ["malformed --rounds '²'", "whole number >= 1, at most 1000"]),
    (["bench", "--ngpus", SUPERSCRIPT_TWO], ["unsupported GPU count '²'"]),
    (["bench", "--iters", SUPERSCRIPT_TWO], ["malformed --iters '²'", "at most 10000000"]),
    (["bench", "--batch", SUPERSCRIPT_TWO], ["malformed --batch '²'", "at most 100000"]),
    (["bench", "--timeout", SUPERSCRIPT_TWO], ["malformed --timeout '²'"]),
    (["bench", "--warmup", SUPERSCRIPT_TWO], ["malformed --warmup '²'"]),
    (["stress", "--shapes", f"1x8x{SUPERSCRIPT_TWO}x64"], ["malformed shape '1x8x²x64'"]),
    (["bench", "--seeds", ARABIC_THREE], ["malformed --seeds '٣'"]),
    (["bench", "--sizes", ARABIC_THREE + "K"], ["malformed size '٣K'"]),
    (["sweep", "--sizes", "1" * 5000], ["size '11111111111111111111...' is above the 16G limit"]),
    (["bench", "--timeout", "9" * 400], ["--timeout '99999999999999999999...' is out of range"]),
    (["bench", "--iters", "10000001"], ["--iters '10000001' is out of range"]),
    (["bench", "--warmup", "-1"], ["malformed --warmup '-1'", "--warmup must be a whole number >= 0"]),
    (["stress", "--minutes", ARABIC_THREE], ["malformed --minutes '٣'"]),  # float() reads it as 3.0
    (["stress", "--minutes", "1" * 400], ["malformed --minutes"]),
    (["submit", "--partitions", "h100", "--poll", SUPERSCRIPT_TWO], ["malformed --poll '²'"]),
    (["submit", "--partitions", "h100", "--gpus", SUPERSCRIPT_TWO], ["malformed --gpus '²'"]),
    (["submit", "--partitions", "h100", "--timeout", "9" * 400], ["--timeout '99999999999999999999...' is out"]),
    (["submit", "--partitions", "h100", "--", "--rounds", SUPERSCRIPT_TWO], ["malformed --rounds '²'"]),
    (["collect", "no_such_folder", "--poll", SUPERSCRIPT_TWO], ["malformed --poll '²'"]),
]


@pytest.mark.parametrize("argv, needles", NUMBER_FAULTS)
def test_a_number_that_is_not_ascii_digits_or_out_of_range_is_one_line(capsys, no_work, argv, needles):
    code, _out, err = _main(capsys, *argv)
    line = _one_line(err)
    assert code == ConfigError.exit_code and line.startswith("configuration error: ")
    for needle in needles:
        assert needle in line
    assert len(line) < 400  # a 5000-digit value is shown by its first characters


def test_cuda_visible_devices_of_a_non_ascii_digit_names_no_gpu(capsys, monkeypatch, results_dir):
    """CUDA reads `²` as no GPU: the list ends there, and with nothing visible the run stops with NoGPU."""

    class FakeNvml:
        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, i):
            return f"h{i}"

        def nvmlDeviceGetUUID(self, h):
            return f"GPU-{h}"

        def nvmlShutdown(self):
            pass

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", SUPERSCRIPT_TWO)
    monkeypatch.setattr(device, "start_nvml", FakeNvml)
    monkeypatch.setattr(bench, "prepare", lambda opts, limits: (None, "sm_90"))  # the build, done
    code, _out, err = _main(capsys, "bench", "--suite", "sdpa", "--no-build")
    assert code == NoGPU.exit_code
    assert "CUDA_VISIBLE_DEVICES='²' leaves none of this host's 2 GPU(s) visible" in _one_line(err)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1," + SUPERSCRIPT_TWO + ",0")
    assert device.visible_handles(FakeNvml()) == ["h1"]


# ---------------------------------------------------------------- one architecture per run


@pytest.mark.parametrize("cmd", ["bench", "stress", "sweep"])
def test_an_arch_list_is_refused_where_a_run_has_one_arch(capsys, no_work, cmd):
    code, _out, err = _main(capsys, cmd, "--arch", "sm_90,sm_89")
    line = _one_line(err)
    assert code == ConfigError.exit_code
    assert f"--arch sm_90,sm_89: {cmd} runs on one architecture" in line and "leave out sm_89" in line


def test_one_arch_given_twice_is_that_arch(capsys, ran):
    code, _out, err = _main(capsys, "bench", "--arch", "sm_89,sm_89")
    assert code == 0 and ran[0].arch == "sm_89"
    assert _one_line(err) == "note: given more than once, run once: --arch sm_89"


# ---------------------------------------------------------------- repeats: folded, and said once


def test_every_repeated_list_value_runs_once_and_one_line_says_which(capsys, ran):
    code, _out, err = _main(
        capsys, "bench", "--suite", "sdpa,allreduce,sdpa", "--sizes", "256K,16M,262144", "--dtype",
        "float32,bfloat16,float32", "--ngpus", "2,2", "--shapes", "mission,1x8x512x64,large", "--seeds", "0,1,0",
        "--precision", "fp16,fp8,fp16", "--distributions", "normal,tiny,normal", "--timing", "cold,device")
    assert code == 0
    o = ran[0]
    assert o.suites == ("sdpa", "allreduce") and o.sizes_bytes == (256 << 10, 16 << 20)
    assert o.dtypes == ("float32", "bfloat16") and o.ngpus == (2,) and o.seeds == (0, 1)
    assert [name for name, _dims in o.shapes] == ["mission", "large"]
    assert o.precisions == ("fp16", "fp8") and o.distributions == ("normal", "tiny") and o.timing == ("cold",)
    assert _one_line(err) == (
        "note: given more than once, run once: --suite sdpa; --dtype float32; --sizes 256K; --precision fp16; "
        "--distributions normal; --ngpus 2; --shapes 1x8x512x64 (= mission); --seeds 0; --timing cold")


def test_stress_folds_its_suites_too(capsys, ran):
    code, _out, err = _main(capsys, "stress", "--suite", "sdpa,all")
    assert code == 0 and ran[0].stress_parts[:2] == ("sdpa", "allreduce")
    assert _one_line(err) == "note: given more than once, run once: --suite sdpa"


def test_no_repeat_no_note(capsys, ran):
    code, _out, err = _main(capsys, "bench", "--sizes", "256K,16M", "--seeds", "0,1,2")
    assert code == 0 and err == ""


def test_submit_folds_its_own_lists_and_the_tasks_once(capsys, monkeypatch, results_dir):
    from driver.cluster import submit

    seen = []

    def plan(opts):
        seen.append(opts)
        raise ConfigError("stop here")

    monkeypatch.setattr(submit, "plan", plan)
    code, _out, err = _main(capsys, "submit", "--suite", "bench,stress,bench", "--partitions", "h100,h100",
                            "--gpus", "2,2", "--", "--seeds", "1,1")
    assert code == ConfigError.exit_code and seen[0].suites == ("bench", "stress")
    assert seen[0].partitions == ("h100",) and seen[0].gpus == (2,)
    note, stop = [ln for ln in err.splitlines() if ln.strip()]
    assert note == "note: given more than once, run once: --suite bench; --seeds 1; --partitions h100; --gpus 2"
    assert stop == "configuration error: stop here"


# ---------------------------------------------------------------- thresholds.toml: strict types, one version


def _edited(tmp_path: Path, pattern: str, repl: str) -> Path:
    """The repo's thresholds file with one line edited (`pattern`, its first match)."""
    text, n = re.subn(pattern, repl, thresholds.paths.thresholds_file().read_text(), count=1, flags=re.MULTILINE)
    assert n == 1
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("pattern, repl, needles", [
    (r"^min_ratio = 1\.5$", "min_ratio = true", ["allreduce.speedup.0.min_ratio: Input should be a valid number",
                                                 "(got true)"]),
    (r"^min_ratio = 1\.5$", 'min_ratio = "1.5"', ["allreduce.speedup.0.min_ratio", '(got "1.5")']),
    (r"^max_wrong = 0$", "max_wrong = false", ["allreduce.max_wrong: Input should be a valid integer", "(got false)"]),
    (r"^max_wrong = 0$", "max_wrong = 0.0", ["allreduce.max_wrong: Input should be a valid integer", "(got 0.0)"]),
    (r"^version = 5$", "version = 999", ["version: Value error, version 999 is not the one this driver reads (5)"]),
    (r"^version = 5$", "version = true", ["version: Input should be a valid integer"]),
    (r'^shape = "mission"$', f'shape = "1x8x{SUPERSCRIPT_TWO}x64"', ["malformed shape '1x8x²x64'"]),
])
def test_a_thresholds_value_of_the_wrong_type_or_version_is_one_line(capsys, no_work, tmp_path, pattern, repl,
                                                                      needles):
    path = _edited(tmp_path, pattern, repl)
    code, _out, err = _main(capsys, "bench", "--thresholds", str(path))
    line = _one_line(err)
    assert code == ConfigError.exit_code and f"configuration error: thresholds file {path}: " in line
    for needle in needles:
        assert needle in line


def test_a_thresholds_file_with_a_byte_order_mark_reads_as_without(capsys, ran, tmp_path):
    path = tmp_path / "thresholds.toml"
    path.write_bytes(b"\xef\xbb\xbf" + thresholds.paths.thresholds_file().read_bytes())
    assert thresholds.load(path) == thresholds.load()
    code, _out, err = _main(capsys, "bench", "--thresholds", str(path))
    assert code == 0 and err == "" and ran[0].thresholds == path


def test_an_integer_min_ratio_loads(tmp_path):
    t = thresholds.load(_edited(tmp_path, r"^min_ratio = 1\.5$", "min_ratio = 2"))
    assert t.allreduce.speedup[0].min_ratio == 2.0 and isinstance(t.allreduce.speedup[0].min_ratio, float)


# ---------------------------------------------------------------- every parse_* of config.py, on any text

DIGITISH = st.text(alphabet="0123456789" + SUPERSCRIPT_TWO + ARABIC_THREE + ",xXKMGB .-+_e", max_size=40)
LONG_DIGITS = st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n)
ANY_TEXT = st.one_of(st.text(max_size=40), DIGITISH, LONG_DIGITS,
                     st.lists(st.sampled_from([*config.SDPA_SHAPES, *config.DTYPES, *config.SUPPORTED_ARCHS, "all",
                                               *config.SUITES, *config.TIMING_MODES, *config.TIMING_ALIASES,
                                               *config.PRECISIONS, *config.ALLREDUCE_KERNEL_NAMES, "1x8x512x64",
                                               "normal", "tiny", "256K", "2", "8", "0", "1",
                                               *registry.registered("peers")]),
                              min_size=1, max_size=5).map(",".join))


def _choice_list(allowed):
    def check(parse, value):
        assert isinstance(value, tuple) and value and all(v in allowed for v in value)
        assert parse(",".join(value)) == value
    return check


def _check_size(parse, v):
    assert isinstance(v, int) and 0 <= v <= config.MAX_SIZE_BYTES and parse(config.format_size(v)) == v


def _check_shape(parse, v):
    name, case = v
    dims = (*case.q_shape, *case.kv_shape)
    assert min(dims) >= 1 and max(dims) <= config.SHAPE_DIM_MAX and case.d in config.SDPA_HEAD_DIMS
    assert case.problem() is None and parse(name) == v


def _check_whole(parse, v):
    lo, hi = config.WHOLE_RANGES["--iters"]
    assert isinstance(v, int) and lo <= v <= hi and parse(str(v)) == v


def _distributions():
    from driver.reference.sdpa import DISTRIBUTIONS

    return tuple(DISTRIBUTIONS)


# parse_* -> (how to call it on one text, what a value it returns satisfies: its constraints and a round trip)
PARSERS = {
    "parse_size": (config.parse_size, _check_size),
    "parse_sizes": (config.parse_sizes, lambda p, v: v and all(_check_size(config.parse_size, s) is None for s in v)
                    and p(",".join(map(config.format_size, v))) == v),
    "parse_archs": (config.parse_archs, _choice_list(config.SUPPORTED_ARCHS)),
    "parse_dtypes": (config.parse_dtypes, _choice_list(config.DTYPES)),
    "parse_suite": (config.parse_suite, lambda p, v: v and set(v) <= {"allreduce", "sdpa"} and p(",".join(v)) == v),
    "parse_timing": (config.parse_timing, _choice_list(config.TIMING_MODES)),
    "parse_kernel": (config.parse_kernel, lambda p, v: v in (*config.ALLREDUCE_KERNELS,
                                                             *config.ALLREDUCE_KERNEL_NAMES) and p(v) == v),
    "parse_ngpus": (config.parse_ngpus, lambda p, v: v and set(v) <= set(config.SUPPORTED_NGPUS)
                    and p(",".join(map(str, v))) == v),
    "parse_shape": (config.parse_shape, _check_shape),
    "parse_shapes": (config.parse_shapes, lambda p, v: v and all(_check_shape(config.parse_shape, s) is None for s in v)
                     and p(",".join(n for n, _ in v)) == v),
    "parse_seeds": (config.parse_seeds, lambda p, v: v and all(0 <= s <= config.SEED_RANGE[1] for s in v)
                    and p(",".join(map(str, v))) == v),
    "parse_precisions": (config.parse_precisions, _choice_list(config.PRECISIONS)),
    "parse_q_terms": (lambda t: config.parse_q_terms(t, ("fp16", "fp8")),
                      lambda p, v: v in config.Q_TERMS and p(v) == v),
    "parse_distributions": (config.parse_distributions, lambda p, v: _choice_list(_distributions())(p, v)),
    "parse_whole": (lambda t: config.parse_whole(t, "--iters"), _check_whole),
    "parse_registered": (lambda t: config.parse_registered(t, "peers"), lambda p, v: _choice_list(
        registry.registered("peers"))(p, v)),
    "parse_minutes": (config.parse_minutes, lambda p, v: isinstance(v, float) and 0 <= v <= config.MAX_SOAK_MINUTES
                      and p(format(v, ".12f")) == v),
}


def test_the_property_test_covers_every_parser_of_config():
    assert {n for n, f in inspect.getmembers(config, inspect.isfunction) if n.startswith("parse_")} == set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
@example(text=SUPERSCRIPT_TWO).via("str.isdigit passes it, int() refuses it")
@example(text="1" * 5000).via("int() refuses more than 4300 digits")
@example(text="9" * 400).via("float() overflows")
@example(text=ARABIC_THREE).via("int() reads it, nobody types it")
def test_every_parser_returns_a_valid_value_or_config_error(name, text):
    parse, check = PARSERS[name]
    try:
        value = parse(text)
    except ConfigError as exc:
        assert "\n" not in exc.one_line() and len(exc.one_line()) < 1200
        return
    result = check(parse, value)
    assert result is None or result, f"{name}({text!r}) -> {value!r}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5), max_size=12))
def test_fold_keeps_each_value_once_in_first_order_and_names_every_repeat(values):
    kept, repeats = config.fold(values)
    assert list(kept) == list(dict.fromkeys(values))
    assert len(kept) + len(repeats) == len(values) and all(v == first for v, first in repeats)


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 10**6), span=st.integers(0, 10**6), n=st.integers(0, 3 * 10**6))
def test_parse_whole_round_trips_inside_its_range_and_refuses_outside(lo, span, n):
    hi = lo + span
    if lo <= n <= hi:
        assert config.parse_whole(f" {n} ", "--x", (lo, hi)) == n
    else:
        with pytest.raises(ConfigError) as err:
            config.parse_whole(str(n), "--x", (lo, hi))
        assert err.value.one_line() == f"configuration error: --x '{n}' is out of range (--x must be a whole " \
                                       f"number >= {lo}, at most {hi})"


# ---------------------------------------------------------------- the executables' line parser, on any output

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
AR_LINE = json.loads((Path(__file__).parent / "data" / "captured" / "allreduce_h200x2.jsonl").read_text()
                     .splitlines()[1])


def _mutated_line(draw_key, value) -> str:
    line = dict(AR_LINE)
    line[draw_key] = value
    return json.dumps(line)


OUTPUTS = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("utf-8", errors="replace")),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    st.lists(JSON_VALUES.map(json.dumps), max_size=4).map("\n".join),
    st.builds(_mutated_line, st.sampled_from(sorted(AR_LINE)), JSON_VALUES),
    st.integers(min_value=1, max_value=6000).map(lambda n: '{"n": ' + "9" * n + "}"),
)


@pytest.mark.parametrize("model", [AllreduceLine, SdpaLine])
@settings(max_examples=300, deadline=None)
@given(text=OUTPUTS)
def test_the_line_parser_gives_records_or_kernel_failed_on_any_output(model, text):
    try:
        records = parse_lines(text, model, what="x")
    except KernelFailed as exc:
        assert "\n" not in exc.one_line()
        return
    assert records and all(isinstance(r, model) for r in records)


def test_the_line_parser_on_json_nested_past_the_recursion_limit():
    """json.loads raises RecursionError past Python's recursion limit: malformed output, never a traceback."""
    with pytest.raises(KernelFailed):
        parse_lines("[" * 100_000, AllreduceLine, what="x")
