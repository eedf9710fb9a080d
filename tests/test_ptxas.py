"""ptxas report parsing, on output captured from nvcc 13.0 (see the file's header)."""

from pathlib import Path

from driver.inspect_ptx import parse_ptxas, scan_ptx

SAMPLE = Path(__file__).parent / "data" / "ptxas_nvcc13_sample.txt"


def test_parse_ptxas_captured_sample():
    kernels = {(k.name, k.arch): k for k in parse_ptxas(SAMPLE.read_text())}
    assert set(kernels) == {
        ("_Z3barILi64EEvPd", "sm_90"), ("_Z3fooPfi", "sm_90"), ("_Z3barILi64EEvPd", "sm_89"), ("_Z3fooPfi", "sm_89"),
    }
    foo90 = kernels[("_Z3fooPfi", "sm_90")]
    assert (foo90.registers, foo90.smem_bytes, foo90.stack_frame_bytes) == (14, 1024, 0)
    bar89 = kernels[("_Z3barILi64EEvPd", "sm_89")]
    assert (bar89.registers, bar89.stack_frame_bytes, bar89.cmem_bytes, bar89.smem_bytes) == (40, 512, 360, 0)


def test_parse_ptxas_spills():
    text = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Function properties for k\n"
        "    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem\n"
    )
    (k,) = parse_ptxas(text)
    assert (k.registers, k.spill_store_bytes, k.spill_load_bytes, k.smem_bytes) == (255, 16, 12, 49152)


def test_scan_ptx_attributes_instructions_to_entries():
    ptx = """
.version 8.8
.visible .entry plain(.param .u64 a) { ld.global.f32 %f1, [%rd1]; ret; }
.visible .entry piped(.param .u64 a) { cp.async.cg.shared.global [%r1], [%rd1], 16; cp.async.wait_group 0; ret; }
.visible .entry tensor(.param .u64 a) { wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16 {%f1}, {%r1}, {%r2}, {%f2}; }
"""
    got = {k.name: (k.has_cp_async, k.has_mma) for k in scan_ptx(ptx)}
    assert got == {"plain": (False, False), "piped": (True, False), "tensor": (False, True)}
