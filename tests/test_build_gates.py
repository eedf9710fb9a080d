"""The build's static gates close their holes, on a fake CUDA toolchain (shell scripts for nvcc, ptxas and
cuobjdump as $CUDA_HOME/bin) driven through the real configure and build (cli.main, thresholds.load,
build.build_all, launch.run_process, inspect_ptx, build_gates):

- a SASS instruction the build table requires or forbids that the inspector does not look for is a configuration
  error (exit 2) naming the target and the name, before anything compiles;
- a cached build whose SASS was read for another instruction list is read again, not judged on the old reading;
- ptxas limits set for one build target hold for that target alone, and a target that is no CUDA target of the
  build table is a configuration error (exit 2).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from driver import build, build_gates, cli, inspect_ptx, paths, targets, thresholds, toolchain

# `nvcc --version`; `nvcc ... -keep-dir DIR ... -o OUT`: logs OUT in $FAKE_NVCC_LOG, writes a PTX file into DIR (one
# `sdpa_fake_k` entry with an mma, and cp.async where -DUSE_CP_ASYNC=1), prints ptxas -v lines ($FAKE_REGS
# registers, default 40) and writes OUT.
FAKE_NVCC = r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
out=""; keep=""; prev=""; cp=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"; [ "$prev" = "-keep-dir" ] && keep="$a"
  [ "$a" = "-DUSE_CP_ASYNC=1" ] && cp="cp.async.cg.shared.global [%r1], [%rd1], 16;"
  prev="$a"
done
[ -n "$FAKE_NVCC_LOG" ] && echo "$out" >> "$FAKE_NVCC_LOG"
echo ".version 8.8" > "$keep/runner.ptx"
echo ".visible .entry sdpa_fake_k(.param .u64 a) { $cp mma.sync.aligned.m16n8k16.row.col.f32.f16 {%f1}; ret; }" \
  >> "$keep/runner.ptx"
echo "ptxas info    : Compiling entry function 'sdpa_fake_k' for 'sm_90a'" >&2
echo "ptxas info    : Used ${FAKE_REGS:-40} registers, used 1 barriers, 1024 bytes smem" >&2
echo "fake executable $out" > "$out"
"""
FAKE_PTXAS = '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n'
# `cuobjdump --dump-sass EXE`: logs EXE in $FAKE_CUOBJDUMP_LOG; the machine code of an sm_90a runner (both tiers'
# warpgroup MMAs, mma.sync, setmaxnreg), with the copy engine's loads and LDGSTS in the cpasync build only.
FAKE_CUOBJDUMP = r"""#!/bin/sh
[ -n "$FAKE_CUOBJDUMP_LOG" ] && echo "$2" >> "$FAKE_CUOBJDUMP_LOG"
case "$2" in *cpasync*)
  echo "        /*0100*/                   LDGSTS.E.BYPASS.128 [R1], [R2] ;"
  echo "        /*0108*/                   UTMALDG.2D [UR8], [UR4] ;";;
esac
echo "        /*0110*/                   HMMA.16816.F32 R4, R8, R12, R4 ;"
echo "        /*0120*/              @!P0 HGMMA.64x128x16.F32 R24, gdesc[UR8], RZ, !UPT ;"
echo "        /*0130*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ;"
echo "        /*0140*/                   USETMAXREG.DEALLOC.CTAPOOL 0x40 ;"
"""


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _clear_tool_caches() -> None:
    for cached in (toolchain.find_nvcc, toolchain.find_ptxas, toolchain._version_text):
        cached.cache_clear()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake toolchain as $CUDA_HOME, build/ in a temporary folder; the logs of its compiles and SASS reads."""
    bin_dir = tmp_path / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    _script(bin_dir / "nvcc", FAKE_NVCC)
    _script(bin_dir / "ptxas", FAKE_PTXAS)
    _script(bin_dir / "cuobjdump", FAKE_CUOBJDUMP)
    logs = {"compiles": tmp_path / "compiles.log", "sass": tmp_path / "sass.log"}
    monkeypatch.setenv("CUDA_HOME", str(bin_dir.parent))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(logs["compiles"]))
    monkeypatch.setenv("FAKE_CUOBJDUMP_LOG", str(logs["sass"]))
    monkeypatch.setattr(paths, "build_dir", lambda: tmp_path / "build")
    _clear_tool_caches()
    yield logs
    _clear_tool_caches()


def _count(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.is_file() else 0


def _build(capsys, *args: str) -> tuple[int, str]:
    """`python -m driver build` in process: its exit code and its last line on stderr."""
    rc = cli.main(["build", "--targets", "sdpa", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err[-1] if err else ""


def _with_sass(name: str, arch: str, **change: tuple[str, ...]):
    """The real build table with one SASS expectation of target `name` for `arch` changed (require/forbid added)."""
    real = targets.all_targets

    def table():
        out = []
        for t in real():
            if t.name == name:
                sass = tuple(dataclasses.replace(e, **{k: getattr(e, k) + v for k, v in change.items()})
                             if e.arch == arch else e for e in t.sass)
                t = dataclasses.replace(t, sass=sass)
            out.append(t)
        return tuple(out)

    return table


# ---------------------------------------------------------------- (a) an instruction the inspector does not read


def test_the_build_table_names_only_instructions_the_inspector_reads():
    assert build_gates.unknown_sass(targets.all_targets()) == []


@pytest.mark.parametrize("cmd", [["build", "--targets", "sdpa"], ["bench", "--suite", "sdpa"]])
@pytest.mark.parametrize("how, name", [("forbid", "LDGSTZ"),  # misspelt: would never be seen, so never fail
                                       ("require", "SHFL")])  # a real instruction, not looked for
def test_an_instruction_the_inspector_does_not_read_is_bad_input_before_any_build(fake, capsys, monkeypatch, cmd,
                                                                                  how, name):
    monkeypatch.setattr(targets, "all_targets", _with_sass("sdpa_fp8_baseline", "sm_90", **{how: (name,)}))
    rc = cli.main(cmd)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    verb = {"forbid": "forbids", "require": "requires"}[how]
    assert err[-1].startswith(f"configuration error: driver/targets.py: sdpa_fp8_baseline sm_90: SASS {verb} "
                              f"'{name}', which the inspector does not look for (it reads LDGSTS, "), err
    assert "SASS_INSTRUCTIONS" in err[-1] and _count(fake["compiles"]) == 0  # nothing compiled


# ---------------------------------------------------------------- (b) the inspected list changes


def test_a_cached_build_is_read_again_when_the_inspected_list_changes(fake, capsys, monkeypatch):
    """The stamp holds the list its SASS was read for (the record's `sass` keys): a new instruction in the
    inspector's list reads the cached executable's machine code again (no compile), and a gate on it holds."""
    assert _build(capsys)[0] == 0  # the first build compiles both targets and reads their SASS
    assert _count(fake["compiles"]) == 2 and _count(fake["sass"]) == 2
    rc, _line = _build(capsys)
    assert rc == 0 and _count(fake["compiles"]) == 2 and _count(fake["sass"]) == 2  # a plain cache hit: nothing read

    monkeypatch.setattr(inspect_ptx, "SASS_INSTRUCTIONS", (*inspect_ptx.SASS_INSTRUCTIONS, "USETMAXREG"))
    monkeypatch.setattr(targets, "all_targets", _with_sass("sdpa_fp8_cpasync", "sm_90", forbid=("USETMAXREG",)))
    rc, line = _build(capsys)
    assert rc == 4 and _count(fake["compiles"]) == 2, line  # read again, not compiled again
    assert line == "build failed: 1 static gate(s) failed: sdpa_fp8_cpasync sm_90: USETMAXREG present in SASS", line
    stamp = json.loads((paths.build_dir() / "sm_90" / "sdpa_fp8_cpasync.stamp.json").read_text())
    assert stamp["sass"]["USETMAXREG"] is True and set(stamp["sass"]) == set(inspect_ptx.SASS_INSTRUCTIONS)
    meta = build.load_meta()
    assert all(set(r.sass) == set(inspect_ptx.SASS_INSTRUCTIONS) for r in meta.targets), meta.targets
    reads = _count(fake["sass"])
    rc, line = _build(capsys)  # the stamp now holds today's list: a cache hit reads nothing more
    assert rc == 4 and _count(fake["sass"]) == reads and "USETMAXREG present in SASS" in line


def test_with_sass_reads_again_a_record_read_for_another_list(fake, capsys, monkeypatch):
    """On a GPU host, `with_sass` (bench.prepare) reads again what was read for another list than today's."""
    assert _build(capsys)[0] == 0
    monkeypatch.setattr(inspect_ptx, "SASS_INSTRUCTIONS", (*inspect_ptx.SASS_INSTRUCTIONS, "USETMAXREG"))
    meta = build.with_sass(build.load_meta())
    assert {r.target: r.sass["USETMAXREG"] for r in meta.targets} == {"sdpa_fp8_baseline": True,
                                                                      "sdpa_fp8_cpasync": True}


def test_a_record_without_a_name_the_gate_asks_about_fails_not_passes(fake, capsys):
    """A record read for an older list (a bundle's build_meta.json, where no cuobjdump reads it again) holds no
    answer for a name its target's expectations use: said so, never taken as absent."""
    assert _build(capsys)[0] == 0
    rec = build.load_meta().target("sdpa_fp8_baseline", "sm_90")
    old = rec.model_copy(update={"sass": {k: v for k, v in rec.sass.items() if k != "UTMALDG"}})
    (t,) = targets.select("sdpa_fp8_baseline")
    got = build_gates.sass_violations(t, old)
    assert got == [("sdpa_fp8_baseline sm_90: UTMALDG was not looked for in this build's SASS (read for LDGSTS, HMMA, "
                   "HGMMA, QGMMA, UBLKCP; build again to read it)")], got


# ---------------------------------------------------------------- (c) ptxas limits per target


def _thresholds(tmp_path: Path, entry: str) -> Path:
    """The repo's thresholds.toml with one more [[build.kernels]] entry after the [build] defaults."""
    text = paths.thresholds_file().read_text()
    anchor = "max_spill_bytes = 0\n"
    assert anchor in text
    path = tmp_path / "t.toml"
    path.write_text(text.replace(anchor, anchor + f"\n[[build.kernels]]\n{entry}\n", 1))
    return path


def test_ptxas_limits_set_for_one_target_hold_for_it_alone(fake, capsys, tmp_path):
    path = _thresholds(tmp_path, 'target = "sdpa_fp8_cpasync"\nmax_registers_per_thread = 32\n'
                                 "max_smem_bytes_per_block = 65536\nmax_spill_bytes = 0")
    rc, line = _build(capsys, "--thresholds", str(path))
    assert rc == 4, line  # the fake's 40 registers: over the cpasync target's 32, within the baseline's 128
    assert line == "build failed: 1 static gate(s) failed: sdpa_fp8_cpasync sm_90 sdpa_fake_k: 40 registers > 32", line
    gates = thresholds.load(path).build
    own = gates.for_entry("sdpa_fake_k", "sdpa_fp8_cpasync")
    assert own.target == "sdpa_fp8_cpasync" and gates.for_entry("sdpa_fake_k", "sdpa_fp8_baseline") is gates
    hopper = "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp16TraitsILi64ELb1ELi0ELb0EEEEEv"
    assert gates.for_entry(hopper, "sdpa_fp8_cpasync") is own  # ahead of the family's
    family = gates.for_entry(hopper, "sdpa_fp8_baseline")  # the family's elsewhere
    assert family.target is None and family.pattern in hopper and family is gates.for_entry(hopper)
    assert gates.smem_limit(None) == gates.max_smem_bytes_per_block  # a target's entry gates no runner's line


def test_a_target_entry_with_a_pattern_holds_for_its_matching_entries_only(fake, capsys, tmp_path):
    path = _thresholds(tmp_path, 'target = "sdpa_fp8_cpasync"\npattern = "no_such_entry"\n'
                                 "max_registers_per_thread = 32\nmax_smem_bytes_per_block = 65536\nmax_spill_bytes = 0")
    assert _build(capsys, "--thresholds", str(path))[0] == 0


@pytest.mark.parametrize("entry, says", [
    ('target = "sdpa_fp8_cpasync_variant"',
     ("[[build.kernels]] #1 (target = 'sdpa_fp8_cpasync_variant'): no build target is named "
     "'sdpa_fp8_cpasync_variant' (CUDA targets: sdpa_fp8_baseline, sdpa_fp8_cpasync)")),
    ('target = "allreduce_bench"',
     ("[[build.kernels]] #1 (target = 'allreduce_bench'): allreduce_bench is a Mojo target, which ptxas reports "
     "nothing of (CUDA targets: sdpa_fp8_baseline, sdpa_fp8_cpasync)")),
    ('target = "sdpa_fp8_cpasync"\nkernel = "wgmma_sm90"',
     "target 'sdpa_fp8_cpasync' with kernel 'wgmma_sm90': a runner's shared memory is gated per kernel family"),
    ('pattern = "sdpa"', "an entry names a kernel family (`kernel` and `pattern`) or a build target"),
])
def test_a_target_entry_that_cannot_hold_is_bad_input_before_any_build(fake, capsys, tmp_path, entry, says):
    path = _thresholds(tmp_path, f"{entry}\nmax_registers_per_thread = 32\nmax_smem_bytes_per_block = 65536\n"
                                 "max_spill_bytes = 0")
    rc, line = _build(capsys, "--thresholds", str(path))
    assert rc == 2 and line.startswith(f"configuration error: thresholds file {path}: ") and says in line, line
    assert _count(fake["compiles"]) == 0
