"""The allreduce dispatch table (bytes x GPU count x dtype -> kernel), without a GPU.

`dispatch_table` calls the same `select_kernel` the launch path calls, compiled
with the same -D size windows as `allreduce_bench`, and runs on the CPU. The
defaults these tests expect are read from kernels_mojo/allreduce/dispatch.mojo
itself, never copied here.
"""

import ast
import json
import operator
import re
import subprocess

import pytest

from driver import build, paths, targets, thresholds, toolchain
from driver.config import ALLREDUCE_KERNEL_NAMES, DTYPES, SUPPORTED_NGPUS, WINDOWED_KERNELS
from driver.errors import ConfigError

GATES = thresholds.load().build
DISPATCH_MOJO = paths.ROOT / "kernels_mojo" / "allreduce" / "dispatch.mojo"


def _table(exe) -> dict[tuple[int, str, int], str]:
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout
    return {(r["ngpus"], r["dtype"], r["bytes"]): r["kernel"] for r in map(json.loads, out.splitlines())}


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def mojo_defaults() -> dict[str, int]:
    """dispatch.mojo's integer constants: `comptime X = get_defined_int["X", <default>]()` gives X its
    default, `comptime X = <expr>` its value (KIB, MIB, GIB and earlier names allowed)."""
    values: dict[str, int] = {}

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(ast.dump(node))

    text = re.sub(r"\[\s*\n\s*", "[", DISPATCH_MOJO.read_text())  # a default wrapped onto the next line
    for m in re.finditer(r"^comptime (\w+) = (.+)$", text, re.MULTILINE):
        name, expr = m.groups()
        d = re.fullmatch(r'get_defined_int\["\w+",\s*(.+)\]\(\)', expr.strip())
        try:
            values[name] = ev(ast.parse(d.group(1) if d else expr.strip(), mode="eval").body)
        except (ValueError, KeyError, SyntaxError):
            continue  # not an integer constant (a tuple, a call, a Bool)
    return values


def expected_kernel(d: dict[str, int], ngpus: int, nbytes: int, *, push_defined: bool, one_stage_defined: bool) -> str:
    """The rule select_kernel documents, every window the one of `ngpus`: its _<n>GPU define where given
    (-1 in `d`: not given), else the shared define, else the default. The push window first, then the windows
    of config.WINDOWED_KERNELS (2stage_ce, 2stage_push, 1stage_pushflag, 1stage_bulk) in that order, then the cp.async window, then 1stage up
    to the crossover, 2stage above."""
    def own_or(name: str, shared: int) -> int:
        v = d[f"{name}_{ngpus}GPU"]
        return v if v >= 0 else shared

    push_max = own_or("AR_PUSH_MAX_BYTES", d["AR_PUSH_MAX_BYTES"] if push_defined else (
        d["AR_PUSH_MAX_BYTES_2GPU_DEFAULT"] if ngpus == 2 else 0))
    if 0 < nbytes <= push_max:
        return "1stage_push"
    for name, key in WINDOWED_KERNELS.items():  # in select_kernel's order
        if d[f"AR_{key}_MIN_BYTES_{ngpus}GPU"] <= nbytes <= d[f"AR_{key}_MAX_BYTES_{ngpus}GPU"]:
            return name
    if own_or("AR_CPASYNC_MIN_BYTES", d["AR_CPASYNC_MIN_BYTES"]) <= nbytes <= own_or("AR_CPASYNC_MAX_BYTES",
                                                                                     d["AR_CPASYNC_MAX_BYTES"]):
        return f"1stage_cpasync_s{own_or('AR_CPASYNC_STAGES', d['AR_CPASYNC_STAGES'])}"
    limit = own_or("AR_1STAGE_MAX_BYTES", d["AR_1STAGE_MAX_BYTES"] if one_stage_defined or ngpus != 2
                   else d["AR_1STAGE_MAX_BYTES_2GPU_DEFAULT"])
    return "1stage" if nbytes <= limit else "2stage"


def _build(out_dir, *defines: str):
    """dispatch_table built into `out_dir` with these -D NAME=VALUE defines (and no others)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = out_dir / "dispatch_table"
    cmd = [toolchain.find_mojo().path, "build", "-I", "kernels_mojo", "--target-accelerator", "sm_90",
           *(x for d in defines for x in ("-D", d)), "kernels_mojo/bin/dispatch_table.mojo", "-o", str(exe)]
    subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, timeout=600, check=True)
    return exe


def _build_table(out_dir, *defines: str) -> dict[tuple[int, str, int], str]:
    """dispatch_table built with these defines, run on the CPU."""
    return _table(_build(out_dir, *defines))


@pytest.fixture(scope="module")
def default_table():
    """The dispatch_table the build makes from the committed kernels_mojo/dispatch_windows.json."""
    build.build_all(targets.select("dispatch_table"), ("sm_90",), GATES)
    return _table(paths.build_dir() / "sm_90" / "dispatch_table")


def test_mojo_defaults_are_read_from_the_source():
    d = mojo_defaults()
    assert d["GIB"] == 1 << 30 and d["AR_CPASYNC_MIN_BYTES"] > d["AR_CPASYNC_MAX_BYTES"]  # empty window
    assert d["AR_1STAGE_MAX_BYTES_2GPU"] == d["AR_1STAGE_MAX_BYTES_4GPU"] == -1  # -1: not measured
    assert {"AR_1STAGE_MAX_BYTES", "AR_PUSH_MAX_BYTES_2GPU_DEFAULT", "AR_CPASYNC_STAGES"} <= d.keys()
    for n in SUPPORTED_NGPUS:  # every window has a per-count form; the shared ones are -1 (not given) by default
        assert d[f"AR_PUSH_MAX_BYTES_{n}GPU"] == d[f"AR_CPASYNC_STAGES_{n}GPU"] == d[f"AR_CPASYNC_MIN_BYTES_{n}GPU"] == -1
        assert all(d[f"AR_{k}_MIN_BYTES_{n}GPU"] > d[f"AR_{k}_MAX_BYTES_{n}GPU"] for k in ("2STAGE_PUSH", "PUSHFLAG", "BULK"))


def test_every_define_the_sweep_writes_is_one_dispatch_mojo_reads():
    from driver.suites import sweep

    def row(cp: float) -> dict[str, float]:  # every kernel timed; cp.async wins where cp is small
        return {k: (cp if k == "1stage_cpasync_s3" else 10.0 + i) for i, k in enumerate(ALLREDUCE_KERNEL_NAMES)}

    table = {(n, dt, size): row(1.0 if size == 1 << 20 else 50.0) for n in SUPPORTED_NGPUS for dt in DTYPES
             for size in (1 << 16, 1 << 20)}
    written = sweep.crossovers(table, noise=0.05)
    assert {sweep.count_of(k) for k in written} == set(SUPPORTED_NGPUS)
    assert all(f"AR_CPASYNC_STAGES_{n}GPU" in written for n in SUPPORTED_NGPUS)
    assert set(written) <= targets.dispatch_define_names()
    assert set(json.loads(targets.DISPATCH_WINDOWS_FILE.read_text())["defines"]) <= targets.dispatch_define_names()


def test_a_windows_file_naming_an_unknown_define_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "dispatch_windows.json"
    bad.write_text(json.dumps({"defines": {"AR_PUSH_MAX_BYTES_3GPU": 0}}))
    monkeypatch.setattr(targets, "DISPATCH_WINDOWS_FILE", bad)
    with pytest.raises(ConfigError, match="AR_PUSH_MAX_BYTES_3GPU"):
        targets.select("dispatch_table")


@pytest.mark.mojo
def test_table_covers_every_gpu_count_and_dtype(default_table):
    assert {k[0] for k in default_table} == set(SUPPORTED_NGPUS)
    assert {k[1] for k in default_table} == set(DTYPES)
    assert set(default_table.values()) <= set(ALLREDUCE_KERNEL_NAMES)


@pytest.mark.mojo
def test_default_windows(tmp_path, monkeypatch):
    """A build with an empty windows file dispatches on dispatch.mojo's own defaults."""
    empty = tmp_path / "dispatch_windows.json"
    empty.write_text(json.dumps({"defines": {}}))
    monkeypatch.setattr(targets, "DISPATCH_WINDOWS_FILE", empty)
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    (t,) = targets.select("dispatch_table")
    assert t.defines == {}
    build.build_all((t,), ("sm_90",), GATES)
    table = _table(tmp_path / "build" / "sm_90" / "dispatch_table")
    d = mojo_defaults()
    for (ngpus, _dtype, nbytes), kernel in table.items():
        assert kernel == expected_kernel(d, ngpus, nbytes, push_defined=False, one_stage_defined=False), (ngpus, nbytes)
    assert {"1stage_push", "1stage", "2stage"} <= set(table.values())  # the defaults use all three


@pytest.mark.mojo
def test_measured_windows_are_what_the_build_dispatches_on(default_table):
    """kernels_mojo/dispatch_windows.json (written by `sweep --write`) reaches select_kernel."""
    defines = json.loads(targets.DISPATCH_WINDOWS_FILE.read_text())["defines"]
    d = mojo_defaults() | defines
    for (ngpus, _dtype, nbytes), kernel in default_table.items():
        assert kernel == expected_kernel(d, ngpus, nbytes, push_defined="AR_PUSH_MAX_BYTES" in defines,
                                         one_stage_defined="AR_1STAGE_MAX_BYTES" in defines), (ngpus, nbytes)


@pytest.mark.mojo
def test_every_registry_kernel_is_one_the_executable_takes():
    """config.ALLREDUCE_KERNEL_NAMES against allreduce_bench's own argument check: each name's flags
    pass it (the refusal is then about the GPU count), an unknown name does not."""
    from driver.config import kernel_flags
    from driver.launch import runtime_env

    exe = paths.build_dir() / "sm_90" / "allreduce_bench"
    for kernel in ALLREDUCE_KERNEL_NAMES:
        proc = subprocess.run([str(exe), *kernel_flags(kernel), "--ngpus", "3", "--sizes", "1M"], capture_output=True,
                              text=True, timeout=60, env=runtime_env())
        assert proc.returncode == 2 and "unsupported --ngpus 3" in proc.stderr, (kernel, proc.stderr)
    proc = subprocess.run([str(exe), *kernel_flags("3stage"), "--ngpus", "3"], capture_output=True, text=True,
                          timeout=60, env=runtime_env())
    assert proc.returncode == 2 and "unknown kernel" in proc.stderr


@pytest.mark.mojo
def test_a_cp_async_window_define_reaches_the_runtime_choice(tmp_path):
    """The seeds' bug: a window set at compile time must change what runs."""
    table = _build_table(tmp_path, "AR_CPASYNC_MIN_BYTES=1048576", "AR_CPASYNC_MAX_BYTES=4194304",
                         "AR_CPASYNC_STAGES=2", "AR_1STAGE_MAX_BYTES=65536", "AR_PUSH_MAX_BYTES=0")
    for (ngpus, _dtype, nbytes), kernel in table.items():
        if 1 << 20 <= nbytes <= 4 << 20:
            assert kernel == "1stage_cpasync_s2"
        elif nbytes <= 65536:
            assert kernel == "1stage"
        else:
            assert kernel == "2stage"


@pytest.mark.mojo
def test_a_per_gpu_count_crossover_applies_to_that_count_only(tmp_path):
    for (ngpus, _dtype, nbytes), kernel in _build_table(tmp_path, "AR_1STAGE_MAX_BYTES_2GPU=1048576",
                                                        "AR_PUSH_MAX_BYTES=0").items():
        if ngpus == 2:
            assert kernel == ("1stage" if nbytes <= 1 << 20 else "2stage")
        else:  # untouched: dispatch.mojo's default for 4 and 8 GPUs
            assert kernel == ("1stage" if nbytes <= mojo_defaults()["AR_1STAGE_MAX_BYTES"] else "2stage")


PER_COUNT_4GPU = {  # a 4-GPU sweep's windows, every kind, beside shared ones that 2 and 8 GPUs keep using
    "AR_PUSH_MAX_BYTES_4GPU": 64 << 10, "AR_2STAGE_PUSH_MIN_BYTES_4GPU": 256 << 10, "AR_2STAGE_PUSH_MAX_BYTES_4GPU": 512 << 10,
    "AR_PUSHFLAG_MIN_BYTES_4GPU": 64 << 20, "AR_PUSHFLAG_MAX_BYTES_4GPU": 128 << 20,
    "AR_BULK_MIN_BYTES_4GPU": 8 << 20, "AR_BULK_MAX_BYTES_4GPU": 16 << 20,
    "AR_CPASYNC_MIN_BYTES_4GPU": 1 << 20, "AR_CPASYNC_MAX_BYTES_4GPU": 4 << 20, "AR_CPASYNC_STAGES_4GPU": 4,
    "AR_1STAGE_MAX_BYTES_4GPU": 32 << 10,
}


@pytest.mark.mojo
def test_per_gpu_count_windows_apply_to_that_count_only(tmp_path):
    shared = {"AR_PUSH_MAX_BYTES": 1 << 20, "AR_CPASYNC_MIN_BYTES": 2 << 20, "AR_CPASYNC_MAX_BYTES": 2 << 20}
    defines = shared | PER_COUNT_4GPU
    table = _build_table(tmp_path, *(f"{k}={v}" for k, v in defines.items()))
    d = mojo_defaults() | defines
    for (ngpus, _dtype, nbytes), kernel in table.items():
        assert kernel == expected_kernel(d, ngpus, nbytes, push_defined=True, one_stage_defined=False), (ngpus, nbytes)
    four = {nbytes: k for (n, dt, nbytes), k in table.items() if n == 4 and dt == "float32"}
    two = {nbytes: k for (n, dt, nbytes), k in table.items() if n == 2 and dt == "float32"}
    assert (four[64 << 10], four[128 << 10], four[256 << 10]) == ("1stage_push", "2stage", "2stage_push")
    assert (four[2 << 20], four[8 << 20], four[64 << 20]) == ("1stage_cpasync_s4", "1stage_bulk", "1stage_pushflag")
    assert (two[256 << 10], two[2 << 20], two[8 << 20]) == ("1stage_push", "1stage_cpasync_s3", "1stage")
    assert {k: v for k, v in table.items() if k[0] == 8} == {
        k: v for k, v in _build_table(tmp_path / "shared", *(f"{k}={v}" for k, v in shared.items())).items()
        if k[0] == 8}


@pytest.mark.mojo
def test_the_windows_of_before_select_what_they_selected(tmp_path):
    """tests/data/dispatch: the committed windows of 4ddc8c6 (shared push and cp.async windows, 2-GPU-only
    ones) give today's dispatch_table the very table they gave then, line for line."""
    data = paths.ROOT / "tests" / "data" / "dispatch"
    defines = json.loads((data / "windows_4ddc8c6.json").read_text())["defines"]
    exe = _build(tmp_path, *(f"{k}={v}" for k, v in defines.items()))
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == (data / "table_4ddc8c6.jsonl").read_text().splitlines()


@pytest.mark.mojo
def test_a_merged_4gpu_sweep_reaches_the_build_and_leaves_2_and_8_gpus_alone(tmp_path, monkeypatch, default_table):
    """The driver's own path: a 4-GPU sweep's windows merged into the committed file (sweep --write), read by
    driver/targets.py and passed to the dispatch_table build."""
    from driver.suites import sweep

    windows = tmp_path / "dispatch_windows.json"
    windows.write_text(targets.DISPATCH_WINDOWS_FILE.read_text())
    prov = sweep.Provenance(measured_on="4xH200", git_sha="0" * 40, margin=0.05, sizes_bytes=[], note="test")
    monkeypatch.setattr(sweep, "DISPATCH_WINDOWS_FILE", windows)
    sweep.write_windows(sweep.windows_data(PER_COUNT_4GPU, {4: prov}))
    monkeypatch.setattr(targets, "DISPATCH_WINDOWS_FILE", windows)
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    (t,) = targets.select("dispatch_table")
    assert {k: str(v) for k, v in PER_COUNT_4GPU.items()}.items() <= t.defines.items()
    build.build_all((t,), ("sm_90",), GATES)
    table = _table(tmp_path / "build" / "sm_90" / "dispatch_table")
    assert {k: v for k, v in table.items() if k[0] != 4} == {k: v for k, v in default_table.items() if k[0] != 4}
    d = mojo_defaults() | {k: int(v) for k, v in t.defines.items()}
    for (ngpus, _dtype, nbytes), kernel in table.items():
        assert kernel == expected_kernel(d, ngpus, nbytes, push_defined=True, one_stage_defined=False), (ngpus, nbytes)


@pytest.mark.mojo
def test_mojo_host_logic():
    """kernels_mojo/tests/test_host_logic.mojo: size parsing, selection, stats, checking, on the CPU."""
    mojo = toolchain.find_mojo().path
    proc = subprocess.run([mojo, "run", "-I", "kernels_mojo", "kernels_mojo/tests/test_host_logic.mojo"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_host_logic: all passed" in proc.stdout
