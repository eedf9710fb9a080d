"""What tests/test_docs.py reads: the sentences of the docs that say something happens in one place only,
and the code facts (found with `ast`) that make each of them true or false.

A *claim* is a sentence of README.md, docs/*.md or a driver docstring or comment that says something
happens in one place only ("X is the only place that Y", "the one parser", "here and nowhere else",
...; `ONLY` below). The modules it names (`launch.py`, `driver/peers/__init__.py`, `report.publish`),
plus the module whose docstring or comment it is, or the modules named in its table row, are the places
it allows; a checker looks up in the code where Y really happens and names every place outside them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "driver"

# The phrasings of a one-place claim, as the docs and docstrings write them.
ONLY = re.compile(
    r"\bonly place\b|\bone place\b|\bnowhere else\b|\bno other (?:module|place|caller)\b|\bthe only (?:module|caller|way)\b"
    r"|\b(?:is|are) the only\b|\bonly (?:through|by|in|from) `|\bthe one (?:\w+ )?(?:place|registry|list|parser|launcher|way|"
    r"writer|caller|table|home)\b|\bone registry\b|\bone home\b|\bone (?:list|table) of\b",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------- sentences
@dataclass(frozen=True)
class Sentence:
    where: str  # "docs/ARCHITECTURE.md:42" or "driver/launch.py:1"
    text: str  # whitespace collapsed
    subject: frozenset[str] = frozenset()  # driver modules it speaks for without naming them (its own module, its row)

    @property
    def named(self) -> frozenset[str]:
        return self.subject | named_modules(self.text)

    @property
    def functions(self) -> frozenset[str]:
        return named_functions(self.text)


def _sentences(text: str) -> list[str]:
    text = " ".join(text.split())
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\"])", text) if s]


def markdown_sentences(path: Path, label: str) -> list[Sentence]:
    """Paragraphs and list items joined across their lines, table rows cell by cell (a row's modules are the
    subject of every sentence in it), code blocks skipped."""
    out: list[Sentence] = []
    block: list[str] = []
    start = 0
    fenced = False

    def flush() -> None:
        if block:
            out.extend(Sentence(f"{label}:{start}", s) for s in _sentences(" ".join(block)))
            block.clear()

    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if stripped.startswith("|"):
            flush()
            row = named_modules(stripped)
            for cell in stripped.strip("|").split(" | "):
                out.extend(Sentence(f"{label}:{n}", s, row) for s in _sentences(cell))
            continue
        if not stripped or stripped.startswith("#") or re.match(r"([-*]|\d+\.) ", stripped):
            flush()
        if stripped and not stripped.startswith("#"):
            if not block:
                start = n
            block.append(stripped)
    flush()
    return out


def driver_modules() -> list[str]:
    """Every module of the driver, by its path under driver/ (`launch.py`, `peers/serving.py`)."""
    return sorted(str(p.relative_to(DRIVER)) for p in DRIVER.rglob("*.py") if "__pycache__" not in p.parts)


@cache
def tree(rel: str) -> ast.Module:
    return ast.parse((DRIVER / rel).read_text(), filename=f"driver/{rel}")


def docstring_sentences() -> list[Sentence]:
    """The driver's docstrings and comments, sentence by sentence; each speaks for its own module."""
    out: list[Sentence] = []
    for rel in driver_modules():
        mod = frozenset({rel})
        for node in ast.walk(tree(rel)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    line = node.body[0].lineno
                    out.extend(Sentence(f"driver/{rel}:{line}", s, mod) for s in _sentences(doc))
        comment: list[str] = []
        first = 0
        source = (DRIVER / rel).read_text()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                if not comment:
                    first = tok.start[0]
                comment.append(tok.string.lstrip("#").strip())
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) and comment:
                out.extend(Sentence(f"driver/{rel}:{first}", s, mod) for s in _sentences(" ".join(comment)))
                comment = []
    return out


def claims(sentences: list[Sentence]) -> list[Sentence]:
    return [s for s in sentences if ONLY.search(s.text)]


# ---------------------------------------------------------------------------------------------- names in text
_PATH = re.compile(r"(?<![\w/.-])((?:driver/)?(?:[a-z_]+/)*[a-z_0-9]+\.py)\b")
_DOTTED = re.compile(r"(?<![\w/.])([a-z_]+(?:/[a-z_]+)*)\.(?!(?:py|toml|json|md|mojo|cuh?|h|txt|npy|png|sh)\b)"
                     r"([a-z_][a-z_0-9]*)\b")


def _resolve(token: str) -> set[str]:
    """`launch.py` -> {launch.py}; `cluster/slurm.py`, `driver/cluster/slurm.py` -> {cluster/slurm.py};
    `sdpa.py` -> every module of that name where none is at the top."""
    token = token.removeprefix("driver/")
    mods = driver_modules()
    if token in mods:
        return {token}
    return {m for m in mods if m.endswith("/" + token)}


def named_modules(text: str) -> frozenset[str]:
    """The driver modules a text names as files (`launch.py`, `driver/peers/__init__.py`) or through one
    of their functions (`report.publish`, `suites/sdpa.VARIANTS`)."""
    found: set[str] = set()
    for token in _PATH.findall(text):
        found |= _resolve(token)
    for mod, _attr in _DOTTED.findall(text):
        found |= _resolve(mod + ".py")
    return frozenset(found)


def named_functions(text: str) -> frozenset[str]:
    """`report.publish` -> {report.py:publish}: functions named with their module."""
    out = set()
    for mod, attr in _DOTTED.findall(text):
        for rel in _resolve(mod + ".py"):
            out.add(f"{rel}:{attr}")
    return frozenset(out)


# ---------------------------------------------------------------------------------------------- code facts
@dataclass(frozen=True)
class Site:
    module: str  # path under driver/
    line: int
    what: str  # e.g. "subprocess.run", "json.loads", "GateResult("
    function: str = ""  # the enclosing function's name, "" at module level
    strings: frozenset[str] = field(default=frozenset(), compare=False)  # the string constants of that function

    def __str__(self) -> str:
        return f"driver/{self.module}:{self.line} {self.what}"


def _aliases(mod: ast.Module) -> dict[str, str]:
    """Local name -> what it stands for: imports anywhere in the module (`import torch.multiprocessing as
    mp`, `from subprocess import run`) and `x = <multiprocessing>.get_context(...)`."""
    names: dict[str, str] = {}
    for node in ast.walk(mod):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(mod):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = dotted(node.value.func, names)
            if called.endswith(("multiprocessing.get_context", "multiprocessing.context.get_context")):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        names[t.id] = called.rsplit(".", 1)[0] + ".context"
    return names


def dotted(node: ast.AST, aliases: dict[str, str]) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(aliases.get(node.id, node.id))
    elif isinstance(node, ast.Call):
        parts.append(dotted(node.func, aliases) + "()")
    else:
        parts.append("?")
    return ".".join(reversed(parts))


def _docstring_nodes(mod: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(mod):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _functions(mod: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(enclosing top-level function's name, node) for every node; "" at module level."""
    def walk(node: ast.AST, fn: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not fn else fn
            yield name, child
            yield from walk(child, name)
    yield from walk(mod, "")


def _strings(node: ast.AST) -> frozenset[str]:
    return frozenset(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


@dataclass
class _Index:
    nodes: list[tuple[str, ast.AST]]  # (enclosing function, node), every node once
    calls: list[tuple[str, ast.Call, str]]  # (resolved dotted name, call, enclosing function)
    docstrings: set[int]
    strings: dict[str, frozenset[str]]  # function name ("" = the module) -> its string constants


@cache
def index(rel: str) -> _Index:
    mod = tree(rel)
    aliases = _aliases(mod)
    nodes = list(_functions(mod))
    calls = [(dotted(n.func, aliases), n, fn) for fn, n in nodes if isinstance(n, ast.Call)]
    strings = {n.name: _strings(n) for n in mod.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    strings[""] = _strings(mod)
    return _Index(nodes, calls, _docstring_nodes(mod), strings)


def nodes(rel: str) -> list[ast.AST]:
    """Every node of driver/<rel> (the module itself not included)."""
    return [n for _fn, n in index(rel).nodes]


def calls(match: Callable[[str, ast.Call], str | None]) -> list[Site]:
    """Every call in driver/ that `match(resolved dotted name, node)` names (its return value is the site's
    `what`), with its enclosing top-level function and that function's string constants."""
    sites = []
    for rel in driver_modules():
        ix = index(rel)
        for name, node, fn in ix.calls:
            what = match(name, node)
            if what:
                sites.append(Site(rel, node.lineno, what, fn, ix.strings.get(fn, ix.strings[""])))
    return sites


def code_strings(pred: Callable[[str], bool]) -> list[Site]:
    """String constants (f-string parts too) that are not docstrings, for which `pred` holds."""
    sites = []
    for rel in driver_modules():
        docs = index(rel).docstrings
        for _fn, node in index(rel).nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and pred(node.value):
                sites.append(Site(rel, node.lineno, repr(node.value[:60])))
    return sites


def literals(pred: Callable[[list[str]], bool]) -> list[Site]:
    """Tuple, list and set literals and dict keys (not type arguments) whose string elements satisfy `pred`."""
    sites = []
    for rel in driver_modules():
        every = nodes(rel)
        types = {id(n.slice) for n in every if isinstance(n, ast.Subscript)}  # Literal["a", "b"]
        for node in every:
            if id(node) in types:
                continue
            elts = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else None
            if elts is None:
                continue
            strs = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if strs and pred(strs):
                sites.append(Site(rel, node.lineno, f"a literal of {', '.join(strs[:4])}{', ...' if len(strs) > 4 else ''}"))
    return sites


# The calls that start a process, by resolved name.
_SUBPROCESS = {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
_OS = re.compile(r"^os\.(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawnp?)$")
_MP = {"Process", "Pool", "spawn", "start_processes"}


def process_start(name: str, _node: ast.Call) -> str | None:
    head, _, last = name.rpartition(".")
    if head == "subprocess" and last in _SUBPROCESS or _OS.match(name) or name.startswith("asyncio.create_subprocess"):
        return name
    if "multiprocessing" in head and last in _MP or name == "pty.spawn" or last == "Popen":
        return name
    return None


def process_starts() -> list[Site]:
    return calls(process_start)


def file_read(node: ast.AST) -> bool:
    """`x.read_text()`, `x.read_bytes()`, `open(...)`/`f.read()`: a file's contents, not a process's output."""
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr in ("read_text", "read_bytes", "read")
        or isinstance(node.func, ast.Name) and node.func.id == "open")


def json_decodes() -> list[Site]:
    """json.loads / json.load of anything but a file read."""
    def match(name: str, node: ast.Call) -> str | None:
        if name in ("json.loads", "json.load") and not (node.args and file_read(node.args[0])):
            return name
        return None
    return calls(match)


def constructions(cls: str) -> list[Site]:
    return calls(lambda name, _n: f"{cls}(" if name.rsplit(".", 1)[-1] == cls else None)


def callers(function: str) -> list[Site]:
    return calls(lambda name, _n: f"{function}(" if name.rsplit(".", 1)[-1] == function else None)


def subclasses_of(base: str) -> list[Site]:
    """Classes deriving, directly or through each other, from `base` (by name), wherever defined."""
    defs = [(rel, n) for rel in driver_modules() for n in nodes(rel) if isinstance(n, ast.ClassDef)]
    known, sites, grew = {base}, [], True
    while grew:
        grew = False
        for rel, n in defs:
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in n.bases}
            if n.name not in known and bases & known:
                known.add(n.name)
                sites.append(Site(rel, n.lineno, f"class {n.name}"))
                grew = True
    return sites


def imports_of(target: str) -> list[Site]:
    """Modules that import `target` (a dotted driver module, e.g. driver.launch)."""
    sites = []
    for rel in driver_modules():
        for node in nodes(rel):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == target.rsplit(".", 1)[0]:
                names += [f"{node.module}.{a.name}" for a in node.names]
            if target in names:
                sites.append(Site(rel, node.lineno, f"import {target}"))
    return sites
