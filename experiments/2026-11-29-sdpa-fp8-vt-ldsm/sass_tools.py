"""Static SASS of runner builds (cuobjdump -sass):
    python3 sass_tools.py same A B          every kernel of A and B instruction for instruction (addresses and
                                            encodings dropped), listing the ones that differ or exist in one only
    python3 sass_tools.py count A [B ...]   per head-dim-128 fp8 kernel (unsplit, no ablation, Q one term), the
                                            static count of LDSM, STSM, PRMT, LDS, STS (all widths) and instructions
CUOBJDUMP names the tool (default: the one in PATH)."""

import collections
import os
import re
import subprocess
import sys

CUOBJDUMP = os.environ.get("CUOBJDUMP", "cuobjdump")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?);")
OPS = ("LDSM", "STSM", "PRMT", "LDS", "STS")


def functions(binary):
    text = subprocess.run([CUOBJDUMP, "-sass", binary], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in text.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            cur = m.group(1)
            funcs[cur] = []
        elif cur and (m := INSN.search(line)):
            funcs[cur].append(re.sub(r"\s+", " ", m.group(1)).strip())
    return funcs


def norm_name(f):  # the runner's anonymous namespace carries a hash of the source path
    return re.sub(r"_GLOBAL__N__[0-9a-f_]+", "_GLOBAL__N_", f)


def same(a, b):
    fa = {norm_name(k): v for k, v in functions(a).items()}
    fb = {norm_name(k): v for k, v in functions(b).items()}
    diff = sorted(k for k in fa.keys() & fb.keys() if fa[k] != fb[k])
    only = sorted(fa.keys() ^ fb.keys())
    print(f"{a} vs {b}: {len(fa)} / {len(fb)} kernels, {len(fa.keys() & fb.keys()) - len(diff)} identical, "
          f"{len(diff)} differ, {len(only)} in one only")
    for k in diff + only:
        print("  ", "differs" if k in diff else "one only", k)
    return not diff and not only


def count(binary):
    print(f"== {binary}")
    for f, insns in sorted(functions(binary).items()):
        m = re.search(r"Fp8TraitsILi128ELb1ELi0ELb0ELi(\d+)ELb0EEELb(\d)E", f)
        if not m:
            continue
        c = collections.Counter(i.split()[0].split(".")[0] if not i.startswith("@") else i.split()[1].split(".")[0]
                                for i in insns)
        print(f"  BN {m.group(1):3s} causal {m.group(2)}: " + " ".join(f"{o} {c[o]}" for o in OPS) +
              f" instructions {len(insns)}")


if __name__ == "__main__":
    if sys.argv[1] == "same":
        sys.exit(0 if same(sys.argv[2], sys.argv[3]) else 1)
    for p in sys.argv[2:]:
        count(p)
