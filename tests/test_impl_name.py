"""A variant cannot be mistaken for another: the build tells each executable its name (`Target.impl`, passed as
the IMPL_NAME define), the executable prints it in every line's `impl`, and the suites refuse a line whose `impl`
is not the one they asked for (one line, exit 7), instead of filing its timings under another impl's name.

The refusals run through `python -m driver`'s entry point with runner doubles (tests/runner_doubles.py) in place
of the executables: a variant added as a new target whose executable prints another variant's name, and an
allreduce executable that prints the peer's name."""

from __future__ import annotations

from driver import archive, build, cli, device, peers, registry, targets
from driver.errors import WrongResults
from driver.records import Toolchain, ToolVersion
from driver.suites import sdpa
from tests.runner_doubles import H200X2, allreduce_exe, calls, fake_build, sdpa_exe, sdpa_exes

BENCH = ["bench", "--no-build", "--arch", "sm_90", "--iters", "5", "--warmup", "0", "--rounds", "1",
         "--shapes", "mission"]


def _host(tmp_path, monkeypatch):
    exe_dir = fake_build(tmp_path, monkeypatch)
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)  # no torch: no peer runs
    return exe_dir


def test_every_target_that_prints_lines_is_told_its_impl():
    """Each runner target's compile command carries -DIMPL_NAME=<its impl>, on every arch it builds for; the SDPA
    targets' names are the suite's variants, the allreduce ones ours and upstream's."""
    tc = Toolchain(python="test", nvcc=ToolVersion(name="nvcc", path="nvcc", version="13.0"),
                   mojo=ToolVersion(name="mojo", path="mojo", version="1.2"))
    by_name = {t.name: t for t in targets.all_targets()}
    assert {by_name[exe].impl: exe for exe in sdpa.VARIANTS.values()} == dict(sdpa.VARIANTS)
    assert (by_name["allreduce_bench"].impl, by_name["upstream_bench"].impl) == ("ours", "upstream")
    for t in by_name.values():
        for arch in ("sm_89", "sm_90"):
            cmd = build._command(t, arch, tc, "out", "keep")
            named = [a for a in cmd if a.startswith(f"-D{targets.IMPL_NAME_DEFINE}=")]
            assert named == ([f"-D{targets.IMPL_NAME_DEFINE}={t.impl}"] if t.impl else []), (t.name, arch, cmd)
    assert by_name["dispatch_table"].impl is None  # host only: it prints a table, no result line


def test_a_new_variant_whose_executable_prints_another_impl_is_refused_not_merged(tmp_path, monkeypatch,
                                                                                   results_dir, capsys):
    """A variant added as a new target (`cpasync_x`) whose executable still says "cpasync" (a runner that prints
    a fixed name): the run stops with one line naming both names and exit 7, and nothing is archived, instead of
    its timings being counted as cpasync's."""
    exe_dir = _host(tmp_path, monkeypatch)
    log = sdpa_exes(exe_dir, p50={"baseline": 10.0, "cpasync": 8.0})
    monkeypatch.setitem(registry.SDPA.variants, "cpasync_x",
                        registry.Variant("sdpa_fp8_cpasync_x", {"USE_CP_ASYNC": "1"}))
    sdpa_exe(exe_dir / "sdpa_fp8_cpasync_x", impl="cpasync", p50=4.0, log=log)
    code = cli.main([*BENCH, "--suite", "sdpa"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == WrongResults.exit_code, err
    assert err[-1].startswith("wrong results: sdpa mission normal seed ") and \
        "cpasync_x fp16 (check): asked for impl cpasync_x, the line says cpasync (" in err[-1], err[-1]
    assert not any(ln.startswith("Traceback") for ln in err)
    assert any(c[-2:] == ["--precision", "fp16"] for c in calls(log))  # it did run: refused on its line
    assert archive.archived_runs(results_dir) == []


def test_an_executable_that_prints_another_impl_in_the_allreduce_suite_is_refused(tmp_path, monkeypatch,
                                                                                  results_dir, capsys):
    """allreduce_bench printing upstream's name would put ours' timings under upstream's: refused, exit 7."""
    exe_dir = _host(tmp_path, monkeypatch)
    allreduce_exe(exe_dir, "allreduce_bench", impl="upstream", p50=5.0)
    allreduce_exe(exe_dir, "upstream_bench", impl="upstream", p50=8.0)
    code = cli.main([*BENCH, "--suite", "allreduce", "--sizes", "256K"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == WrongResults.exit_code, err
    assert err[-1] == ("wrong results: allreduce cold: asked for impl ours, the line says upstream (give the target "
                       "its own impl in driver/targets.py and rebuild (python -m driver build))"), err[-1]
    assert archive.archived_runs(results_dir) == []
