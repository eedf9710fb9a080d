"""The two timing modes on a CPU: the --timing vocabulary, the flags each executable gets, a peer
that cannot do a mode is skipped for that mode only, a line in the wrong mode is refused, and a
gate on a mode the run did not time fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from driver import compare, config, gates, report, thresholds
from driver.errors import ConfigError, KernelFailed, PerfGateFailed
from driver.options import RunOptions
from driver.records import AllreduceLine, ArchivedRecord, RunArchive, SdpaLine, Verdict
from driver.suites import allreduce, sdpa
from driver.suites.common import interleaved
from tests.conftest import run_driver

GATES = thresholds.load()


def test_timing_vocabulary():
    assert config.parse_timing("cold,hot") == ("cold", "hot")
    assert config.parse_timing("device") == ("cold",) and config.parse_timing("host") == ("hot",)
    assert config.fold(config.parse_timing("hot, device,cold"))[0] == ("hot", "cold")  # aliases fold, order kept
    with pytest.raises(ConfigError, match="unknown timing mode 'warm'"):
        config.parse_timing("cold,warm")
    with pytest.raises(ConfigError, match="empty timing mode list"):
        config.parse_timing(",")


def test_default_modes_per_suite():
    opts = RunOptions()
    assert opts.modes("sdpa") == ("cold", "hot") and opts.modes("allreduce") == ("cold",)
    both = RunOptions(timing=("cold", "hot"))
    assert both.modes("allreduce") == both.modes("sdpa") == ("cold", "hot")


def test_bad_timing_on_the_command_line(results_dir):
    proc = run_driver("bench", "--timing", "warm")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == ConfigError.exit_code and len(lines) == 1, proc.stderr
    assert "unknown timing mode 'warm'" in lines[0] and "Traceback" not in proc.stderr
    assert not results_dir.exists()


def test_each_executable_gets_its_method_for_each_mode():
    assert allreduce.timing_flags("ours", "cold", 10) == ["--timing", "device"]
    assert allreduce.timing_flags("upstream", "hot", 10) == ["--timing", "host", "--batch", "10"]
    assert allreduce.timing_flags("nccl", "cold", 10) == ["--timing", "device"]
    assert allreduce.timing_flags("nccl", "hot", 10) == ["--timing", "hot", "--batch", "10"]
    opts = RunOptions(iters=50, warmup=3, batch=7)
    assert sdpa.timing_args(opts, "hot") == ["--iters", "50", "--warmup", "3", "--timing", "hot", "--batch", "7"]


def _printer(line: dict | None, *, fail: str = "") -> list[str]:
    """A stand-in executable: prints `line`, or an `error:` line and exits 3."""
    code = (f"import sys; print({fail!r}, file=sys.stderr); sys.exit(3)" if fail
            else f"print({json.dumps(json.dumps(line))})")
    return [sys.executable, "-c", code]


SDPA = {"suite": "sdpa", "shape": [1, 8, 512, 64], "iters": 10, "warmup": 1, "p50_us": 9.0, "p90_us": 9.5,
        "mean_us": 9.1, "std_us": 0.1, "min_us": 8.9, "tflops": 60.0}
# As an executable prints it: the raw samples, no statistics (the driver's: driver/parse.py)
PRINTED = {**{k: v for k, v in SDPA.items() if not k.endswith("_us") and k != "tflops"}, "samples_us": [8.9, 9.0, 9.5]}


def test_a_peer_that_cannot_do_a_mode_is_skipped_for_that_mode_only():
    cmds = {
        ("cpasync", "cold"): _printer({**PRINTED, "impl": "cpasync", "timing": "cold"}),
        ("torch_sdpa", "cold"): _printer({**PRINTED, "impl": "torch_sdpa", "timing": "cold"}),
        ("cpasync", "hot"): _printer({**PRINTED, "impl": "cpasync", "timing": "hot", "batch": 10}),
        ("torch_sdpa", "hot"): _printer(None, fail="error: hot timing: CUDA graph capture failed: test"),
    }
    seen: list[tuple[str, str]] = []
    samples = interleaved(cmds, SdpaLine, rounds=2, min_rounds=2, target_spread=0.05, timeout_s=60,
                          key=lambda k, ln: (ln.impl, k[1]), on_line=lambda k, _ln: seen.append(k),
                          peers=frozenset({("torch_sdpa", "cold"), ("torch_sdpa", "hot")}))
    assert set(samples.by_key) == {("cpasync", "cold"), ("torch_sdpa", "cold"), ("cpasync", "hot")}
    assert list(samples.peer_failures) == [("torch_sdpa", "hot")]
    assert "CUDA graph capture failed" in samples.peer_failures[("torch_sdpa", "hot")]
    # Interleaved by mode: ours and the peer cold, then hot, every round; the failed peer only once.
    assert seen == [("cpasync", "cold"), ("torch_sdpa", "cold"), ("cpasync", "hot")] * 2


def test_our_failure_in_a_mode_is_not_skipped():
    cmds = {("cpasync", "hot"): _printer(None, fail="error: CUDA cudaStreamBeginCapture: test")}
    with pytest.raises(KernelFailed, match="cudaStreamBeginCapture"):
        interleaved(cmds, SdpaLine, rounds=1, min_rounds=1, target_spread=0.05, timeout_s=60,
                    key=lambda k, ln: (ln.impl, k[1]))


def test_a_line_in_another_mode_is_refused():
    line = AllreduceLine.model_validate({
        "suite": "allreduce", "impl": "nccl", "kernel_requested": "nccl", "kernel_selected": "nccl",
        "kernel_confirmed": "nccl", "dtype": "float32", "ngpus": 2, "bytes": 262144, "elements": 65536, "iters": 10,
        "warmup": 1, "timing": "host", "batch": 10, "p50_us": 40.0, "p90_us": 41.0, "min_us": 39.0, "mean_us": 40.0,
        "algbw_gbps": 6.5, "busbw_gbps": 6.5, "max_abs_err": 0.0, "wrong": 0, "checked": True})
    assert allreduce.line_key(("nccl", "hot"), line) == ("nccl", "hot", 262144)
    with pytest.raises(KernelFailed, match="asked for timing cold, the line says hot"):
        allreduce.line_key(("nccl", "cold"), line)


def test_a_gate_on_a_mode_not_timed_fails(tmp_path):
    """A run that timed hot only has the mission's cold gates not measured, which fails the run (exit 8)
    like a failure, while its hot gate (against torch) is judged; timed cold, the other way round."""
    def rec(impl: str, mode: str, p50: float) -> ArchivedRecord:
        line = SdpaLine.model_validate({**SDPA, "impl": impl, "timing": mode, "p50_us": p50})
        return ArchivedRecord(suite="sdpa", impl=impl, kernel=impl, config="mission/seed0", device="1xH200",
                              git_sha="0" * 40, seed=0, passed=True, correctness=Verdict(status="pass"),
                              measurement=line, round_p50_us=[p50], timing=mode)

    mission = (("mission", (1, 8, 512, 64)),)
    hot = [rec("cpasync", "hot", 9.0), rec("baseline", "hot", 11.0), rec("torch_sdpa", "hot", 20.0)]
    results, _ = gates.evaluate(hot, [], RunOptions(suites=("sdpa",), shapes=mission, timing=("hot",)), GATES,
                                "1xH200")
    speed = [g for g in results if g.kind == "speed"]
    cold_gates = [g for g in speed if "/cold/" in g.gate]
    assert cold_gates and all(g.status == "not_measured" for g in cold_gates)
    assert "cold timing, which this run did not measure" in cold_gates[0].reasons[0]
    assert [g.status for g in speed if "/hot/" in g.gate] == ["pass"]  # 9.0 us vs torch's 20.0
    assert isinstance(gates.exit_decision(speed, tmp_path), PerfGateFailed)
    cold = [r.model_copy(update={"timing": "cold"}) for r in hot]
    results, _ = gates.evaluate(cold, [], RunOptions(suites=("sdpa",), shapes=mission, timing=("cold",)), GATES,
                                "1xH200")
    judged = [g for g in results if g.kind == "speed" and "/cold/" in g.gate]
    assert judged and all(g.status in ("pass", "fail", "inconclusive") for g in judged)
    assert not any("did not measure" in r for g in judged for r in g.reasons)
    assert [g.status for g in results if g.kind == "speed" and "/hot/" in g.gate] == ["not_measured"]


def test_every_gate_names_its_mode(tmp_path):
    text = thresholds.paths.thresholds_file().read_text().replace('timing = "cold"\n', "", 1)
    bad = tmp_path / "t.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match="timing: Field required"):
        thresholds.load(bad)


# The validation runs of experiments/2026-11-23-timing-modes (2x H200, f98118b), read where they are kept.
EXPERIMENT = Path(__file__).parent.parent / "experiments" / "2026-11-23-timing-modes"
SDPA_RUN = RunArchive.model_validate_json((EXPERIMENT / "sdpa_results.json").read_text())
AR_RUN = RunArchive.model_validate_json((EXPERIMENT / "allreduce_results.json").read_text())


def _row(md: str, start: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def test_compare_shows_both_modes_side_by_side_on_a_real_run():
    md = report.compare_markdown(SDPA_RUN)
    assert "| config | candidate | other | cold p50 us (cand / other) | cold speedup | cold reading | cold winner | " \
           "hot p50 us (cand / other) | hot speedup | hot reading | hot winner |" in md
    row = _row(md, "| sdpa mission | cpasync | torch_sdpa |")
    assert row[3:7] == ["9.98 / 13.28", "1.33x (+33.0%)", "significant", "cpasync"]
    assert row[7:11] == ["5.93 / 9.82", "1.66x (+65.6%)", "significant", "cpasync"]
    row = _row(md, "| sdpa 3x5x777x64 | cpasync | baseline |")  # a winner in one mode, a tie in the other
    assert (row[6], row[10]) == ("cpasync", "tie")
    assert "| mission/seed0 | cpasync | sdpa_fp8_cpasync | hot (graph x10) | 5.93 |" in md
    assert "| mission/seed0 | torch_sdpa | torch_sdpa | cold (events, L2 flushed) | 13.28 |" in md


def test_allreduce_hot_names_each_method():
    md = report.compare_markdown(AR_RUN)
    assert _row(md, "| allreduce float32/2gpu/8192B | ours | nccl |")[7:11] == [
        "8.85 / 8.80", "0.99x (-0.6%)", "negligible", "tie"]
    assert "| float32/2gpu/262144B | nccl | nccl | hot (graph x10) | 10.72 |" in md
    assert "| float32/2gpu/262144B | ours | 1stage_push | hot (host batch x10) | 8.78 |" in md
    assert "| float32/2gpu/262144B | ours | 1stage_push | cold (events) | 6.56 |" in md


def test_one_mode_run_has_one_set_of_columns():
    cold = SDPA_RUN.model_copy(update={"records": [r for r in SDPA_RUN.records if r.timing != "hot"]})
    md = report.compare_markdown(cold)
    assert "cold winner" in md and "hot winner" not in md


def test_compare_matches_mode_and_method():
    """A cold number with the L2 flush is never compared with one from before the flush, and the
    cold and hot records of one config are compared each with its own kind."""
    rows, _ = compare.compare(SDPA_RUN, SDPA_RUN, 0.02)
    assert sum("| mission/seed0 |" in r for r in rows) == 6  # 3 impls x 2 modes
    unflushed = [r.model_copy(update={"measurement": r.measurement.model_copy(update={"l2_flush_bytes": 0}),
                                      "timing": None if r.timing == "cold" else r.timing})
                 for r in SDPA_RUN.records]
    legacy = SDPA_RUN.model_copy(update={"records": unflushed})
    rows, _ = compare.compare(legacy, SDPA_RUN, 0.02)
    assert not any("cold (events, L2 flushed)" in r for r in rows[2:])
    assert sum("hot (graph x10)" in r for r in rows[2:]) == 6


def test_plots_are_palette_pngs_of_the_same_picture(monkeypatch):
    """The archived plot is a 256-colour palette PNG (Pillow, matplotlib's own dependency): smaller than matplotlib's
    own PNG of the same figure, the same size in pixels, and no pixel more than a few levels off."""
    pytest.importorskip("matplotlib")
    import io

    import numpy as np
    from PIL import Image

    from driver import plots

    def matplotlib_png(fig, **kw):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", **kw)
        return buf.getvalue()

    packed = plots.render(SDPA_RUN)["sdpa_p50.png"]
    with monkeypatch.context() as m:
        m.setattr(plots, "_png", matplotlib_png)
        plain = plots.render(SDPA_RUN)["sdpa_p50.png"]
    a, b = Image.open(io.BytesIO(plain)), Image.open(io.BytesIO(packed))
    assert a.mode == "RGBA" and b.mode == "P" and a.size == b.size and len(packed) < len(plain)
    diff = np.abs(np.asarray(a.convert("RGB"), dtype=int) - np.asarray(b.convert("RGB"), dtype=int))
    assert np.percentile(diff, 99.9) <= 16


def test_plots_mark_the_mode():
    pytest.importorskip("matplotlib")
    from driver import plots

    out = plots.render(SDPA_RUN)
    assert set(out) == {"sdpa_p50.png"} and out["sdpa_p50.png"].startswith(b"\x89PNG")
    import matplotlib.pyplot as plt

    labels = []
    real_legend = plt.Axes.legend

    def spy(self, *a, **kw):
        labels.extend(self.get_legend_handles_labels()[1])
        return real_legend(self, *a, **kw)

    plt.Axes.legend = spy
    try:
        plots.render(AR_RUN)
        plots.render(SDPA_RUN)
    finally:
        plt.Axes.legend = real_legend
    assert "nccl float32 x2 hot" in labels and "ours 1stage_push float32 x2 cold" in labels
    assert {"cpasync cold", "cpasync hot", "torch_sdpa hot"} <= set(labels)
