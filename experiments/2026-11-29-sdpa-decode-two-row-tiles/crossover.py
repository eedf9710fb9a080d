"""Where two row tiles per warp start to pay: the same runners as ab.py (main1, rt1 in $BIN) at 32 rows per K/V head
(G 4, Sq 8, causal) with 2 to 64 tiles per key group, cold and hot p50 under --kernel auto, 3 rounds, alternating.
  python3 crossover.py     (results under $OUT/crossover.jsonl)"""
import pathlib, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("rt2x", 300, results="crossover.jsonl")
# name: (q_shape, kv_shape, causal); tiles per key group under rt1's plan (8 groups) / main1's (4 groups) in the comment
CASES = {
    "b8_4k_g4_sq8": ((8, 32, 8, 128), (8, 8, 4096, 128), True),      # 2 chunks: 8 / 16
    "b8_8k_g4_sq8": ((8, 32, 8, 128), (8, 8, 8192, 128), True),      # 2 chunks: 16 / 32
    "b8_16k_g4_sq8": ((8, 32, 8, 128), (8, 8, 16384, 128), True),    # 2 chunks: 32 / 64
    "b1_32k_g4_sq8": ((1, 32, 8, 128), (1, 8, 32768, 128), True),    # 16 chunks: 8 / 16
    "b64_4k_g4_sq8": ((64, 32, 8, 128), (64, 8, 4096, 128), True),   # 1 chunk (512 blocks): 16 / 32
    "b2_32k_g4_sq8": ((2, 32, 8, 128), (2, 8, 32768, 128), True),    # 8 chunks: 16 / 32
}
exes = {k: lab.unpack(k) for k in ("main1", "rt1")}
files = {n: ab_kit.code_inputs(lab.tmp / n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for rnd in range(3):
    for name, (_, _, causal) in CASES.items():
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(list(exes), rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = ab_kit.launch(exes[k], files[name], causal, ["--precision", "fp16", "--kernel", "auto", "--iters", "50",
                                  "--warmup", "10", "--timing", mode], lab.tmp / "o.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "p50_us": ab_kit.p50_us(r)})
lab.close()
