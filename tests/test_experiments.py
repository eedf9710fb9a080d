"""experiments/: one dated folder per kept experiment, each with a README that says what it was and
the raw files it reads beside it; the lab calls the driver through its command line only (issue 31)."""

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

EXPERIMENTS = ROOT / "experiments"
FIELDS = ("question", "command", "device", "commit", "answer")


def _folders():
    return sorted(p for p in EXPERIMENTS.iterdir() if p.is_dir())


def test_every_experiment_is_a_dated_folder_with_a_readme_naming_the_five_items():
    assert _folders()
    for folder in _folders():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9.-]*", folder.name), folder.name
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.name} has no README.md"
        text = readme.read_text().lower()
        missing = [f for f in FIELDS if f not in text]
        assert not missing, f"{folder.name}/README.md does not name: {', '.join(missing)}"


def test_every_experiment_is_listed_in_the_index():
    index = (EXPERIMENTS / "README.md").read_text()
    for folder in _folders():
        assert f"]({folder.name}/)" in index, f"add a row for {folder.name} to experiments/README.md"


# ---- the lab apart: no experiment imports the driver ------------------------------------------------
# Python a shell script runs: a heredoc fed to python (`python3 - ARGS <<'PY' ... PY`) or `python -c '...'`.
HEREDOC = re.compile(r"python3?\b[^\n]*<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*$", re.DOTALL | re.MULTILINE)
DASH_C = re.compile(r"python3?(?:\s+-\w+)*\s+-c\s+(['\"])(.*?)(?<!\\)\1", re.DOTALL)
IMPORT_LINE = re.compile(r"^\s*(?:from\s+driver[\s.]|import\s+driver\b)", re.MULTILINE)
BY_PATH = {"spec_from_file_location", "SourceFileLoader", "run_path", "load_source"}  # load a module from a file
BY_NAME = {"import_module", "__import__"}


def _is_driver(name: str) -> bool:
    return name == "driver" or name.startswith("driver.")


def driver_uses(source: str) -> list[str]:
    """Where one Python source reaches into the driver's modules: an import of `driver` or a submodule,
    importlib by name, or a module loaded by file path from driver/ (what the command line hides)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a snippet the shell fills in: read its import lines
        return [m.group(0).strip() for m in IMPORT_LINE.finditer(source)]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _is_driver(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_driver(node.module or ""):
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            strings = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if fn in BY_NAME and strings and _is_driver(strings[0]):
                found.append(f"{fn}({strings[0]!r})")
            elif fn in BY_PATH and any(s == "driver" or re.search(r"(^|/)driver/", s) for s in strings):
                found.append(f"{fn}(<a file of driver/>)")
    return found


def driver_imports(root: Path) -> list[str]:
    """Every use of the driver's modules in the .py files under root and the Python in its .sh files."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".py":
            sources = [path.read_text()]
        elif path.suffix == ".sh":
            text = path.read_text()
            sources = [m.group(3) for m in HEREDOC.finditer(text)] + [m.group(2) for m in DASH_C.finditer(text)]
        else:
            continue
        found += [f"{path.relative_to(root)}: {use}" for src in sources for use in driver_uses(src)]
    return found


def test_no_experiment_imports_the_driver():
    """Experiments run `python -m driver ...` (or the executables); an import of a driver module from a
    script nothing tests would break, or hold back, any refactor of the driver."""
    assert driver_imports(EXPERIMENTS) == []


def test_the_import_check_finds_every_way_in(tmp_path):
    (tmp_path / "a.py").write_text("import numpy\nfrom driver.reference import sdpa as ref\n"
                                   "def f():\n    import driver.cli\n")
    (tmp_path / "b.py").write_text("import importlib, os\nm = importlib.import_module('driver.peers.torch_sdpa')\n"
                                   "s = importlib.util.spec_from_file_location('r', os.path.join(R, 'driver', 'x.py'))\n")
    (tmp_path / "c.sh").write_text("python3 - \"$S\" <<'PY'\nimport sys\nfrom driver.reference import sdpa\nPY\n"
                                   "python3 -c 'import driver.cli; print(1)'\n"
                                   "python3 - <<PY\nx = $X\nfrom driver import paths\nPY\n")
    (tmp_path / "ok.py").write_text("import subprocess, sys\n# output from driver bench\n"
                                    "subprocess.run([sys.executable, '-m', 'driver', 'bench'])\nimport drivers\n")
    (tmp_path / "ok.sh").write_text("# from driver bench\npython -m driver bench --suite sdpa\n"
                                    "python3 -c 'import json; print(1)'\n")
    found = driver_imports(tmp_path)
    assert [f.split(":")[0] for f in found] == ["a.py", "a.py", "b.py", "b.py", "c.sh", "c.sh", "c.sh"], found


# ---- raw outputs beside the README that reads them ------------------------------------------------
RAW_NAME = re.compile(r"`([^`\s]+\.(?:jsonl|json|txt|log|csv|tsv|gz))`")
RAW_SUFFIXES = {".jsonl", ".txt", ".log", ".csv", ".tsv"}
RAW_PLAIN_MAX = 8192  # bytes: a raw file larger than this is kept gzipped


def _names_a_file_there(name: str, folder: Path, archived: list[str]) -> bool:
    if (folder / name).exists() or (ROOT / name).exists():
        return True
    tail = "/" + name
    return any(("/" + p.relative_to(folder).as_posix()).endswith(tail) for p in folder.rglob("*")) or any(
        p.endswith(tail) for p in archived)


def test_every_raw_file_a_readme_names_is_there():
    """A file an experiment's README names in backticks (.jsonl, .json, .txt, .log, .csv, .gz) exists: in
    its folder (as named, or as the end of a path in it, for a run folder's files), from the repository
    root, or in an archived run of bench_results/. Names with shell variables or wildcards, absolute
    paths and the device's carried folders (`.gpu/...`) are what a command writes, not files here."""
    archived = [p.relative_to(ROOT).as_posix() for p in (ROOT / "bench_results").rglob("*") if p.is_file()]
    missing = []
    for folder in _folders():
        for name in sorted(set(RAW_NAME.findall((folder / "README.md").read_text()))):
            if re.search(r"[$*{}<>~]", name) or name.startswith(("/", ".")):
                continue
            if not _names_a_file_there(name, folder, archived):
                missing.append(f"{folder.name}: {name}")
    assert not missing, "named in a README but not there (gzipped? then name the .gz): " + ", ".join(missing)


def test_raw_outputs_are_kept_compressed():
    """Raw logs and JSON lines over 8 KiB are gzipped (`zcat` reads them); archived runs' records
    stay as bench_results/ keeps them (results.json.gz)."""
    big = [p.relative_to(EXPERIMENTS).as_posix() for p in EXPERIMENTS.rglob("*")
           if p.suffix in RAW_SUFFIXES and p.stat().st_size > RAW_PLAIN_MAX]
    assert not big, f"gzip -n -9 these and name the .gz in the README: {big}"
