"""The makespan model of tile_plan.cuh causal_makespan, restated, against the timings of calls 2 and 3: the cost of a
three-warpgroup tile over a two-warpgroup one from call 2's non-causal (4,32,4096,64), then per causal case the
predicted two / three against the measured (cold p50, mean of 2 rounds).
  python3 model.py"""
import collections, gzip, json, math, pathlib, statistics

HERE = pathlib.Path(__file__).resolve().parent
SMS = 132
BLOCK_COST = [0, 0.58, 0.82, 1]  # tile_plan.cuh kBlockCost


def timings(path):
    t = collections.defaultdict(list)
    for line in gzip.open(path, "rt"):
        r = json.loads(line)
        if r["phase"] == "time" and r.get("p50_us") and r["mode"] == "cold":
            t[(r["case"], r["impl"])].append(r["p50_us"])
    return {k: statistics.mean(v) for k, v in t.items()}


def makespan(bh, s, ncwg, tile_cost, bn=128):
    bm = 64 * ncwg
    full = math.ceil(s / bm)
    units = full * bh
    grid = max(1, min(units, SMS))
    busy = [0.0] * grid
    for i in range(units):
        m0 = (full - 1 - i // bh) * bm
        rows = min(bm, s - m0)
        nt = math.ceil((m0 + rows) / bn)
        r, b = divmod(i, grid)
        busy[grid - 1 - b if r % 2 else b] += nt * tile_cost[ncwg] * BLOCK_COST[(rows + 63) // 64] / BLOCK_COST[ncwg]
    return max(busy)


t = {**timings(HERE / "call2/results.jsonl.gz"), **timings(HERE / "call3/results.jsonl.gz")}
two, three = t[("4x32x4096x64", "two")], t[("4x32x4096x64", "main")]
tiles2 = 128 * 32 * 32                       # 128 heads x 32 units of 128 rows x 32 tiles
tiles3 = 128 * (21 + BLOCK_COST[1]) * 32     # 21 units of 192 rows and one of 64 per head
ratio = (three / tiles3) / (two / tiles2)
print(f"a three-warpgroup tile over a two-warpgroup one: {ratio:.3f} (tile_plan.cuh kCausalTileCost[3] = 1.27)")
cost = [0, 0, 1.0, 1.27]
print(f"{'case':22s} {'measured two/three':>18s} {'model':>7s}  agree")
for case in sorted({c for c, _ in t if c.endswith("causal")}, key=lambda c: [int(x) for x in c.split()[0].split("x")]):
    b, h, s, _ = (int(x) for x in case.split()[0].split("x"))
    meas = t[(case, "two")] / t[(case, "main")]
    pred = makespan(b * h, s, 2, cost) / makespan(b * h, s, 3, cost)
    print(f"{case:22s} {meas:18.3f} {pred:7.3f}  {(meas < 1) == (pred < 1)}")
