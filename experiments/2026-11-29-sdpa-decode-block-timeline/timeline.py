"""Reads call*/timeline.jsonl.gz (timeline.cu's lines) and prints, per case, the medians over samples of where a launch's
time goes: from the marker kernel to the first block's start, the blocks' starts, their first tiles, loops, in-block
merges, the counting, and the last blocks' final merges (us from the first block's start).
  python3 timeline.py call1/timeline.jsonl.gz"""
import gzip, json, statistics, sys

NAMES = ["start", "first_tile", "loop0_done", "loops_done", "merge_written", "counted", "final_start", "final_done",
         "q_issued", "weights"]
K = len(NAMES)


def med(x):
    return statistics.median(x) if x else float("nan")


by_case = {}
for line in gzip.open(sys.argv[1], "rt"):
    r = json.loads(line)
    by_case.setdefault(r["case"], []).append(r)
for case, rs in by_case.items():
    r0 = rs[0]
    print(f"== {case}: grid {r0['grid']} x {r0['block']} threads, nsplit {r0['nsplit']}, rt {r0['rt']}, wm {r0['wm']}, "
          f"wk {r0['wk']}, chunk_tiles {r0['chunk_tiles']}; event us median {med([r['us'] for r in rs]):.2f}")
    rows = {}
    for r in rs:
        st = r["stamps"]
        blocks = [st[b * K:(b + 1) * K] for b in range(r["grid"])]
        t0 = min(b[0] for b in blocks)
        rel = lambda v: (v - t0) / 1000.0
        vals = {}
        vals["marker_to_first_start"] = (t0 - r["marker"]) / 1000.0
        for k, n in enumerate(NAMES):
            xs = sorted(rel(b[k]) for b in blocks if b[k])
            if not xs:
                continue
            vals[f"{n} min"] = xs[0]
            vals[f"{n} p50"] = xs[len(xs) // 2]
            vals[f"{n} max"] = xs[-1]
        d = lambda a, b: [(x[b] - x[a]) / 1000.0 for x in blocks if x[a] and x[b]]
        for a, b, n in ((0, 8, "start->q_issued"), (0, 1, "start->first_tile"), (1, 2, "first_tile->loop0_done"),
                        (2, 3, "loop0->all_loops"), (3, 4, "loops->merge_written"), (4, 5, "merge_written->counted"),
                        (6, 9, "final: weights"), (9, 7, "final: o")):
            xs = d(a, b)
            if xs:
                vals[f"per block {n} p50"] = med(xs)
                vals[f"per block {n} max"] = max(xs)
        last_end = max(max(rel(b[7]) for b in blocks if b[7]) if any(b[7] for b in blocks) else 0,
                       max(rel(b[5]) for b in blocks if b[5]) if any(b[5] for b in blocks) else 0)
        vals["last stamp"] = last_end
        for k, v in vals.items():
            rows.setdefault(k, []).append(v)
    for k, v in rows.items():
        print(f"  {k:36s} {med(v):9.2f}")
