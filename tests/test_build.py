"""The real build: cached compiles, build metadata, and static gates on real ptxas/PTX data.

`nox -s test` builds before pytest; the fixture below makes plain `pytest` work too
(then it is the cached no-op). These tests read the executables this checkout builds.
"""

import re
import time

import pytest

from driver import build, build_gates, inspect_ptx, targets, thresholds, toolchain
from driver.errors import NoGPU
from tests.conftest import gpu_skip_reason, run_driver

GATES = thresholds.load().build
pytestmark = [pytest.mark.nvcc, pytest.mark.mojo]  # the session's real build: every target, CUDA and Mojo


@pytest.fixture(scope="session")
def meta():
    build.build_all(targets.select("all"), ("sm_90",), GATES)
    meta, _ = build.build_all(targets.select("sdpa"), ("sm_89",), GATES)
    return meta


def test_second_build_compiles_nothing(meta):
    t0 = time.perf_counter()
    again, compiled = build.build_all(targets.select("all"), ("sm_90",), GATES)
    seconds = time.perf_counter() - t0
    print(f"no-op build: {seconds:.3f} s of driver time")
    assert compiled == []
    assert {t.source_hash for t in again.targets} >= {t.source_hash for t in meta.targets if t.arch == "sm_90"}


def test_cache_key_follows_defines_and_sources(meta):
    t = targets.select("sdpa_fp8_cpasync")[0]
    rec = meta.target("sdpa_fp8_cpasync", "sm_90")
    tc = meta.toolchain
    key = build._source_hash(t, "sm_90", rec.command, tc)
    assert key == rec.source_hash
    assert build._source_hash(t, "sm_90", rec.command + ["-DEXTRA=1"], tc) != key
    assert build._source_hash(t, "sm_89", rec.command, tc) != key


def test_build_meta_records_provenance(meta):
    assert len(meta.git_sha) == 40
    assert meta.toolchain.mojo and meta.toolchain.mojo.version == toolchain.pins()["mojo"]
    assert meta.toolchain.nvcc and meta.toolchain.nvcc.version.startswith("13.")
    assert meta.host.logical_cores > 0 and meta.host.ram_gib > 0
    cu = meta.target("sdpa_fp8_cpasync", "sm_90")
    # sm_90 builds the arch-specific sm_90a (wgmma, setmaxnreg) and tells the host code so.
    assert "-DUSE_CP_ASYNC=1" in cu.command and "arch=compute_90a,code=[sm_90a,compute_90a]" in cu.command
    assert "-DSDPA_SM90A=1" in cu.command and cu.defines["SDPA_SM90A"] == "1"
    cu89 = meta.target("sdpa_fp8_cpasync", "sm_89")
    assert "arch=compute_89,code=[sm_89,compute_89]" in cu89.command and "SDPA_SM90A" not in cu89.defines
    mj = meta.target("allreduce_bench", "sm_90")
    assert mj.command[1:6] == ["build", "-I", "kernels_mojo", "--target-accelerator", "sm_90"]


@pytest.mark.parametrize("arch", ["sm_90", "sm_89"])
@pytest.mark.parametrize("name", ["sdpa_fp8_baseline", "sdpa_fp8_cpasync"])
def test_sdpa_resource_gates_on_real_ptxas_report(meta, name, arch):
    rec = meta.target(name, arch)
    assert rec.ptxas, "no ptxas report parsed"
    for k in rec.ptxas:
        g = GATES.for_entry(k.name)  # the Hopper kernel's own gates, the seed gates for the rest
        assert k.arch == (arch + "a" if arch == "sm_90" else arch)
        assert 0 < k.registers <= g.max_registers_per_thread, k
        assert k.smem_bytes <= g.max_smem_bytes_per_block, k
        assert k.spill_store_bytes == k.spill_load_bytes == 0, k
        # ptxas info C75xx: only the diagnostic entries thresholds.toml names may be serialized
        assert k.wgmma_serialized == "" or g.serialized_ok(k.name) is not None, k
    hopper = [k for k in rec.ptxas if "sdpa_fp8_sm90_kernel" in k.name]
    mma_sync = [k for k in rec.ptxas if "sdpa_fp8_fwd_kernel" in k.name]
    # fp8 tier: (head dim 64, head dim 128 with 128-key tiles, with 192-key tiles) x 2 block configurations
    # (unsplit, split) x 3 ablation modes, plus the head-dim-64 unsplit kernel with three consumer warpgroups
    # x 3 ablation modes, plus Q as two E4M3 terms (SDPA_SM90_FP8_Q2) for (head dim 64, 128) x (unsplit, split)
    # with 128-key tiles, no ablation; fp16 tier: (head dim 64, 128) x 2 block configurations x 3 ablation
    # modes; both tiers in every sm_90 build (the tier is chosen at run time), none in others.  Since 2026-11-28
    # each configuration without ablation twice: sdpa_fp8_sm90_kernel<Traits, CAUSAL> without and with the causal
    # mask (kernels_cuda/sdpa_fp8_sm90/tile_plan.cuh CaseTraits): 4 more fp16 entries, 11 more fp8 ones.  Since
    # 2026-11-29 the fp8 tier's 256-key kernel at head dim 128 (SDPA_SM90_BN_D128=256: unsplit, no ablation), without
    # and with the mask
    # Since 2026-11-29 the fp16 tier's key-chunk kernels (decode-shaped cases, tile_plan.cuh KVCHUNK): the entry's
    # overload with a KvChunks argument, split traits without ablation, head dim 64 and 128, without and with the
    # packed rows' mask: 4 more entries, counted apart below; since the fp8 tier's split configuration has an even
    # count of K stages (fp8_traits.cuh NS), the fp8 tier's too (SDPA_SM90_KV_FP8=1, one Q term): 4 more.
    # Since 2026-11-29 the cpasync build's fp8 tier also has the head-dim-128 kernel with three consumer warpgroups
    # (SDPA_SM90_NCWG3_D128: 128-key tiles, unsplit, no ablation), without and with the mask; the baseline build has
    # none (its producer would need 64 registers, at which the consumers spill).
    on90 = arch == "sm_90"
    w3 = 1 if on90 and name == "sdpa_fp8_cpasync" else 0
    assert len([k for k in hopper if "Fp8Traits3ILi128E" in k.name]) == 2 * w3
    kv = [k for k in hopper if "NS_8KvChunksE" in k.name]
    assert len(kv) == (8 if on90 else 0)
    kv16 = [k for k in kv if re.search(r"Fp16TraitsILi(64|128)ELb[01]ELi0ELb1EEELb[01]EEEv", k.name)]
    kv8 = [k for k in kv if re.search(r"Fp8TraitsILi(64|128)ELb[01]ELi0ELb1ELi128ELb0EEELb[01]EEEv", k.name)]
    assert len(kv16) == len(kv8) == (4 if on90 else 0), kv
    hopper = [k for k in hopper if k not in kv]
    causal = [k for k in hopper if "ELb1EEEvNS_8TileMaps" in k.name]
    assert len(causal) + len([k for k in hopper if "ELb0EEEvNS_8TileMaps" in k.name]) == len(hopper)
    assert all(re.search(r"Traits3?ILi\d+ELb[01]ELi0E", k.name) for k in causal)  # no ablation with the mask
    fp16 = [k for k in hopper if "INS_10Fp16TraitsI" in k.name]
    assert len(fp16) == (12 + 4 if on90 else 0)
    assert len(hopper) - len(fp16) == (26 + 12 + 2 * w3 if on90 else 0)
    assert len(causal) == (4 + 12 + w3 if on90 else 0)
    assert len([k for k in hopper if "Li256ELb0EEE" in k.name]) == (1 + 1 if on90 else 0)
    assert len([k for k in hopper if "Fp8Traits3ILi64E" in k.name]) == (3 + 1 if on90 else 0)
    assert len([k for k in hopper if "Li192ELb0EEE" in k.name]) == (6 + 2 if on90 else 0)
    q2 = [k for k in hopper if "Li128ELb1EEE" in k.name]  # Fp8Traits<D, ASYNC, ABL, SPLIT, 128, Q2 = true>
    assert len(q2) == (4 + 4 if on90 else 0)
    assert all("ELi0ELb" in k.name for k in q2)  # ablation none only
    assert mma_sync and all(k.registers <= GATES.max_registers_per_thread for k in mma_sync)
    assert all(GATES.for_entry(k.name) in GATES.kernels for k in hopper + kv)  # its family's gates, not the seed's


@pytest.mark.parametrize("arch", ["sm_90", "sm_89"])
def test_sdpa_ptx_cp_async_only_in_the_cpasync_variant(meta, arch):
    base = meta.target("sdpa_fp8_baseline", arch).ptx_kernels
    cp = meta.target("sdpa_fp8_cpasync", arch).ptx_kernels
    sdpa = lambda ks: [k for k in ks if "sdpa" in k.name]
    assert sdpa(base) and sdpa(cp)
    assert not any(k.has_cp_async for k in sdpa(base))
    assert all(k.has_cp_async for k in sdpa(cp))
    assert all(k.has_mma for k in sdpa(base) + sdpa(cp))


def test_mojo_binary_embeds_cp_async_only_in_cpasync_kernels(meta):
    rec = meta.target("allreduce_bench", "sm_90")
    t = targets.select("allreduce_bench")[0]
    assert build_gates.static_violations(t, rec, GATES) == []
    ours = [k for k in rec.ptx_kernels if any(e.pattern in k.name for e in t.ptx)]
    with_cp = [k for k in ours if k.has_cp_async]
    # 3 dtypes x 3 GPU counts x 3 stage counts of the cp.async kernel.
    assert len(with_cp) >= 27, [k.name for k in ours]
    assert len(ours) > len(with_cp)


def test_bench_without_gpu_builds_then_says_no_gpu(meta, results_dir):
    reason = gpu_skip_reason()
    if reason is None:
        pytest.skip("this machine has a GPU: the no-GPU path cannot be shown here")
    proc = run_driver("bench", "--suite", "sdpa", "--shapes", "small")
    assert proc.returncode == NoGPU.exit_code, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("no GPU:")
    assert not results_dir.exists()


def test_sass_gates_on_the_real_machine_code(meta):
    """The build reads each CUDA executable's SASS where cuobjdump exists (on the CPU box: the
    nvidia-cuda-cuobjdump wheel the test extra installs) and gates it per target and arch."""
    if toolchain.find_cuobjdump() is None:
        pytest.skip("no cuobjdump here: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (the test extra)")
    sass = {(t.target, t.arch): t.sass for t in meta.targets if t.lang == "cuda"}
    cp90, base90 = sass[("sdpa_fp8_cpasync", "sm_90")], sass[("sdpa_fp8_baseline", "sm_90")]
    assert cp90["QGMMA"] and cp90["UTMALDG"] and cp90["LDGSTS"] and cp90["HMMA"]
    assert base90["QGMMA"] and not base90["UTMALDG"] and not base90["LDGSTS"]
    # both tiers in every sm_90 build: the fp16 tier's warpgroup MMA (HGMMA) beside the fp8 tier's (QGMMA)
    assert cp90["HGMMA"] and base90["HGMMA"]
    cp89, base89 = sass[("sdpa_fp8_cpasync", "sm_89")], sass[("sdpa_fp8_baseline", "sm_89")]
    assert cp89["LDGSTS"] and cp89["HMMA"] and not cp89["HGMMA"] and not cp89["QGMMA"] and not base89["LDGSTS"]
    for t in targets.select("sdpa"):
        for arch in ("sm_90", "sm_89"):
            assert build_gates.sass_violations(t, meta.target(t.name, arch)) == []


def test_sass_violations_name_the_missing_and_forbidden_instructions(meta):
    t = targets.select("sdpa_fp8_cpasync")[0]
    rec = meta.target("sdpa_fp8_cpasync", "sm_90")
    no_tma = rec.model_copy(update={"sass": {**dict.fromkeys(inspect_ptx.SASS_INSTRUCTIONS, True), "UTMALDG": False}})
    assert build_gates.sass_violations(t, no_tma) == ["sdpa_fp8_cpasync sm_90: UTMALDG missing in SASS"]
    base = targets.select("sdpa_fp8_baseline")[0]
    with_tma = no_tma.model_copy(update={"target": "sdpa_fp8_baseline", "sass": dict.fromkeys(inspect_ptx.SASS_INSTRUCTIONS, True)})
    assert set(build_gates.sass_violations(base, with_tma)) == {
        "sdpa_fp8_baseline sm_90: UTMALDG present in SASS", "sdpa_fp8_baseline sm_90: LDGSTS present in SASS"}
    assert build_gates.sass_violations(t, rec.model_copy(update={"sass": None})) == []  # not read: nothing to gate


def test_sass_is_recorded_where_cuobjdump_exists(tmp_path, monkeypatch):
    """A build made where no cuobjdump was records sass=None; a host with one (the GPU hosts)
    fills it in from the real executables' machine code before archiving."""
    fake = tmp_path / "cuobjdump"
    # Stands in for `cuobjdump --dump-sass EXE`: machine code of a cp.async build holds LDGSTS.
    fake.write_text('#!/bin/sh\ncase "$2" in *cpasync*) echo "        /*0100*/                   LDGSTS.E.BYPASS.128 [R1], [R2] ;";; esac\n'
                    'echo "        /*0110*/                   HMMA.16816.F32 R4, R8, R12, R4 ;"\n'
                    'echo "        /*0120*/              @!P0 HGMMA.64x128x16.F32 R24, gdesc[UR8], RZ, !UPT ;"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(toolchain, "find_cuobjdump", lambda: str(fake))
    unread = build.load_meta()
    unread = unread.model_copy(update={"targets": [t.model_copy(update={"sass": None}) for t in unread.targets]})
    meta = build.with_sass(unread)
    sass = {t.target: t.sass for t in meta.targets if t.lang == "cuda" and t.arch == "sm_90"}
    expect = dict.fromkeys(inspect_ptx.SASS_INSTRUCTIONS, False) | {"HMMA": True, "HGMMA": True}
    assert sass["sdpa_fp8_cpasync"] == expect | {"LDGSTS": True}
    assert sass["sdpa_fp8_baseline"] == expect
    assert all(t.sass is None for t in meta.targets if t.lang == "mojo")


@pytest.mark.parametrize("args, needle", [(["--timing", "warm"], "--timing must be cold or hot"),
                                          (["--batch", "0"], "--batch must be an integer")])
def test_sdpa_runner_rejects_bad_timing_flags(meta, args, needle):
    """The flags are checked before any input or GPU is touched: one `error:` line, exit 2."""
    import subprocess

    from driver import paths

    exe = paths.build_dir() / "sm_90" / "sdpa_fp8_cpasync"
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert proc.stdout == "" and len(lines) == 1 and lines[0].startswith(f"error: {needle}"), proc.stderr


def test_serialized_wgmma_fails_the_static_gate(meta):
    """A kernel ptxas serialized the wgmma of (info C75xx) fails the build's static gate, with the reason, unless
    thresholds.toml names it as a diagnostic (wgmma_serialized_ok)."""
    rec = meta.target("sdpa_fp8_cpasync", "sm_90")
    t = targets.select("sdpa_fp8_cpasync")[0]
    assert build_gates.static_violations(t, rec, GATES) == []
    k0 = next(k for k in rec.ptxas if "sdpa_fp8_sm90_kernel" in k.name and not k.wgmma_serialized)
    bad = rec.model_copy(update={"ptxas": [k0.model_copy(update={"wgmma_serialized": "a reason (C7511)"})]})
    got = build_gates.static_violations(t, bad, GATES)
    assert any("serialized its wgmma (a reason (C7511))" in v and k0.name in v for v in got), got
    # nvcc 13.0 serializes the no_compute ablation of the three-warpgroup fp8 kernel (C7511): named, so it passes
    ablation = [k for k in rec.ptxas if k.wgmma_serialized]
    assert [k.name for k in ablation] == [k.name for k in rec.ptxas if "Fp8Traits3ILi64ELb1ELi1EEE" in k.name]
    assert all("(C7511)" in k.wgmma_serialized for k in ablation)



def test_a_cached_build_is_judged_by_todays_ptxas_parser(meta, tmp_path):
    """A cache hit reads the ptxas report again from the build's log: a line the stamp's parser did not read (a
    C7511 on a timed kernel, here added to a copy of the real log) fails the static gate without a rebuild."""
    import shutil

    from driver import paths

    src = paths.build_dir() / "sm_90"
    for name in ("sdpa_fp8_cpasync.stamp.json", "sdpa_fp8_cpasync.log"):
        shutil.copy2(src / name, tmp_path / name)
    timed = next(k.name for k in meta.target("sdpa_fp8_cpasync", "sm_90").ptxas if "Fp16TraitsILi128ELb1ELi0ELb0E" in k.name)
    t = targets.select("sdpa_fp8_cpasync")[0]
    same = build.cached_record(tmp_path / "sdpa_fp8_cpasync.stamp.json", tmp_path / "sdpa_fp8_cpasync.log", "cuda")
    assert build_gates.static_violations(t, same, GATES) == []
    with open(tmp_path / "sdpa_fp8_cpasync.log", "a") as f:
        f.write(f"ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
                f"to insufficient register resources for the wgmma pipeline in the function '{timed}'\n")
    rec = build.cached_record(tmp_path / "sdpa_fp8_cpasync.stamp.json", tmp_path / "sdpa_fp8_cpasync.log", "cuda")
    got = build_gates.static_violations(t, rec, GATES)
    assert any(timed in v and "(C7511)" in v for v in got), got
