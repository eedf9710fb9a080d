"""The README's profile numbers from the raw Nsight Compute files in this folder (numpy-free, stdlib only):
  python3 analyze.py metrics      pipe utilization, stall ratios, SM active cycles (m_*.csv.gz), side by side
  python3 analyze.py kv16         the fp16 key chunks' stall samples by role and by phase of the consumer loop
  python3 analyze.py mqa16        the MQA decode kernel's instruction mix and stall reasons
The consumer / producer split and the phases go by SASS address ranges of this build (c6c61eb's sm_90a runner); they
are printed with the numbers so that they can be checked against the SASS listing in s_kv16.csv.gz."""

import collections
import csv
import gzip
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent


def rows_of(name: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in gzip.open(HERE / name, "rt") if line.startswith('"')]
    table = list(csv.reader(lines))
    return table[0], table[1:]


def metrics() -> None:
    names = ["kv16", "kv8", "dec16", "mqa16"]
    data = {}
    for n in names:
        hdr, rows = rows_of(f"m_{n}.csv.gz")
        data[n] = dict(zip(hdr, rows[1]))  # rows[0]: units
    print("metric".ljust(80), *(n.rjust(12) for n in names))
    for k in data["kv16"]:
        if k.startswith(("sm__", "smsp__", "gpc__")):
            print(k[:80].ljust(80), *(data[n].get(k, "-").rjust(12) for n in names))


def source(name: str):
    hdr, rows = rows_of(name)
    hdr, rows = rows[0], rows[1:]  # the first quoted line is the kernel name
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    base = int(rows[0][ix["Address"]], 16)
    out = []
    for r in rows:
        src = r[ix["Source"]].strip()
        out.append({"addr": int(r[ix["Address"]], 16) - base, "src": src,
                    "op": re.sub(r"^@!?U?P\w+\s+", "", src).split(" ")[0],
                    "samples": int(r[ix["Warp Stall Sampling (All Samples)"]] or 0),
                    "exec": int(r[ix["Instructions Executed"]].replace(",", "") or 0),
                    "stalls": {h[6:]: int(r[ix[h]] or 0) for h in stalls}})
    return out


def reasons(insts) -> str:
    c = collections.Counter()
    for i in insts:
        c.update(i["stalls"])
    total = sum(i["samples"] for i in insts) or 1
    return ", ".join(f"{k} {v / total:.0%}" for k, v in c.most_common(8))


def kv16() -> None:
    insts = source("s_kv16.csv.gz")
    producer_from = 0xE800  # the producer's code (the warps of exec count 79844 per loop) lies above this address
    consumer = [i for i in insts if i["addr"] < producer_from]
    producer = [i for i in insts if i["addr"] >= producer_from]
    for role, part in (("consumers", consumer), ("producer", producer)):
        print(f"{role} (addresses {'<' if role == 'consumers' else '>='} {producer_from:#x}): "
              f"{sum(i['samples'] for i in part)} samples; {reasons(part)}")
    # The consumer loop's phases (address ranges of this build; the boundary instructions are printed).
    cuts = [(0x30D0, "V decode (mbarrier wait, LDS, F2FP, STS)"), (0x3920, "fence, warpgroup barrier, V stage release"),
            (0x3970, "wait for the producer's K (KFULL)"), (0x39B0, "Q K^T and P V issue"), (0x3D50, "wgmma wait"),
            (0x3D80, "-"), (0x49E0, "softmax"), (0x5E60, None)]
    n_cons = sum(i["samples"] for i in consumer)
    for (lo, label), (hi, _) in zip(cuts, cuts[1:]):
        part = [i for i in consumer if lo <= i["addr"] < hi]
        first = part[0]["src"][:48] if part else ""
        print(f"  {lo:#07x}-{hi:#07x} {sum(i['samples'] for i in part) / n_cons:6.1%}  {label:45} starts: {first}")
    n_prod = sum(i["samples"] for i in producer)
    for pattern, label in ((r"BAR\.SYNC.*0x1, 0x80", "the named barrier before a K refill (sampled on the next instruction)"),
                           (r"FENCE\.VIEW\.ASYNC|SYNCS\.ARRIVE\.TRANS64\.A1T0 RZ, \[R3", "fence.proxy.async, KFULL arrive")):
        hits = [k for k, i in enumerate(producer) if re.search(pattern, i["src"])]
        take = {k + 1 for k in hits} if "next" in label else set(hits)
        print(f"  producer: {label}: {sum(producer[k]['samples'] for k in take if k < len(producer)) / n_prod:.1%}")


def mqa16() -> None:
    insts = source("s_mqa16.csv.gz")
    total = sum(i["exec"] for i in insts)
    mix = collections.Counter()
    for i in insts:
        mix[i["op"]] += i["exec"]
    print(f"{total} warp instructions; " + ", ".join(f"{k} {v / total:.1%}" for k, v in mix.most_common(8)))
    print(f"{sum(i['samples'] for i in insts)} samples; {reasons(insts)}")


if __name__ == "__main__":
    {"metrics": metrics, "kv16": kv16, "mqa16": mqa16}[sys.argv[1] if len(sys.argv) > 1 else "metrics"]()
