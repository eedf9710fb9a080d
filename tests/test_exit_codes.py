"""One table of the runners' exit codes, by name (driver/errors.py RunnerExit): the runners' sources declare the
same names with the same numbers and exit only through them, docs/BUILD.md's table is the code's, and the driver
maps each by name, so a runner's code never reaches the driver's exit as a different meaning."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from driver import errors
from driver.errors import RUNNER_EXIT_ERROR, ConfigError, KernelFailed, NoGPU, RunnerExit, TierNotOffered
from driver.launch import exit_error

ROOT = Path(__file__).resolve().parents[1]
RUNNER_CU = ROOT / "kernels_cuda/sdpa_fp8/runner.cu"
MOJO = sorted([*ROOT.glob("kernels_mojo/benchlib/*.mojo"), *ROOT.glob("kernels_mojo/bin/*.mojo")])
PEERS = sorted((ROOT / "driver/peers").glob("*.py")) + [ROOT / "driver/reference/sdpa_gpu.py"]


def _declared(text: str, pattern: str) -> dict[str, int]:
    return {m["name"]: int(m["code"]) for m in re.finditer(pattern, text)}


def _check_declared(declared: dict[str, int], where: str) -> None:
    assert declared, f"{where} declares no EXIT_ name"
    for name, code in declared.items():
        assert name.removeprefix("EXIT_") in RunnerExit.__members__, f"{where}: {name} is not in errors.RunnerExit"
        assert RunnerExit[name.removeprefix("EXIT_")] == code, f"{where}: {name} = {code}, RunnerExit says otherwise"


def test_cuda_runner_declares_the_table_and_exits_by_name():
    text = RUNNER_CU.read_text()
    declared = _declared(text, r"constexpr int (?P<name>EXIT_\w+) = (?P<code>\d+);")
    _check_declared(declared, RUNNER_CU.name)
    assert set(declared) == {"EXIT_BAD_INPUT", "EXIT_CUDA_ERROR", "EXIT_NO_GPU", "EXIT_NOT_OFFERED"}
    codes = re.findall(r"\bdie\(([^,]+),", text)
    assert len(codes) > 20  # the walk sees the calls it is meant to see
    bare = [c for c in codes if re.search(r"\b\d+\b", c) and "int code" not in c]
    assert bare == [], f"runner.cu dies with a bare number, not an EXIT_ name: {bare}"
    for c in codes:
        assert set(re.findall(r"\bEXIT_\w+", c)) <= set(declared) or c.startswith("int "), c
    assert re.findall(r"\breturn [1-9]\d*;", text) == [], "runner.cu returns a bare non-zero exit code"


def test_mojo_runners_declare_the_table_and_exit_by_name():
    cli = ROOT / "kernels_mojo/benchlib/cli.mojo"
    declared = _declared(cli.read_text(), r"comptime (?P<name>EXIT_\w+) = (?P<code>\d+)")
    _check_declared(declared, cli.name)
    calls = 0
    for path in MOJO:
        for arg in re.findall(r"(?<!struct )\b(?:coded_error|fail|CaseStatus)\(([^,()]+),", path.read_text()):
            if arg.strip().startswith(("code:", "out self")) or arg.strip() in ("code", "status.code"):
                continue  # the definitions, and a coded_error's code passed on
            calls += 1
            assert arg.strip() in declared, f"{path.name}: exits with {arg.strip()!r}, not a cli.mojo EXIT_ name"
    assert calls > 10


def _peer_exits(path: Path) -> list[tuple[int, str]]:
    """(line, source) of every exit in `path` given as a bare integer: SystemExit(3), fail(msg, 3), rc=3."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        args = list(node.args[1:2]) if fn == "fail" else list(node.args[:1]) if fn == "SystemExit" else []
        args += [k.value for k in node.keywords if k.arg == "rc"]
        bad += [(node.lineno, ast.unparse(node)) for a in args
                if isinstance(a, ast.Constant) and isinstance(a.value, int) and a.value]
    return bad


def test_python_peers_exit_by_name():
    for path in PEERS:
        assert _peer_exits(path) == [], f"{path.name} exits with a bare number, not a RunnerExit name"
        for name, value in re.findall(r"^(EXIT_\w+(?:, EXIT_\w+)*) = (.+?)(?:  #.*)?$", path.read_text(), re.MULTILINE):
            for one, rhs in zip(name.split(", "), value.split(", "), strict=True):
                assert rhs == f"RunnerExit.{one.removeprefix('EXIT_')}", f"{path.name}: {one} = {rhs}"


def test_peer_exit_walk_sees_a_bare_number(tmp_path):
    bad = tmp_path / "peer.py"
    bad.write_text("import sys\ndef f():\n    fail('x', 3)\n    raise SystemExit(4)\n    send(c, rc=2)\n    fail('y', E)\n")
    assert [line for line, _ in _peer_exits(bad)] == [3, 4, 5]


def _doc_table() -> dict[str, tuple[int, str, int]]:
    """docs/BUILD.md's runners' table: name -> (runner code, the driver's error, its exit code)."""
    text = (ROOT / "docs/BUILD.md").read_text()
    section = text[text.index("## Kernel executable interface"):]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| [^|]+ \| `(\w+)` \((\d+)", section, re.MULTILINE)
    return {name: (int(code), error, int(exit_code)) for code, name, error, exit_code in rows}


def test_build_md_table_is_the_codes_table():
    doc = _doc_table()
    code = {m.name: (int(m), RUNNER_EXIT_ERROR[m].__name__, RUNNER_EXIT_ERROR[m].exit_code) for m in RunnerExit}
    assert doc == code


@pytest.mark.parametrize("runner_exit", list(RunnerExit))
def test_driver_maps_each_runner_code_by_name(runner_exit):
    err = exit_error(int(runner_exit), "sdpa_fp8_baseline", "error: something", "cmd")
    assert type(err) is RUNNER_EXIT_ERROR[runner_exit]
    if runner_exit in (RunnerExit.CUDA_ERROR, RunnerExit.RUN_FAILED):
        assert f"exited {int(runner_exit)}:" in err.message


def test_no_runner_code_reaches_the_driver_as_another_meaning():
    """A runner's 3 (a CUDA error) is the driver's 6 (kernel failed), never its 3 (toolchain missing); and a
    runner code equal to a driver code means the same there (2: the input is wrong)."""
    assert exit_error(3, "r", "d", "w").exit_code == KernelFailed.exit_code == 6
    assert errors.ToolchainMissing.exit_code == 3
    assert exit_error(4, "r", "d", "w").exit_code == NoGPU.exit_code
    assert exit_error(2, "r", "d", "w").exit_code == ConfigError.exit_code == 2
    assert isinstance(exit_error(5, "r", "d", "w"), TierNotOffered)
    assert type(exit_error(99, "r", "d", "w")) is KernelFailed
