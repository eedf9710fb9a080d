"""Is MQA's gap to G 4 a cost per launch or a rate? main's runner (`cur1` in $BIN) at the same K/V bytes with 32 rows per
K/V head (MQA, Hkv 1) and with 4 (G 4, Hkv 8), from 64 to 512 MiB (B doubling), cold and hot p50 under --kernel auto,
3 rounds.
  python3 scale.py     (results under $OUT/scale.jsonl)"""
import pathlib, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("scale", 240, results="scale.jsonl")
CASES = {}
for i, b in enumerate((8, 16, 32, 64)):  # MQA: 64, 128, 256, 512 MiB of K + V
    CASES[f"mqa_b{b}"] = ((b, 32, 1, 128), (b, 1, 32768, 128), False)
    g4 = 1 << i  # G 4 on 8 K/V heads: the same bytes
    CASES[f"g4_b{g4}"] = ((g4, 32, 1, 128), (g4, 8, 32768, 128), False)
exe = lab.unpack("cur1")
for rnd in range(3):
    for name, (qs, kvs, causal) in CASES.items():
        f = ab_kit.code_inputs(lab.tmp / name, qs, kvs) if rnd == 0 else {n: lab.tmp / name / f"{n}.npy" for n in
                                                                             ("q", "k", "v", "scales")}
        for mode in ("cold", "hot"):
            if lab.over_budget():
                lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
            r = ab_kit.launch(exe, f, causal, ["--precision", "fp16", "--kernel", "auto", "--iters", "50", "--warmup",
                                               "10", "--timing", mode], lab.tmp / "o.npy")
            line = r.get("line", {})
            lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "rc": r["rc"], "kernel": line.get("kernel"),
                     "p50_us": ab_kit.p50_us(r), "kv_mib": 2 * kvs[0] * kvs[1] * kvs[2] * kvs[3] / 2**20})
lab.close()
