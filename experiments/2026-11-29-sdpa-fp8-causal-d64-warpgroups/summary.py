"""Prints a call's timing table: per case and mode the mean over rounds of each p50, two / main and cuDNN against both.
  python3 summary.py call2/results.jsonl.gz.gz"""
import collections, gzip, json, statistics, sys

recs = [json.loads(line) for line in gzip.open(sys.argv[1], "rt")]
for r in recs:
    if r["phase"] == "same":
        print(r["case"], "main and two bit for bit:", r["main_vs_two"])
t = collections.defaultdict(list)
for r in recs:
    if r["phase"] == "time" and r.get("p50_us"):
        t[(r["case"], r["mode"], r["impl"])].append(r["p50_us"])
for c in dict.fromkeys(k[0] for k in t):
    for m in ("cold", "hot"):
        mn, tw = statistics.mean(t[(c, m, "main")]), statistics.mean(t[(c, m, "two")])
        line = f"{c:22s} {m:4s} main {mn:8.2f} two {tw:8.2f} (two/main {tw / mn:.3f})"
        if t.get((c, m, "cudnn")):
            cu = statistics.mean(t[(c, m, "cudnn")])
            line += f" cudnn {cu:8.2f} (cudnn/main {cu / mn:.3f}, cudnn/two {cu / tw:.3f})"
        print(line)
