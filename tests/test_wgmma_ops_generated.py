"""kernels_cuda/sdpa_fp8_sm90/wgmma_ops.cuh says "Generated ... Do not edit": it must be exactly what
gen_wgmma_ops.py renders, so an edit by hand (or a generator change not re-run) is caught here."""

import importlib.util
import re

from driver import paths

FOLDER = paths.ROOT / "kernels_cuda" / "sdpa_fp8_sm90"


def test_wgmma_ops_is_what_the_generator_renders():
    folder = paths.ROOT / "kernels_cuda" / "sdpa_fp8_sm90"
    spec = importlib.util.spec_from_file_location("gen_wgmma_ops", folder / "gen_wgmma_ops.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (folder / "wgmma_ops.cuh").read_text() == gen.render()


def _generator():
    folder = paths.ROOT / "kernels_cuda" / "sdpa_fp8_sm90"
    spec = importlib.util.spec_from_file_location("gen_wgmma_ops", folder / "gen_wgmma_ops.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def _called(kind: str) -> set[int]:
    """The N of every `wgmma::{kind}_m64n{N}k..` wrapper the kernel's own sources call."""
    text = "".join(f.read_text() for f in sorted(FOLDER.glob("*.cu*")) if f.name != "wgmma_ops.cuh")
    return {int(n) for n in re.findall(rf"\bwgmma::{kind}_m64n(\d+)k\d+", text)}


def test_the_fp8_wrappers_are_the_ones_the_kernel_calls():
    """Every wrapper the kernel calls is generated; no E4M3 wrapper is generated that nothing calls."""
    gen = _generator()
    assert _called("rs_e4m3") == set(gen.RS_E4M3_N) and _called("ss_e4m3") == set(gen.SS_E4M3_N)
    text = "".join(f.read_text() for f in sorted(FOLDER.glob("*.cu*")) if f.name != "wgmma_ops.cuh")
    zero = {int(n) for n in re.findall(r"\bwgmma::ss_e4m3_m64n(\d+)k\d+_zero\b", text)}
    assert zero == set(gen.SS_E4M3_ZERO_N) and zero <= set(gen.SS_E4M3_N)
    assert _called("ss") <= set(gen.SS_N) and _called("rs") <= set(gen.RS_N)


def test_e4m3_wrappers_spell_the_fp8_instruction_and_its_operands():
    """The FP8 wrappers the wgmma_fp8_sm90 kernel calls: m64nNk32 with E4M3 A and B and f32 accumulators,
    A from 4 registers, B by descriptor, and no transpose immediates (PTX allows none for FP8 operands);
    operand numbers: N/2 accumulators, then the 4 A registers, the descriptor, the scale-d flag."""
    gen = _generator()
    assert gen.RS_E4M3_N  # which N: test_the_fp8_wrappers_are_the_ones_the_kernel_calls
    for n in gen.RS_E4M3_N:
        nd = n // 2
        text = gen.rs_e4m3(n)
        assert f"void rs_e4m3_m64n{n}k32(float (&d)[{nd}], const uint32_t (&a)[4], uint64_t desc_b, int accumulate)" in text
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 " in text
        assert f"setp.ne.b32 p, %{nd + 5}, 0;" in text
        a_regs = ", ".join(f"%{i}" for i in range(nd, nd + 4))
        assert f"}}, {{{a_regs}}}, %{nd + 4}, p, 1, 1;" in text  # scale-a, scale-b; nothing after them
        assert text.count('"+f"(d[') == nd
        assert f"rs_e4m3_m64n{n}k32" in gen.render()


def test_e4m3_shared_memory_wrappers_take_both_operands_by_descriptor():
    """Q K^T with Q's E4M3 codes in shared memory (192-key tiles at head dim 128): m64nNk32, E4M3 A and B,
    f32 accumulators, A and B by descriptor, no transpose immediates; operand numbers: N/2 accumulators,
    then the A and B descriptors, the scale-d flag."""
    gen = _generator()
    assert gen.SS_E4M3_N
    for n in gen.SS_E4M3_N:
        nd = n // 2
        text = gen.ss_e4m3(n)
        assert f"void ss_e4m3_m64n{n}k32(float (&d)[{nd}], uint64_t desc_a, uint64_t desc_b, int accumulate)" in text
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 " in text
        assert f"setp.ne.b32 p, %{nd + 2}, 0;" in text
        assert f"}}, %{nd}, %{nd + 1}, p, 1, 1;" in text
        assert text.count('"+f"(d[') == nd
        assert f"ss_e4m3_m64n{n}k32" in gen.render()
