"""docs/ARCHITECTURE.md stays a true map, and every "only here" sentence of the docs stays true.

1. The map names every kernel folder, driver subpackage and module, nox session and CLI subcommand, and
   every file it names exists.
2. Its pipeline diagram lists the stages in the order the code runs them (bench.run, report.publish).
3. Every sentence of docs/*.md, README.md or a driver docstring or comment that says something happens in
   one place only ("X is the only place that Y", "the one parser", "here and nowhere else": see
   tests/doc_claims.py `ONLY`) is checked against the code with `ast`: a claim is sorted by what it is about
   (`TOPICS`), the modules it names are the places it allows, and the topic's check names every place in
   driver/ where the thing happens outside them. A claim no topic covers fails too, and so does a map that
   stops stating one of the `REQUIRED` claims (naming the topic whose check it lost).

ARCHITECTURE_MD=/path/to/page.md checks another page in place of docs/ARCHITECTURE.md (the test's own
demonstration: `git show 9897725:docs/ARCHITECTURE.md > /tmp/old.md; ARCHITECTURE_MD=/tmp/old.md pytest
tests/test_docs.py` fails, naming what that page got wrong).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import doc_claims as dc
from tests.conftest import ROOT

DOC = Path(os.environ.get("ARCHITECTURE_MD") or ROOT / "docs" / "ARCHITECTURE.md")
DOC_LABEL = "docs/ARCHITECTURE.md" if "ARCHITECTURE_MD" not in os.environ else str(DOC)


def _mentions(text: str, spellings: list[str]) -> bool:
    return any(re.search(rf"(?<![\w/.-]){re.escape(s)}(?![\w/]|\.\w)", text) for s in spellings)


# ============================================================================ 1. everything is on the map
def kernel_folders() -> list[str]:
    """Each folder directly under kernels_mojo/ that holds Mojo sources, and each under kernels_cuda/."""
    mojo = [p for p in (ROOT / "kernels_mojo").iterdir() if p.is_dir() and any(p.rglob("*.mojo"))]
    cuda = [p for p in (ROOT / "kernels_cuda").iterdir() if p.is_dir() and p.name != "__pycache__"]
    return sorted(str(p.relative_to(ROOT)) for p in mojo + cuda)


def driver_subpackages() -> list[str]:
    return sorted(str(p.parent.relative_to(ROOT / "driver")) for p in (ROOT / "driver").rglob("__init__.py")
                  if p.parent != ROOT / "driver")


def module_spellings(rel: str) -> list[str]:
    """How the map may name driver/<rel>: `launch.py`, `driver/launch.py`, `driver.launch`; a module of a
    subpackage with at least its folder (`peers/serving.py`, `suites/sdpa.VARIANTS`, `driver.peers.serving`)."""
    parts = rel.removesuffix(".py").split("/")
    least = 1 if len(parts) == 1 else 2
    out = [f"driver/{rel}", "driver." + ".".join(parts)]
    for k in range(least, len(parts) + 1):
        tail = "/".join(parts[-k:])
        out += [tail + ".py"] + ([tail] if k >= 2 else [])
    return out


def nox_sessions() -> list[str]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for dec in fn.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call else dec
            if isinstance(target, ast.Attribute) and target.attr == "session" or getattr(target, "id", "") == "session":
                given = [k.value.value for k in (call.keywords if call else []) if k.arg == "name"]
                names.append(given[0] if given else fn.name)
    return names


def cli_subcommands() -> list[str]:
    from driver.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def missing_from_map(text: str) -> list[str]:
    missing = []
    missing += [f"kernel folder {f}/" for f in kernel_folders() if not _mentions(text, [f + "/", f])]
    missing += [f"driver subpackage driver/{p}/" for p in driver_subpackages() if not _mentions(text, [f"driver/{p}/", f"{p}/"])]
    missing += [f"driver module driver/{m}" for m in dc.driver_modules()
                if not m.endswith(("__init__.py", "__main__.py")) and not _mentions(text, module_spellings(m))]
    missing += [f"nox session `nox -s {s}`" for s in nox_sessions() if f"nox -s {s}" not in text]
    missing += [f"CLI subcommand `python -m driver {c}`" for c in cli_subcommands()
                if not re.search(rf"\bdriver {re.escape(c)}\b", text)]
    return missing


def test_the_map_names_every_kernel_folder_package_module_session_and_subcommand():
    assert nox_sessions() and cli_subcommands() and kernel_folders() and driver_subpackages()
    missing = missing_from_map(DOC.read_text())
    assert not missing, f"{DOC_LABEL} does not name: " + "; ".join(missing)


def test_every_file_the_map_names_exists():
    text = DOC.read_text()
    named = set(re.findall(r"`((?:driver|kernels_mojo|kernels_cuda|tests|docs|experiments)/[\w/.-]+\.(?:py|mojo|cuh|cu|h|json|toml|md))`", text))
    assert named, "the map names no files"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"{DOC_LABEL} names files that do not exist: {', '.join(missing)}"


# ============================================================================ 2. the stages in the code's order
# The pipeline diagram's stages, in the order the data flows through them; configure runs before bench.run
# (cli._run_options), launch -> parse -> verify inside each suite, the rest as the calls below say.
STAGES = ["configure", "build", "launch", "parse", "verify", "gate", "report", "archive", "index", "exit"]
# (stage, module, function, call): inside each function, the calls come in this order.
STAGE_CALLS = [
    ("build", "bench.py", "run", "prepare"),
    ("launch", "bench.py", "run", "run"),  # SUITES[suite].run: launch, parse, verify, per-record verdicts
    ("gate", "bench.py", "run", "evaluate"),
    ("report", "bench.py", "run", "render"),  # plots.render
    ("report", "bench.py", "run", "publish"),  # report.publish: the three below
    ("report", "report.py", "publish", "compare_markdown"),
    ("archive", "report.py", "publish", "write_run"),
    ("index", "report.py", "publish", "update_index"),
    ("exit", "bench.py", "run", "exit_decision"),
]


def _first_call_line(module: str, function: str, call: str) -> int | None:
    fn = next(n for n in dc.tree(module).body if isinstance(n, ast.FunctionDef) and n.name == function)
    lines = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call)
             and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == call]
    return min(lines) if lines else None


def stage_problems(text: str) -> list[str]:
    problems = []
    blocks = re.findall(r"```\n(.*?)```", text, re.DOTALL)
    drawn = next(([m for m in re.findall(r"──(\w+)─*>", b)] for b in blocks if "──" in b), [])
    if drawn != STAGES:
        problems.append(f"the pipeline diagram's stages are {' -> '.join(drawn) or '(none)'}; the code runs "
                        f"{' -> '.join(STAGES)}")
    for module in {m for _s, m, _f, _c in STAGE_CALLS}:
        seen = [(s, f, c, _first_call_line(m, f, c)) for s, m, f, c in STAGE_CALLS if m == module]
        for s, f, c, line in seen:
            if line is None:
                problems.append(f"driver/{module} {f}() no longer calls {c}() (stage {s}): update STAGE_CALLS and the map")
        lines = [line for *_x, line in seen if line is not None]
        if lines != sorted(lines):
            problems.append(f"driver/{module}: the calls {[c for _s, _f, c, _l in seen]} are no longer in this order")
    return problems


def test_the_pipeline_diagram_has_the_codes_stage_order():
    problems = stage_problems(DOC.read_text())
    assert not problems, f"{DOC_LABEL}: " + "; ".join(problems)


# ============================================================================ 3. one-place claims
Check = Callable[[frozenset[str], dc.Sentence], list[str]]


def outside(sites: list[dc.Site], allowed: frozenset[str], why: str = "") -> list[str]:
    return [f"{s}{why}" for s in sites if s.module not in allowed]


# What a process started outside launch.py is for, proved by a string its function holds. "tool": not a
# kernel executable, peer or compiler; "version": a compiler's (or cuobjdump's) --version; "ranks": a
# peer's own processes, one per GPU.
PURPOSES = {
    "host.py": ("git", "tool"),
    "toolchain.py": ("--version", "version"),
    "bundle.py": ("pip", "tool"),
    "inspect_ptx.py": ("--dump-sass", "tool"),
}


def purpose(site: dc.Site) -> str:
    if site.module == "launch.py":
        return "launch"
    if site.module.startswith("peers/") and "multiprocessing" in site.what:
        return "ranks"
    marker, kind = PURPOSES.get(site.module, (None, "unknown"))
    return kind if marker is not None and marker in site.strings else "unknown"


def check_processes(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """Every call that starts a process (subprocess, os.exec/spawn/system, multiprocessing) is in a module the
    sentence names, each module it names starts one, and each start outside launch.py is for what PURPOSES says."""
    sites = dc.process_starts()
    bad = outside(sites, allowed, " starts a process")
    bad += [f"it names driver/{m}, which starts no process" for m in sorted(allowed - {x.module for x in sites})]
    bad += [f"{x} starts a process for a purpose tests/test_docs.py PURPOSES does not know"
            for x in sites if x.module in allowed and purpose(x) == "unknown"]
    return bad


def _runs(exempt: set[str]) -> Check:
    def check(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
        return [f"{x} ({purpose(x)})" for x in dc.process_starts() if x.module not in allowed and purpose(x) not in exempt]
    return check


# "the one launcher", "kernel executables and peers are started only by launch.py"
check_kernel_runs = _runs({"tool", "version", "ranks"})
# "the one way every compiler and kernel executable is run": a compiler's --version is a compiler run
check_compiler_runs = _runs({"tool", "ranks"})

GUARD_VARS = ("LD_LIBRARY_PATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def check_env_guard(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """The runtime library path and the NVLink-multicast guard: where code (not a docstring) spells them."""
    return outside(dc.code_strings(lambda v: any(g in v for g in GUARD_VARS)), allowed, " sets the guard or the library path")


def check_parser(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """JSON decoded from anything but a file only where the sentence says ("the one parser": parse.py).
    workers.py decodes its workers' ready and end lines (the protocol, not result lines) and hands the result
    lines to parse.parse_lines: it may, as long as it does."""
    hands_on = any(x.module == "workers.py" for x in dc.callers("parse_lines"))
    ok = allowed | ({"workers.py"} if hands_on else set())
    return outside(dc.json_decodes(), ok, " decodes output")


SLURM_COMMANDS = {"sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol", "srun", "salloc"}


def check_slurm(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """Slurm command lines are composed, run and read only where the sentence says: no list starting with a
    Slurm command elsewhere, and no other cluster module imports the launcher."""
    bad = outside(dc.literals(lambda strs: strs[0] in SLURM_COMMANDS), allowed, " (a Slurm command line)")
    return bad + outside([x for x in dc.imports_of("driver.launch") if x.module.startswith("cluster/")], allowed)


def check_config_registry(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """The allreduce kernel names: one list (no other literal of half of them or more), `kernel_flags` and the
    list defined once, and read by every reader the map names; element sizes and shapes: no other table."""
    from driver import config

    names = {re.sub(r"_s\d+$", "", n) for n in config.ALLREDUCE_KERNEL_NAMES}  # 1stage_cpasync_s3 -> 1stage_cpasync
    bad = outside(dc.literals(lambda strs: len(names & set(strs)) * 2 >= len(names)), allowed, " lists the kernels")
    bad += outside(_definitions({"kernel_flags", "ALLREDUCE_KERNEL_NAMES", "ELEM_BYTES", "SDPA_SHAPES"}), allowed,
                   " defines it again")
    bad += [f"{r} does not read ALLREDUCE_KERNEL_NAMES" for r in KERNEL_NAME_READERS
            if not re.search(r"\bALLREDUCE_KERNEL(_NAME)?S\b", (ROOT / r).read_text())]
    dtypes = set(config.DTYPES)
    bad += outside(_dict_sites(lambda k, v: len(dtypes & set(k)) >= 2 and all(isinstance(x, int) for x in v)),
                   allowed, " maps dtypes to sizes")
    shapes = set(config.SDPA_SHAPES.values())
    bad += outside([x for x in _int_tuples(4) if x.value in shapes], allowed, " spells a named shape again")
    return bad


# Who the map says reads the kernel list: --kernel, the sweep, the stress soak and sanitizers, the GPU tests,
# the dispatch test.
KERNEL_NAME_READERS = ["driver/cli.py", "driver/suites/sweep.py", "driver/suites/stress/__init__.py",
                       "tests/gpu/test_allreduce_gpu.py", "tests/test_dispatch.py"]


def _definitions(names: set[str]) -> list[dc.Site]:
    out = []
    for rel in dc.driver_modules():
        for n in dc.tree(rel).body:
            defined = {n.name} if isinstance(n, ast.FunctionDef) else {
                t.id for t in getattr(n, "targets", [getattr(n, "target", None)]) if isinstance(t, ast.Name)}
            out += [dc.Site(rel, n.lineno, f"{d} =") for d in defined & names]
    return out


def _dict_sites(pred: Callable[[list, list], bool]) -> list[dc.Site]:
    out = []
    for rel in dc.driver_modules():
        for n in dc.nodes(rel):
            if (isinstance(n, ast.Dict) and all(isinstance(x, ast.Constant) for x in [*n.keys, *n.values])
                    and pred([k.value for k in n.keys], [v.value for v in n.values])):
                out.append(dc.Site(rel, n.lineno, "a dict literal"))
    return out


@dataclass(frozen=True)
class _Tuple(dc.Site):
    value: tuple = ()


def _int_tuples(size: int) -> list[_Tuple]:
    return [_Tuple(rel, n.lineno, f"the tuple {ast.unparse(n)}", value=tuple(e.value for e in n.elts))
            for rel in dc.driver_modules() for n in dc.nodes(rel) if isinstance(n, ast.Tuple)
            and len(n.elts) == size and all(isinstance(e, ast.Constant) and type(e.value) is int for e in n.elts)]


def check_peer_registry(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """Peers are declared (`Peer(...)`) and their command lines (`-m driver.peers.<module>`) made only there."""
    return (outside(dc.constructions("Peer"), allowed) +
            outside(dc.code_strings(lambda v: v.startswith("driver.peers.")), allowed, " builds a peer's command"))


def check_gate_results(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    return outside(dc.constructions("GateResult"), allowed)


def check_verdicts(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    return outside(dc.constructions("GateResult") + dc.constructions("Verdict"), allowed)


def check_run_writer(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """archive.write_run is called only from the functions the sentence names (`report.publish`)."""
    named = s.functions
    return [f"{x} in {x.function}()" for x in dc.callers("write_run") if f"{x.module}:{x.function}" not in named]


def check_targets(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    return outside(dc.constructions("Target"), allowed)


def check_errors(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """Every DriverError class with an exit code of its own is defined where the sentence says; no two share one."""
    bad, codes = [], {}
    for site in dc.subclasses_of("DriverError"):
        cls = next(n for n in dc.nodes(site.module) if isinstance(n, ast.ClassDef) and n.lineno == site.line)
        code = next((a.value.value for a in cls.body if isinstance(a, ast.Assign)
                     and any(getattr(t, "id", "") == "exit_code" for t in a.targets)), None)
        if code is None:
            continue
        if site.module not in allowed:
            bad.append(f"{site} with exit code {code}")
        if code in codes:
            bad.append(f"{site} shares exit code {code} with {codes[code]}")
        codes[code] = site.what
    return bad


def check_gpu_table(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    from driver.cluster import gpus

    kinds = set(gpus.GPU_KINDS)
    return outside(dc.literals(lambda strs: len(kinds & set(strs)) >= 2), allowed, " maps GPU types")


def check_toolchain_pins(allowed: frozenset[str], s: dc.Sentence) -> list[str]:
    """The Mojo toolchain's pins live in pyproject.toml only: no pinned mojo / max-core in the driver or noxfile."""
    pin = re.compile(r"\b(mojo|max-core|modular)\s*==")
    bad = [str(x) for x in dc.code_strings(lambda v: bool(pin.search(v)))]
    return bad + [f"noxfile.py: {m.group(0)}" for m in pin.finditer((ROOT / "noxfile.py").read_text())]


@dataclass(frozen=True)
class Topic:
    key: str
    about: re.Pattern  # matched against the claim's own part of its sentence
    check: Check
    says: str  # the claim, in words, for the messages
    implied: frozenset[str] = frozenset()  # the module a claim means without naming it ("the one parser")


def _t(key: str, about: str, check: Check, says: str, implied: tuple[str, ...] = ()) -> Topic:
    return Topic(key, re.compile(about, re.IGNORECASE), check, says, frozenset(implied))


# First match wins.
TOPICS = [
    _t("processes", r"\bprocess(es)? (is |are )?(started|spawned)|\bstarts? a process", check_processes,
       "the modules that start a process"),
    _t("compiler-runs", r"\bcompilers?\b.*\b(run|started)\b", check_compiler_runs,
       "compilers and kernel executables are run only through launch.py", ("launch.py",)),
    _t("slurm", r"\bSlurm\b", check_slurm, "Slurm's commands are run and read only in cluster/slurm.py"),
    _t("env-guard", r"multicast|library path", check_env_guard,
       "where the runtime library path and the NVLink-multicast guard are set"),
    _t("gpu-table", r"\bGPU type\b", check_gpu_table, "the one table of GPU types"),
    _t("toolchain-pins", r"toolchain|\bpins?\b", check_toolchain_pins, "the Mojo toolchain's pins have one home"),
    _t("run-writer", r"write_run|run folder", check_run_writer, "who writes a run folder"),
    _t("gate-results", r"GateResult", check_gate_results, "where a GateResult is made"),
    _t("verdicts", r"\bverdicts?\b", check_verdicts, "where verdicts are made"),
    _t("targets", r"`Target`|build table", check_targets, "the one build table"),
    _t("errors", r"\berror class", check_errors, "the error classes, one per exit code"),
    _t("kernel-names", r"kernel names|kernel_flags|ALLREDUCE_KERNEL_NAMES|the one list", check_config_registry,
       "config.py is the one registry of kernel names, flags, element sizes and shapes"),
    _t("peers", r"\bpeers?\b.*\bregistry\b|\bregistry\b.*\bpeers?\b|`PEERS`", check_peer_registry,
       "driver/peers/__init__.py is the one registry of peers"),
    _t("parser", r"\bpars(er|ed|es)\b|\bdecod", check_parser, "the one parser of result lines", ("parse.py",)),
    _t("kernel-runs", r"\blauncher\b|\b(kernel executables?|peers?)\b.*\b(run|started|launched)\b", check_kernel_runs,
       "kernel executables and peers are started only through launch.py", ("launch.py",)),
]
# The claims the map must make: rewording one away loses its check, and this says which.
REQUIRED = ["processes", "kernel-runs", "env-guard", "parser", "slurm", "kernel-names", "peers", "gate-results", "run-writer",
            "targets", "errors"]

# Claims in files this test cannot fix that are false today, with why: strict, so that a fix (of the code or of
# the sentence) turns them into a failure until they are taken off this list.
KNOWN_FALSE: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Claim:
    sentence: dc.Sentence
    part: str  # the claim's own part of the sentence (between its neighbours' one-place phrases)
    topic: Topic | None

    @property
    def allowed(self) -> frozenset[str]:
        named = dc.named_modules(self.sentence.text)
        return (named or self.sentence.subject) | (self.topic.implied if self.topic else frozenset())

    @property
    def id(self) -> str:
        return f"{self.sentence.where}:{self.topic.key if self.topic else 'unchecked'}"


def split_claims(s: dc.Sentence) -> list[Claim]:
    """One claim per one-place phrase; each gets the text from the phrase before it to the phrase after it."""
    hits = list(dc.ONLY.finditer(s.text))
    out = []
    for i, m in enumerate(hits):
        part = s.text[hits[i - 1].end() if i else 0: hits[i + 1].start() if i + 1 < len(hits) else len(s.text)]
        topic = next((t for t in TOPICS if t.about.search(part)), None)
        out.append(Claim(s, part, topic))
    return out


def doc_sentences(page: Path = DOC, label: str = DOC_LABEL) -> list[dc.Sentence]:
    return dc.markdown_sentences(page, label)


def other_sentences() -> list[dc.Sentence]:
    """README.md, the other pages of docs/, the driver's docstrings and comments."""
    pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")]
    out = [s for p in pages if p.is_file() for s in dc.markdown_sentences(p, str(p.relative_to(ROOT)))]
    return out + dc.docstring_sentences()


def all_claims() -> list[Claim]:
    return [c for s in dc.claims(doc_sentences() + other_sentences()) for c in split_claims(s)]


def claim_problems(c: Claim) -> list[str]:
    if c.topic is None:
        return [(f"{c.sentence.where} says something happens in one place only, and no topic of tests/test_docs.py "
                 f"TOPICS checks it: add a check, or reword it: \"{c.sentence.text}\"")]
    bad = c.topic.check(c.allowed, c.sentence)
    if not bad:
        return []
    allowed = ", ".join(sorted(c.allowed)) or "nothing"
    return [f"{c.sentence.where}: \"{c.sentence.text}\" is not true ({c.topic.says}; it allows {allowed}): "
            + "; ".join(bad)]


def _params() -> list:
    out = []
    for c in all_claims():
        file = c.sentence.where.rsplit(":", 1)[0]
        why = KNOWN_FALSE.get((file, c.topic.key if c.topic else ""))
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.parametrize("claim", _params())
def test_every_one_place_claim_is_true(claim: Claim):
    problems = claim_problems(claim)
    assert not problems, "\n".join(problems)


def lost_claims(page: Path = DOC, label: str = DOC_LABEL) -> list[str]:
    made = {c.topic.key for s in dc.claims(doc_sentences(page, label)) for c in split_claims(s) if c.topic}
    says = {t.key: t.says for t in TOPICS}
    return [f"{label} no longer states \"{says[k]}\" (topic {k}), so nothing checks it: restore the sentence, or "
            f"take {k} off REQUIRED in tests/test_docs.py" for k in REQUIRED if k not in made]


def test_the_map_still_makes_every_required_claim():
    lost = lost_claims()
    assert not lost, "\n".join(lost)


def test_the_checks_can_fail():
    """Each check, given a sentence that allows nothing, finds the thing somewhere: none passes vacuously."""
    empty = dc.Sentence("nowhere", "")
    vacuous = [t.key for t in TOPICS if t.key not in ("toolchain-pins",) and not t.check(frozenset(), empty)]
    assert not vacuous, f"these checks find nothing to check: {vacuous}"


def test_every_known_false_claim_is_still_made():
    made = {(c.sentence.where.rsplit(":", 1)[0], c.topic.key) for c in all_claims() if c.topic}
    stale = [f"{f} ({k})" for f, k in KNOWN_FALSE if (f, k) not in made]
    assert not stale, f"KNOWN_FALSE in tests/test_docs.py lists claims no longer made: {', '.join(stale)}; remove them"


def test_a_false_claim_a_lost_claim_and_a_wrong_order_fail(tmp_path):
    """The checks bite, on a page of their own: one that says launch.py alone starts processes, draws archive
    before report and makes none of the required claims is refused, naming host.py, the order and the topics."""
    diagram = "\n".join(f"     ──{s}──> x" for s in ["configure", "build", "launch", "parse", "verify", "gate",
                                                       "archive", "report", "index", "exit"])
    page = tmp_path / "page.md"
    page.write_text(f"# Map\n\n```\n{diagram}\n```\n\n`launch.py` is the only place a process is started.\n")
    found = "\n".join(page_problems(page, "page.md"))
    assert "driver/host.py:" in found and "starts a process" in found, found
    assert "gate -> archive -> report -> index" in found, found
    assert all(f"(topic {k})" in found for k in REQUIRED if k != "processes"), found


# ==================================================================== 4. where generated tables live, which kernel runs
# Two claims of the map went stale unnoticed (2026-11-28): the known-limits table written "into README.md" (it
# is limits.TABLE_FILE) and `--kernel auto` picking `wgmma_fp8_sm90` (the default tier picks `wgmma_sm90`).
# Every page (README.md, docs/, the kernels' READMEs), the driver's docstrings and comments and the CLI's help
# are checked against the code's own values, so neither can go stale again.
def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "kernels_cuda").glob("*/README.md")), ROOT / "kernels_mojo" / "README.md"]


def _units(page: Path, label: str) -> list[dc.Sentence]:
    """The page's sentences, a table row as one unit (its first cell says what the others are about)."""
    lines = page.read_text().splitlines()
    rows: dict[str, dc.Sentence] = {}
    out = []
    for s in dc.markdown_sentences(page, label):
        n = int(s.where.rsplit(":", 1)[1])
        if lines[n - 1].lstrip().startswith("|"):
            rows.setdefault(s.where, dc.Sentence(s.where, " ".join(lines[n - 1].split())))
        else:
            out.append(s)
    return out + list(rows.values())


def _help_units() -> list[dc.Sentence]:
    """Every subcommand's help and its options' help, each prefixed with `driver <command>`."""
    from driver.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help for a in sub._choices_actions}
    return [dc.Sentence(f"driver/cli.py: `driver {name}` help", f"driver {name}: {text}")
            for name, parser in sub.choices.items()
            for text in [helps.get(name) or "", *(a.help or "" for a in parser._actions)] if text]


def every_unit() -> list[dc.Sentence]:
    return ([u for p in _pages() if p.is_file() for u in _units(p, str(p.relative_to(ROOT)))]
            + dc.docstring_sentences() + _help_units())


_ABOUT_LIMITS = re.compile(r"known[- ]limits|\bdriver limits\b|\blimits --write\b", re.IGNORECASE)
_PAGE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*)(README|[A-Z_]+\.md)\b")
_README_OWNS = re.compile(r"README(?:\.md)?(?:'s|\.md's)? known[- ]limits|known[- ]limits[\w -]*\b(?:in|into) "
                          r"(?:the )?(?:top-level )?README|\binto README\.md", re.IGNORECASE)


def limits_place_problems(units: list[dc.Sentence]) -> list[str]:
    """A sentence about the known-limits table that names pages names the one it lives in (limits.TABLE_FILE;
    a sentence on that page names it by being there) and never gives the table to the README."""
    from driver import limits

    home = limits.TABLE_FILE.name
    out = []
    for u in units:
        if not _ABOUT_LIMITS.search(u.text):
            continue
        pages = {m.group(2) for m in _PAGE.finditer(u.text) if "bench_results/" not in m.group(1)
                 and m.group(2) not in ("COMPARE.md", "DISPATCH.md")}
        if u.where.startswith(str(limits.TABLE_FILE.relative_to(ROOT)) + ":"):
            pages.add(home)
        if _README_OWNS.search(u.text) or (pages and home not in pages):
            out.append(f"{u.where}: the known-limits table lives in "
                       f"{limits.TABLE_FILE.relative_to(ROOT)} (limits.TABLE_FILE): \"{u.text[:240]}\"")
    return out


def test_every_sentence_on_the_known_limits_table_names_its_page():
    problems = limits_place_problems(every_unit())
    assert not problems, "\n".join(problems)


def kernel_choice_problems(units: list[dc.Sentence]) -> list[str]:
    """A sentence on what `--kernel auto` (or `--precision`) picks names, for each tier, only the kernels
    suites/sdpa.expected_kernel gives that tier; a kernel with no tier named before it is the default tier's."""
    from driver.config import DEFAULT_PRECISIONS, PRECISIONS
    from driver.suites import sdpa

    hosts = [("sm_90", "sm_90a"), ("sm_90", "sm_90"), ("sm_89", "sm_89"), ("sm_80", "sm_80")]
    picks = {t: {k for g, b in hosts if (k := sdpa.expected_kernel(t, g, b))} for t in PRECISIONS}
    kernels = sorted(set().union(*picks.values()), key=len, reverse=True)
    token = re.compile(r"\b(" + "|".join(PRECISIONS) + r")\b|`(" + "|".join(map(re.escape, kernels)) + r")`")
    out = []
    for u in units:
        if not re.search(r"--kernel auto`?\W[^.]*\bpicks?\b|--precision`? picks?\b", u.text):
            continue
        tier = DEFAULT_PRECISIONS[0]
        for m in token.finditer(u.text[re.search(r"\bpicks?\b", u.text).end():]):
            if m.group(1):
                tier = m.group(1)
            elif m.group(2) not in picks[tier]:
                out.append(f"{u.where}: `{m.group(2)}` is not what the {tier} tier picks (suites/sdpa.expected_kernel: "
                           f"{', '.join(sorted(picks[tier]))}): \"{u.text[:240]}\"")
    return out


def test_what_kernel_auto_picks_is_what_the_code_picks():
    problems = kernel_choice_problems(every_unit())
    assert not problems, "\n".join(problems)


def test_the_stale_limits_and_kernel_claims_fail(tmp_path):
    """The two claims as the map made them before 2026-11-28 are refused, each naming what is true."""
    page = tmp_path / "ARCHITECTURE.md"
    page.write_text("| `driver limits` | | the speed gates not met (`--write`: into README.md) |\n\n"
                    "At run time `--kernel auto` (the default) picks `wgmma_fp8_sm90` on an sm_90 GPU in an sm_90a "
                    "build and `mma_sync_sm80` everywhere else.\n")
    units = _units(page, "page.md")
    assert any("docs/LIMITS.md (limits.TABLE_FILE)" in p for p in limits_place_problems(units))
    (bad,) = kernel_choice_problems(units)
    assert "`wgmma_fp8_sm90` is not what the fp16 tier picks" in bad and "wgmma_sm90" in bad



# ============================================================================ 5. the README fits one screen
README = ROOT / "README.md"
README_MAX_LINES, README_MAX_WORDS = 100, 800  # issue 48: the README was 133 lines and 1696 words
COMMANDS = ["pip install nox && nox -s bench -- --sizes 256K,16M", "pip install nox && nox -s test"]


def test_the_readme_fits_one_screen():
    text = README.read_text()
    lines, words = len(text.splitlines()), len(text.split())  # as `wc -l -w` counts them
    assert lines <= README_MAX_LINES and words <= README_MAX_WORDS, (
        f"README.md is {lines} lines and {words} words (at most {README_MAX_LINES} and {README_MAX_WORDS}): "
        "move the detail to docs/")


def test_the_readme_opens_with_the_two_commands_and_ci_runs_its_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.DOTALL)
    assert blocks[:2] == COMMANDS, f"README.md's first two code blocks must be {COMMANDS}, are {blocks[:2]}"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    test_command = COMMANDS[1].split("&&")[-1].strip()
    assert test_command in ci, f".ci/run no longer runs the README's test command `{test_command}`"


def test_the_readme_headline_is_what_index_writes_now():
    from driver import archive, report

    expected = report.headline_table(archive.readable_runs(ROOT / "bench_results"))
    assert report.headline_section() == expected, (
        "README.md's headline table is not what the archived runs give: run `python -m driver index`")



def test_the_headline_skips_wrong_peers_and_takes_the_newest_run():
    """On an archived 4x H200 run: a peer whose result was wrong is no one's fastest peer, and of two runs of
    one GPU kind the newer one's ratios stand (here: ours twice as slow, so every speedup halves)."""
    from driver import archive, peers, report

    folder = ROOT / "bench_results" / "20261127T023724Z-e94797dc-4xH200"
    run = archive.load_run(folder)

    def changed(r, **kw):
        return r.model_copy(update=kw)
    wrong = run.model_copy(update={"records": [
        changed(r, correctness=changed(r.correctness, status="fail")) if peers.is_peer(r.impl) else r
        for r in run.records]})
    assert report.headline_table([(folder, wrong)]).startswith("No archived run timed ours and a peer")
    slower = run.model_copy(update={"created_utc": "2099-01-01T00:00:00Z", "records": [
        changed(r, measurement=changed(r.measurement, p50_us=2 * r.measurement.p50_us)) if r.impl == "ours" else r
        for r in run.records]})
    old, new = report._speedups(run), report._speedups(slower)
    assert old.keys() == new.keys() == {("allreduce", "2 GPUs"), ("allreduce", "4 GPUs")}
    table = report.headline_table([(folder, run), (folder, slower)])
    for part, ratios in new.items():
        low = min(ratios)
        assert low[0] == pytest.approx(min(old[part])[0] / 2)
        assert f"{low[0]:.2f}x-{max(ratios)[0]:.2f}x" in table and f"{low[1]} vs {low[2]}" in table


def test_a_newer_run_of_a_few_configs_does_not_hide_the_others():
    """A run that timed a few configs (decode shapes, one message size) replaces those configs' ratios and no more:
    every other config keeps its newest ratio from the older run, and the row names both runs, newest first."""
    from driver import archive, report

    folder = ROOT / "bench_results" / "20261127T023724Z-e94797dc-4xH200"
    run = archive.load_run(folder)
    old = report._speedups(run)[("allreduce", "4 GPUs")]
    low_config = min(old)[1]
    few = run.model_copy(update={"created_utc": "2099-01-01T00:00:00Z", "run_id": "20990101T000000Z-few", "records": [
        r.model_copy(update={"measurement": r.measurement.model_copy(update={"p50_us": 4 * r.measurement.p50_us})})
        if r.impl == "ours" else r for r in run.records if r.config.split("/seed")[0] == low_config]})
    assert set(report._speedups(few)) == {("allreduce", "4 GPUs")}
    newer = Path("20990101T000000Z-few")
    row = next(line for line in report.headline_table([(folder, run), (newer, few)]).splitlines()
               if line.startswith("| allreduce | 4xH200 | 4 GPUs |"))
    assert row.startswith(f"| allreduce | 4xH200 | 4 GPUs | {len(old)} (")  # every config, not the newer run's one
    assert f"{min(old)[0] / 4:.2f}x-{max(old)[0]:.2f}x" in row and f"| {low_config} vs " in row
    assert "[20990101T000000Z](bench_results/20990101T000000Z-few/COMPARE.md) +1 |" in row  # the newest run, one older


def page_problems(page: Path, label: str) -> list[str]:
    """Everything this file finds wrong with one page of the map (for a page that is not the checkout's:
    `python -m tests.test_docs /tmp/old.md`)."""
    text = page.read_text()
    out = [f"does not name: {m}" for m in missing_from_map(text)] + stage_problems(text)
    for s in dc.claims(dc.markdown_sentences(page, label)):
        out += [p for c in split_claims(s) for p in claim_problems(c)]
    return out + lost_claims(page, label)


if __name__ == "__main__":
    import sys

    for path in sys.argv[1:]:
        found = page_problems(Path(path), path)
        print(f"{path}: {len(found)} problem(s)")
        for p in found:
            print(f"- {p}")
