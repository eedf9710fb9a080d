"""The tables of README.md from the stored raw data: python3 analyze.py

calls 1, 3, 5, 6, 7, 9 (ab_ps.py results): p50 per case and runner, the median of the rounds, and each runner's time over base's;
call 2 (profile.sh): pipe activity, issue and cycles of base, ps32 and cuDNN FP8, and the stall samples by reason;
call 8 (trace.py): the timeline of block 0's two consumer warpgroups, per-tile phases and how their softmax phases overlap;
call 4 (profile_cudnn_sass.sh, reduced to call4_1xH200_cudnn_summary.json): the synchronization and MMA instructions
of cuDNN FP8's per-tile loop in order, its opcode counts and stall samples."""
import collections
import csv
import gzip
import io
import json
import pathlib
import statistics

import numpy as np

here = pathlib.Path(__file__).parent


def records(call: int) -> list[dict]:
    with gzip.open(here / f"call{call}" / f"call{call}_1xH200_results.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def timing_table(call: int) -> None:
    recs = records(call)
    t = collections.defaultdict(list)
    for r in recs:
        if r.get("phase") == "time" and r.get("p50_us"):
            t[(r["case"], r["impl"])].append(r["p50_us"])
    impls = list(dict.fromkeys(i for _, i in t))
    cases = list(dict.fromkeys(c for c, _ in t))
    print(f"call {call}: p50 us (median of rounds); in brackets time / base")
    print("| case | " + " | ".join(impls) + " |")
    for c in cases:
        base = statistics.median(t[(c, "base")])
        cells = []
        for i in impls:
            v = statistics.median(t[(c, i)]) if t.get((c, i)) else None
            cells.append("" if v is None else f"{v:.1f}" + ("" if i == "base" else f" ({v / base:.3f})"))
        print(f"| {c} | " + " | ".join(cells) + " |")
    same = [(r["case"], r["a"], r["b"], r["equal"]) for r in recs if r.get("phase") == "bitwise"]
    print(f"  bit for bit: {sum(s[3] for s in same)} of {len(same)} pairs equal")
    for r in recs:
        if r.get("phase") == "san":
            print(f"  {r['impl']} {r['tool']}: rc {r['rc']}  {r.get('tail', [''])[0] if r.get('tail') else ''}")
    print()


def ncu_raw(name: str) -> dict:
    with gzip.open(here / "call2" / f"call2_1xH200_m_{name}.csv.gz", "rt") as f:
        rows = list(csv.reader(f))
    i = next(k for k, r in enumerate(rows) if r and r[0] == "ID")
    head = rows[i]
    data = [r for r in rows[i + 2:] if len(r) == len(head)]
    return dict(zip(head, data[-1]))


def num(x: str) -> float:
    return float(x.replace(",", ""))


def sass_rows(path: pathlib.Path) -> tuple[list[str], list[list[str]]]:
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]


def stalls(path: pathlib.Path) -> None:
    head, rows = sass_rows(path)
    src = head.index("Source")
    cols = [i for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    tot, byop = collections.Counter(), collections.defaultdict(collections.Counter)
    for r in rows:
        words = r[src].split()
        op = (words[1] if words and words[0].startswith("@") else words[0] if words else "").split(".")[0]
        for i in cols:
            v = float(r[i] or 0)
            tot[head[i]] += v
            byop[head[i]][op] += v
    total = sum(tot.values())
    for k, v in tot.most_common(6):
        tops = ", ".join(f"{o} {c / total * 100:.1f}%" for o, c in byop[k].most_common(3))
        print(f"    {k[6:]:16s} {v / total * 100:5.1f}%   ({tops})")


def profile() -> None:
    names = ("base", "ps32", "cudnn")
    m = {n: ncu_raw(n) for n in names}
    keys = [("duration us", "gpu__time_duration.sum", 1e-3), ("SM cycles active (avg)", "sm__cycles_active.avg", 1),
            ("warp instructions", "smsp__inst_executed.sum", 1),
            ("tensor pipe %", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 1),
            ("XU (MUFU) %", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1),
            ("ALU %", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", 1),
            ("FMA %", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", 1),
            ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
            ("shared-memory wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1)]
    print("call 2: Nsight Compute at (1,16,8192,128), one launch each")
    print("| metric | " + " | ".join(names) + " |")
    for label, k, scale in keys:
        print(f"| {label} | " + " | ".join(f"{num(m[n][k]) * scale:,.1f}" for n in names) + " |")
    for n in names:
        act = num(m[n]["sm__cycles_active.avg"])
        tens = num(m[n]["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]) / 100 * act
        xu = num(m[n]["sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"]) / 100 * act
        print(f"  {n}: tensor busy {tens / 1e3:.0f}k + XU busy {xu / 1e3:.0f}k = {(tens + xu) / act:.2f} of its {act / 1e3:.0f}k active cycles")
    for n, p in (("base", here / "call2" / "call2_1xH200_s_base.csv.gz"), ("ps32", here / "call2" / "call2_1xH200_s_ps32.csv.gz")):
        print(f"  stall samples, {n} (every warp of the kernel):")
        stalls(p)
    print()


def cudnn_loop() -> None:
    d = json.loads((here / "call4" / "call4_1xH200_cudnn_summary.json").read_text())
    print(f"call 4: cuDNN FP8's per-tile loop (instructions run {d['loop_executions']} times: once per consumer warp and tile)")
    for e in d["loop_sync_and_mma_order"]:
        print("    " + e)
    print("  opcodes of the loop:", ", ".join(f"{o} {c}" for o, c in list(d["loop_opcodes"].items())[:10]))
    total = sum(d["stall_samples"].values())
    print("  stall samples, cudnn (every warp of the kernel):")
    for k, v in list(d["stall_samples"].items())[:6]:
        tops = ", ".join(f"{o} {c / total * 100:.1f}%" for o, c in list(d["stall_samples_top_opcodes"][k].items())[:3])
        print(f"    {k:16s} {v / total * 100:5.1f}%   ({tops})")

def timeline() -> None:
    """Call 8: per tile of each warpgroup (tiles 1 .. n-1 of the traced unit), the median cycles of each phase: the turn
    (k0 - k5 of the tile before), P V issued and waited for (k1 - k0), Q K^T issued and the turn passed (k2 - k1), the wait
    for S (k3 - k2), the softmax (k4 - k3), the O rescale and packing (k5 - k4); and the share of each warpgroup's
    softmax cycles during which the other ran its products (k0 .. k3) or its own softmax (k3 .. k4)."""
    with gzip.open(here / "call8" / "call8_1xH200_trace.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    print("call 8: one block's two consumer warpgroups (clock64 cycles; median per tile)")
    for d in recs:
        if "stamps" not in d:
            continue
        a = np.array(d["stamps"], dtype=np.int64)
        nt = max(t for t in range(65) if a[0, t, 0] > 0)  # the last entry: the last P V
        a = np.where(a > 0, a - a[a > 0].min(), -1)
        print(f"  {d['case']} (bn {d['bn']}, {nt} tiles)")
        for cw in range(2):
            ph = np.array([[a[cw, t, 0] - a[cw, t - 1, 5], a[cw, t, 1] - a[cw, t, 0], a[cw, t, 2] - a[cw, t, 1],
                            a[cw, t, 3] - a[cw, t, 2], a[cw, t, 4] - a[cw, t, 3], a[cw, t, 5] - a[cw, t, 4]]
                           for t in range(1, nt)])
            med = np.median(ph, axis=0)
            period = np.median(np.diff(a[cw, 1:nt, 0]))
            other = 1 - cw
            sm = [(a[cw, t, 3], a[cw, t, 4]) for t in range(1, nt)]

            def share(lo, hi, sm=sm, other=other, a=a, nt=nt):
                iv = [(a[other, t, lo], a[other, t, hi]) for t in range(1, nt)]
                ov = sum(max(0, min(e, e2) - max(s, s2)) for s, e in sm for s2, e2 in iv)
                return ov / sum(e - s for s, e in sm)

            print(f"    warpgroup {cw}: turn {med[0]:.0f}, P V {med[1]:.0f}, Q K^T issue {med[2]:.0f}, S wait {med[3]:.0f}, "
                  f"softmax {med[4]:.0f}, rescale + pack {med[5]:.0f}; period {period:.0f}; its softmax beside the other's "
                  f"products {share(0, 3):.2f}, beside the other's softmax {share(3, 4):.2f}")
    t = collections.defaultdict(list)
    for d in recs:
        if "p50_us" in d:
            t[(d["case"], d["impl"])].append(d["p50_us"])
    for (case, impl), v in sorted(t.items()):
        print(f"  timing {case} {impl}: p50 {statistics.median(v):.1f} us (rounds {', '.join(f'{x:.1f}' for x in v)})")
    print()


for c in (1, 3, 5, 6, 7, 9):
    timing_table(c)
timeline()
profile()
cudnn_loop()
