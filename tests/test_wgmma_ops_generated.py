"""kernels_cuda/sdpa_fp8_sm90/wgmma_ops.cuh says "Generated ... Do not edit": it must be exactly what
gen_wgmma_ops.py renders, so an edit by hand (or a generator change not re-run) is caught here."""

import importlib.util

from driver import paths


def test_wgmma_ops_is_what_the_generator_renders():
    folder = paths.ROOT / "kernels_cuda" / "sdpa_fp8_sm90"
    spec = importlib.util.spec_from_file_location("gen_wgmma_ops", folder / "gen_wgmma_ops.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (folder / "wgmma_ops.cuh").read_text() == gen.render()
