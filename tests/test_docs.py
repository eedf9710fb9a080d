"""docs/ARCHITECTURE.md stays a true map: every driver module is on it, and every file it names exists."""

import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"


def test_every_driver_module_is_on_the_map():
    text = DOC.read_text()
    modules = sorted(p.name for p in (ROOT / "driver").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    missing = [m for m in modules if f"`{m}`" not in text and f"{m}`" not in text]
    assert not missing, f"name these driver modules in docs/ARCHITECTURE.md: {', '.join(missing)}"


def test_every_file_the_map_names_exists():
    text = DOC.read_text()
    named = set(re.findall(r"`((?:driver|kernels_mojo|kernels_cuda|tests)/[\w/.-]+\.(?:py|mojo|cuh|cu|json))`", text))
    assert named, "the map names no files"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"docs/ARCHITECTURE.md names files that do not exist: {', '.join(missing)}"
