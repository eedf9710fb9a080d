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
from driver.config import ALLREDUCE_KERNEL_NAMES, DTYPES, SUPPORTED_NGPUS

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
    """The rule select_kernel documents: the push window first, then (2 GPUs only) the windows of
    2stage_push, 1stage_pushflag and 1stage_bulk in that order, then the cp.async window, then 1stage up
    to the (per-GPU-count, else global, else per-count default) crossover, 2stage above."""
    push_max = d["AR_PUSH_MAX_BYTES"] if push_defined else (d["AR_PUSH_MAX_BYTES_2GPU_DEFAULT"] if ngpus == 2 else 0)
    if 0 < nbytes <= push_max:
        return "1stage_push"
    if ngpus == 2:
        for name, key in (("2stage_push", "2STAGE_PUSH"), ("1stage_pushflag", "PUSHFLAG"), ("1stage_bulk", "BULK")):
            if d[f"AR_{key}_MIN_BYTES_2GPU"] <= nbytes <= d[f"AR_{key}_MAX_BYTES_2GPU"]:
                return name
    if d["AR_CPASYNC_MIN_BYTES"] <= nbytes <= d["AR_CPASYNC_MAX_BYTES"]:
        return f"1stage_cpasync_s{d['AR_CPASYNC_STAGES']}"
    limit = d[f"AR_1STAGE_MAX_BYTES_{ngpus}GPU"]
    if limit < 0:
        limit = d["AR_1STAGE_MAX_BYTES"] if one_stage_defined or ngpus != 2 else d["AR_1STAGE_MAX_BYTES_2GPU_DEFAULT"]
    return "1stage" if nbytes <= limit else "2stage"


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
    mojo = toolchain.find_mojo().path
    exe = tmp_path / "dispatch_table"
    cmd = [mojo, "build", "-I", "kernels_mojo", "--target-accelerator", "sm_90", "-D", "AR_CPASYNC_MIN_BYTES=1048576",
           "-D", "AR_CPASYNC_MAX_BYTES=4194304", "-D", "AR_CPASYNC_STAGES=2", "-D", "AR_1STAGE_MAX_BYTES=65536", "-D", "AR_PUSH_MAX_BYTES=0",
           "kernels_mojo/bin/dispatch_table.mojo", "-o", str(exe)]
    subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, timeout=600, check=True)
    table = _table(exe)
    for (ngpus, _dtype, nbytes), kernel in table.items():
        if 1 << 20 <= nbytes <= 4 << 20:
            assert kernel == "1stage_cpasync_s2"
        elif nbytes <= 65536:
            assert kernel == "1stage"
        else:
            assert kernel == "2stage"


@pytest.mark.mojo
def test_a_per_gpu_count_crossover_applies_to_that_count_only(tmp_path):
    mojo = toolchain.find_mojo().path
    exe = tmp_path / "dispatch_table"
    cmd = [mojo, "build", "-I", "kernels_mojo", "--target-accelerator", "sm_90", "-D", "AR_1STAGE_MAX_BYTES_2GPU=1048576",
           "-D", "AR_PUSH_MAX_BYTES=0", "kernels_mojo/bin/dispatch_table.mojo", "-o", str(exe)]
    subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, timeout=600, check=True)
    for (ngpus, _dtype, nbytes), kernel in _table(exe).items():
        if ngpus == 2:
            assert kernel == ("1stage" if nbytes <= 1 << 20 else "2stage")
        else:  # untouched: dispatch.mojo's default for 4 and 8 GPUs
            assert kernel == ("1stage" if nbytes <= mojo_defaults()["AR_1STAGE_MAX_BYTES"] else "2stage")


@pytest.mark.mojo
def test_mojo_host_logic():
    """kernels_mojo/tests/test_host_logic.mojo: size parsing, selection, stats, checking, on the CPU."""
    mojo = toolchain.find_mojo().path
    proc = subprocess.run([mojo, "run", "-I", "kernels_mojo", "kernels_mojo/tests/test_host_logic.mojo"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_host_logic: all passed" in proc.stdout
