"""driver/peers/ imports go one way: no module imports, at its top or inside a function, a module that imports
it back (the served torch allreduce worker is a leaf of its own, driver/peers/allreduce_server.py), and every
module imports on a CPU host in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from driver import peers

PKG = "driver.peers"
PEERS_DIR = Path(peers.__file__).parent
MODULES = sorted(p.stem for p in PEERS_DIR.glob("*.py") if p.stem != "__init__")


def _imported(path: Path) -> set[str]:
    """The driver.peers submodules a module imports anywhere in its source (top level or in a function)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PKG:  # from driver.peers import a, b
                out |= {a.name for a in node.names if a.name in MODULES}
            elif node.module.startswith(PKG + "."):  # from driver.peers.a import x
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith(PKG + ".")}
    return out


def import_graph() -> dict[str, set[str]]:
    graph = {m: _imported(PEERS_DIR / f"{m}.py") - {m} for m in MODULES}
    graph["__init__"] = _imported(PEERS_DIR / "__init__.py")
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_peers_import_graph_is_acyclic():
    graph = import_graph()
    assert "torch_allreduce" in graph["nccl_allreduce"]  # the walk sees the imports it is meant to see
    assert find_cycle(graph) is None, f"driver/peers/ import cycle: {' -> '.join(find_cycle(graph))}"


def test_allreduce_server_is_a_leaf():
    graph = import_graph()
    assert {"nccl_allreduce", "symm_allreduce", "torch_allreduce"} <= graph["allreduce_server"]
    assert [m for m, deps in graph.items() if "allreduce_server" in deps] == []


def test_every_peers_module_imports_in_a_fresh_interpreter():
    """Each module alone, first in its interpreter (so no other import has initialised what it needs), and
    none of them pulls in torch at import time (the driver imports them on CPU boxes)."""
    code = ("import importlib, sys\n"
            "importlib.import_module(sys.argv[1])\n"
            "assert 'torch' not in sys.modules, 'imports torch'\n")
    modules = [PKG, *(f"{PKG}.{m}" for m in MODULES)]
    procs = {m: subprocess.Popen([sys.executable, "-c", code, m], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=PEERS_DIR.parent.parent) for m in modules}  # at once: 2 cores
    for module, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{module}: {err.strip().splitlines()[-1:]}"
