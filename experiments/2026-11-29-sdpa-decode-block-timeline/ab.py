"""Call 1: main's decode kernel against two branches, and the block timeline.
  dm: the in-block merge buffer in channel order at head dim 128 (branch decmerge, e084118);
  dd: one copy of the fp16 tier's fragment code (branch decode-dedupe, 5a3127e).
Outputs byte for byte against main's at forced chunk counts (both variants), compute-sanitizer on the branches' cpasync
runners, a 4-stream soak of dm, then cold and hot p50 under --kernel auto (2 rounds, the runners alternating), then
./timeline on four cases (timeline.jsonl).
Runners in $BIN (xz): main1 main0 dm1 dm0 dd1 dd0 timeline.
  python3 ab.py     (results under $OUT/ab.jsonl)"""
import pathlib, shutil, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

lab = ab_kit.Lab("tl1", 420)
RUNNERS = ("main1", "main0", "dm1", "dm0", "dd1", "dd0")
D = ab_kit.DECODE_CASES
# name: (q_shape, kv_shape, causal, forced --split)
SAME = {
    "mqa_2k": ((2, 32, 1, 128), (2, 1, 2048, 128), False, 4),
    "san_decode_rows32": (*D["san_decode_rows32"], 2),
    "san_decode_split": (*D["san_decode_split"], 3),
    "g8_sq4_causal": ((2, 16, 4, 128), (2, 2, 1000, 128), True, 2),
    "g4_sq8_8k_causal": ((2, 16, 8, 128), (2, 4, 8192, 128), True, 2),
    "rows17_d64": ((1, 17, 1, 64), (1, 1, 4097, 64), False, 4),
    "g4_sq8_d64_causal": ((3, 8, 8, 64), (3, 2, 8193, 64), True, 2),
    "decode_b8_32k_mqa": (*D["decode_b8_32k_mqa"], 17),
    "decode_b1_128k": (*D["decode_b1_128k"], 33),
}
TIMED = {n: D[n] for n in ("decode_b8_32k_mqa", "decode_b1_32k", "decode_b1_128k", "decode_b8_32k", "decode_b8_32k_hq64")}
TIMED["b8_32k_g4_sq8"] = ((8, 32, 8, 128), (8, 8, 32768, 128), True)
TIMELINE = {
    "decode_b8_32k_mqa": "8,32,1,1,32768,128,0",
    "decode_b1_32k": "1,32,8,1,32768,128,0",
    "decode_b1_128k": "1,32,8,1,131072,128,0",
    "decode_b8_32k": "8,32,8,1,32768,128,0",
}


exes = {k: lab.unpack(k) for k in RUNNERS}
PAIRS = (("dm1", "main1"), ("dm0", "main0"), ("dd1", "main1"), ("dd0", "main0"), ("main0", "main1"))
for name, (qs, kvs, causal, split) in SAME.items():
    ab_kit.same_outputs(lab, exes, name, ab_kit.decode_files(lab, name, qs, kvs), causal, split, PAIRS)
    if name.startswith("decode_"):
        shutil.rmtree(lab.tmp / name)  # 64-256 MiB of inputs: made again below when timed
for k, cases in (("dm1", ("san_decode_rows32", "san_decode_split")), ("dd1", ("g4_sq8_d64_causal",))):
    for name in cases:
        qs, kvs, causal, _ = SAME[name]
        ab_kit.sanitize(lab, k, exes[k], name, ab_kit.decode_files(lab, name, qs, kvs), causal)
ab_kit.soak(lab, "dm1", exes["dm1"], "mqa_2k", ab_kit.decode_files(lab, "mqa_2k", *SAME["mqa_2k"][:2]))
ab_kit.timeline(lab, TIMELINE)
for name, (qs, kvs, causal) in TIMED.items():
    if not ab_kit.time_in_turn(lab, exes, ["main1", "dm1", "dd1"], name, ab_kit.decode_files(lab, name, qs, kvs), causal):
        break
    shutil.rmtree(lab.tmp / name)
lab.close()
