"""More bad input: an unwritable results folder, gates no run can measure, empty or impossible flag
values, runs with nothing to compare. Each is one clear line and exit 2 before any work, and leaves
nothing half-written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from driver import cli, report, thresholds
from driver.errors import ConfigError
from driver.records import ClusterTask, Submission, TaskState
from tests.conftest import ROOT, run_driver
from tests.conftest import one_line as _one_line
from tests.conftest import run_main as _main

RUN = ROOT / "bench_results" / "20261122T131144Z-89d7f9d3-1xH100"  # a real archived run (SDPA, 1x H100)




# ---------------------------------------------------------------- 1. an unwritable bench_results/


def _blocked(tmp_path: Path) -> Path:
    """A file where the results folder's parent should be: nothing under it can be made (as root too)."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("keep me\n")
    return blocker


@pytest.mark.parametrize("cmd", ["index", "schema"])
@pytest.mark.parametrize("where", ["itself", "parent"])
def test_index_and_schema_refuse_a_results_folder_they_cannot_write(tmp_path, cmd, where):
    blocker = _blocked(tmp_path)
    root = blocker if where == "itself" else blocker / "bench_results"
    proc = run_driver(cmd, env={"BENCH_RESULTS_DIR": str(root)}, timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("configuration error: ") and str(root) in line and "BENCH_RESULTS_DIR" in line
    assert blocker.read_text() == "keep me\n" and sorted(p.name for p in tmp_path.iterdir()) == [blocker.name]


def test_schema_refuses_an_out_folder_it_cannot_write(tmp_path, capsys):
    out = _blocked(tmp_path) / "schema"
    code, stdout, err = _main(capsys, "schema", "--out", str(out))
    assert code == 2 and stdout == ""
    line = _one_line(err)
    assert str(out) in line and "--out" in line


def test_a_write_that_fails_half_way_is_one_line_and_leaves_no_temporary_file(results_dir, capsys, monkeypatch):
    """Permission lost (or the disk full) while the index is written: one line naming the file, exit 2,
    and neither a temporary file nor a half-written index left behind."""
    results_dir.mkdir()

    def denied(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(os, "replace", denied)
    code, _out, err = _main(capsys, "index")
    assert code == 2
    line = _one_line(err)
    assert str(results_dir / "README.md") in line and "Permission denied" in line
    assert list(results_dir.iterdir()) == []

    code, _out, err = _main(capsys, "schema")
    assert code == 2 and "Permission denied" in _one_line(err)
    assert [p.name for p in (results_dir / "schema").iterdir()] == []


def test_a_results_folder_without_write_permission_is_refused(results_dir, capsys, monkeypatch):
    """A 0o555 bench_results/ (simulated: as root, chmod stops nothing): index, schema and the run commands
    refuse it before any work; a bench would otherwise lose its run at the very end."""
    results_dir.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != results_dir and real_access(path, mode,
                                                                                                         **kw))
    for argv in (["index"], ["schema"], ["bench", "--no-build"], ["sweep", "--no-build"]):
        code, out, err = _main(capsys, *argv)
        assert code == 2 and out == ""
        line = _one_line(err)
        assert "no write permission" in line and str(results_dir) in line, line
    assert list(results_dir.iterdir()) == []


def test_known_limits_that_cannot_be_written_leave_no_temporary_copy(tmp_path, monkeypatch):
    from driver import limits

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{limits.BEGIN}\nold\n{limits.END}\n")

    def denied(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(os, "replace", denied)
    with pytest.raises(PermissionError):
        limits.write_table("| new |\n", readme)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"] and "old" in readme.read_text()


def _submission(folder: Path) -> Submission:
    for sub in ("logs", "results", "status"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    task = ClusterTask(index=0, suite="bench", partition="h100", gpu_type="h100", arch="sm_90", gpus=1,
                       driver_args=["bench"])
    sub = Submission(submission_id="20261123T000000Z-test", created_utc="2026-11-23T00:00:00Z",
                     command=["python", "-m", "driver", "submit"], git_sha="0" * 40, git_dirty=False,
                     folder=str(folder), job_id="1", time_limit_min=60, archs=["sm_90"], tasks=[task])
    (folder / "submission.json").write_text(sub.model_dump_json(indent=1))
    src = folder / "results" / "task-0" / RUN.name
    shutil.copytree(RUN, src)
    return sub


@pytest.fixture
def slurm_done(monkeypatch):
    """The array ended, task 0 completed with exit 0 (no Slurm needed)."""
    from driver.cluster import watch

    monkeypatch.setattr(watch, "watch", lambda sub, poll_s, out=None: {0: TaskState(index=0, state="COMPLETED",
                                                                                      exit_code=0)})


def _files(root: Path) -> list[tuple[Path, bytes]]:
    return sorted((p.relative_to(root), p.read_bytes()) for p in root.rglob("*") if p.is_file())


def _same_tree(a: Path, b: Path) -> bool:
    return _files(a) == _files(b)


def test_collect_refuses_a_results_folder_it_cannot_write_before_moving_anything(tmp_path, capsys, monkeypatch,
                                                                               slurm_done):
    sub = _submission(tmp_path / "shared")
    root = _blocked(tmp_path) / "bench_results"
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(root))
    code, _out, err = _main(capsys, "collect", sub.folder)
    assert code == 2
    line = _one_line(err)
    assert str(root) in line and "BENCH_RESULTS_DIR" in line
    assert _same_tree(Path(sub.folder) / "results" / "task-0" / RUN.name, RUN)  # the run stays where it was


def test_collect_failing_mid_copy_leaves_no_partial_run_folder(tmp_path, results_dir, capsys, monkeypatch,
                                                               slurm_done):
    from driver.cluster import collect

    sub = _submission(tmp_path / "shared")
    real_copytree, copied = shutil.copytree, []

    def copy_then_deny(src, dst, **kw):
        if copied:  # the first file lands, the rest are refused: half a folder in the temporary copy
            raise PermissionError(13, "Permission denied", str(dst))
        copied.append(shutil.copy2(src, dst, **kw))
        return copied[-1]

    monkeypatch.setattr(collect.shutil, "copytree",
                        lambda src, dst, **kw: real_copytree(src, dst, copy_function=copy_then_deny, **kw))
    code, _out, err = _main(capsys, "collect", sub.folder)
    assert code == 2 and copied
    line = _one_line(err)
    assert "Permission denied" in line and RUN.name in line and f"collect {sub.folder}" in line
    assert [p.name for p in results_dir.iterdir()] == []  # no .tmp-<id>, no run folder, no index
    assert _same_tree(Path(sub.folder) / "results" / "task-0" / RUN.name, RUN)


# ---------------------------------------------------------------- 2. gates no run can measure


SDPA_GATE = '[[sdpa.speedup]]\nimpl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshape = "{shape}"\nmin_ratio = 1.0\n'
ALLREDUCE_GATE = ('[[allreduce.speedup]]\npeer = "upstream"\ntiming = "cold"\nbytes = {nbytes}\ndtype = "{dtype}"\n'
                  'ngpus = {ngpus}\nmin_ratio = 1.0\n')


def _with_gate(tmp_path: Path, entry: str) -> Path:
    """The repo's thresholds with one more gate, placed before [noise] (arrays of tables may continue there)."""
    text = thresholds.paths.thresholds_file().read_text().replace("\n[noise]\n", f"\n{entry}\n[noise]\n")
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("entry, needle", [
    (SDPA_GATE.format(shape="missoin"), "malformed shape 'missoin'"),
    (SDPA_GATE.format(shape="1x8x512"), "malformed shape '1x8x512'"),
    (SDPA_GATE.format(shape="1x8x512x96"), "unsupported head dim 96"),
    (SDPA_GATE.format(shape="1X8X512X64"), "'1x8x512x64'"),
    (ALLREDUCE_GATE.format(nbytes=262146, dtype="float32", ngpus=2), "not a multiple of the 4-byte float32 element"),
    (ALLREDUCE_GATE.format(nbytes=7, dtype="bfloat16", ngpus=2), "not a multiple of the 2-byte bfloat16 element"),
    (ALLREDUCE_GATE.format(nbytes=0, dtype="float32", ngpus=2), "size 0 is no element"),
    (ALLREDUCE_GATE.format(nbytes=32 << 30, dtype="float32", ngpus=2), "above the 16G limit"),
    (ALLREDUCE_GATE.format(nbytes=262144, dtype="float32", ngpus=3), "3 GPUs"),
])
def test_a_gate_no_run_can_measure_is_refused_at_load(tmp_path, entry, needle):
    path = _with_gate(tmp_path, entry)
    with pytest.raises(ConfigError) as err:
        thresholds.load(path)
    table = entry.splitlines()[0]
    fields = entry.splitlines()[4 if "sdpa" in table else 3]  # shape = "..." / bytes = ...
    for text in (str(path), table, fields, needle):
        assert text in err.value.one_line()


def test_such_a_gate_stops_bench_before_anything_builds(tmp_path, results_dir):
    path = _with_gate(tmp_path, SDPA_GATE.format(shape="missoin"))
    proc = run_driver("bench", "--thresholds", str(path), "--no-build", timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    line = _one_line(proc.stderr)
    assert "[[sdpa.speedup]]" in line and 'shape = "missoin"' in line
    assert not results_dir.exists()


def test_gates_any_run_can_measure_still_load(tmp_path):
    """An explicit shape written as runs name it, a bfloat16 size of whole elements, 8 GPUs."""
    entry = SDPA_GATE.format(shape="1x8x512x64") + "\n" + ALLREDUCE_GATE.format(nbytes=6, dtype="bfloat16", ngpus=8)
    t = thresholds.load(_with_gate(tmp_path, entry))
    assert t.sdpa.speedup[-1].shape == "1x8x512x64" and t.allreduce.speedup[-1].bytes == 6


# ---------------------------------------------------------------- 3. empty and impossible flag values


@pytest.mark.parametrize("cmd", ["bench", "stress", "sweep"])
@pytest.mark.parametrize("args, needles", [
    (["--sizes", ""], ["empty --sizes"]),
    (["--sizes", "7"], ["size 7", "4-byte float32"]),
    (["--sizes", "256K,0"], ["size 0"]),
    (["--sizes", "6", "--dtype", "bfloat16,float32"], ["size 6", "4-byte float32"]),
    (["--ngpus", ""], ["empty --ngpus"]),
    (["--arch", ""], ["empty --arch"]),
    (["--thresholds", ""], ["empty --thresholds"]),
])
def test_run_commands_refuse_empty_and_impossible_values_before_any_build(cmd, args, needles, capsys, no_work):
    code, out, err = _main(capsys, cmd, *args)
    assert code == ConfigError.exit_code and out == ""
    line = _one_line(err)
    assert line.startswith("configuration error: ")
    for needle in needles:
        assert needle in line, line


def test_sizes_of_whole_elements_of_every_dtype_still_pass(capsys, monkeypatch):
    from driver import bench

    seen = []
    monkeypatch.setattr(bench, "run", lambda opts, argv: seen.append(opts))
    assert cli.main(["bench", "--sizes", "6,8K", "--dtype", "bfloat16,float16"]) == 0
    assert seen[0].sizes_bytes == (6, 8192) and seen[0].sizes_given


def test_the_size_check_runs_end_to_end(results_dir):
    """The real command line, not only main(): one line, exit 2, nothing written."""
    proc = run_driver("sweep", "--sizes", "7", "--no-build", timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr
    assert "size 7" in _one_line(proc.stderr)
    assert not results_dir.exists()


@pytest.mark.parametrize("args, needle", [
    (["build", "--targets", ""], "empty --targets"),
    (["build", "--targets", " "], "empty --targets"),
    (["build", "--thresholds", ""], "empty --thresholds"),
    (["submit", "--partitions", "h100", "--gpus", ""], "empty --gpus"),
    (["submit", "--partitions", "h100", "--timeout", ""], "empty --timeout"),
    (["schema", "--out", ""], "empty --out"),
])
def test_other_commands_refuse_empty_values(args, needle, capsys, no_work, results_dir):
    code, _out, err = _main(capsys, *args)
    assert code == ConfigError.exit_code
    assert needle in _one_line(err)
    assert not results_dir.exists()


# ---------------------------------------------------------------- 4. compare with nothing in common


def _published(sha: str, config_of=lambda c: c):
    from tests.test_archive import _meta, _run

    run = _run(1.0, sha=sha)
    run = run.model_copy(update={"records": [r.model_copy(update={"config": config_of(r.config)}) for r in run.records]})
    return report.publish(run, _meta(), "")


def test_compare_of_runs_without_a_config_in_common_is_one_line(results_dir, capsys):
    old = _published("a" * 40)
    new = _published("b" * 40, lambda c: c.replace("float32", "float16"))
    code, out, err = _main(capsys, "compare", str(old), str(new))
    assert code == ConfigError.exit_code and out == ""
    line = _one_line(err)
    assert old.name in line and new.name in line and "no timed config in common" in line


def test_compare_refuses_runs_whose_common_configs_were_never_timed(results_dir, capsys):
    """Same configs, but the older run timed none of them (checked only): nothing to compare either."""
    from tests.test_archive import _meta, _run

    run = _run(1.0, sha="d" * 40)
    untimed = report.publish(run.model_copy(update={"records": [r.model_copy(update={"round_p50_us": []})
                                                                for r in run.records]}), _meta(), "")
    code, out, err = _main(capsys, "compare", str(untimed), str(_published("e" * 40)))
    assert code == ConfigError.exit_code and out == ""
    assert "no timed config in common (the first has 0 timed, the second 12)" in _one_line(err)
