"""The build cache checks what it trusts, on a fake Mojo compiler (a shell script) driven through the real
build (cli.main, build.build_all, launch.run_process): a changed output is rebuilt, compilers write under a
temporary name, an interrupt (SIGINT or SIGTERM) kills the compiler's whole process group and caches nothing,
the cache key does not hold the checkout's path, and a cached build writes nothing (a read-only tree builds)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from driver import build, cli, paths, toolchain

ROOT = Path(__file__).resolve().parent.parent
LATE_S = 5  # longer than the driver takes to stop (a killed process's parent may reap it late: 2-3 s here)
TARGET = "dispatch_table"  # a Mojo target with no PTX expectations: the fake's output passes the static gates

# `mojo --version` as the pin expects; `mojo build ... -o OUT`: records its pid and OUT in $FAKE_MOJO_LOG,
# sleeps $FAKE_MOJO_SLEEP seconds, then writes OUT. With $FAKE_MOJO_LATE it first leaves a process behind in
# its process group (its parent exits at once, so it belongs to no tree) that writes OUT and then
# $FAKE_MOJO_LATE after $FAKE_MOJO_LATE_S seconds: the orphaned compiler of issue 49.
# $FAKE_MOJO_FAIL: write half an output, exit 1.
FAKE_MOJO = r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Mojo 1.2.0 (fake)"; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
[ -n "$FAKE_MOJO_LOG" ] && echo "$$ $out" >> "$FAKE_MOJO_LOG"
if [ -n "$FAKE_MOJO_LATE" ]; then
  ( ( sleep "$FAKE_MOJO_LATE_S"; echo late > "$out"; echo late > "$FAKE_MOJO_LATE" ) & )
fi
if [ -n "$FAKE_MOJO_FAIL" ]; then echo half > "$out"; echo "error: fake failure" >&2; exit 1; fi
sleep "${FAKE_MOJO_SLEEP:-0}"
echo "fake executable" > "$out"
"""


def _fake_mojo(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "mojo"
    exe.write_text(FAKE_MOJO)
    exe.chmod(0o755)
    return exe


def _clear_tool_caches() -> None:
    for cached in (toolchain.find_mojo, toolchain._version_text):
        cached.cache_clear()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake compiler as $MOJO, build/ in a temporary folder; yields the compile log (one line a compile)."""
    compiles = tmp_path / "compiles.log"
    monkeypatch.setenv("MOJO", str(_fake_mojo(tmp_path / "tool")))
    monkeypatch.setenv("FAKE_MOJO_LOG", str(compiles))
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    _clear_tool_caches()
    yield compiles
    _clear_tool_caches()


def _build(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["build", "--targets", TARGET, *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.is_file() else 0


@pytest.mark.parametrize("damage", ["truncate", "same size"])
def test_a_changed_output_is_rebuilt_not_trusted(fake, capsys, damage):
    assert _build(capsys)[0] == 0 and _compiles(fake) == 1
    rc, out, _err = _build(capsys)
    assert rc == 0 and "nothing to compile" in out and _compiles(fake) == 1
    exe = paths.build_dir() / "sm_90" / TARGET
    good = exe.read_bytes()
    if damage == "truncate":  # head -c 10 good > build/sm_90/dispatch_table
        exe.write_bytes(good[:10])
    else:  # another file of the same size
        exe.write_bytes(bytes([good[0] ^ 1]) + good[1:])
    rc, out, err = _build(capsys)
    assert rc == 0 and _compiles(fake) == 2, err
    assert f"output {TARGET} changed since it was built" in err and ": rebuilding" in err, err
    assert out.startswith("build: 1 of 1 target(s) for sm_90 compiled"), out
    assert exe.read_bytes() == good


def test_a_changed_log_is_rebuilt_too(fake, capsys):
    """The log is trusted as well: a cached CUDA build's ptxas report is read from it."""
    assert _build(capsys)[0] == 0
    (paths.build_dir() / "sm_90" / f"{TARGET}.log").write_text("edited\n")
    rc, _out, err = _build(capsys)
    assert rc == 0 and _compiles(fake) == 2 and f"output {TARGET}.log changed since it was built" in err, err


def test_the_compiler_writes_a_temporary_name_renamed_only_after_success(fake, capsys, monkeypatch):
    assert _build(capsys)[0] == 0
    folder = paths.build_dir() / "sm_90"
    _pid, written = fake.read_text().split()
    assert Path(written).parent == folder and Path(written).name != TARGET  # beside the output, another name
    good = (folder / TARGET).read_bytes()
    stamp = (folder / f"{TARGET}.stamp.json").read_text()
    monkeypatch.setenv("FAKE_MOJO_FAIL", "1")
    rc, _out, err = _build(capsys, "--force")
    assert rc == 4 and err.strip().splitlines()[-1].startswith(f"build failed: {TARGET} for sm_90: error: fake"), err
    assert (folder / TARGET).read_bytes() == good and (folder / f"{TARGET}.stamp.json").read_text() == stamp
    assert sorted(p.name for p in folder.iterdir()) == [TARGET, f"{TARGET}.log", f"{TARGET}.stamp.json"]
    monkeypatch.delenv("FAKE_MOJO_FAIL")
    rc, _out, err = _build(capsys)  # the failed compile's log is not the stamped one: rebuilt, not trusted
    assert rc == 0 and f"output {TARGET}.log changed since it was built" in err, err


def test_a_stamp_without_output_hashes_is_rebuilt(fake, capsys):
    """Stamps written before the cache checked its outputs hold none: such a build is compiled once again."""
    assert _build(capsys)[0] == 0
    stamp = paths.build_dir() / "sm_90" / f"{TARGET}.stamp.json"
    old = build.TargetBuild.model_validate_json(stamp.read_text()).model_copy(update={"outputs": []})
    stamp.write_text(old.model_dump_json())
    rc, _out, err = _build(capsys)
    assert rc == 0 and _compiles(fake) == 2 and "its stamp predates output hashes: rebuilding" in err, err


def test_the_cache_key_holds_no_compiler_path(fake, capsys, tmp_path, monkeypatch):
    assert _build(capsys)[0] == 0
    monkeypatch.setenv("MOJO", str(_fake_mojo(tmp_path / "elsewhere")))  # the same toolchain, installed elsewhere
    _clear_tool_caches()
    rc, out, _err = _build(capsys)
    assert rc == 0 and "nothing to compile" in out and _compiles(fake) == 1


@pytest.mark.parametrize("cmd, says", [("build", "interrupted: the build stopped; nothing half-built was cached"),
                                       ("bench", "interrupted: nothing was archived")])
def test_ctrl_c_says_what_it_stopped(cmd, says, capsys, monkeypatch, tmp_path):
    def stop(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setattr(build, "build_all", stop)
    if cmd == "bench":  # past its checks, in its run
        monkeypatch.setattr(cli, "cmd_bench", stop)
    assert cli.main([cmd]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [says]


def test_sigterm_takes_ctrl_cs_path_and_exits_143(capsys, monkeypatch):
    def terminated(*_a, **_k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

    def unhandled(*_a):
        raise AssertionError("cli.main left SIGTERM to the handler it found")

    monkeypatch.setattr(build, "build_all", terminated)
    before = signal.signal(signal.SIGTERM, unhandled)  # pytest's process must outlive a failure
    try:
        assert cli.main(["build"]) == 143
        assert signal.getsignal(signal.SIGTERM) == unhandled  # put back
    finally:
        signal.signal(signal.SIGTERM, before)
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["interrupted: the build stopped; nothing half-built was cached"]


# ---------------------------------------------------------------- a checkout of its own, `python -m driver`


def _checkout(where: Path) -> Path:
    """What `python -m driver build --targets dispatch_table` reads, copied; the fake Mojo in its toolchain venv."""
    for name in ("driver", "kernels_mojo"):
        shutil.copytree(ROOT / name, where / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "thresholds.toml"):
        shutil.copy2(ROOT / name, where / name)
    _fake_mojo(where / ".toolchain" / "venv" / "bin")
    return where


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MOJO", "DRIVER_TOOLCHAIN_VENV", "PYTHONPATH", "BENCH_RESULTS_DIR")
           and not k.startswith("FAKE_")}
    return {**env, **extra}


def _driver(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "driver", "build", "--targets", TARGET, *args], cwd=repo,
                          env=_env(**env), capture_output=True, text=True, timeout=120)


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if not p.is_dir()}


def _alive(pid: int) -> list[psutil.Process]:
    """The processes of process group `pid` that still run (a zombie writes nothing)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def test_a_copied_checkout_keeps_its_cache(tmp_path):
    """The cache key holds the toolchain's version and pins, not its path inside the checkout."""
    first = _checkout(tmp_path / "a")
    proc = _driver(first)
    assert proc.returncode == 0 and "1 of 1 target(s) for sm_90 compiled" in proc.stdout, proc.stderr
    copy = tmp_path / "b"
    shutil.copytree(first, copy, symlinks=True)
    proc = _driver(copy)
    assert proc.returncode == 0 and proc.stdout.startswith("build: nothing to compile"), proc.stdout + proc.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_build_kills_its_compilers_group_and_caches_nothing(tmp_path, sig, code):
    repo = _checkout(tmp_path / "repo")
    assert _driver(repo).returncode == 0
    folder = repo / "build"
    before = _tree(folder)
    compiles, late = tmp_path / "compiles.log", tmp_path / "late"
    proc = subprocess.Popen([sys.executable, "-m", "driver", "build", "--force", "--targets", TARGET], cwd=repo,
                            env=_env(FAKE_MOJO_LOG=str(compiles), FAKE_MOJO_SLEEP="30", FAKE_MOJO_LATE=str(late),
                                     FAKE_MOJO_LATE_S=str(LATE_S)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not compiles.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    pid, tmp_out = compiles.read_text().split()
    time.sleep(0.3)  # the leftover process has started
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < LATE_S, "the driver took too long to stop: the test proves nothing"
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == (f"interrupted: build of {TARGET} for sm_90 stopped and its compiler "
                                            "killed; nothing of it was written (build/ keeps what the last finished build made; "
                                            "the next build compiles what that is not)"), err
    assert _alive(int(pid)) == []  # the compiler's process group, the orphan too
    time.sleep(max(0.0, started + LATE_S + 0.5 - time.monotonic()))  # past the orphan's late write
    assert not late.exists() and not Path(tmp_out).exists()
    assert _tree(folder) == before  # nothing written after the driver exited, nothing left half-built
    again = _driver(repo)
    assert again.returncode == 0 and again.stdout.startswith("build: nothing to compile"), again.stderr


def _read_only(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m driver build` with the checkout mounted read-only (a private mount namespace)."""
    cmd = (f"mount --bind -o ro {repo} {repo} && cd {repo} && exec {sys.executable} -m driver build "
           f"--targets {TARGET} {' '.join(args)}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", cmd], env=_env(), capture_output=True, text=True, timeout=120)


def test_a_read_only_tree_builds_when_everything_is_cached(tmp_path):
    repo = _checkout(tmp_path / "repo")
    assert _driver(repo).returncode == 0
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount --bind -o ro {repo} {repo} && touch {repo}/x"],
                           capture_output=True, text=True)
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()}")
    proc = _read_only(repo)
    assert proc.returncode == 0 and proc.stdout.startswith("build: nothing to compile"), proc.stderr
    (repo / "build" / "sm_90" / TARGET).unlink()
    proc = _read_only(repo)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 10, proc.stderr
    assert lines[-1].startswith(f"I/O error: cannot write {repo / 'build' / 'sm_90'}"), lines
    assert "Read-only file system" in lines[-1], lines
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- targets compiled side by side

PAIR = ("upstream_bench", "dispatch_table")  # two Mojo targets with no PTX expectations, in the table's order


def _timed_mojo(where: Path) -> Path:
    """A fake Mojo that logs `start NAME` and `end NAME` around its sleep: 1.5 s for PAIR[0], 0.3 s for the rest."""
    exe = _fake_mojo(where)
    exe.write_text(r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Mojo 1.2.0 (fake)"; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
name=$(basename "$out" | sed 's/^[.]//; s/-building-.*//')
echo "start $name" >> "$FAKE_MOJO_LOG"
case "$name" in """ + PAIR[0] + r""") sleep 1.5;; *) sleep 0.3;; esac
echo "fake executable" > "$out"
echo "end $name" >> "$FAKE_MOJO_LOG"
""")
    return exe


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU core: the build compiles one target at a time")
def test_targets_compile_side_by_side_and_print_in_the_tables_order(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOJO", str(_timed_mojo(tmp_path / "timed")))
    _clear_tool_caches()
    rc = cli.main(["build", "--targets", ",".join(PAIR)])
    err = capsys.readouterr().err
    assert rc == 0, err
    events = fake.read_text().split("\n")[:-1]
    assert set(events[:2]) == {f"start {PAIR[0]}", f"start {PAIR[1]}"}, events  # both began before either ended
    assert events.index(f"end {PAIR[1]}") < events.index(f"end {PAIR[0]}"), events  # and ended first
    said = [ln.split(":")[0].split()[-1] + ":" + ln.split(":")[1].split()[0] for ln in err.splitlines()
            if ln.startswith("[build]")]
    assert said == [f"{PAIR[0]}:compiling", f"{PAIR[0]}:compiled", f"{PAIR[1]}:compiling", f"{PAIR[1]}:compiled"], err


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU core: the build compiles one target at a time")
def test_an_interrupted_build_kills_every_running_compiler(tmp_path):
    repo = _checkout(tmp_path / "repo")
    compiles = tmp_path / "compiles.log"
    proc = subprocess.Popen([sys.executable, "-m", "driver", "build", "--targets", ",".join(PAIR)], cwd=repo,
                            env=_env(FAKE_MOJO_LOG=str(compiles), FAKE_MOJO_SLEEP="30"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (not compiles.is_file() or len(compiles.read_text().splitlines()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(ln.split()[0]) for ln in compiles.read_text().splitlines()]
    time.sleep(0.3)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20 and proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (f"interrupted: build of {PAIR[0]} for sm_90, {PAIR[1]} for sm_90 stopped "
                                            "and their compilers killed; nothing of them was written (build/ keeps "
                                            "what the last finished build made; the next build compiles what that "
                                            "is not)"), err
    assert all(_alive(pid) == [] for pid in pids)
    assert not (repo / "build" / "sm_90").exists() or not any((repo / "build" / "sm_90").glob("*.stamp.json"))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU core: the build compiles one target at a time")
def test_a_failing_target_stops_the_others_at_once(fake, capsys, tmp_path, monkeypatch):
    """PAIR[1] fails at once while PAIR[0] compiles for 30 s: the build ends with PAIR[1]'s failure, PAIR[0]'s
    compiler killed and nothing of it cached, without waiting for PAIR[0]'s turn."""
    exe = _fake_mojo(tmp_path / "failing")
    exe.write_text(r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Mojo 1.2.0 (fake)"; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
echo "$$ $out" >> "$FAKE_MOJO_LOG"
case "$out" in *""" + PAIR[1] + r"""*)
  # fail once the slow compile has started (its line is in the log), so that there is a compiler to stop
  i=0; while [ $i -lt 100 ] && ! grep -q '""" + PAIR[0] + r"""' "$FAKE_MOJO_LOG"; do sleep 0.1; i=$((i + 1)); done
  echo "error: fake failure" >&2; exit 1;;
esac
sleep 30
echo "fake executable" > "$out"
""")
    monkeypatch.setenv("MOJO", str(exe))
    _clear_tool_caches()
    started = time.monotonic()
    rc = cli.main(["build", "--targets", ",".join(PAIR)])
    err = capsys.readouterr().err
    assert time.monotonic() - started < 20, "the build waited for the slow compile"
    assert rc == 4 and err.strip().splitlines()[-1].startswith(f"build failed: {PAIR[1]} for sm_90: error: fake"), err
    slow = next(int(ln.split()[0]) for ln in fake.read_text().splitlines() if PAIR[0] in ln)
    assert not psutil.pid_exists(slow) or psutil.Process(slow).status() == psutil.STATUS_ZOMBIE
    assert sorted(p.name for p in (paths.build_dir() / "sm_90").iterdir()) == [f"{PAIR[1]}.log"]
