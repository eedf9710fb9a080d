"""Ratio table of an A/B log: kernel x size, p50 us, GB/s, link_frac, vs 1stage and vs upstream.

Reads every JSON line of the files given (allreduce_bench, upstream_bench, the torch peers; each
line tagged by the `tag` the run script prefixed as `TAG<TAB>{json}`) and the p2p_copy line.
Usage: python3 summarize.py ab.jsonl[.gz] [p2p.json]   (stdlib only: runs on the GPU host as is)
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict


def load(path: str):
    rows = defaultdict(list)  # (tag, dtype, bytes) -> [p50 per round]
    bad = []
    ceiling = None
    for raw in (gzip.open if path.endswith(".gz") else open)(path, "rt"):
        raw = raw.rstrip("\n")
        if "\t" not in raw:
            continue
        tag, text = raw.split("\t", 1)
        if not text.startswith("{") or tag.startswith("soak"):
            continue
        d = json.loads(text)
        if "p2p_copy_gbps" in d:
            ceiling = d["p2p_copy_gbps"]
            continue
        if d.get("wrong", 0) or not d.get("timed", True):
            bad.append((tag, d.get("bytes"), d.get("wrong"), d.get("kernel_confirmed")))
            continue
        rows[(tag, d["dtype"], d["bytes"])].append((d["p50_us"], d.get("kernel_confirmed"), d.get("hold_overruns", 0)))
    return rows, bad, ceiling


def main() -> None:
    rows, bad, ceiling = load(sys.argv[1])
    sizes = sorted({k[2] for k in rows})
    tags = list(dict.fromkeys(k[0] for k in rows))
    dtypes = sorted({k[1] for k in rows})
    print(f"link ceiling (p2p copy GPU0->GPU1): {ceiling} GB/s")
    for dtype in dtypes:
        print(f"\n## {dtype}: p50 us (median over rounds) | GB/s | link_frac | vs 1stage | vs upstream | rounds\n")
        print("| kernel | size | p50 us | GB/s | link_frac | vs 1stage | vs upstream | round p50s | overruns |")
        print("|---|---|---|---|---|---|---|---|---|")
        for tag in tags:
            for size in sizes:
                got = rows.get((tag, dtype, size))
                if not got:
                    continue
                p50 = statistics.median(g[0] for g in got)
                gbps = size / (p50 * 1e-6) / 1e9
                frac = f"{gbps / ceiling:.3f}" if ceiling else "-"
                one = rows.get(("1stage", dtype, size))
                up = rows.get(("upstream", dtype, size))
                r1 = f"{statistics.median(g[0] for g in one) / p50:.3f}" if one else "-"
                ru = f"{statistics.median(g[0] for g in up) / p50:.3f}" if up else "-"
                confirmed = {g[1] for g in got}
                rounds = " / ".join(f"{g[0]:.2f}" for g in got)
                over = sum(g[2] for g in got)
                print(f"| {tag} | {size >> 20 if size >= 1 << 20 else size}{'M' if size >= 1 << 20 else ''} | {p50:.2f} | "
                      f"{gbps:.1f} | {frac} | {r1} | {ru} | {rounds} | {over} |" + ("" if len(confirmed) == 1 else f" {confirmed}"))
    if bad:
        print("\nWRONG / untimed lines:", bad)


if __name__ == "__main__":
    main()
