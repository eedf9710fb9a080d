"""The ptxas -v report of runner builds, per fp8 head-dim-128 kernel: registers, spill bytes (stores / loads) and
the wgmma serialization warnings (C7510-C7512, C7520; C7519 is an informational note):
    python3 ptxas_table.py BUILD_LOG [BUILD_LOG ...]"""

import pathlib
import re
import sys

FUNC = re.compile(r"Function properties for (\S+)")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Compiling entry function '(\S+)'|Used (\d+) registers")
WARN = re.compile(r"\((C75(?:1[0-28]|20))\)[^']*'(\S+?)'")


def table(path):
    text = pathlib.Path(path).read_text(errors="replace")
    spills, regs, warns = {}, {}, {}
    cur = None
    for line in text.splitlines():
        if m := FUNC.search(line):
            cur = m.group(1)
        elif cur and (m := SPILL.search(line)):
            spills[cur] = (int(m.group(1)), int(m.group(2)))
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            cur_entry = m.group(1)
            regs.setdefault(cur_entry, None)
        elif (m := re.search(r"Used (\d+) registers", line)) and regs:
            last = list(regs)[-1]
            if regs[last] is None:
                regs[last] = int(m.group(1))
        if m := WARN.search(line):
            warns.setdefault(m.group(2), set()).add(m.group(1))
    rows = []
    for f, (st, ld) in spills.items():
        if "Fp8Traits" not in f or "ILi128E" not in f:
            continue
        m = re.search(r"Fp8Traits(N?)ILi128ELb(\d)ELi(\d)ELb(\d)E(?:Li(\d)E)?Li(\d+)ELb(\d)EEELb(\d)E", f)
        name = (f"BN {m.group(6)} abl {m.group(3)} split {m.group(4)} q2 {m.group(7)} causal {m.group(8)}"
                if m else f)
        rows.append((name, regs.get(f), st, ld, ",".join(sorted(warns.get(f, ())))))
    return rows


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"== {p}")
        for name, r, st, ld, w in sorted(table(p), key=lambda x: x[0]):
            print(f"  {name:45s} regs {r} spill {st}/{ld} {w}")
