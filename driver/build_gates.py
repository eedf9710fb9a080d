"""Build: the static gates of a built target, judged by the build stage before anything runs. ptxas's
resource report (registers, static shared memory, spills, serialized wgmma) against thresholds.toml `[build]`
and `[[build.kernels]]`, the PTX and SASS expectations of driver/targets.py.

A violation fails the build (exit 4). The run's gates (correctness, accuracy, speed, the exit decision) are
driver/gates.py's; nothing here measures anything.
"""

from __future__ import annotations

from driver.records import TargetBuild
from driver.targets import Target
from driver.thresholds import BuildGates


def static_violations(t: Target, rec: TargetBuild, gates: BuildGates) -> list[str]:
    """Resource gates (ptxas) and instruction expectations (PTX) for one built target."""
    bad: list[str] = []
    where = f"{rec.target} {rec.arch}"
    for k in rec.ptxas:
        g = gates.for_entry(k.name)  # the kernel family's own gates (thresholds.toml [[build.kernels]]) or the defaults
        if k.registers > g.max_registers_per_thread:
            bad.append(f"{where} {k.name}: {k.registers} registers > {g.max_registers_per_thread}")
        if k.smem_bytes > g.max_smem_bytes_per_block:
            bad.append(f"{where} {k.name}: {k.smem_bytes} B static smem > {g.max_smem_bytes_per_block}")
        spill = k.spill_store_bytes + k.spill_load_bytes
        if spill > g.max_spill_bytes:
            bad.append(f"{where} {k.name}: {k.spill_store_bytes} B spill stores, {k.spill_load_bytes} B spill loads")
        if k.wgmma_serialized and g.serialized_ok(k.name) is None:  # every warpgroup MMA waits for the one before
            bad.append(f"{where} {k.name}: ptxas serialized its wgmma ({k.wgmma_serialized})")
    if t.lang == "cuda" and not rec.ptxas:
        bad.append(f"{where}: no ptxas report was parsed")
    for exp in t.ptx:
        hits = [k for k in rec.ptx_kernels if exp.pattern in k.name]
        if not hits:
            bad.append(f"{where}: no PTX kernel matches {exp.pattern!r}")
            continue
        for k in hits:
            if exp.cp_async is not None and k.has_cp_async != exp.cp_async:
                bad.append(f"{where} {k.name}: cp.async {'missing' if exp.cp_async else 'present'} in PTX")
            if exp.mma is not None and k.has_mma != exp.mma:
                bad.append(f"{where} {k.name}: mma {'missing' if exp.mma else 'present'} in PTX")
    return bad + sass_violations(t, rec)


def sass_violations(t: Target, rec: TargetBuild) -> list[str]:
    """The target's SASS expectations for this arch, where the SASS was read (cuobjdump present)."""
    if rec.sass is None:
        return []
    bad = []
    for exp in (e for e in t.sass if e.arch == rec.arch):
        bad += [f"{rec.target} {rec.arch}: {ins} missing in SASS" for ins in exp.require if not rec.sass.get(ins)]
        bad += [f"{rec.target} {rec.arch}: {ins} present in SASS" for ins in exp.forbid if rec.sass.get(ins)]
    return bad
