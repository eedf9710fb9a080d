"""docs/EXTENDING.md, followed: its registry entries for a new SDPA peer and a new SDPA variant (read from the
page's code blocks) are registered in a fixture, and the whole pipeline runs with them on a CPU through
stand-ins (tests/runner_doubles.py) -- records, gates, `--peers/--variants`, COMPARE.md, the build table and
the regenerated schemas. If the page's steps stop being enough, these tests fail.

Nothing else is edited: that each addition is its module plus one entry (a variant: one entry) is what is shown.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from driver import archive, cli, device, paths, peers, records, registry, targets, thresholds
from driver.errors import ConfigError
from driver.suites import sdpa
from tests.runner_doubles import H200X2, ROOT, SDPA, SERVE, fake_build, sdpa_exes

PAGE = ROOT / "docs" / "EXTENDING.md"
BENCH = ["bench", "--no-build", "--arch", "sm_90", "--iters", "5", "--warmup", "0", "--rounds", "1",
         "--shapes", "mission", "--suite", "sdpa", "--distributions", "normal"]
SDPA_US = {"baseline": 10.0, "cpasync": 8.0}
NEW_VARIANT_US, NEW_PEER_US = 7.0, 9.0


def block(tag: str) -> str:
    """The code block that follows `<!-- extending:<tag> -->` on the page."""
    m = re.search(rf"<!-- extending:{tag} -->\s*```\w*\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert m, f"docs/EXTENDING.md has no code block marked extending:{tag}"
    return m.group(1)


def entry(tag: str) -> tuple[str, object]:
    """A registry entry as the page writes it (`"name": Peer(...)`), evaluated in driver/registry.py."""
    (name, value), = eval("{" + block(tag).strip().rstrip(",") + "}", vars(registry)).items()
    return name, value


@pytest.fixture
def added(monkeypatch):
    """The page's peer and variant entries, each registered the way a contributor adds it: one entry."""
    peer_name, peer = entry("peer-entry")
    variant_name, variant = entry("variant-entry")
    assert isinstance(peer, registry.Peer) and isinstance(variant, registry.Variant)
    monkeypatch.setitem(registry.SDPA.peers, peer_name, peer)
    monkeypatch.setitem(registry.SDPA.variants, variant_name, variant)
    return peer_name, variant_name


def test_one_entry_each_reaches_every_derived_list(added, tmp_path, capsys):
    peer_name, variant_name = added
    variant = registry.SDPA.variants[variant_name]
    # The line models, the tiers, the suite's lists, the gates' types.
    line = {"suite": "sdpa", "shape": [1, 8, 512, 64], "iters": 1, "warmup": 0, "p50_us": 1.0, "p90_us": 1.0,
            "mean_us": 1.0, "std_us": 0.0, "min_us": 1.0, "tflops": 1.0}
    assert records.SdpaLine.model_validate({**line, "impl": peer_name, "precision": "fp16"}).impl == peer_name
    assert records.SdpaLine.model_validate({**line, "impl": variant_name, "precision": "fp16"}).impl == variant_name
    with pytest.raises(ValueError, match="registered names"):
        records.SdpaLine.model_validate({**line, "impl": "unregistered", "precision": "fp16"})
    assert records.SDPA_PEER_PRECISION[peer_name] == "fp16"
    assert peer_name in sdpa.PEERS and sdpa.VARIANTS[variant_name] == variant.target
    assert peers.command(peer_name)[1:] == ["-m", f"driver.peers.{peer_name}"]
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + "\n" + block("peer-gate"))
    assert any(g.peer == peer_name for g in thresholds.load(limits).sdpa.speedup)
    # The build table: one target with the variant's defines and the cp.async build's expectations.
    (t,) = [t for t in targets.all_targets() if t.name == variant.target]
    assert t.defines == dict(variant.defines) and t.ptx[0].cp_async and "LDGSTS" in t.sass[0].require
    # The regenerate step: each command of the page is one of the CLI's; schema's enum names both entries.
    lines = [ln.split() for ln in block("regenerate").splitlines() if ln.strip()]
    assert [ln[:3] for ln in lines] == [["python", "-m", "driver"]] * 2 and [ln[3] for ln in lines] == ["schema", "index"]
    for ln in lines:
        with pytest.raises(SystemExit) as done:
            cli.build_parser().parse_args([*ln[3:], "--help"])
        assert done.value.code == 0
    capsys.readouterr()
    assert cli.main(["schema", "--out", str(tmp_path / "schema")]) == 0
    schema = json.loads((tmp_path / "schema" / "sdpa_line.schema.json").read_text())
    assert {peer_name, variant_name} <= set(schema["properties"]["impl"]["enum"])
    changed = sorted(f.name for f in (tmp_path / "schema").glob("*.json")
                     if json.loads(f.read_text()) != json.loads((ROOT / "bench_results/schema" / f.name).read_text()))
    assert changed == ["results.schema.json", "sdpa_line.schema.json"], changed  # what a new SDPA entry regenerates


def _stand_ins(tmp_path: Path, monkeypatch, peer_name: str, variant_name: str) -> Path:
    """The runner doubles for every registered variant (the new one too), a stand-in for the new peer (the
    same double, printing the peer's name; it needs no torch), and a two-H200 host without torch."""
    exe_dir = fake_build(tmp_path, monkeypatch)
    log = sdpa_exes(exe_dir, p50={**SDPA_US, variant_name: NEW_VARIANT_US})
    stand_in = tmp_path / "peer_stand_in.py"
    stand_in.write_text(SDPA.format(python=sys.executable, root=str(ROOT), log=str(log), impl=peer_name,
                                    p50=NEW_PEER_US, corrupt=False, noise={}, refuse=(), first_head_only=False,
                                    refuse_cases=False, flip_causal=False, serve=SERVE))
    real_command = peers.command
    monkeypatch.setattr(peers, "command", lambda name, *args: [sys.executable, str(stand_in), *args]
                        if name == peer_name else real_command(name, *args))
    monkeypatch.setitem(registry.SDPA.peers, peer_name, dataclasses.replace(registry.SDPA.peers[peer_name], needs=()))
    monkeypatch.setattr(device, "probe", lambda: H200X2)
    monkeypatch.setattr(device, "arch_of", lambda index=0: "sm_90")
    monkeypatch.setattr(peers, "_found", lambda module: False)  # no torch: no other Python peer could run
    limits = tmp_path / "thresholds.toml"
    limits.write_text(paths.thresholds_file().read_text() + "\n" + block("peer-gate") + f"""
[[sdpa.speedup]]
impl = "{variant_name}"
peer = "baseline"
timing = "cold"
shape = "mission"
min_ratio = 1.0
""")
    return limits


def _run(results_dir: Path) -> tuple[Path, records.RunArchive]:
    folder = archive.archived_runs(results_dir)[-1]
    return folder, archive.load_run(folder)


def test_the_new_peer_and_variant_run_through_the_pipeline(added, tmp_path, monkeypatch, results_dir, capsys):
    """`bench --peers <new>`: the new variant and peer are checked, timed and gated; the registered peers left
    out are listed as not measured with the reason and do not block the run."""
    peer_name, variant_name = added
    limits = _stand_ins(tmp_path, monkeypatch, peer_name, variant_name)
    code = cli.main([*BENCH, "--peers", peer_name, "--thresholds", str(limits)])
    assert code == 0, capsys.readouterr().err
    folder, run = _run(results_dir)
    timed = {(r.impl, r.timing_mode) for r in run.records if r.round_p50_us}
    assert {(variant_name, "cold"), (peer_name, "cold"), ("cpasync", "cold")} <= timed
    states = {g.gate: g for g in run.gates}
    assert states[f"sdpa/speed/best-vs-{peer_name}/cold/mission"].status == "pass"
    assert states[f"sdpa/speed/{variant_name}-vs-baseline/cold/mission"].status == "pass"
    left_out = states["sdpa/accuracy/ours-vs-torch_sdpa/fp16/normal/mission"]
    assert (left_out.status, left_out.optional) == ("not_measured", True)
    assert registry.not_selected("peers") in left_out.reasons
    compare = (folder / "COMPARE.md").read_text()
    assert f"| {variant_name} | {peer_name} |" in compare and f"| cpasync | {variant_name} |" in compare


def test_variants_leave_out_the_new_variant_and_its_gate_says_so(added, tmp_path, monkeypatch, results_dir, capsys):
    peer_name, variant_name = added
    limits = _stand_ins(tmp_path, monkeypatch, peer_name, variant_name)
    code = cli.main([*BENCH, "--peers", peer_name, "--variants", "baseline,cpasync", "--thresholds", str(limits)])
    assert code == 0, capsys.readouterr().err
    _, run = _run(results_dir)
    assert variant_name not in {r.impl for r in run.records}
    (gate,) = [g for g in run.gates if g.gate == f"sdpa/speed/{variant_name}-vs-baseline/cold/mission"]
    assert (gate.status, gate.optional) == ("not_measured", True)
    assert registry.not_selected("variants") in gate.reasons


def test_an_unknown_peer_or_variant_is_one_line_naming_the_registered(added):
    peer_name, variant_name = added
    for flag in ("--peers", "--variants"):
        with pytest.raises(ConfigError) as err:
            cli._run_options(cli.build_parser().parse_args([*BENCH, flag, "nope"]))
        line = err.value.one_line()
        assert line.startswith(f"configuration error: unknown {flag[2:-1]} 'nope' (choose from ") and "\n" not in line
        assert (peer_name if flag == "--peers" else variant_name) in line
