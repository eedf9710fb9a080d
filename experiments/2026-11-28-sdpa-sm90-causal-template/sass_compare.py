"""The Hopper SDPA kernels of two or three builds side by side, from their SASS (cuobjdump -sass) and ptxas reports.

    python3 sass_compare.py OLD.cubin OLD.ptxas.txt NEW.cubin NEW.ptxas.txt [CUR.cubin CUR.ptxas.txt]
    python3 sass_compare.py --diff KEY OLD.cubin NEW.cubin      # the per-tile loop's differing instructions

A kernel is keyed by its traits (the mangled Fp16Traits / Fp8Traits / Fp8Traits3 arguments; "_C" for the causal
kernel, sdpa_fp8_sm90_kernel<Traits, true>). Per kernel without ablation: registers (ptxas), SASS instructions (NOPs
left out), and the instructions of the per-tile loop: the innermost backward branch whose body holds a warpgroup MMA
(the consumers' loop over K/V tiles; static count, including the masked tiles' branch).
"""

import collections
import difflib
import re
import subprocess
import sys


def sass(cubin):
    out = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def regs(ptxas_txt):
    r, cur = {}, None
    with open(ptxas_txt) as f:
        for line in f:
            m = re.search(r"Compiling entry function '(\S+)'", line) or re.search(r"Function properties for (\S+)", line)
            if m:
                cur = m.group(1)
            m = re.search(r"Used (\d+) registers", line)
            if m and cur:
                r[cur] = int(m.group(1))
    return r


def key(name):
    """Fp16TraitsILi64ELb1ELi0ELb0EE (90347d1: kernel<Traits>; since: kernel<Traits, CAUSAL>, + "_C" if causal)."""
    m = re.search(r"sdpa_fp8_sm90_kernelINS_\d+(\w+?EE)(ELb[01])?EEEv", name)
    if not m:
        return None
    return m.group(1) + ("_C" if m.group(2) == "ELb1" else "")


def ablation(k):
    """The ablation argument of a key (0 none, 1 no_compute, 2 no_loads): the third template argument."""
    return int(re.match(r"\w+?ILi\d+ELb[01]ELi(\d)", k).group(1))


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]


def tile_loop(ins):
    """The instructions of the innermost backward-branch loop that holds a GMMA (NOPs left out)."""
    best = None
    for pc, i in ins:
        if not re.match(r"(@!?U?P\w+\s+)?BRA\b", i):
            continue
        t = re.search(r"0x([0-9a-f]+)", i)
        if not t or int(t.group(1), 16) >= pc:
            continue
        lo = int(t.group(1), 16)
        body = [x for p, x in ins if lo <= p <= pc]
        if any("GMMA" in x for x in body) and (best is None or pc - lo < best[1] - best[0]):
            best = (lo, pc)
    return [x for p, x in ins if best and best[0] <= p <= best[1] and opcode(x) != "NOP"]


def stats(cubin, ptxas):
    funcs, rg = sass(cubin), regs(ptxas)
    out = {}
    for n, ins in funcs.items():
        k = key(n)
        if k:
            out[k] = (rg.get(n), sum(1 for _, x in ins if opcode(x) != "NOP"), len(tile_loop(ins)))
    return out


def table(old, new, cur=None):
    print("| kernel (traits) | regs old / new | SASS old" + (" / cur" if cur else "") + " / new (new, causal) "
          "| per-tile loop old" + (" / cur" if cur else "") + " / new (new, causal) |")
    print("|---|---|---|---|")
    for k in sorted(k for k in old if ablation(k) == 0):
        o, n, c, nc = old[k], new.get(k), (cur or {}).get(k), new.get(k + "_C")
        if n is None:
            continue
        mid1, mid2 = (f" / {c[1]}", f" / {c[2]}") if c else ("", "")
        print(f"| `{k}` | {o[0]} / {n[0]} | {o[1]}{mid1} / {n[1]} ({nc[1] if nc else '-'}) "
              f"| {o[2]}{mid2} / {n[2]} ({nc[2] if nc else '-'}) |")


def diff(k, a_cubin, b_cubin):
    a = tile_loop(next(v for n, v in sass(a_cubin).items() if key(n) == k))
    b = tile_loop(next(v for n, v in sass(b_cubin).items() if key(n) == k))
    sm = difflib.SequenceMatcher(a=[opcode(x) for x in a], b=[opcode(x) for x in b], autojunk=False)
    ca, cb = collections.Counter(), collections.Counter()
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            ca.update(opcode(x) for x in a[i1:i2])
            cb.update(opcode(x) for x in b[j1:j2])
    print("only in the first:", dict(ca - cb))
    print("only in the second:", dict(cb - ca))


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        diff(*sys.argv[2:5])
    else:
        args = sys.argv[1:]
        table(stats(*args[0:2]), stats(*args[2:4]), stats(*args[4:6]) if len(args) >= 6 else None)
