"""The Hopper key-chunk kernels (both tiers, head dim 128, 64 rows per K/V head) with the key chunk count that
kv_plan picks (main: one wave, 2 chunks per head at B 8, Hkv 8) against a fixed count of 4, 8, 16 or 32 chunks per
head (the same runner, built with kv_chunks_force.patch, under SDPA_KV_CHUNKS_FORCE=N; variants c4 .. c32): many
short blocks that
the hardware hands to whichever SM is free, against one block per SM.  Per case and tier: each runner's output
against main's (rel_l2, max abs; the merge order differs, so not bit for bit), then cold and hot p50 (--iters 30
--warmup 5), the variants alternating, 2 rounds.  The runner: $BIN/envf.xz.  Inputs: ab_kit.code_inputs, seed 0.
  python3 ab_chunks.py main c4 c8 c16 c32     (results under $OUT/ab.jsonl)"""
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit

lab = ab_kit.Lab("kvc", 480)
CASES = {k: v for k, v in ab_kit.ROWS64_CASES.items() if k != "b8_g8_sq8_32k"}
TIERS = {"fp16": ["--precision", "fp16", "--kernel", "wgmma_sm90", "--split", "0"],
         "fp8": ["--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0"]}

names = sys.argv[1:] or ["main", "c4", "c8", "c16", "c32"]
exe = lab.unpack("envf")


def launch(k, *args):
    """Variant k: main (the plan's count) or cN (N chunks per head)."""
    os.environ.pop("SDPA_KV_CHUNKS_FORCE", None)
    if k != "main":
        os.environ["SDPA_KV_CHUNKS_FORCE"] = k[1:]
    return ab_kit.launch(exe, *args)



files = {n: ab_kit.code_inputs(lab.tmp / n, qs, kvs) for n, (qs, kvs, _) in CASES.items()}
for name, (_, _, causal) in CASES.items():
    for tier, targs in TIERS.items():
        outs = {}
        for k in names:
            r = launch(k, files[name], causal, [*targs, "--iters", "1", "--warmup", "0"], lab.tmp / f"o_{k}.npy")
            outs[k] = np.load(lab.tmp / f"o_{k}.npy").astype(np.float64) if r["rc"] == 0 else None
            rec = {"step": "check", "case": name, "tier": tier, "runner": k, "rc": r["rc"],
                   "kv_chunks": r.get("line", {}).get("kv_chunks"), "stderr": r.get("stderr", "")[-200:]}
            a, b = outs[names[0]], outs[k]
            if a is not None and b is not None:
                rec.update(rel_l2_vs_main=float(np.linalg.norm(b - a) / np.linalg.norm(a)),
                           max_abs_vs_main=float(np.abs(b - a).max()), finite=bool(np.isfinite(b).all()))
            lab.log(rec)
for rnd in range(2):
    for name, (_, _, causal) in CASES.items():
        for tier, targs in TIERS.items():
            for mode in ("cold", "hot"):
                for k in ab_kit.in_turn(names, rnd):
                    if lab.over_budget():
                        lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                    r = launch(k, files[name], causal, [*targs, "--iters", "30", "--warmup", "5", "--timing", mode],
                                      lab.tmp / "o_t.npy")
                    lab.log({"step": "time", "round": rnd, "case": name, "tier": tier, "mode": mode, "runner": k,
                             "rc": r["rc"], "p50_us": ab_kit.p50_us(r)})
lab.close()
