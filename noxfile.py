"""Sessions are the user interface; the logic lives in `python -m driver`.

    nox -s build  -- --arch sm_90,sm_89
    nox -s test
    nox -s lint
    nox -s bench  -- --sizes 256K,16M
    nox -s stress
    nox -s sweep  -- --write
    nox -s bundle -- --out bundle
    nox -s submit -- --suite bench --partitions h100,h200 --gpus 2,8
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["test"]
nox.options.reuse_venv = "yes"

ROOT = Path(__file__).parent
TOOLCHAIN_VENV = ROOT / ".toolchain" / "venv"


def _toolchain_pins() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["optional-dependencies"]["toolchain"]


def _install(session: nox.Session, extras: str = "test") -> None:
    """The project into the session venv; the Mojo toolchain once into a shared venv."""
    session.install("-e", f".[{extras}]")
    pins = " ".join(_toolchain_pins())
    stamp = TOOLCHAIN_VENV / "pins.txt"
    if not stamp.is_file() or stamp.read_text() != pins:
        session.log(f"installing the Mojo toolchain ({pins}) into {TOOLCHAIN_VENV}, shared by every session")
        session.run("python", "-m", "venv", "--clear", str(TOOLCHAIN_VENV))
        session.run(str(TOOLCHAIN_VENV / "bin" / "python"), "-m", "pip", "install", "-q", *pins.split(), external=True)
        stamp.write_text(pins)
    session.env["DRIVER_TOOLCHAIN_VENV"] = str(TOOLCHAIN_VENV)


@nox.session
def build(session: nox.Session) -> None:
    """Compile every kernel for the requested GPU archs (default sm_90), with or without a GPU."""
    _install(session)
    session.run("python", "-m", "driver", "build", *session.posargs)


@nox.session
def test(session: nox.Session) -> None:
    """Build for sm_90 (and the SDPA kernels for sm_89), then run pytest; GPU tests skip with a reason."""
    _install(session)
    session.run("python", "-m", "driver", "build", "--arch", "sm_90")
    session.run("python", "-m", "driver", "build", "--arch", "sm_89", "--targets", "sdpa")
    # The CPU tests side by side, one process per core (pytest-xdist); the GPU tests all in one group, one
    # at a time on one of them, since they share the GPUs and time them.
    session.run("pytest", "-n", "auto", "--dist", "loadgroup", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the driver, the tests and this file, with the settings in pyproject.toml."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "driver", "tests", "noxfile.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Build, check correctness, time ours against the peers side by side, archive in bench_results/."""
    _install(session)
    session.run("python", "-m", "driver", "bench", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """Release gate: long soak of every kernel with every result checked, archived in bench_results/."""
    _install(session)
    session.run("python", "-m", "driver", "stress", *session.posargs)


@nox.session
def sweep(session: nox.Session) -> None:
    """Time every allreduce kernel at every size; `-- --write` merges the swept GPU counts' windows into kernels_mojo/dispatch_windows.json."""
    _install(session)
    session.run("python", "-m", "driver", "sweep", *session.posargs)


@nox.session
def bundle(session: nox.Session) -> None:
    """Build and pack a folder a GPU host runs with only the NVIDIA driver and Python."""
    _install(session)
    session.run("python", "-m", "driver", "build", "--arch", "sm_90")
    session.run("python", "-m", "driver", "bundle", *session.posargs)


@nox.session
def submit(session: nox.Session) -> None:
    """Build once, submit the bench or stress matrix to Slurm as one job array, watch, collect, compare."""
    _install(session)
    session.run("python", "-m", "driver", "submit", *session.posargs)
