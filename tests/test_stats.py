"""One estimator for every executable and peer (driver/stats.py, docs/TIMING.md "One estimator").

The same raw samples, printed in each executable's line shape (the Mojo runner's and the SDPA runner's, from lines
captured on H200s with their statistics replaced by the samples, as they print them now; the torch allreduce and
SDPA peers' from their own line functions), must come out of the one parser with one p50, p90 and min, and with the
estimator and sample count named. Before it, the Mojo executables took the lower median, the torch allreduce peers
the upper one, and the SDPA runner and peers interpolated: on an even count, three different p50s.
"""

import argparse
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from driver import stats
from driver.errors import KernelFailed
from driver.parse import DRIVER_FIELDS, parse_lines
from driver.peers import sdpa_io, torch_allreduce
from driver.records import AllreduceLine, SdpaLine
from driver.suites.common import interleaved

ROOT = Path(__file__).resolve().parent.parent
CAPTURED = ROOT / "tests" / "data" / "captured"
# An even count, unevenly spaced: the lower median (9.0), the upper one (11.0) and their mean (10.0) all differ.
SAMPLES = [12.0, 9.0, 30.0, 8.5, 11.0, 7.0, 9.5, 13.0]

P50 = (9.5 + 11.0) / 2  # sorted: 7, 8.5, 9, 9.5, 11, 12, 13, 30; numpy linear: the middle pair's mean


def _executable_line(path: Path, model: type, **where) -> dict:
    """A captured line of our executable as it prints today: its own statistics gone, the raw samples in."""
    for raw in path.read_text().splitlines():
        d = json.loads(raw)
        if all(d.get(k) == v for k, v in where.items()):
            return {**{k: v for k, v in d.items() if k not in DRIVER_FIELDS[model]}, "samples_us": SAMPLES}
    raise AssertionError(f"no line with {where} in {path.name}")


def _mojo_line() -> str:
    return json.dumps(_executable_line(CAPTURED / "allreduce_h200x2.jsonl", AllreduceLine, impl="ours",
                                       bytes=1048596, dtype="float32"))


def _sdpa_runner_line() -> str:
    return json.dumps(_executable_line(CAPTURED / "sdpa_h200.jsonl", SdpaLine, impl="cpasync"))


def _torch_allreduce_line() -> str:
    ns = argparse.Namespace(dtype="float32", ngpus=2, iters=8, warmup=1, timing="cold", batch=1, check=1)
    return json.dumps(torch_allreduce.line(ns, "nccl", 262144, 65536, list(SAMPLES),
                                           {**torch_allreduce.NOT_CHECKED, "wrong": 0}))


def _sdpa_peer_line() -> str:
    ns = argparse.Namespace(iters=8, warmup=1, timing="cold")
    out = io.StringIO()
    with redirect_stdout(out):
        q, kv = np.zeros((1, 8, 512, 64), np.float16), np.zeros((1, 8, 512, 64), np.uint8)
        case = sdpa_io.SdpaCase(q=q, k_u8=kv, v_u8=kv, k_scale=1.0, v_scale=1.0)
        sdpa_io.emit("torch_sdpa", case, list(SAMPLES), ns, batch=1, flush_bytes=0, arithmetic="fp16",
                     version="test")
    return out.getvalue()


SHAPES = {"mojo runner": (_mojo_line, AllreduceLine), "sdpa runner": (_sdpa_runner_line, SdpaLine),
          "torch allreduce peer": (_torch_allreduce_line, AllreduceLine), "sdpa peer": (_sdpa_peer_line, SdpaLine)}


def test_every_line_shape_gives_one_p50_from_the_same_samples():
    got = {}
    for name, (text, model) in SHAPES.items():
        (line,) = parse_lines(text(), model, what=name)
        got[name] = (line.p50_us, line.p90_us, line.min_us, line.estimator, line.samples)
        assert line.samples_us == SAMPLES  # archived as timed, in order
    want = (P50, float(np.percentile(SAMPLES, 90)), 7.0, "numpy-linear", len(SAMPLES))
    assert got == dict.fromkeys(SHAPES, want)
    assert P50 not in (sorted(SAMPLES)[len(SAMPLES) // 2 - 1], sorted(SAMPLES)[len(SAMPLES) // 2])


def test_what_follows_from_the_p50_is_the_drivers():
    (ar,) = parse_lines(_torch_allreduce_line(), AllreduceLine, what="nccl")
    assert ar.algbw_gbps == pytest.approx(262144 / (P50 * 1e-6) / 1e9)
    assert ar.busbw_gbps == pytest.approx(ar.algbw_gbps * 2 * (2 - 1) / 2)
    (sd,) = parse_lines(_sdpa_peer_line(), SdpaLine, what="torch_sdpa")
    assert sd.tflops == pytest.approx(4 * 1 * 8 * 512 * 512 * 64 / (P50 * 1e-6) / 1e12)
    assert sd.std_us == pytest.approx(float(np.std(SAMPLES)))


def test_the_definition_is_numpys_linear_percentile():
    """docs/TIMING.md's definition, by hand: position q/100 * (n - 1), interpolated between its neighbours."""
    s = stats.summarize(SAMPLES)
    ordered = sorted(SAMPLES)
    pos = 0.9 * (len(ordered) - 1)
    lo = int(pos)
    assert s.p90_us == pytest.approx(ordered[lo] + (ordered[lo + 1] - ordered[lo]) * (pos - lo))
    assert (s.p50_us, s.min_us, s.samples) == (P50, 7.0, 8)
    assert s.spread == pytest.approx((s.p90_us - s.p50_us) / s.p50_us)
    assert stats.summarize([]) == stats.Summary(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)  # untimed: nothing, all 0
    assert stats.spread([10.0, 11.0, 12.0, 30.0]) == pytest.approx(20.0 / 11.5)


def test_no_executable_prints_a_statistic_of_its_own():
    """The sources print the samples and no p50: the Mojo runner's JSON line, the SDPA runner's."""
    mojo = (ROOT / "kernels_mojo" / "benchlib" / "runner.mojo").read_text()
    cuda = (ROOT / "kernels_cuda" / "sdpa_fp8" / "runner.cu").read_text()
    for text in (mojo, cuda):
        assert "samples_us" in text and not re.search(r'p50_us\\?":', text)


@pytest.mark.parametrize("extra", [{"p50_us": 1.0}, {"tflops": 3.0}, {"estimator": "numpy-linear"}])
def test_a_line_that_brings_its_own_statistics_is_refused(extra):
    line = json.loads(_sdpa_runner_line()) | extra
    with pytest.raises(KernelFailed, match="brings its own"):
        parse_lines(json.dumps(line), SdpaLine, what="runner")


@pytest.mark.parametrize("bad", [[1.0, -2.0], "1,2", [True], [1.0, "x"]])
def test_samples_that_are_not_times_are_one_clear_error(bad):
    with pytest.raises(KernelFailed, match="malformed output"):
        parse_lines(json.dumps(json.loads(_mojo_line()) | {"samples_us": bad}), AllreduceLine, what="runner")


def test_a_timed_line_without_samples_is_refused_by_the_rounds():
    """A stale executable printing only its own statistics is never timed against the peers (exit 6)."""
    old = (CAPTURED / "sdpa_h200.jsonl").read_text().splitlines()[0]
    cmd = ["python3", "-c", f"print({old!r})"]
    with pytest.raises(KernelFailed, match="no samples_us"):
        interleaved({("cpasync", "cold"): cmd}, SdpaLine, rounds=1, min_rounds=1, target_spread=0.0, timeout_s=60,
                    key=lambda k, ln: (ln.impl, k[1]))


def test_older_lines_still_parse_and_name_no_estimator():
    """Lines captured before the samples (and every archived record of them) keep their executable's numbers."""
    (line,) = parse_lines((CAPTURED / "allreduce_h200x2.jsonl").read_text().splitlines()[1], AllreduceLine, what="old")
    assert line.samples_us is None and line.estimator is None and line.samples is None and line.p50_us > 0


@pytest.mark.parametrize("name", ["allreduce_samples_h200x2.jsonl", "upstream_samples_h200x2.jsonl"])
def test_captured_lines_with_samples_get_the_drivers_p50(name):
    """Lines our Mojo executables printed on 2x H200 (2026-11-28, bundle of 00ec369): raw samples only, and the
    driver's p50 of each is numpy's linear median of exactly those samples (20 per line: an even count, where
    the old nearest-rank rule took the lower one)."""
    lines = parse_lines((CAPTURED / name).read_text(), AllreduceLine, what=name)
    assert len(lines) == 2
    for line in lines:
        assert line.estimator == stats.ESTIMATOR and line.samples == len(line.samples_us) == 20
        assert line.p50_us == pytest.approx(float(np.percentile(line.samples_us, 50)))
        assert line.min_us == min(line.samples_us)
