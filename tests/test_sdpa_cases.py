"""The attention case beyond square MHA on a CPU (config.AttnCase: q [B,Hq,Sq,D], k/v [B,Hkv,Skv,D], the
bottom-right causal mask): the presets and the --shapes syntax, bad input (one line, exit 2, before anything
runs), the unmasked work TF/s counts, hbm_frac, the peers' arguments (decided without torch, cuDNN or FlashInfer),
the case threaded through the SDPA suite to runner and peer doubles and back, and the gates of the inference
presets (hbm_frac floors, causal against non-causal ratios).

The inputs and the float64 reference of every case are driver/reference's (GQA and the mask: tests/test_sdpa_inputs.py
and tests/test_sdpa_reference.py check them); the runner and peer doubles write that reference of the files they
are given, with --causal where they are given it."""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from driver import config, device, gates, parse, peers, plan, thresholds
from driver.config import AttnCase
from driver.errors import ConfigError, KernelFailed
from driver.options import RunOptions
from driver.peers import cudnn_sdpa, flashinfer_sdpa, sdpa_io, torch_sdpa
from driver.records import ArchivedRecord, CopyLine, DeviceInfo, GpuInfo, SdpaLine, Skip, Verdict
from driver.suites import sdpa
from tests.conftest import one_line, run_main
from tests.runner_doubles import ROOT, SERVE, calls, sdpa_exes

LIMITS = thresholds.load()
GQA_CAUSAL = AttnCase((1, 4, 24, 64), (1, 2, 40, 64), causal=True)  # 2 query heads a K/V head, 16 keys of history


# ---------------------------------------------------------------- presets and syntax


def test_the_presets_are_the_issues_cases_and_each_parses_back_by_name():
    dec = config.DECODE_CASES
    assert {(c.b, c.skv) for n, c in dec.items() if c.sq == 1 and (c.hq, c.hkv) == (32, 8)} == \
        {(b, s) for b in (1, 8, 64) for s in (4096, 32768, 131072)} - {(64, 131072)}  # does not fit: config.py
    assert all(c.d == 128 and c.hq % c.hkv == 0 for c in dec.values())
    assert (dec["decode_b8_32k_sq4"].sq, dec["decode_b8_32k_sq16"].sq) == (4, 16)
    assert (dec["decode_b8_32k_hq64"].hq, dec["decode_b8_32k_hq64"].hkv) == (64, 8)
    assert (dec["decode_b8_32k_mqa"].hq, dec["decode_b8_32k_mqa"].hkv) == (32, 1)
    chunk = config.CHUNKED_PREFILL_CASES
    assert {(c.sq, c.skv) for c in chunk.values()} == {(512, 8192), (2048, 32768)}
    assert all(c.causal and (c.b, c.hq, c.hkv, c.d) == (1, 32, 8, 128) for c in chunk.values())
    for name, twin in config.CAUSAL_TWINS.items():
        assert config.SDPA_CASES[name] == AttnCase(config.SDPA_SHAPES[twin], config.SDPA_SHAPES[twin], True)
        assert config.noncausal_twin(name) == twin
    assert set(config.CAUSAL_TWINS.values()) == {"large", "heads32", "batch8", "large_d128", "long_d128"}
    for name, case in config.SDPA_CASES.items():
        assert case.problem() is None and config.parse_shape(name) == (name, case)
        assert config.parse_shape(case.name)[1] == case  # the syntax of every preset names the same case


def test_groups_expand_in_order_and_a_square_shape_keeps_its_name_and_case():
    got = config.parse_shapes("mission,decode,causal_prefill")
    names = [n for n, _ in got]
    assert names == ["mission", *config.DECODE_CASES, "large", "large_causal", "heads32", "heads32_causal",
                     "batch8", "batch8_causal", "large_d128", "large_d128_causal", "long_d128", "long_d128_causal"]
    assert config.parse_shape("1x8x512x64") == ("1x8x512x64", AttnCase.of((1, 8, 512, 64)))
    assert AttnCase.of((1, 8, 512, 64)).square and config.SDPA_CASES["mission"].square


@pytest.mark.parametrize("text, name, case", [
    ("8x32x4x128:8x8x32768x128:causal", "8x32x4x128:8x8x32768x128:causal",
     AttnCase((8, 32, 4, 128), (8, 8, 32768, 128), True)),
    ("1X8X512X64:causal", "1x8x512x64:causal", AttnCase((1, 8, 512, 64), (1, 8, 512, 64), True)),
    ("1x8x512x64:1x8x512x64", "1x8x512x64", AttnCase.of((1, 8, 512, 64))),  # k/v as q: the square case
    ("2x32x1x64:2x1x100x64", "2x32x1x64:2x1x100x64", AttnCase((2, 32, 1, 64), (2, 1, 100, 64))),
    (" 1x4x16x128:1x4x16x128:causal ", "1x4x16x128:causal", AttnCase((1, 4, 16, 128), (1, 4, 16, 128), True)),
])
def test_the_case_syntax_names_each_case_one_way(text, name, case):
    assert config.parse_shape(text) == (name, case)
    assert config.parse_shapes(f"mission,{text.strip()}")[1] == (name, case)  # unambiguous in a comma list


BAD_CASES = [
    ("1x30x1x128:1x8x4096x128", "Hq = 30 query heads over Hkv = 8 K/V heads: Hq must be a multiple of Hkv"),
    ("1x8x20x64:1x8x10x64:causal", "causal with Sq = 20 > Skv = 10"),
    ("1x8x20x64:causal:1x8x40x64", "malformed shape"),  # the mask comes last
    ("1x8x512x96", "unsupported head dim 96"),
    ("1x8x1x96:1x8x64x96", "unsupported head dim 96"),
    ("2x8x1x64:1x8x64x64", "differ in B"),
    ("1x8x1x64:1x8x64x128", "differ in D"),
    ("1x8x1x64:1x0x64x64", "zero dimension"),
    ("1x8x1x64:1x8x0x64", "Skv = 0"),
    ("1x8x512x64:8x512x64", "malformed shape"),
    ("1x8x512x64:acausal", "malformed shape"),
    ("1x8x512x64;causal", "malformed shape"),
    ("1x8x512x64:causal:causal", "malformed shape"),
    ("1x8x\u0663x64:causal", "malformed shape"),  # Arabic three: \\d takes it, the syntax does not
    ("decode_b64_128k", "malformed shape"),  # the preset that does not fit is no preset
]


@pytest.mark.parametrize("text, needle", BAD_CASES)
def test_bad_cases_are_one_line_and_exit_2_before_anything_runs(capsys, no_work, text, needle):
    with pytest.raises(ConfigError) as err:
        config.parse_shapes(text)
    assert needle in err.value.one_line()
    code, _out, errtext = run_main(capsys, "bench", "--suite", "sdpa", "--shapes", f"mission,{text}")
    line = one_line(errtext)
    assert code == ConfigError.exit_code and line.startswith("configuration error: ") and needle in line


def test_the_help_and_the_docs_give_the_syntax_with_an_example(capsys):
    with pytest.raises(SystemExit):
        run_main(capsys, "bench", "--help")
    helptext = " ".join(capsys.readouterr().out.split())
    assert config.CASE_SYNTAX in helptext and config.CASE_EXAMPLE in helptext and "decode_b8_32k_mqa" in helptext
    assert config.parse_shape(config.CASE_EXAMPLE)[0] == config.CASE_EXAMPLE
    for doc in ("README.md", "docs/SDPA.md"):
        assert config.CASE_EXAMPLE in (ROOT / doc).read_text(), doc


# ---------------------------------------------------------------- the case's arithmetic


def visible(sq: int, skv: int, causal: bool) -> np.ndarray:
    """[Sq, Skv] booleans: which keys each query row sees (bottom-right: j <= i + Skv - Sq)."""
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    return (j <= i + skv - sq) if causal else np.ones((sq, skv), dtype=bool)


@pytest.mark.parametrize("case", [GQA_CAUSAL, AttnCase((2, 3, 7, 64), (2, 3, 7, 64), True),
                                  AttnCase((1, 8, 1, 128), (1, 2, 33, 128), True), AttnCase.of((1, 2, 9, 64))])
def test_keys_seen_and_flops_count_the_unmasked_scores(case):
    seen = int(visible(case.sq, case.skv, case.causal).sum())  # brute force: the mask itself
    assert case.keys_seen() == seen
    assert case.flops() == 4 * case.b * case.hq * case.d * seen
    if not case.causal:
        assert case.flops() == 4 * case.b * case.hq * case.sq * case.skv * case.d


def test_a_lines_tflops_is_the_unmasked_work_over_its_p50():
    samples = [9.0, 10.0, 11.0]  # p50 10 us
    data = {"suite": "sdpa", "impl": "cpasync", "kernel": "wgmma_sm90", "precision": "fp16", "shape": [1, 4, 24, 64],
            "q_shape": [1, 4, 24, 64], "kv_shape": [1, 2, 40, 64], "causal": True, "iters": 3, "warmup": 0,
            "samples_us": samples}
    (line,) = parse.parse_lines(json.dumps(data), SdpaLine, what="test")
    assert line.tflops == pytest.approx(GQA_CAUSAL.flops() / 10e-6 / 1e12)
    square = {k: v for k, v in data.items() if k not in ("q_shape", "kv_shape", "causal")}  # a line before them
    (old,) = parse.parse_lines(json.dumps(square), SdpaLine, what="test")
    assert old.tflops == pytest.approx(4 * 1 * 4 * 24 * 24 * 64 / 10e-6 / 1e12)


def test_bytes_moved_and_hbm_frac_follow_the_reads_of_each_implementation():
    case = config.SDPA_CASES["decode_b8_32k"]  # K, V: 8 x 8 x 32768 x 128 = 2^28 elements each
    q_elems = 8 * 32 * 1 * 128
    assert case.bytes_moved(1) == 2 * (1 << 28) + 2 * 2 * q_elems
    assert case.bytes_moved(2) == 4 * (1 << 28) + 2 * 2 * q_elems
    # ours reads E4M3 (1 byte), torch its fp16 copy (2): at the same p50 torch moved twice the K/V bytes
    ours = sdpa.hbm_frac(case, "cpasync", 150.0, 4274.0)
    assert ours == pytest.approx(case.bytes_moved(1) / 150e-6 / 4274e9)
    assert sdpa.hbm_frac(case, "torch_sdpa", 150.0, 4274.0) == pytest.approx(case.bytes_moved(2) / 150e-6 / 4274e9)
    assert sdpa.hbm_frac(case, "cpasync", 150.0, None) is None  # the copy not measured
    assert sdpa.hbm_frac(config.SDPA_CASES["large"], "cpasync", 150.0, 4274.0) is None  # not memory-bound
    # which cases are memory-bound: every decode preset, no prefill one
    assert all(c.memory_bound for c in config.DECODE_CASES.values())
    assert not any(c.memory_bound for c in (*config.CHUNKED_PREFILL_CASES.values(),
                                            *config.CAUSAL_PREFILL_CASES.values()))
    assert not any(config.SDPA_CASES[n].memory_bound for n in config.BENCH_SDPA_SHAPES)  # default runs copy nothing


def test_the_copy_bandwidth_is_read_plus_write_over_the_p50_of_its_samples():
    line = CopyLine(hbm_copy=True, bytes=1 << 30, timing="cold", samples_us=[500.0, 510.0, 490.0, 2000.0])
    assert sdpa.copy_gbps(line) == pytest.approx(2 * (1 << 30) / 505e-6 / 1e9)  # p50 of four: (500 + 510) / 2


# ---------------------------------------------------------------- the peers' arguments


@pytest.mark.parametrize("hq, hkv, sq, skv, causal, gqa, mask", [
    (32, 8, 1, 4096, False, True, "none"),
    (8, 8, 512, 512, False, False, "none"),
    (8, 8, 512, 512, True, False, "is_causal"),  # square: top-left and bottom-right agree
    (32, 8, 512, 8192, True, True, "causal_lower_right"),  # never is_causal: torch aligns it top-left
    (4, 4, 16, 32768, True, False, "causal_lower_right"),
    (32, 1, 4, 32768, True, True, "causal_lower_right"),
])
def test_the_torch_call_groups_heads_and_aligns_the_mask_bottom_right(hq, hkv, sq, skv, causal, gqa, mask):
    call = torch_sdpa.torch_call(hq, hkv, sq, skv, causal)
    assert (call.enable_gqa, call.mask) == (gqa, mask)
    assert ("is_causal" in call.words()) == (mask == "is_causal")
    assert call.kwargs(None, sq, skv) == ({"enable_gqa": True} if gqa else {}) | (
        {"is_causal": True} if mask == "is_causal" else {}) if mask != "causal_lower_right" else True


def test_cudnn_is_asked_for_the_bottom_right_mask_in_the_form_its_frontend_has():
    assert cudnn_sdpa.cudnn_mask(False, False, True) == {} == cudnn_sdpa.cudnn_mask(False, True, False)
    assert cudnn_sdpa.cudnn_mask(True, False, True) == {"diagonal_alignment": "BOTTOM_RIGHT", "right_bound": 0}
    assert cudnn_sdpa.cudnn_mask(True, False, False) == {"use_causal_mask_bottom_right": True}
    # Sq == Skv: the same mask, in the top-left form cuDNN's FP8 attention takes before Blackwell
    assert cudnn_sdpa.cudnn_mask(True, True, True) == {"diagonal_alignment": "TOP_LEFT", "right_bound": 0}
    assert cudnn_sdpa.cudnn_mask(True, True, False) == {"use_causal_mask": True}

    class Alignment:  # the frontend's enum, by member name
        BOTTOM_RIGHT, TOP_LEFT = "bottom-right member", "top-left member"

    class WithAlignment:
        diagonal_alignment = Alignment

    assert cudnn_sdpa._mask_args(WithAlignment, True, False) == {"diagonal_alignment": "bottom-right member",
                                                                 "right_bound": 0}
    assert cudnn_sdpa._mask_args(WithAlignment, True, True)["diagonal_alignment"] == "top-left member"
    assert cudnn_sdpa._mask_args(object(), True, False) == {"use_causal_mask_bottom_right": True}


def test_flashinfer_is_planned_as_decode_for_one_row_and_as_causal_prefill_otherwise(monkeypatch):
    dec = flashinfer_sdpa.plan_of(8, 1, 32768, causal=True)  # one row sees every key: the mask changes nothing
    assert (dec.kind, dec.pages, dec.page_size, dec.qo_indptr, dec.causal) == ("decode", 8, 32768, (), False)
    assert dec.kv_indptr == tuple(range(9))
    pre = flashinfer_sdpa.plan_of(2, 512, 8192, causal=True)
    assert (pre.kind, pre.qo_indptr, pre.causal, pre.page_size) == ("prefill", (0, 512, 1024), True, 8192)
    assert flashinfer_sdpa.plan_of(1, 16, 100, causal=False).causal is False
    monkeypatch.setattr(flashinfer_sdpa, "_found", lambda module: module == "torch")
    monkeypatch.setattr(peers, "_found", lambda module: module == "torch")
    why = flashinfer_sdpa.missing()
    assert why == flashinfer_sdpa.UNAVAILABLE and "cannot be built or carried offline" in why and "62 MB" in why
    assert peers.missing("flashinfer") == why
    monkeypatch.setattr(flashinfer_sdpa, "_found", lambda module: True)
    assert flashinfer_sdpa.missing() is None


def _peer(module: str, *args: str):
    import subprocess

    return subprocess.run([sys.executable, "-m", f"driver.peers.{module}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _case_files(folder: Path, case: AttnCase, seed: int = 0) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return sdpa.write_inputs(folder, case, seed)


@pytest.mark.parametrize("module", ["torch_sdpa", "cudnn_sdpa", "flash_sdpa", "flashinfer_sdpa"])
def test_a_peer_refuses_a_case_the_runners_refuse_in_one_line_and_exit_2(tmp_path, module):
    files = _case_files(tmp_path / "gqa", AttnCase.of((1, 3, 8, 64)))
    kv = _case_files(tmp_path / "kv", AttnCase.of((1, 2, 8, 64)))
    files = {**files, "k": kv["k"], "v": kv["v"]}  # 3 query heads over 2 K/V heads: no case make_inputs makes
    proc = _peer(module, *sdpa.file_args(files))
    assert proc.returncode == 2 and "Hq must be a multiple of Hkv" in one_line(proc.stderr), proc.stderr
    files = _case_files(tmp_path / "causal", AttnCase((1, 2, 40, 64), (1, 2, 16, 64)))
    proc = _peer(module, *sdpa.file_args(files), "--causal")
    assert proc.returncode == 2 and "causal with Sq = 40 > Skv = 16" in one_line(proc.stderr), proc.stderr
    assert not proc.stdout


def test_a_peer_reads_a_grouped_causal_case_and_its_line_names_it(tmp_path):
    files = _case_files(tmp_path, GQA_CAUSAL)
    case = sdpa_io.load_case(*(str(files[n]) for n in ("q", "k", "v", "scales")), causal=True)
    assert (case.shape, case.kv_shape, case.causal) == (GQA_CAUSAL.q_shape, GQA_CAUSAL.kv_shape, True)
    out = io.StringIO()
    with redirect_stdout(out):
        sdpa_io.emit("torch_sdpa", case, [1.0, 2.0], argparse.Namespace(iters=2, warmup=0, timing="cold"), batch=1,
                     flush_bytes=0, arithmetic="test", version="test")
    (line,) = parse.parse_lines(out.getvalue(), SdpaLine, what="test")
    assert sdpa.line_case(line) == GQA_CAUSAL


# ---------------------------------------------------------------- the case through the suite


PEER = """import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from driver.reference.sdpa import reference
def case(argv):
    causal = "--causal" in argv
    rest = [a for a in argv if a != "--causal"]
    args = dict(zip(rest[::2], rest[1::2]))
    with open({log!r}, "a") as f:
        f.write(json.dumps(argv) + "\\n")
    q, k, v = (np.load(args["--" + n]) for n in ("q", "k", "v"))
    ks, vs = np.load(args["--scales"])
    out = reference(q, k, v, float(ks), float(vs), causal=causal) + 0.001
    np.save(args["--out"], out.astype(np.float16))
    print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "shape": list(q.shape), "q_shape": list(q.shape),
                      "kv_shape": list(k.shape), "causal": causal, "iters": 3, "warmup": 0,
                      "samples_us": [{p50!r}] * 3, "timing": args["--timing"], "precision": {tier!r},
                      "arithmetic": "test", "peer_version": "test"}}), flush=True)
"""


def _setup(tmp_path, monkeypatch, folder: str = "bin", **doubles):
    """Runner doubles, peer doubles (torch_sdpa 20 us, cudnn_fp8 40 us) logging to one file, one H200."""
    dev = DeviceInfo(driver_version="test", gpus=[GpuInfo(index=0, name="NVIDIA H200", memory_mib=1)])
    monkeypatch.setattr(device, "probe", lambda: dev)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    exe_dir = tmp_path / folder
    log = sdpa_exes(exe_dir, p50={"baseline": 12.0, "cpasync": 10.0}, **doubles)
    scripts = {}
    for impl, tier, p50 in (("torch_sdpa", "fp16", 20.0), ("cudnn_fp8", "fp8", 40.0)):
        scripts[impl] = tmp_path / f"peer_{impl}.py"
        scripts[impl].write_text(PEER.format(root=str(ROOT), impl=impl, tier=tier, p50=p50, log=str(log)) + SERVE)
    monkeypatch.setattr(peers, "command", lambda impl, *args: [sys.executable, str(scripts[impl]), *args])
    return dev, exe_dir, log


def _opts(name: str, case: AttnCase, **kw) -> RunOptions:
    return RunOptions(shapes=((name, case),), seeds=(0, 1), iters=3, rounds=1, timing=("cold",),
                      distributions=("normal",), **kw)


def test_a_grouped_causal_case_reaches_every_runner_and_peer_and_comes_back_checked(tmp_path, monkeypatch):
    dev, exe_dir, log = _setup(tmp_path, monkeypatch)
    opts = _opts("gqa_causal", GQA_CAUSAL, precisions=("fp16", "fp8"))
    records, skipped = sdpa._shape(opts, exe_dir, dev, LIMITS, "0" * 40, ("torch_sdpa", "cudnn_fp8"), "gqa_causal",
                                   GQA_CAUSAL, copy_gbps=1000.0)
    ran = calls(log)
    assert ran and all("--causal" in c for c in ran)  # every check and every timed run, ours and the peers'
    by = {(r.impl, r.precision, r.seed, r.timing): r for r in records}
    for impl, tier in (("cpasync", "fp16"), ("baseline", "fp8"), ("torch_sdpa", "fp16"), ("cudnn_fp8", "fp8")):
        rec = by[(impl, tier, 0, "cold")]
        assert sdpa.line_case(rec.measurement) == GQA_CAUSAL and rec.measurement.causal
        assert rec.measurement.tflops == pytest.approx(GQA_CAUSAL.flops() / (rec.measurement.p50_us * 1e-6) / 1e12)
        # 20 flops a byte: memory-bound, so the timed records carry hbm_frac over the run's copy bandwidth
        elem = 1 if impl in sdpa.VARIANTS or impl == "cudnn_fp8" else 2
        assert rec.hbm_frac == pytest.approx(GQA_CAUSAL.bytes_moved(elem) / (rec.measurement.p50_us * 1e-6) / 1e12)
    assert by[("cpasync", "fp16", 1, None)].passed and by[("cpasync", "fp16", 1, None)].rel_l2 < 1e-3
    assert by[("torch_sdpa", "fp16", 0, "cold")].rel_l2 > 0  # the peer's error against the same reference
    assert not skipped


def test_a_memory_bound_cases_records_carry_hbm_frac_over_the_runs_copy_bandwidth(tmp_path, monkeypatch):
    dev, exe_dir, _log = _setup(tmp_path, monkeypatch)
    case = AttnCase((2, 8, 1, 64), (2, 2, 256, 64))  # decode-shaped: 8 flops per byte
    assert case.memory_bound
    records, _ = sdpa._shape(_opts("tiny_decode", case), exe_dir, dev, LIMITS, "0" * 40, ("torch_sdpa",),
                             "tiny_decode", case, copy_gbps=100.0)
    by = {(r.impl, r.seed, r.timing): r for r in records}
    assert by[("cpasync", 0, "cold")].hbm_frac == pytest.approx(case.bytes_moved(1) / 10e-6 / 100e9)
    assert by[("torch_sdpa", 0, "cold")].hbm_frac == pytest.approx(case.bytes_moved(2) / 20e-6 / 100e9)
    assert by[("cpasync", 1, None)].hbm_frac is None  # checked only, not timed


def test_a_case_our_runner_does_not_serve_is_not_offered_there_and_its_peers_are_still_timed(tmp_path, monkeypatch):
    dev, exe_dir, log = _setup(tmp_path, monkeypatch, refuse_cases=True)
    opts = _opts("gqa_causal", GQA_CAUSAL)
    records, skipped = sdpa._shape(opts, exe_dir, dev, LIMITS, "0" * 40, ("torch_sdpa",), "gqa_causal", GQA_CAUSAL)
    assert not [r for r in records if r.impl in sdpa.VARIANTS]
    (skip,) = [s for s in skipped if s.impl == "ours/fp16"]
    assert skip.reason.startswith("gqa_causal (q [1, 4, 24, 64], k/v [1, 2, 40, 64], causal (bottom-right)): the "
                                  "runner refused the fp16 tier for this case:") and "serves square MHA only" in skip.reason
    timed = [r for r in records if r.impl == "torch_sdpa" and r.timing == "cold"]
    assert len(timed) == 1 and timed[0].round_p50_us  # the case's benchmark: the peer alone
    # the refusal stands for this case only: a square case after it runs ours as before
    results, _ = gates.evaluate(records, skipped, opts, LIMITS, dev.kind)
    (acc,) = [g for g in results if g.gate == "sdpa/accuracy/ours-vs-torch_sdpa/fp16/normal/gqa_causal"]
    assert acc.status == "not_measured" and any("refused the fp16 tier for this case" in r for r in acc.reasons)
    square, _ = sdpa._shape(_opts("small", AttnCase.of((1, 2, 128, 64))), exe_dir, dev, LIMITS, "0" * 40, (),
                            "small", (1, 2, 128, 64))
    assert {r.impl for r in square} == set(sdpa.VARIANTS)
    assert any(c[c.index("--k") + 1].endswith(".npy") for c in calls(log))


def test_a_line_that_names_another_case_than_asked_is_a_failed_run(tmp_path, monkeypatch):
    dev, exe_dir, _log = _setup(tmp_path, monkeypatch, flip_causal="cpasync")
    with pytest.raises(KernelFailed, match=r"asked for the case q \[1, 4, 24, 64\], k/v \[1, 2, 40, 64\], causal "
                                           r"\(bottom-right\), the line says .* not causal"):
        sdpa._shape(_opts("gqa_causal", GQA_CAUSAL), exe_dir, dev, LIMITS, "0" * 40, (), "gqa_causal", GQA_CAUSAL)


def test_check_case_reads_older_lines_as_the_square_case():
    line = SdpaLine.model_validate({"suite": "sdpa", "impl": "cpasync", "precision": "fp16", "shape": [1, 2, 8, 64],
                                    "iters": 1, "warmup": 0, "p50_us": 1, "p90_us": 1, "mean_us": 1, "std_us": 0,
                                    "min_us": 1, "tflops": 0})
    sdpa.check_case("test", AttnCase.of((1, 2, 8, 64)), line)
    with pytest.raises(KernelFailed):
        sdpa.check_case("test", AttnCase((1, 2, 8, 64), (1, 2, 8, 64), True), line)


# ---------------------------------------------------------------- gates


def _rec(impl: str, config: str, p50: float, *, tier: str = "fp16", mode: str = "cold",
         hbm: float | None = None) -> ArchivedRecord:
    name = config.split("/")[0]
    case = config_case(name)
    line = SdpaLine.model_validate({
        "suite": "sdpa", "impl": impl, "precision": tier, "shape": list(case.q_shape), "q_shape": list(case.q_shape),
        "kv_shape": list(case.kv_shape), "causal": case.causal, "iters": 3, "warmup": 0,
        "samples_us": [p50] * 3, "estimator": "numpy-linear", "samples": 3, "timing": mode,
        "p50_us": p50, "p90_us": p50, "mean_us": p50, "std_us": 0, "min_us": p50, "tflops": 1.0,
        **({"kernel": "wgmma_sm90" if tier == "fp16" else "wgmma_fp8_sm90"} if impl in sdpa.VARIANTS else {})})
    status = "pass" if impl in sdpa.VARIANTS else "not_measured"
    return ArchivedRecord(suite="sdpa", impl=impl, kernel=impl, config=f"{name}/seed0", device="1xH200",
                          git_sha="0" * 40, seed=0, distribution="normal", passed=status == "pass",
                          correctness=Verdict(status=status), measurement=line, round_p50_us=[p50], timing=mode,
                          hbm_frac=hbm)


def config_case(name: str) -> AttnCase:
    return config.parse_shape(name)[1]


def _opts_of(*names: str, precisions=("fp16",)) -> RunOptions:
    return RunOptions(suites=("sdpa",), shapes=tuple(config.parse_shape(n) for n in names), timing=("cold",),
                      precisions=precisions)


def _gate(results, gate: str):
    (g,) = [r for r in results if r.gate == gate]
    return g


@pytest.mark.parametrize("frac, status", [(0.85, "pass"), (0.70, "fail"), (0.81, "inconclusive"),
                                          (None, "not_measured")])
def test_the_hbm_gate_holds_ours_to_its_share_of_the_copy_bandwidth(frac, status):
    recs = [_rec("cpasync", "decode_b8_32k", 100.0, hbm=frac), _rec("baseline", "decode_b8_32k", 120.0, hbm=0.1),
            _rec("torch_sdpa", "decode_b8_32k", 180.0)]
    skipped = [Skip(suite="sdpa", impl="hbm_copy", reason="torch is not installed on this host")]
    results, judged = gates.evaluate(recs, skipped, _opts_of("decode_b8_32k"), LIMITS, "1xH200")
    g = _gate(results, "sdpa/speed/best-hbm_frac/cold/decode_b8_32k")
    assert g.status == status, g
    if frac is None:
        assert "the copy bandwidth was not measured" in g.reasons[0] and "torch is not installed" in g.reasons[1]
    else:
        assert g.reasons[0].startswith(f"cold hbm_frac {frac:.2f} of the measured copy bandwidth (cpasync")
    speed = _gate(results, "sdpa/speed/best-vs-torch_sdpa/cold/decode_b8_32k")  # 180 / 100: 1.80x of 1.6x
    assert speed.status == "pass" and "1.80x" in speed.reasons[0]
    best = next(r for r in judged if r.impl == "cpasync")
    assert {"sdpa/speed/best-hbm_frac/cold/decode_b8_32k"} <= {g.gate for g in results}
    assert best.performance is not None


@pytest.mark.parametrize("causal_peer_us, status", [(50.0, "pass"), (40.0, "fail"), (45.5, "inconclusive")])
def test_the_causal_gate_compares_two_ratios_of_one_run(causal_peer_us, status):
    # non-causal: ours 100, torch 90 -> 0.90x; causal: ours 50, torch `causal_peer_us` -> causal_peer_us / 50; the
    # floor is 1.0 x 0.90x, and the band around it 2 x the noise (4 p50s in a quotient of two ratios): 0.9 +- 0.036
    recs = [_rec("cpasync", "large", 100.0), _rec("torch_sdpa", "large", 90.0),
            _rec("cpasync", "large_causal", 50.0), _rec("torch_sdpa", "large_causal", causal_peer_us)]
    results, _ = gates.evaluate(recs, [], _opts_of("large", "large_causal"), LIMITS, "1xH200")
    g = _gate(results, "sdpa/speed/best-vs-torch_sdpa-causal-vs-noncausal/cold/large_causal")
    assert g.status == status, g
    ratio = causal_peer_us / 50.0
    assert f"causal {ratio:.2f}x at large_causal" in g.reasons[0] and "non-causal 0.90x at large" in g.reasons[0]
    assert "floor 1.00 x 0.90x = 0.90x" in g.reasons[0]
    band = 2 * LIMITS.noise.min_rel_noise * 0.9
    assert (abs(ratio - 0.9) <= band) == (status == "inconclusive")
    assert abs(ratio - 0.9) > LIMITS.noise.min_rel_noise * 0.9 or status == "inconclusive"  # outside one band: decided


def test_the_causal_gate_without_its_twin_in_the_run_says_so():
    recs = [_rec("cpasync", "large_causal", 50.0), _rec("torch_sdpa", "large_causal", 90.0)]
    results, _ = gates.evaluate(recs, [], _opts_of("large_causal"), LIMITS, "1xH200")
    g = _gate(results, "sdpa/speed/best-vs-torch_sdpa-causal-vs-noncausal/cold/large_causal")
    assert g.status == "not_measured" and "the non-causal twin large of large_causal is not in this run" in g.reasons[0]
    text = plan.render(_opts_of("large_causal"), LIMITS, plan.Host(1, "sm_90", "1xH200"), "thresholds.toml")
    assert "its non-causal twin large is not in --shapes" in text


def test_the_inference_gates_of_the_repo_cover_the_issues_targets():
    speed = {(g.peer, g.timing, s): g.min_ratio for g in LIMITS.sdpa.speedup for s in g.names}
    for name, case in config.DECODE_CASES.items():
        for mode in ("cold", "hot"):
            assert speed[("torch_sdpa", mode, name)] == (1.6 if case.skv >= 32768 else 1.0), name
    hbm = {s: g.min_frac for g in LIMITS.sdpa.hbm for s in g.names if g.timing == "cold"}
    assert hbm == {n: 0.80 for n, c in config.DECODE_CASES.items() if c.skv >= 32768}
    for name in config.CHUNKED_PREFILL_CASES:
        for mode in ("cold", "hot"):
            assert speed[("torch_sdpa", mode, name)] == 1.0 and speed[("cudnn_fp8", mode, name)] == 1.0
    causal = {(g.peer, g.timing, s): g.min_ratio for g in LIMITS.sdpa.causal_ratio for s in g.names}
    assert causal == {(p, m, n): 1.0 for p in ("torch_sdpa", "cudnn_fp8") for m in ("cold", "hot")
                      for n in config.CAUSAL_PREFILL_CASES}
    text = (ROOT / "thresholds.toml").read_text()
    for anchor in ("[[sdpa.hbm]]", "[[sdpa.causal_ratio]]"):
        assert "issue 50" in text[text.index(anchor) - 900:text.index(anchor) + 900]  # every new floor says whence


@pytest.mark.parametrize("table, entry, needle", [
    ("sdpa.hbm", 'impl = "best"\ntiming = "cold"\nshape = "large"\nmin_frac = 0.8\n', "large is not memory-bound"),
    ("sdpa.causal_ratio", 'impl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshape = "large"\nmin_ratio = 1.0\n',
     "large is not a causal case"),
    ("sdpa.speedup", ('impl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshape = "large"\nshapes = ["odd"]\n'
                      'min_ratio = 1.0\n'), "give `shape` (one case) or `shapes`"),
    ("sdpa.speedup", ('impl = "best"\npeer = "torch_sdpa"\ntiming = "cold"\nshapes = ["decode_b64_128k"]\n'
                      'min_ratio = 1.0\n'), "malformed shape 'decode_b64_128k'"),
])
def test_a_gate_no_run_can_measure_is_refused_when_the_file_is_read(tmp_path, table, entry, needle):
    path = tmp_path / "t.toml"
    path.write_text((ROOT / "thresholds.toml").read_text() + f"\n[[{table}]]\n{entry}")
    with pytest.raises(ConfigError) as err:
        thresholds.load(path)
    assert needle in err.value.one_line()


# ---------------------------------------------------------------- stress, reports, plan


def test_the_soak_takes_the_case_and_a_case_not_offered_is_not_measured_with_the_runners_words(tmp_path,
                                                                                              monkeypatch):
    from driver.suites.stress import soak

    dev, exe_dir, log = _setup(tmp_path, monkeypatch)
    opts = RunOptions(seeds=(0,), distributions=("normal",), iters=4)
    rec = soak.soak_sdpa(opts, exe_dir, dev, LIMITS, "0" * 40, "cpasync", "gqa_causal", GQA_CAUSAL)
    assert rec.correctness.status == "pass", rec.correctness
    assert all("--causal" in c for c in calls(log))
    _dev, refusing, _log = _setup(tmp_path / "refusing", monkeypatch, refuse_cases=True)
    rec = soak.soak_sdpa(opts, refusing, dev, LIMITS, "0" * 40, "cpasync", "gqa_causal", GQA_CAUSAL)
    assert rec.correctness.status == "not_measured"
    assert "does not offer the fp16 tier for q [1, 4, 24, 64]" in rec.correctness.reasons[0]
    assert "serves square MHA only" in rec.correctness.reasons[0]


def test_compare_lists_the_runs_cases_and_the_limits_table_names_a_presets_shapes():
    from driver import limits, report
    from driver.records import HostInfo, RunArchive

    recs = [_rec("cpasync", "decode_b8_32k", 100.0, hbm=0.85), _rec("torch_sdpa", "decode_b8_32k", 180.0, hbm=0.9),
            _rec("cpasync", "large_causal", 50.0)]
    run = RunArchive(run_id="r", created_utc="2026-11-28T00:00:00Z", command=["test"], git_sha="0" * 40,
                     git_dirty=False, device=DeviceInfo(driver_version="t", gpus=[]),
                     host=HostInfo(hostname="h", os="o", cpu="c", logical_cores=1, ram_gib=1.0), records=recs,
                     ceilings_gbps={sdpa.COPY_CEILING: 4274.0})
    md = report.compare_markdown(run)
    cases = md[md.index("## SDPA cases"):]
    assert "| decode_b8_32k | 8x32x1x128 | 8x8x32768x128 | no | 4.29 | 8 | yes |" in cases
    assert "| large_causal | 2x16x2048x64 | 2x16x2048x64 | yes |" in cases
    assert "| decode_b8_32k/seed0 | cpasync | cpasync | cold (events) |" in md and "| 0.85 |" in md
    assert "copy bandwidth hbm_copy_gpu0: 4274.0 GB/s, read + write" in md
    assert limits.case_words("sdpa", "decode_b8_32k") == "decode_b8_32k (8x32x1x128:8x8x32768x128)"
    assert limits.case_words("sdpa", "mission") == "mission"
    assert limits.case_words("sdpa", "1x8x512x64:causal") == "1x8x512x64:causal"


def test_the_plan_lists_the_inference_gates_and_what_each_needs(capsys):
    opts = _opts_of("decode_b8_32k", "chunk_sq512_8k", precisions=("fp16", "fp8"))
    text = plan.render(opts, LIMITS, plan.Host(1, "sm_90", "1xH200"), "thresholds.toml")
    assert "decode_b8_32k (8x32x1x128:8x8x32768x128)" in text
    for gate in ("sdpa/speed/best-vs-torch_sdpa/cold/decode_b8_32k", "sdpa/speed/best-hbm_frac/cold/decode_b8_32k",
                 "sdpa/speed/best-vs-cudnn_fp8/cold/chunk_sq512_8k"):
        assert gate in text
    assert "not in this run" in text.split("sdpa/speed/best-vs-torch_sdpa-causal-vs-noncausal/cold/large_causal")[0]


COPY = """import json, sys
print(json.dumps({"hbm_copy": True, "bytes": 1 << 30, "timing": "cold", "samples_us": [500.0, 505.0, 510.0],
                  "l2_flush_bytes": 1 << 26}), flush=True)
"""


def test_a_run_measures_the_copy_once_and_every_memory_bound_case_divides_by_it(tmp_path, monkeypatch):
    dev, sm90, _log = _setup(tmp_path, monkeypatch, folder="sm_90")  # the suite reads the build's arch by its name
    (tmp_path / "hbm_copy_double.py").write_text(COPY)
    peer_cmd = peers.command
    monkeypatch.setattr(peers, "command", lambda impl, *args: [sys.executable, str(tmp_path / "hbm_copy_double.py")]
                        if impl == "hbm_copy" else peer_cmd(impl, *args))
    monkeypatch.setattr(peers, "missing", lambda impl, arch=None: None if impl in ("torch_sdpa", "hbm_copy")
                        else f"{impl}: not here (test)")
    decode = AttnCase((2, 8, 1, 64), (2, 2, 256, 64))
    opts = RunOptions(suites=("sdpa",), shapes=(("tiny_decode", decode), ("gqa_causal", GQA_CAUSAL)), seeds=(0,),
                      iters=3, rounds=1, timing=("cold",), distributions=("normal",), workers=False)
    result = sdpa.run(opts, sm90, dev, LIMITS, "0" * 40)
    gbps = 2 * (1 << 30) / 505e-6 / 1e9
    assert result.ceilings_gbps == {sdpa.COPY_CEILING: pytest.approx(gbps)}
    timed = {(r.impl, r.config): r for r in result.records if r.timing == "cold"}
    for impl, elem, p50 in (("cpasync", 1, 10.0), ("torch_sdpa", 2, 20.0)):
        for name, case in (("tiny_decode", decode), ("gqa_causal", GQA_CAUSAL)):
            assert timed[(impl, f"{name}/seed0")].hbm_frac == pytest.approx(
                case.bytes_moved(elem) / (p50 * 1e-6) / (gbps * 1e9))
    assert {s.impl for s in result.skipped} >= {"cudnn_fp8", "flash_attn", "flashinfer"}
    # a run of cases none memory-bound copies nothing
    prefill = AttnCase((1, 8, 1024, 64), (1, 8, 1024, 64), True)  # 341 flops a byte
    none = sdpa.run(opts.model_copy(update={"shapes": (("prefill", prefill),)}), sm90, dev, LIMITS, "0" * 40)
    assert none.ceilings_gbps == {} and not prefill.memory_bound
    assert all(r.hbm_frac is None for r in none.records) and any(r.round_p50_us for r in none.records)


def test_a_skip_one_case_caused_is_said_at_that_cases_gates_only():
    """A peer dropped at one case (its skip reason starts with that case and mode) is not a reason at another case's
    gate; a skip of the whole peer is said everywhere."""
    from driver import gates
    from driver.records import Skip

    skipped = [Skip(suite="sdpa", impl="cudnn_fp8", reason="decode_b8_32k cold: kernel failed: refused"),
               Skip(suite="sdpa", impl="cudnn_fp8", reason="chunk_sq512_8k cold: kernel failed: refused too"),
               Skip(suite="sdpa", impl="cudnn_fp8", reason="optional here: cuDNN may refuse such a case")]
    at_chunk = gates._skip_reasons(skipped, ("cudnn_fp8",), "chunk_sq512_8k")
    assert at_chunk == ["chunk_sq512_8k cold: kernel failed: refused too", "optional here: cuDNN may refuse such a case"]
    assert len(gates._skip_reasons(skipped, ("cudnn_fp8",))) == 3
