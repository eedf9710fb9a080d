#!/usr/bin/env python3
"""Markdown tables of ce_plus_sm rows: python3 summarize.py ce_plus_sm_4gpu.jsonl [ce_plus_sm_2gpu.jsonl ...]"""
import json
import sys


def mib(b):
    return f"{b / 2**20:g} MiB"


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        header, rows = {}, []
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                r = json.loads(line)
                if "S_bytes" in r:
                    rows.append(r)
                else:
                    header.update(r)
        if not rows:
            print(f"{path}: no rows\n")
            continue
        print(f"### {path}: {rows[0]['ngpus']} GPUs" + (f", {header['device']}" if "device" in header else ""))
        print()
        print("| S | f | sm_order | sm_blocks | median us | GB/s per GPU | min / max us | ce us (GB/s) | sm us (GB/s) | bad_bytes |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            ce = f"{r['ce_only_us']:.1f} ({r['ce_gbps']:.1f})" if r["ce_bytes_per_gpu"] else "-"
            sm = f"{r['sm_only_us']:.1f} ({r['sm_gbps']:.1f})" if r["sm_bytes_per_gpu"] else "-"
            print(f"| {mib(r['S_bytes'])} | {r['f']:.2f} | {r['sm_order']} | {r['sm_blocks']} | {r['median_us']:.1f} "
                  f"| {r['gbps_per_gpu']:.1f} | {r['min_us']:.1f} / {r['max_us']:.1f} | {ce} | {sm} | {r['bad_bytes']} |")
        print()
        for s in sorted({r["S_bytes"] for r in rows}):
            at = [r for r in rows if r["S_bytes"] == s]
            best = max(at, key=lambda r: r["gbps_per_gpu"])
            ce = [r for r in at if r["f"] == 0]
            ce_txt = f"; copy engine alone (f 0): {ce[0]['gbps_per_gpu']:.1f}" if ce else ""
            print(f"- {mib(s)}: best {best['gbps_per_gpu']:.1f} GB/s per GPU (f {best['f']:.2f}, "
                  f"{best['sm_order']}, {best['sm_blocks']} blocks){ce_txt}; bad_bytes total {sum(r['bad_bytes'] for r in at)}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
