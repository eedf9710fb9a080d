"""The allreduce dispatch table (bytes x GPU count x dtype -> kernel), without a GPU.

`dispatch_table` calls the same `select_kernel` the launch path calls, compiled
with the same -D size windows as `allreduce_bench`, and runs on the CPU.
"""

import json
import subprocess

import pytest

from driver import build, paths, targets, thresholds, toolchain

GATES = thresholds.load().build


def _table(exe) -> dict[tuple[int, str, int], str]:
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout
    return {(r["ngpus"], r["dtype"], r["bytes"]): r["kernel"] for r in map(json.loads, out.splitlines())}


@pytest.fixture(scope="module")
def default_table():
    build.build_all(targets.select("dispatch_table"), ("sm_90",), GATES)
    return _table(paths.build_dir() / "sm_90" / "dispatch_table")


def test_table_covers_every_gpu_count_and_dtype(default_table):
    assert {k[0] for k in default_table} == {2, 4, 8}
    assert {k[1] for k in default_table} == {"float32", "bfloat16", "float16"}
    assert set(default_table.values()) <= {"1stage", "2stage", "1stage_push", "1stage_cpasync_s2", "1stage_cpasync_s3",
                                           "1stage_cpasync_s4"}


def test_default_windows(default_table):
    # Provisional defaults (kernels_mojo/allreduce/dispatch.mojo): one-shot for every size on
    # 2 GPUs, 2-stage above 512 KiB on 4 and 8; the cp.async window is empty until measured.
    if targets.DISPATCH_WINDOWS_FILE.is_file():
        pytest.skip(f"measured windows in use ({targets.DISPATCH_WINDOWS_FILE.name}), not the defaults")
    for (ngpus, _dtype, nbytes), kernel in default_table.items():
        expected = "1stage" if ngpus == 2 or nbytes <= 512 * 1024 else "2stage"
        if ngpus == 2 and 0 < nbytes <= 1 << 20:
            expected = "1stage_push"
        assert kernel == expected, (ngpus, nbytes, kernel)


def test_measured_windows_are_what_the_build_dispatches_on(default_table):
    """kernels_mojo/dispatch_windows.json (written by the sweep) reaches select_kernel."""
    if not targets.DISPATCH_WINDOWS_FILE.is_file():
        pytest.skip("no measured windows yet: the provisional defaults apply")
    defines = json.loads(targets.DISPATCH_WINDOWS_FILE.read_text())["defines"]
    lo, hi = defines.get("AR_CPASYNC_MIN_BYTES", 1), defines.get("AR_CPASYNC_MAX_BYTES", 0)
    for (ngpus, _dtype, nbytes), kernel in default_table.items():
        # dispatch.mojo's default where the sweep wrote no push window: 1 MiB on 2 GPUs, none on 4 and 8.
        push_max = defines.get("AR_PUSH_MAX_BYTES", 1 << 20 if ngpus == 2 else 0)
        if 0 < nbytes <= push_max:  # the push window takes precedence over every other rule
            assert kernel == "1stage_push", (ngpus, nbytes, kernel)
            continue
        if lo <= nbytes <= hi:
            assert kernel.startswith("1stage_cpasync"), (ngpus, nbytes, kernel)
            continue
        limit = defines.get(f"AR_1STAGE_MAX_BYTES_{ngpus}GPU", 2 << 30 if ngpus == 2 else 512 << 10)
        assert kernel == ("1stage" if nbytes <= limit else "2stage"), (ngpus, nbytes, kernel)


def test_a_cp_async_window_define_reaches_the_runtime_choice(tmp_path):
    """The seeds' bug: a window set at compile time must change what runs."""
    mojo = toolchain.find_mojo().path
    exe = tmp_path / "dispatch_table"
    cmd = [mojo, "build", "-I", "kernels_mojo", "--target-accelerator", "sm_90", "-D", "AR_CPASYNC_MIN_BYTES=1048576",
           "-D", "AR_CPASYNC_MAX_BYTES=4194304", "-D", "AR_CPASYNC_STAGES=2", "-D", "AR_1STAGE_MAX_BYTES=65536", "-D", "AR_PUSH_MAX_BYTES=0",
           "kernels_mojo/bin/dispatch_table.mojo", "-o", str(exe)]
    subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, timeout=600, check=True)
    table = _table(exe)
    for (ngpus, _dtype, nbytes), kernel in table.items():
        if 1 << 20 <= nbytes <= 4 << 20:
            assert kernel == "1stage_cpasync_s2"
        elif nbytes <= 65536:
            assert kernel == "1stage"
        else:
            assert kernel == "2stage"


def test_a_per_gpu_count_crossover_applies_to_that_count_only(tmp_path):
    mojo = toolchain.find_mojo().path
    exe = tmp_path / "dispatch_table"
    cmd = [mojo, "build", "-I", "kernels_mojo", "--target-accelerator", "sm_90", "-D", "AR_1STAGE_MAX_BYTES_2GPU=1048576",
           "-D", "AR_PUSH_MAX_BYTES=0", "kernels_mojo/bin/dispatch_table.mojo", "-o", str(exe)]
    subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, timeout=600, check=True)
    for (ngpus, _dtype, nbytes), kernel in _table(exe).items():
        if ngpus == 2:
            assert kernel == ("1stage" if nbytes <= 1 << 20 else "2stage")
        else:  # untouched: the provisional 512 KiB default
            assert kernel == ("1stage" if nbytes <= 512 << 10 else "2stage")


def test_mojo_host_logic():
    """kernels_mojo/tests/test_host_logic.mojo: size parsing, selection, stats, checking, on the CPU."""
    mojo = toolchain.find_mojo().path
    proc = subprocess.run([mojo, "run", "-I", "kernels_mojo", "kernels_mojo/tests/test_host_logic.mojo"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_host_logic: all passed" in proc.stdout
