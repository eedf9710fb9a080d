"""experiments/: one dated folder per kept experiment, each with a README that says what it was."""

import re

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
