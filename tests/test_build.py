"""The real build: cached compiles, build metadata, and static gates on real ptxas/PTX data.

`nox -s test` builds before pytest; the fixture below makes plain `pytest` work too
(then it is the cached no-op). These tests read the executables this checkout builds.
"""

import time

import pytest

from driver import build, gates, targets, thresholds, toolchain
from driver.errors import NoGPU
from tests.conftest import gpu_skip_reason, run_driver

GATES = thresholds.load().build


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
    assert compiled == 0
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
    assert "-DUSE_CP_ASYNC=1" in cu.command and "arch=compute_90,code=[sm_90,compute_90]" in cu.command
    mj = meta.target("allreduce_bench", "sm_90")
    assert mj.command[1:6] == ["build", "-I", "kernels_mojo", "--target-accelerator", "sm_90"]


@pytest.mark.parametrize("arch", ["sm_90", "sm_89"])
@pytest.mark.parametrize("name", ["sdpa_fp8_baseline", "sdpa_fp8_cpasync"])
def test_sdpa_resource_gates_on_real_ptxas_report(meta, name, arch):
    rec = meta.target(name, arch)
    assert rec.ptxas, "no ptxas report parsed"
    for k in rec.ptxas:
        assert k.arch == arch
        assert 0 < k.registers <= GATES.max_registers_per_thread, k
        assert k.smem_bytes <= GATES.max_smem_bytes_per_block, k
        assert k.spill_store_bytes == k.spill_load_bytes == 0, k


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
    assert gates.static_violations(t, rec, GATES) == []
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


def test_sass_is_recorded_where_cuobjdump_exists(tmp_path, monkeypatch):
    """The CPU box has no cuobjdump, so the build records sass=None; a host with one (the GPU
    hosts) fills it in from the real executables' machine code before archiving."""
    from driver import build, toolchain

    fake = tmp_path / "cuobjdump"
    # Stands in for `cuobjdump --dump-sass EXE`: machine code of a cp.async build holds LDGSTS.
    fake.write_text('#!/bin/sh\ncase "$2" in *cpasync*) echo "LDGSTS.E.BYPASS.128 [R1], [R2]";; esac\n'
                    'echo "HMMA.16816.F32 R4, R8, R12, R4"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(toolchain, "find_cuobjdump", lambda: str(fake))
    meta = build.with_sass(build.load_meta())
    sass = {t.target: t.sass for t in meta.targets if t.lang == "cuda" and t.arch == "sm_90"}
    assert sass["sdpa_fp8_cpasync"] == {"LDGSTS": True, "HMMA": True}
    assert sass["sdpa_fp8_baseline"] == {"LDGSTS": False, "HMMA": True}
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
