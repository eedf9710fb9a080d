"""Damaged run folders are named and skipped, never a traceback; run ids are claimed atomically.

Every reader goes through `archive.try_load_run`: `index` and `limits` name a run folder that does not read
(one line each on stderr) and skip it, the index lists it as unreadable and links every run by its folder's
name, and `compare` or `sweep --from` of such a run exits 2 naming it and the reason. Two runs archived at
once with the same run id get two folders, each with records that name it.
"""

from __future__ import annotations

import gzip
import multiprocessing
import threading
from pathlib import Path

import pytest

from driver import archive, cli, limits, report
from tests.test_archive import _meta, _run

# A run whose records do not read, by how: (what the records file holds, a part of the reason `index` prints).
DAMAGE = {
    "not a RunArchive": (gzip.compress(b'{"x": 1}'), "results.json.gz is not a run record: run_id: Field required"),
    "not JSON": (gzip.compress(b"hello\n"), "results.json.gz is not JSON"),
    "a truncated gzip stream": (None, "results.json.gz is not a whole gzip stream"),
    "not UTF-8": (gzip.compress(b"\xff\xfe{"), "results.json.gz is not UTF-8 text (byte 0: b'\\xff')"),
    "records naming another run": (None, "results.json.gz names run '../../etc', not the folder's own name"),
}


def _damage(folder: Path, how: str) -> str:
    data, reason = DAMAGE[how]
    path = folder / archive.RESULTS_FILE
    if how == "a truncated gzip stream":
        data = path.read_bytes()[:200]
    elif how == "records naming another run":
        run = archive.load_run(folder)
        data = gzip.compress(run.model_copy(update={"run_id": "../../etc"}).model_dump_json().encode())
    path.write_bytes(data)
    return reason


@pytest.fixture
def runs(results_dir, monkeypatch, tmp_path):
    """Two good runs on one device kind and a newer third one (damaged by the test); the known-limits table is
    written into a scratch copy, never into the checkout's docs."""
    table = tmp_path / "LIMITS.md"
    table.write_text(f"{limits.BEGIN}\n{limits.END}\n")
    monkeypatch.setattr(limits, "TABLE_FILE", table)
    good = [report.publish(_run(1.0, sha=c * 40), _meta(), "") for c in "ab"]
    bad = report.publish(_run(1.0, sha="c" * 40), _meta(), "")
    return good, bad


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize("how", DAMAGE)
def test_index_and_limits_name_a_damaged_run_and_skip_it(runs, capsys, how):
    good, bad = runs
    reason = _damage(bad, how)
    got = archive.try_load_run(bad)
    assert isinstance(got, archive.Unreadable) and reason in got.reason

    code, out, err = _main(capsys, "index", "--rerender")
    assert code == 0, err
    assert err.splitlines() == [f"skipped {bad}: {got.reason}"]
    assert "lists 3 run(s) (1 unreadable, skipped)" in out
    index = (bad.parent / "README.md").read_text()
    assert f"| {bad.name} | - | - | unreadable: " in index
    for folder in good:
        assert f"[{folder.name}]({folder.name}/COMPARE.md)" in index
    assert "(../" not in index and "[../" not in index  # never a link made from inside a record

    code, _out, err = _main(capsys, "limits")
    assert code == 0 and err.splitlines() == [f"skipped {bad}: {got.reason}"]


@pytest.mark.parametrize("how", DAMAGE)
def test_compare_of_a_damaged_run_is_one_line_and_exit_2(runs, capsys, how):
    good, bad = runs
    reason = _damage(bad, how)
    code, out, err = _main(capsys, "compare", str(good[0]), str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"configuration error: cannot read run {bad}: ") and reason in err
    assert len(err.splitlines()) == 1

    # The default pair skips it with a line and compares the two newest runs that read.
    code, out, err = _main(capsys, "compare")
    assert code == 0, err
    assert err.splitlines()[0] == f"skipped {bad}: {archive.try_load_run(bad).reason}"
    assert out.startswith(f"# {good[0].name} -> {good[1].name}")


def test_sweep_from_a_truncated_run_is_one_line(runs, capsys):
    _good, bad = runs
    _damage(bad, "a truncated gzip stream")
    code, _out, err = _main(capsys, "sweep", "--from", str(bad))
    assert code == 2 and err.startswith(f"configuration error: cannot read run {bad}: results.json.gz is not a whole")


def test_a_refused_read_says_it_could_not_read_which_file(runs, capsys, monkeypatch):
    """As root a mode of 000 does not stop a read, so the refusal is injected where the reader reads."""
    good, bad = runs
    real = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self.parent == bad:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    code, _out, err = _main(capsys, "index")
    assert code == 0
    assert err.splitlines() == [(f"skipped {bad}: cannot read results.json.gz: Permission denied: "
                                f"{bad / 'results.json.gz'}")]
    code, _out, err = _main(capsys, "compare", str(good[0]), str(bad))
    assert code == 10 and err.startswith(f"I/O error: cannot read run {bad}: cannot read results.json.gz")


def test_a_results_folder_that_cannot_be_listed_is_a_read_error(runs, capsys, monkeypatch):
    good, _bad = runs
    real = Path.iterdir

    def refuse(self: Path):
        if self == good[0].parent:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", refuse)
    for cmd in ("index", "limits", "compare"):
        code, _out, err = _main(capsys, cmd)
        assert code == 10, cmd
        assert err.startswith(f"I/O error: cannot read the results folder {good[0].parent}: Permission denied"), err


@pytest.mark.parametrize("content", [b'{"submission_id": 3}', b"\xff\xfe", b"not json"])
def test_collect_of_a_damaged_submission_is_one_line(tmp_path, capsys, content):
    (tmp_path / "submission.json").write_bytes(content)
    code, _out, err = _main(capsys, "collect", str(tmp_path))
    assert code == 2 and err.startswith(f"configuration error: {tmp_path / 'submission.json'} is not ")
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------- run ids: claimed, never shared


def _check_whole(root: Path, folders: list[Path]) -> None:
    assert len(set(folders)) == len(folders), folders
    for folder in folders:
        run = archive.try_load_run(folder)
        assert not isinstance(run, archive.Unreadable), run
        assert run.run_id == folder.name
        assert (folder / report.COMPARE_FILE).read_text().splitlines()[1] == f"# Run {folder.name}"
    assert sorted(archive.archived_runs(root)) == sorted(folders)
    assert not [p.name for p in root.iterdir() if p.name.startswith(".tmp-")]
    index = (root / report.INDEX_FILE).read_text()
    assert all(f"[{f.name}]({f.name}/COMPARE.md)" in index for f in folders)  # the last index lists every one


def test_a_taken_run_id_gets_the_next_suffix_and_the_records_say_so(results_dir):
    run = _run()
    (results_dir / f"{run.run_id}-2").mkdir(parents=True)  # claimed by a run still writing: not a run yet
    first = report.publish(run, _meta(), "")
    second = report.publish(run, _meta(), "")
    assert (first.name, second.name) == (run.run_id, f"{run.run_id}-3")
    _check_whole(results_dir, [first, second])


def _publish_at(barrier, run, queue) -> None:
    barrier.wait()
    try:
        queue.put(str(report.publish(run, _meta(), "")))
    except BaseException as exc:  # noqa: BLE001 (the parent reports whatever it was)
        queue.put(f"error: {exc!r}")


def test_runs_archived_at_once_with_one_run_id_get_a_folder_each(results_dir):
    """Processes that finish in the same second with the same commit and device: each one's archive whole,
    under its own name, and no `.tmp-*` left."""
    ctx = multiprocessing.get_context("fork")
    run = _run()
    for n in (2, 4, 4):
        barrier, queue = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_publish_at, args=(barrier, run, queue)) for _ in range(n)]
        for p in procs:
            p.start()
        got = [queue.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert not [g for g in got if g.startswith("error")], got
    _check_whole(results_dir, [Path(g) for g in archive.archived_runs(results_dir)])
    assert len(archive.archived_runs(results_dir)) == 10


def test_threads_archiving_at_once_get_a_folder_each(results_dir):
    run, n = _run(), 6
    barrier, folders, errors = threading.Barrier(n), [], []

    def one() -> None:
        barrier.wait()
        try:
            folders.append(report.publish(run, _meta(), ""))
        except BaseException as exc:  # noqa: BLE001 (the test reports whatever it was)
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _check_whole(results_dir, folders)
