"""Run 2, static: compare the SASS of a runner build with the run-time warpgroup rule against two builds
of the commit before it (0bccf03) with SDPA_SM90_NCWG3_D64=0 (two consumer warpgroups) and =1 (three).

  python sass_compare.py NEW MAIN0 MAIN1     (each a printf pattern with %d for USE_CP_ASYNC 0/1,
                                             e.g. /tmp/new_a%d; runners built as pack2.sh builds them)

Per kernel, the instruction and encoding lines of `cuobjdump -sass` (addresses, mnemonics, the 64-bit
encoding words) are compared as text. New `Fp8Traits3<64,A,ABL>` (three warpgroups) is compared with
MAIN1's `Fp8Traits<64,A,ABL,false>`; every other kernel with MAIN0's of the same symbol, and, except the
two-warpgroup head-dim-64 unsplit kernels (three in MAIN1), with MAIN1's too. The anonymous-namespace
hash in a symbol (it depends on the source path) is ignored. Exit 0 when everything matches.
"""

import glob
import re
import shutil
import subprocess
import sys

CUO = shutil.which("cuobjdump") or glob.glob("/work/devvenv/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump")[0]


def funcs(exe: str) -> dict[str, list[str]]:
    out = subprocess.run([CUO, "-sass", exe], capture_output=True, text=True, check=True).stdout
    fs: dict[str, list[str]] = {}
    cur = None
    for line in out.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N__X_", m.group(1))
            fs[cur] = []
        elif cur is not None and line.strip().startswith("/*"):
            fs[cur].append(line.strip())  # "/*0010*/ INSTR ; /* 0x... */" and the second encoding word
    return fs


def main(new_pat: str, main0_pat: str, main1_pat: str) -> int:
    bad = 0
    for a in (0, 1):
        new, r0, r1 = funcs(new_pat % a), funcs(main0_pat % a), funcs(main1_pat % a)
        print(f"USE_CP_ASYNC={a}: {len(new)} kernels in the new build, {len(r0)} in main NCWG3=0, {len(r1)} in main NCWG3=1")
        for name, body in sorted(new.items()):
            m3 = re.search(r"10Fp8Traits3ILi64ELb([01])ELi([0-2])EEE", name)
            if m3:
                ref = name.replace(m3.group(0), f"9Fp8TraitsILi64ELb{m3.group(1)}ELi{m3.group(2)}ELb0EEE")
                checks = [("main NCWG3=1", r1.get(ref))]
            else:
                checks = [("main NCWG3=0", r0.get(name))]
                if not re.search(r"9Fp8TraitsILi64ELb[01]ELi[0-2]ELb0E", name):
                    checks.append(("main NCWG3=1", r1.get(name)))
            res = ", ".join(f"{'identical' if other == body else 'DIFFERENT'} to {tag}" for tag, other in checks)
            bad |= "DIFFERENT" in res
            print(f"  {len(body):5d} lines, {res}: {name[:120]}")
        missing = sorted(set(r0) - set(new))
        if missing:
            print("  in main NCWG3=0, not in the new build:", missing)
            bad = 1
    print("all identical" if not bad else "DIFFERENCES")
    return bad


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
