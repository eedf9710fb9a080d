"""The numbers of ../README.md's profile section from the stored Nsight Compute files: per launch the duration, active
cycles, instructions and the busiest pipes and stall reasons (m_*.csv.gz), and the stall samples and executed
instructions by opcode (s_*.csv.gz).   python3 analyze.py"""
import collections
import csv
import gzip
import io
import pathlib

here = pathlib.Path(__file__).parent


def rows_of(path: pathlib.Path, first: str) -> list[list[str]]:
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return float("nan")


for name in ("g8", "small", "small_causal"):
    rows = rows_of(here / f"m_{name}.csv.gz", '"ID"')
    d = dict(zip(rows[0], rows[2]))
    print(f"m_{name}: {num(d['gpu__time_duration.sum']) / 1000:.1f} us, active cycles avg {num(d['sm__cycles_active.avg']):.0f} "
          f"max {num(d['sm__cycles_active.max']):.0f}, instructions {num(d['smsp__inst_executed.sum']):.0f}")
    pipes = sorted(((num(v), k) for k, v in d.items() if k.startswith("sm__pipe_") and k.endswith("pct_of_peak_sustained_active")),
                   reverse=True)[:4]
    print("  pipes: " + ", ".join(f"{k[9:].split('_cycles')[0]} {v:.1f}%" for v, k in pipes))
    stalls = sorted(((num(v), k) for k, v in d.items() if "warps_issue_stalled" in k), reverse=True)[:7]
    print("  stalls per issue: " + ", ".join(f"{k.split('stalled_')[1].split('_per_issue')[0]} {v:.2f}" for v, k in stalls))
for name in ("g8", "small_causal"):
    rows = rows_of(here / f"s_{name}.csv.gz", '"Address"')
    h = rows[0]
    src, smp = h.index("Source"), h.index("Warp Stall Sampling (All Samples)")
    exe = h.index("Instructions Executed")
    by, ex = collections.Counter(), collections.Counter()
    for r in rows[1:]:
        words = r[src].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        by[op] += num(r[smp]) if r[smp] else 0.0
        ex[op] += num(r[exe]) if r[exe] else 0.0
    total = sum(by.values())
    print(f"s_{name}: {total:.0f} samples; " + ", ".join(f"{op} {100 * v / total:.1f}% ({ex[op] / 1e6:.2f}M)"
                                                        for op, v in by.most_common(12)))
