"""Compare, function by function, the SASS of the kernels whose names match a pattern in two
`cuobjdump --dump-sass` texts (e.g. a runner before and after a change).  Exit 1 on any difference.

  python3 sass_cmp.py BEFORE.sass AFTER.sass 'Fp8Traits'
"""

import re
import sys


def functions(path: str) -> dict[str, str]:
    out, name, body = {}, None, []
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                out[name] = "".join(body)
            name, body = m.group(1), []
        elif name is not None:
            if line.startswith("\t\t..........") or line.strip().startswith("Fatbin"):
                out[name], name, body = "".join(body), None, []
            else:
                body.append(line)
    if name:
        out[name] = "".join(body)
    return out


def main() -> int:
    before, after, pattern = functions(sys.argv[1]), functions(sys.argv[2]), sys.argv[3]
    names = sorted(k for k in before if re.search(pattern, k))
    bad = 0
    for k in names:
        if k not in after:
            print("missing after:", k)
            bad += 1
        elif before[k] != after[k]:
            print(f"differs: {k} ({len(before[k].splitlines())} / {len(after[k].splitlines())} lines)")
            bad += 1
    for k in sorted(k for k in after if re.search(pattern, k) and k not in before):
        print("new after:", k)
    print(f"{len(names)} functions matching {pattern!r}: {len(names) - bad} identical, {bad} different or missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
