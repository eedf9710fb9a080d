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


CAPTURED_C7520 = Path(__file__).parent / "data" / "captured" / "ptxas_wgmma_serialized_sm90a.txt"


def test_parse_ptxas_marks_serialized_wgmma():
    """ptxas info C75xx (captured): the kernels it names carry its reason and code; every other kernel none. The
    capture has three C7520 and one C7511 (the no_compute ablation of the three-warpgroup kernel); the C7511 was
    not read before 2026-11-27."""
    kernels = parse_ptxas(CAPTURED_C7520.read_text())
    serialized = {k.name: k.wgmma_serialized for k in kernels if k.wgmma_serialized}
    c7520 = "program dependence on compiler-inserted WG.AR in divergent path (C7520)"
    assert serialized == {
        "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_9Fp8TraitsILi128ELb1ELi0ELb0EEEEEvNS_8TileMapsEPK6__halfPKhS8_PS4_iNS_8TilePlanEff": c7520,
        "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_9Fp8TraitsILi64ELb1ELi0ELb0EEEEEvNS_8TileMapsEPK6__halfPKhS8_PS4_iNS_8TilePlanEff": c7520,
        "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp8Traits3ILi64ELb1ELi0EEEEEvNS_8TileMapsEPK6__halfPKhS8_PS4_iNS_8TilePlanEff": c7520,
        "_ZN9sdpa_sm9020sdpa_fp8_sm90_kernelINS_10Fp8Traits3ILi64ELb1ELi1EEEEEvNS_8TileMapsEPK6__halfPKhS8_PS4_iNS_8TilePlanEff":
            "insufficient register resources for the wgmma pipeline (C7511)",
    }
    assert len(kernels) > len(serialized) and all(k.registers > 0 for k in kernels)
