"""Nothing destroyed (issue 49): an empty path variable, `bundle --out` over a folder it did not make, the
tracked limits table from a foreign or empty results folder, file modes after an atomic rewrite, and a full
disk or a read-only folder while archiving. Each is one line and its exit code, and the files that must
survive are byte-identical afterwards."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
from pathlib import Path

import pytest

from driver import archive, build, bundle, cli, limits, paths, report, toolchain
from driver.errors import ConfigError, IOFailed
from driver.host import host_info, utc_now
from driver.records import BuildMeta, Toolchain
from tests.conftest import ROOT, run_driver
from tests.conftest import one_line as _one_line
from tests.conftest import run_main as _main
from tests.test_archive import _meta, _run
from tests.test_pipeline import BENCH, host  # noqa: F401  (the fixture: runner doubles for a whole bench)

TRACKED = (ROOT / "README.md", ROOT / "docs" / "LIMITS.md")


def _snapshot(*where: Path) -> dict[str, tuple[int, str]]:
    """Every file under `where` (or the file itself): mode and content hash, by path."""
    out = {}
    for top in where:
        for p in sorted([top] if top.is_file() else top.rglob("*")):
            if p.is_file():
                out[str(p)] = (p.stat().st_mode & 0o7777, hashlib.sha256(p.read_bytes()).hexdigest())
    return out




@pytest.fixture
def tracked_table(tmp_path, monkeypatch) -> Path:
    """docs/LIMITS.md copied aside and made the table file, so that a failing test cannot rewrite the real one."""
    copy = tmp_path / "LIMITS.md"
    shutil.copy2(limits.TABLE_FILE, copy)
    monkeypatch.setattr(limits, "TABLE_FILE", copy)
    return copy


# ---------------------------------------------------------------- row 1: an empty path variable


def test_an_empty_results_dir_is_refused_not_the_current_folder():
    """`BENCH_RESULTS_DIR= python -m driver index` from the checkout overwrote README.md with the run index."""
    before = _snapshot(*TRACKED)
    proc = run_driver("index", env={"BENCH_RESULTS_DIR": ""}, timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("configuration error: BENCH_RESULTS_DIR is set but empty"), line
    assert _snapshot(*TRACKED) == before


@pytest.mark.parametrize("argv", [["index"], ["schema"], ["limits", "--write"], ["bench", "--no-build"],
                                  ["compare"], ["index", "--rerender"]])
@pytest.mark.parametrize("value", ["", "  "])
def test_every_command_refuses_an_empty_results_dir(argv, value, monkeypatch, capsys, tracked_table):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("BENCH_RESULTS_DIR", value)
    monkeypatch.setattr("driver.bench.run", lambda *a: pytest.fail("bench ran"))
    before = _snapshot(*TRACKED, tracked_table)
    code, out, err = _main(capsys, *argv)
    assert code == ConfigError.exit_code and out == ""
    assert "BENCH_RESULTS_DIR is set but empty" in _one_line(err)
    assert _snapshot(*TRACKED, tracked_table) == before
    assert not (ROOT / "schema").exists()


@pytest.mark.parametrize("where", [".", "docs", "driver/x", "kernels_cuda", ".."])
def test_a_results_dir_that_is_the_checkout_or_one_of_its_folders_is_refused(where, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(ROOT / where))
    before = _snapshot(*TRACKED)
    code, out, err = _main(capsys, "index")
    assert code == ConfigError.exit_code and out == ""
    line = _one_line(err)
    assert "BENCH_RESULTS_DIR=" in line and ("checkout" in line), line
    assert _snapshot(*TRACKED) == before and not (ROOT / "docs" / "README.md").exists()


def test_an_empty_toolchain_venv_is_refused(monkeypatch):
    monkeypatch.setenv("DRIVER_TOOLCHAIN_VENV", "")
    monkeypatch.delenv("MOJO", raising=False)
    toolchain.find_mojo.cache_clear()
    try:
        with pytest.raises(ConfigError, match="DRIVER_TOOLCHAIN_VENV is set but empty"):
            toolchain.find_mojo()
        with pytest.raises(ConfigError, match="DRIVER_TOOLCHAIN_VENV"):
            paths.mojo_runtime_lib_dir()
    finally:
        toolchain.find_mojo.cache_clear()


def test_an_empty_cluster_dir_is_refused(monkeypatch, capsys, results_dir):
    from driver.cluster import submit

    monkeypatch.setenv("DRIVER_CLUSTER_DIR", "")
    monkeypatch.setattr(submit, "plan", lambda *a: pytest.fail("reached the Slurm plan"))
    code, out, err = _main(capsys, "submit", "--partitions", "h100", "--no-watch")
    assert code == ConfigError.exit_code and out == ""
    assert "DRIVER_CLUSTER_DIR is set but empty" in _one_line(err)


# ---------------------------------------------------------------- row 2: bundle --out


@pytest.fixture
def packing(tmp_path, monkeypatch) -> dict[str, int]:
    """`bundle` on a CPU box: the build, the Mojo runtime libraries and pip are faked, everything else (the
    checks, the copies, the swap) is the real code. Counts the builds reached."""
    reached = {"build": 0, "allowed": True}
    meta = BuildMeta(created_utc=utc_now(), git_sha="0" * 40, git_dirty=False, toolchain=Toolchain(python="t"),
                     host=host_info(), archs=["sm_90"], targets=[])

    def fake_build(*_a, **_k):
        reached["build"] += 1
        assert reached["allowed"], "refused only after the build"  # and never on to replacing the folder
        return meta, []

    libs = tmp_path / "mojo_lib"
    libs.mkdir()
    for name in bundle.MOJO_RUNTIME_LIBS:
        (libs / name).write_bytes(b"\x7fELF")
    monkeypatch.setattr(build, "build_all", fake_build)
    monkeypatch.setattr(paths, "mojo_runtime_lib_dir", lambda: libs)
    monkeypatch.setattr(bundle, "_pip_target", lambda site, py, pins, deps=True: site.mkdir(parents=True,
                                                                                              exist_ok=True))
    return reached


def _bundle(capsys, out: Path) -> tuple[int, str, str]:
    return _main(capsys, "bundle", "--out", str(out), "--python", "3.11")


def test_bundle_makes_and_remakes_its_own_folder(tmp_path, packing, capsys, results_dir):
    out = tmp_path / "b"
    assert _bundle(capsys, out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(bundle.MADE)
    (out / ".pytest_cache").mkdir()  # what ./run-tests leaves
    (out / "bench_results").mkdir()  # an empty results folder of the bundle's own is not a result
    shutil.rmtree(out / "bench_results")
    assert _bundle(capsys, out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(bundle.MADE)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _bundle(capsys, empty)[0] == 0 and (empty / "bundle.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def _precious(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me\n")
    return folder


def _earlier_bundle_with_results(tmp_path: Path) -> Path:
    folder = tmp_path / "old_bundle"
    folder.mkdir()
    (folder / "bundle.json").write_text(json.dumps({"$comment": bundle.GENERATED}))
    (folder / "bench_results" / "20261122T000000Z-0-1xH100").mkdir(parents=True)
    (folder / "bench_results" / "20261122T000000Z-0-1xH100" / "results.json.gz").write_bytes(b"run")
    return folder


def _foreign_marker(tmp_path: Path) -> Path:
    folder = _precious(tmp_path)
    (folder / "bundle.json").write_text('{"not": "ours"}')
    return folder


def _a_file(tmp_path: Path) -> Path:
    f = tmp_path / "notes.txt"
    f.write_text("keep me\n")
    return f


@pytest.mark.parametrize("make, words", [
    (lambda tmp: ROOT / "bench_results", "the checkout's own bench_results/"),
    (lambda tmp: ROOT, "the checkout itself"),
    (lambda tmp: ROOT.parent, "a folder holding the checkout"),
    (lambda tmp: ROOT / "docs", "the checkout's own docs/"),
    (lambda tmp: ROOT / "kernels_cuda", "the checkout's own kernels_cuda/"),
    (lambda tmp: ROOT / "driver" / "new", "inside the checkout's own driver/"),
    (lambda tmp: ROOT / "tests", "the checkout's own tests/"),
    (lambda tmp: tmp / "bench_results", "the results folder"),
    (_precious, "holds precious.txt and is no bundle"),
    (_foreign_marker, "is no bundle"),
    (_earlier_bundle_with_results, "also holds bench_results"),
    (_a_file, "is a file"),
])
def test_bundle_refuses_to_replace_what_it_did_not_make(tmp_path, packing, capsys, results_dir, make, words):
    results_dir.mkdir()
    (results_dir / "README.md").write_text("index\n")
    out = make(tmp_path)
    # A folder of the checkout is replaced only after the build: not reaching the build is its proof.
    guarded = [out, results_dir] if out.is_relative_to(tmp_path) else [*TRACKED]
    before = _snapshot(*guarded)
    packing["allowed"] = False
    code, stdout, err = _bundle(capsys, out)
    assert code == ConfigError.exit_code and stdout == ""
    line = _one_line(err)
    assert line.startswith(f"configuration error: --out {out.resolve()}") and words in line, line
    assert packing["build"] == 0, "refused only after the build"
    assert _snapshot(*guarded) == before
    assert not out.with_name(f".{out.name}.tmp").exists()


@pytest.mark.parametrize("fault", ["pip", "disk full"])
def test_a_failing_bundle_leaves_the_earlier_one_and_no_half_built_folder(tmp_path, packing, capsys, results_dir,
                                                                          monkeypatch, fault):
    out = tmp_path / "b"
    assert _bundle(capsys, out)[0] == 0
    before = _snapshot(out)
    if fault == "pip":
        monkeypatch.setattr(bundle, "_pip_target", lambda *a, **k: "network unreachable")
        expected = 3
    else:
        real = shutil.copy2

        def full(src, dst, **kw):
            if Path(dst).name == "thresholds.toml":
                Path(dst).write_text("half")
                raise OSError(errno.ENOSPC, "No space left on device", str(dst))
            return real(src, dst, **kw)

        monkeypatch.setattr(shutil, "copy2", full)
        expected = IOFailed.exit_code
    code, stdout, err = _bundle(capsys, out)
    assert code == expected and stdout == ""
    line = _one_line(err)
    if fault == "disk full":
        assert line.startswith("I/O error: cannot write the bundle") and "No space left on device" in line, line
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ---------------------------------------------------------------- row 4: the tracked limits table


@pytest.mark.parametrize("folder", ["missing", "empty", "with a run"])
def test_index_of_a_foreign_results_folder_leaves_the_tracked_table_alone(folder, results_dir, tracked_table,
                                                                         capsys):
    if folder == "empty":
        results_dir.mkdir()
    elif folder == "with a run":
        report.publish(_run(), _meta(), "")
    before = _snapshot(*TRACKED, tracked_table)
    code, out, err = _main(capsys, "index")
    assert code == 0 and err == ""
    assert f"limits: {tracked_table} left alone: {results_dir} is not this checkout's bench_results/" in out
    assert (results_dir / "README.md").is_file()
    assert _snapshot(*TRACKED, tracked_table) == before

    code, out, err = _main(capsys, "limits", "--write")
    assert code == ConfigError.exit_code and out == ""
    assert "left alone" in _one_line(err) and "BENCH_RESULTS_DIR" in err
    assert _snapshot(*TRACKED, tracked_table) == before


def test_an_empty_own_bench_results_leaves_the_tracked_table_alone(tmp_path, monkeypatch, tracked_table, capsys):
    own = tmp_path / "bench_results"
    own.mkdir()
    monkeypatch.delenv("BENCH_RESULTS_DIR", raising=False)
    monkeypatch.setattr(paths, "OWN_RESULTS", own)
    before = _snapshot(tracked_table)
    code, out, _err = _main(capsys, "index")
    assert code == 0 and f"left alone: {own} holds no archived runs" in out
    code, _out, err = _main(capsys, "limits", "--write")
    assert code == ConfigError.exit_code and "holds no archived runs" in _one_line(err)
    assert _snapshot(tracked_table) == before


def test_no_archived_runs_is_never_every_gate_passed(results_dir, capsys):
    table = limits.markdown(limits.newest([], 0.02))
    assert "Every gate passed" not in table and limits.NO_RUNS in table
    code, out, _err = _main(capsys, "limits")
    assert code == 0 and "Every gate passed" not in out and limits.NO_RUNS in out


# ---------------------------------------------------------------- file modes after an atomic rewrite


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_atomic_rewrites_keep_the_mode_and_new_files_get_the_umasks(results_dir, tmp_path, capsys, umask_022):
    assert _main(capsys, "schema")[0] == 0 and _main(capsys, "index")[0] == 0
    written = [*(results_dir / "schema").iterdir(), results_dir / "README.md"]
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o644)}
    for p in written:
        p.chmod(0o664)
    assert _main(capsys, "schema")[0] == 0 and _main(capsys, "index")[0] == 0
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o664)}

    page = tmp_path / "LIMITS.md"
    page.write_text(f"intro\n{limits.BEGIN}\nold\n{limits.END}\n")
    page.chmod(0o664)
    assert limits.write_table("new\n", page) and "new" in page.read_text()
    assert page.stat().st_mode & 0o777 == 0o664 and sorted(p.name for p in tmp_path.iterdir()) == [
        "LIMITS.md", "bench_results"]


# ---------------------------------------------------------------- row 5: a full disk or a read-only folder


def _disk_full_after(monkeypatch, under: Path, nth: int) -> None:
    """The `nth` Path.write_bytes under `under` (counting from 1) writes half its bytes, then finds the disk full."""
    real = pathlib.Path.write_bytes
    count = {"n": 0}

    def write_bytes(self, data):
        count["n"] += self.is_relative_to(under)
        if count["n"] == nth and self.is_relative_to(under):
            real(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file named
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)


def test_a_full_disk_while_archiving_a_bench_is_an_io_error_and_leaves_nothing(host, results_dir, capsys,  # noqa: F811
                                                                               monkeypatch):
    earlier = report.publish(_run(), _meta(), "")
    before = _snapshot(results_dir)
    _disk_full_after(monkeypatch, results_dir, 2)  # results.json.gz whole, then COMPARE.md half
    code = cli.main([*BENCH, "--suite", "allreduce"])
    err = capsys.readouterr().err
    assert code == IOFailed.exit_code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("I/O error: cannot write the run ") and f"into {results_dir}: " in last, last
    assert "No space left on device: " + str(results_dir / ".tmp-") in last and "free space" in last, last
    assert "Traceback" not in err
    assert _snapshot(results_dir) == before and archive.archived_runs(results_dir) == [earlier]
    assert sorted(p.name for p in results_dir.iterdir()) == sorted([earlier.name, "README.md"])


def test_a_full_disk_while_writing_the_index_keeps_the_old_index(results_dir, capsys, monkeypatch):
    report.publish(_run(), _meta(), "")
    before = _snapshot(results_dir)
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            self.fh.write(text[: len(text) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real(fd, *a, **k)))
    code, out, err = _main(capsys, "index")
    assert code == IOFailed.exit_code and out == ""
    line = _one_line(err)
    assert line.startswith(f"I/O error: cannot write the index of {results_dir}") and "No space left" in line, line
    assert f"No space left on device: {results_dir}/.README.md." in line, line
    assert _snapshot(results_dir) == before

    index = (results_dir / "README.md").read_bytes()
    with pytest.raises(IOFailed, match=r"the run itself is archived in .*python -m driver index"):
        report.publish(_run(2.0, sha="b" * 40), _meta(), "")
    assert len(archive.archived_runs(results_dir)) == 2 and (results_dir / "README.md").read_bytes() == index
    assert not [p for p in results_dir.iterdir() if p.name.startswith(".")]


def test_a_read_only_results_folder_is_an_io_error_before_any_work(results_dir, capsys, monkeypatch):
    results_dir.mkdir()
    real = os.statvfs

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly() if Path(p) == results_dir else real(p))
    for argv in (["index"], ["schema"], ["bench", "--no-build"]):
        code, out, err = _main(capsys, *argv)
        assert code == IOFailed.exit_code and out == ""
        line = _one_line(err)
        assert line.startswith("I/O error: cannot write the ") and f"{results_dir}" in line, line
        assert "a read-only file system" in line and "remount it read-write" in line, line
    assert list(results_dir.iterdir()) == []


def test_permission_is_still_configuration(results_dir):
    exc = archive.write_failed("x", PermissionError(errno.EACCES, "Permission denied", "/p"))
    assert isinstance(exc, ConfigError) and exc.exit_code == 2
    for code in (errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT):
        assert archive.write_failed("x", OSError(code, os.strerror(code), "/p")).exit_code == IOFailed.exit_code
