"""Issue 50's Sq 16 case: the S^T prototype (st_proto.cu, built here) against the fp16 tier's key-chunk kernel (main's
runner, --kernel wgmma_sm90 --split 0) at the 64-row cases, in one call: the prototype's error against float64 at two
(b, hkv) and its cold / hot p50, then the runner's, alternating, 2 rounds.  Runner: $BIN/envf.xz (main's runner when
SDPA_KV_CHUNKS_FORCE is unset); prototype: $BIN/st_proto, or $BIN/$PROTO.
  python3 run_st.py     (results under $OUT/st.jsonl)"""
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit

lab = ab_kit.Lab("st", 480, "st.jsonl")
os.environ.pop("SDPA_KV_CHUNKS_FORCE", None)
runner = lab.unpack("envf")
proto = pathlib.Path(os.environ.get("BIN", "bin")) / os.environ.get("PROTO", "st_proto")  # PROTO: another build
# name: (B, Hq, Sq, Skv, Hkv, chunks as kv_plan picks them, causal)
CASES = {"small_causal": (1, 32, 16, 2048, 8, 1, 1), "small": (1, 32, 16, 2048, 8, 1, 0),
         "decode_b8_32k_sq16": (8, 32, 16, 32768, 8, 2, 1), "b8_g8_sq8_32k": (8, 64, 8, 32768, 8, 2, 0),
         "b64_sq16_4k": (64, 32, 16, 4096, 8, 1, 1), "b1_sq16_32k": (1, 32, 16, 32768, 8, 16, 1)}
files = {}
for rnd in range(2):
    for name, (B, Hq, Sq, Skv, Hkv, ch, causal) in CASES.items():
        try:
            p = subprocess.run([str(proto), *map(str, (B, Hq, Sq, Skv, Hkv, ch, causal)), "20"], capture_output=True,
                               text=True, timeout=120)
            line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), {})
            lab.log({"step": "proto", "round": rnd, "case": name, "rc": p.returncode, **line, "stderr": p.stderr[-300:]})
        except subprocess.TimeoutExpired:
            lab.log({"step": "proto", "round": rnd, "case": name, "rc": "timeout"})
        if name.startswith("small"):
            continue
        if name not in files:
            files[name] = ab_kit.code_inputs(lab.tmp / name, (B, Hq, Sq, 128), (B, Hkv, Skv, 128))
        for mode in ("cold", "hot"):
            if lab.over_budget():
                lab.log({"step": "skipped", "why": "budget"}); lab.close(); raise SystemExit(0)
            r = ab_kit.launch(runner, files[name], bool(causal), ["--precision", "fp16", "--kernel", "wgmma_sm90", "--split",
                              "0", "--iters", "30", "--warmup", "5", "--timing", mode], lab.tmp / "o.npy")
            lab.log({"step": "main", "round": rnd, "case": name, "mode": mode, "rc": r["rc"], "p50_us": ab_kit.p50_us(r),
                     "kv_chunks": r.get("line", {}).get("kv_chunks")})
lab.close()
