"""Build: the static gates of a built target, judged by the build stage before anything runs. ptxas's
resource report (registers, static shared memory, spills, serialized wgmma) against thresholds.toml `[build]`
and `[[build.kernels]]` (per kernel family, or per target), the PTX and SASS expectations of driver/targets.py.
Their configuration is checked when thresholds.toml loads (`unknown_targets`, `unknown_sass`), before any build.

A violation fails the build (exit 4). The run's gates (correctness, accuracy, speed, the exit decision) are
driver/gates.py's; nothing here measures anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from driver import inspect_ptx
from driver.records import TargetBuild
from driver.targets import Target
from driver.thresholds import BuildGates


def static_violations(t: Target, rec: TargetBuild, gates: BuildGates) -> list[str]:
    """Resource gates (ptxas) and instruction expectations (PTX) for one built target."""
    bad: list[str] = []
    where = f"{rec.target} {rec.arch}"
    for k in rec.ptxas:
        g = gates.for_entry(k.name, rec.target)  # [[build.kernels]]: the target's, else its family's; else [build]
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
        unread = [ins for ins in (*exp.require, *exp.forbid) if ins not in rec.sass]
        bad += [f"{rec.target} {rec.arch}: {ins} was not looked for in this build's SASS (read for "
                f"{', '.join(rec.sass) or 'nothing'}; build again to read it)" for ins in unread]
        bad += [f"{rec.target} {rec.arch}: {ins} missing in SASS" for ins in exp.require if rec.sass.get(ins) is False]
        bad += [f"{rec.target} {rec.arch}: {ins} present in SASS" for ins in exp.forbid if rec.sass.get(ins)]
    return bad


def unknown_sass(targets: Iterable[Target]) -> list[str]:
    """Each SASS instruction a target requires or forbids that the inspector does not look for
    (inspect_ptx.SASS_INSTRUCTIONS), named with its target and arch: such a name would never be read, so a
    forbidden one would pass unseen."""
    return [f"{t.name} {exp.arch}: SASS {how} {ins!r}, which the inspector does not look for "
            f"(it reads {', '.join(inspect_ptx.SASS_INSTRUCTIONS)})"
            for t in targets for exp in t.sass
            for how, names in (("requires", exp.require), ("forbids", exp.forbid)) for ins in names
            if ins not in inspect_ptx.SASS_INSTRUCTIONS]


def unknown_targets(gates: BuildGates, targets: Iterable[Target]) -> list[str]:
    """Each [[build.kernels]] entry whose `target` is not a CUDA target of the build table (ptxas reports on
    CUDA targets only), named with its number in the file: its limits would never apply."""
    langs = {t.name: t.lang for t in targets}
    cuda = ", ".join(name for name, lang in langs.items() if lang == "cuda")
    bad = []
    for i, k in enumerate(gates.kernels, 1):
        if k.target is None or langs.get(k.target) == "cuda":
            continue
        why = (f"{k.target} is a {langs[k.target].capitalize()} target, which ptxas reports nothing of"
               if k.target in langs else f"no build target is named {k.target!r}")
        bad.append(f"[[build.kernels]] #{i} (target = {k.target!r}): {why} (CUDA targets: {cuda})")
    return bad
