"""Allreduce on the GPU: every kernel x dtype x GPU count present x element count, checked
element by element against a float64 host sum inside the executable, with the kernel
that ran confirmed by the GPU itself."""

from __future__ import annotations

import pytest

from driver import peers, thresholds
from driver.config import ALLREDUCE_KERNEL_NAMES, DTYPES, ELEM_BYTES, SUPPORTED_NGPUS, kernel_flags
from driver.errors import ConfigError, KernelFailed
from driver.gates import allreduce_correctness
from driver.parse import launch_lines
from driver.records import AllreduceLine
from tests.gpu.conftest import serve_lines

ELEMENTS = [0, 7, 8 << 10, (8 << 10) + 1, (8 << 10) + 7, 256 << 10, (256 << 10) + 5, 16 << 20, (16 << 20) + 24, 64 << 20]


def _counts(gpu) -> list[int]:
    return [n for n in SUPPORTED_NGPUS if n <= len(gpu.gpus)]


_POOL: list = []  # the session's worker pool (tests/gpu/conftest.py `workers`), set by the autouse fixture


@pytest.fixture(autouse=True)
def _pool(workers):
    _POOL[:] = [workers]


def _run(exe_dir, *args: str, timeout_s: float = 300) -> list[AllreduceLine]:
    """One case on the session's long-lived allreduce_bench (a hang test passes `one_shot`)."""
    return serve_lines(_POOL[0], [str(exe_dir / "allreduce_bench"), *args], AllreduceLine, what=" ".join(args),
                       timeout_s=timeout_s)


def _run_alone(exe_dir, *args: str, timeout_s: float = 300) -> list[AllreduceLine]:
    return launch_lines([str(exe_dir / "allreduce_bench"), *args], AllreduceLine, what=" ".join(args), timeout_s=timeout_s)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ALLREDUCE_KERNEL_NAMES)
def test_every_element_count_is_correct_and_confirmed(exe_dir, gpu, kernel, dtype):
    counts = _counts(gpu)
    if not counts:
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    sizes = ",".join(str(n * ELEM_BYTES[dtype]) for n in ELEMENTS)
    for ngpus in counts:
        lines = _run(exe_dir, "--sizes", sizes, "--dtype", dtype, "--ngpus", str(ngpus), *kernel_flags(kernel),
                     "--iters", "2", "--warmup", "1", "--check", "1", "--seed", "7")
        assert [ln.elements for ln in lines] == ELEMENTS
        for ln in lines:
            assert ln.wrong == 0, ln
            if ln.elements:
                assert ln.checked and ln.kernel_selected == kernel and ln.kernel_confirmed == kernel, ln
                # the three properties, separately (docs/ALLREDUCE.md); the timed launches were compared too
                assert (ln.out_of_bound, ln.rank_mismatch, ln.run_to_run_mismatch) == (0, 0, 0), ln
                assert ln.same_bits_every_run is True and ln.runs_compared >= 1, ln
                assert ln.max_err_over_bound is not None and ln.max_err_over_bound <= 1, ln


def test_auto_dispatch_is_confirmed_by_the_gpu(exe_dir, gpu):
    if not _counts(gpu):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    for ln in _run(exe_dir, "--sizes", "8K,256K,16M,64M", "--ngpus", "2", "--iters", "2", "--warmup", "1"):
        assert ln.kernel_requested == "auto"
        assert ln.kernel_confirmed == ln.kernel_selected != "none", ln
        assert ln.wrong == 0


def test_unsupported_gpu_counts_are_refused(exe_dir, gpu):
    with pytest.raises(ConfigError, match="3"):
        _run(exe_dir, "--sizes", "1M", "--ngpus", "3", timeout_s=60)
    too_many = next((n for n in SUPPORTED_NGPUS if n > len(gpu.gpus)), None)
    if too_many:
        with pytest.raises(ConfigError):
            _run(exe_dir, "--sizes", "1M", "--ngpus", str(too_many), timeout_s=60)


def test_a_rank_stuck_in_the_barrier_is_killed_and_gpus_recover(exe_dir, gpu):
    if not _counts(gpu):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    with pytest.raises(KernelFailed, match="hung"):
        _run_alone(exe_dir, "--sizes", "1M", "--ngpus", "2", "--debug-hang-rank", "1", "--iters", "1", "--warmup", "0",
                   timeout_s=20)
    (ln,) = _run_alone(exe_dir, "--sizes", "1M", "--ngpus", "2", "--iters", "2", "--warmup", "1")
    assert ln.wrong == 0


@pytest.mark.parametrize("kernel", ["1stage_pushflag", "2stage_push", "1stage_bulk", "2stage_ce"])
def test_new_kernels_survive_other_grids(exe_dir, gpu, kernel):
    """The flag protocols (2stage_ce: its event order and piece bounds) across launch shapes: a capped grid (fewer SMs, more chunks per block) and the
    full one, back to back in one process (counters and generations carry across sizes and grids)."""
    if not _counts(gpu):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    sizes = ",".join(str(n * 4) for n in (7, 8 << 10, (256 << 10) + 5, 4 << 20))
    for extra in (["--max-blocks", "7"], [], ["--max-blocks", "33"]):
        for ln in _run(exe_dir, "--sizes", sizes, "--ngpus", "2", "--kernel", kernel, *extra, "--iters", "3",
                       "--warmup", "1", "--check-iters", "3", "--seed", "5"):
            assert ln.wrong == 0 and ln.kernel_confirmed == kernel, (extra, ln)


def test_a_forced_kernel_the_size_does_not_allow_is_refused_before_running(exe_dir, gpu):
    if not _counts(gpu):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    for kernel in ("1stage_pushflag", "1stage_push"):
        with pytest.raises(ConfigError, match=f"{kernel}.*no .* for 268435472 bytes"):
            _run(exe_dir, "--sizes", "1M,256M+16", "--ngpus", "2", "--kernel", kernel, timeout_s=60)


CORRUPT = 1234  # an element of every size below; rank 1's copy is moved by 4x its bound before the check


def _assert_caught(ln: AllreduceLine, ngpus: int, *, ranks_agree_otherwise: bool = True) -> None:
    """One element of rank 1 out of bound, and (only rank 1 moved) its bits unlike rank 0's: the line names
    it under both properties, and the verdict fails naming both. `ranks_agree_otherwise` False: an impl whose
    ranks may round differently anyway (upstream on 4 or more GPUs), so the mismatch count is not 1."""
    assert ln.out_of_bound == 1 and ln.rank_mismatch >= 1 and ln.wrong >= 2, ln
    oob, mism = ln.out_of_bound_first, ln.rank_mismatch_first
    assert (oob.rank, oob.element) == (1, CORRUPT) and abs(oob.value - oob.reference) > oob.bound, ln
    if ranks_agree_otherwise:
        assert ln.rank_mismatch == 1, ln
        assert (mism.rank, mism.element, mism.value) == (1, CORRUPT, oob.value) and mism.rank0_value != mism.value
    v = allreduce_correctness(ln, thresholds.load())
    assert v.status == "fail", v
    assert any(r.startswith(f"bound: 1 element(s) outside |out - s| <= gamma_{ngpus - 1}") and
               f"rank 1 element {CORRUPT}:" in r for r in v.reasons), v
    assert any(r.startswith("rank agreement: ") for r in v.reasons), v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("exe", ["allreduce_bench", "upstream_bench"])
def test_a_corrupted_element_fails_the_check_with_its_rank_and_index(exe_dir, gpu, exe, dtype):
    """--debug-corrupt-element goes through the whole check path of both executables: the line reports the
    element, the verdict is wrong. Ours is then not timed; upstream (a peer) is timed anyway."""
    counts = _counts(gpu)
    if not counts:
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    for ngpus in counts:
        (ln,) = serve_lines(_POOL[0], [str(exe_dir / exe), "--sizes", "256K", "--dtype", dtype, "--ngpus", str(ngpus),
                                       "--iters", "2", "--warmup", "1", "--seed", "7",
                                       "--debug-corrupt-element", str(CORRUPT)],
                            AllreduceLine, what=f"{exe} corrupt {dtype} x{ngpus}", timeout_s=300)
        _assert_caught(ln, ngpus, ranks_agree_otherwise=exe == "allreduce_bench" or ngpus == 2)
        assert ln.timed == (exe == "upstream_bench"), ln


NO_TORCH = peers.missing("nccl")


@pytest.mark.skipif(NO_TORCH is not None, reason=str(NO_TORCH))
@pytest.mark.parametrize("impl", ["nccl", "torch_symm_oneshot", "torch_symm_twoshot"])
def test_a_torch_peer_line_with_a_rank_mismatch_is_recorded_wrong(gpu, impl):
    """The torch-driven peers' check (driver/peers/torch_allreduce.py) catches the same corruption: rank 1's
    element, its value and rank 0's in the line, and a wrong verdict naming the bound and rank agreement."""
    if not _counts(gpu):
        pytest.skip(f"allreduce needs at least 2 GPUs; this host has {len(gpu.gpus)}")
    cmd = peers.command(impl, "--sizes", "256K", "--dtype", "bfloat16", "--ngpus", "2", "--iters", "2",
                        "--warmup", "1", "--debug-corrupt-element", str(CORRUPT))
    (ln,) = launch_lines(cmd, AllreduceLine, what=f"{impl} corrupt", timeout_s=300)
    _assert_caught(ln, 2)
    assert ln.timed and ln.same_bits_every_run is None  # timed anyway; run-to-run is not asked of a peer
    clean = peers.command(impl, "--sizes", "256K", "--dtype", "bfloat16", "--ngpus", "2", "--iters", "2",
                          "--warmup", "1")
    (ok,) = launch_lines(clean, AllreduceLine, what=f"{impl} clean", timeout_s=300)
    assert (ok.out_of_bound, ok.rank_mismatch, ok.wrong) == (0, 0, 0), ok
    assert allreduce_correctness(ok, thresholds.load()).passed
