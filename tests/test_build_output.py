"""What `python -m driver build` prints, on a faked build (no nvcc, no Mojo): one line when the
cache holds everything, the ptxas reports of what it compiled, all of the asked archs' with -v."""

from __future__ import annotations

import pytest

from driver import build, build_gates, cli, paths, targets, toolchain
from driver.records import PtxasKernel, PtxKernel, TargetBuild, Toolchain


def _record(name: str, arch: str) -> TargetBuild:
    kernel = PtxasKernel(name=f"{name}_kernel", arch=arch, registers=40, smem_bytes=1024, stack_frame_bytes=0,
                         spill_store_bytes=0, spill_load_bytes=0)
    return TargetBuild(target=name, lang="cuda", arch=arch, source_hash="h", command=[], defines={}, flags=[],
                       output=f"build/{arch}/{name}", build_seconds=1.0, ptxas=[kernel],
                       ptx_kernels=[PtxKernel(name=f"{name}_kernel", has_cp_async=False, has_mma=True)])


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """build_target answers from a set of (target, arch) the 'cache' holds; everything else 'compiles'."""
    cached: set[tuple[str, str]] = set()
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    monkeypatch.setattr(toolchain, "describe", lambda **_k: Toolchain(python="test"))
    monkeypatch.setattr(build_gates, "static_violations", lambda *_a: [])

    def build_target(t, arch, _tc, *, force=False):
        did = force or (t.name, arch) not in cached
        cached.add((t.name, arch))
        return _record(t.name, arch), did

    monkeypatch.setattr(build, "build_target", build_target)
    return cached


def _build(capsys, *args: str) -> list[str]:
    assert cli.main(["build", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_noop_build_prints_one_line_and_verbose_prints_only_the_asked_arch(fake, capsys):
    _build(capsys, "--arch", "sm_89", "--targets", "sdpa")  # an earlier call's records stay in build_meta.json
    first = _build(capsys)  # compiles every sm_90 target
    n = len(targets.select("all"))
    assert first[0].startswith(f"build: {n} of {n} target(s) for sm_90 compiled, 0 cached")
    assert len(first) > 1 and all(" sm_90 " in ln for ln in first[1:])

    again = _build(capsys)
    assert len(again) == 1, again
    assert again[0].startswith(f"build: nothing to compile, all {n} target(s) for sm_90 cached")
    assert str(paths.build_dir() / "build_meta.json") in again[0] and "-v" in again[0]

    verbose = _build(capsys, "-v")
    assert verbose[0].startswith(f"build: nothing to compile, all {n} target(s) for sm_90 cached")
    reports = verbose[1:]
    assert reports and all(ln.startswith("  sm_90 ") for ln in reports), reports  # no sm_89 line from the earlier call
    assert {ln.split()[1].rstrip(":") for ln in reports} == {t.name for t in targets.select("all")}
    assert build.load_meta().archs == ["sm_89", "sm_90"]


def test_build_prints_the_reports_of_what_it_compiled_only(fake, capsys):
    _build(capsys)
    fake.discard(("sdpa_fp8_cpasync", "sm_90"))  # its sources changed
    out = _build(capsys)
    n = len(targets.select("all"))
    assert out[0].startswith(f"build: 1 of {n} target(s) for sm_90 compiled, {n - 1} cached")
    assert out[1:] == build.report_lines([_record("sdpa_fp8_cpasync", "sm_90")])
