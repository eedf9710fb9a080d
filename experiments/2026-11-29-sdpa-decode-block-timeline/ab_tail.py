"""Calls 2-5: a rewrite of the decode kernel's tail (NEW) against e034b35 (mg), one call each:
  2  fin  the final merge's weights a warp per row, its loads 32 chunks at a time (fin.patch.gz)
  3  wt   the weights with every row at once on a group of lanes (wt.patch.gz)
  4  pf   each thread's first 16 chunks of partial O loaded beside the m, l loads (pf.patch.gz)
  5  fe   one fence per block, thread 0's (69b89cc); the cpasync variant only, no timeline
  6  cl   (branch decluster; slower, not adopted) the chunks of a cluster of up to 8 blocks merged through distributed shared
          memory (sm_90), then the clusters' partials by the last block: other sums than mg's, so checked against
          float64 at every case; nocl1 (the same build with SDPA_DECODE_CLUSTER=0) against mg1 bit for bit
Outputs byte for byte against mg's (auto and forced chunk counts, up to 264 chunks), error against float64,
compute-sanitizer, a 4-stream soak, the timeline of NEW's kernel (timeline.jsonl: `timeline`, built with
trace.patch), then cold and hot p50 under --kernel auto (2 rounds, the runners alternating, until $AB_BUDGET_S).
Runners in $BIN (xz): mg1 NEW1, and mg0 NEW0 where the call has the baseline variant.
  python3 ab_tail.py CALL     (results under $OUT/abCALL.jsonl)
(Calls 2-5 ran as ab2.py .. ab5.py, four copies of this script with the table's values; folded into it since.)"""
import pathlib
import shutil
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

# call: (NEW, with the baseline variant, sanitizer cases per runner, timeline)
CALLS = {
    2: ("fin", True, {"fin1": ("san_decode_split", "san_decode_rows32", "hkv1_g2_40k_d64_causal"),
                      "fin0": ("san_decode_split",)}, True),
    3: ("wt", True, {"wt1": ("san_decode_split", "san_decode_rows32", "hkv1_g2_40k_d64_causal", "rows64_d64_causal"),
                     "wt0": ("san_decode_split",)}, True),
    4: ("pf", True, {"pf1": ("san_decode_split", "rows64_d64_causal"), "pf0": ("hkv1_g2_40k_d64_causal",)}, True),
    5: ("fe", False, {"fe1": ("san_decode_split", "rows64_d64_causal")}, False),
    6: ("cl", True, {"cl1": ("san_decode_split", "san_decode_rows32", "hkv1_g2_40k_d64_causal", "rows64_d64_causal"),
                     "cl0": ("san_decode_split",)}, False),
}
call = int(sys.argv[1])
new, both, san_cases, with_timeline = CALLS[call]
lab = ab_kit.Lab(f"tl{call}", 420, f"ab{call}.jsonl")
RUNNERS = ("mg1", "mg0", f"{new}1", f"{new}0") if both else ("mg1", f"{new}1")
PAIRS = ((f"{new}1", "mg1"), (f"{new}0", "mg0"), (f"{new}0", f"{new}1"), ("mg0", "mg1")) if both else ((f"{new}1", "mg1"),)
if call == 6:  # other sums than mg's: the variants against each other, the build without clusters against mg
    RUNNERS = ("mg1", "cl1", "cl0", "nocl1")
    PAIRS = (("cl0", "cl1"), ("nocl1", "mg1"))
D = ab_kit.DECODE_CASES
# name: (q_shape, kv_shape, causal, --split (0: the plan's))
SAME = {
    "mqa_2k": ((2, 32, 1, 128), (2, 1, 2048, 128), False, 4),
    "san_decode_rows32": (*D["san_decode_rows32"], 0),
    "san_decode_split": (*D["san_decode_split"], 0),
    "g4_sq8_8k_causal": ((2, 16, 8, 128), (2, 4, 8192, 128), True, 0),
    "rows17_d64": ((1, 17, 1, 64), (1, 1, 4097, 64), False, 0),
    "g4_sq8_d64_causal": ((3, 8, 8, 64), (3, 2, 8193, 64), True, 0),
    "hkv1_g4_128k": ((1, 4, 1, 128), (1, 1, 131072, 128), False, 0),
    "hkv1_g2_40k_d64_causal": ((1, 2, 3, 64), (1, 1, 40000, 64), True, 0),
    "decode_b8_32k_mqa": (*D["decode_b8_32k_mqa"], 0),
    "decode_b1_32k": (*D["decode_b1_32k"], 0),
    "decode_b1_128k": (*D["decode_b1_128k"], 0),
}
if call >= 3:
    SAME["rows64_d64_causal"] = ((1, 8, 16, 64), (1, 2, 1000, 64), True, 2)
    SAME["g4_sq8_32k_causal"] = ((8, 32, 8, 128), (8, 8, 32768, 128), True, 0)
ACCURACY = ("mqa_2k", "san_decode_split", "hkv1_g4_128k", "hkv1_g2_40k_d64_causal", "g4_sq8_d64_causal")
if call == 6:
    ACCURACY = tuple(SAME)
TIMED = {n: D[n] for n in ("decode_b1_128k", "decode_b1_32k", "decode_b8_32k_mqa", "decode_b1_4k", "decode_b8_4k",
                           "decode_b8_32k")}
if call >= 3:
    TIMED["decode_b8_32k_hq64"] = D["decode_b8_32k_hq64"]
    TIMED["b8_32k_g4_sq8"] = ((8, 32, 8, 128), (8, 8, 32768, 128), True)
TIMELINE = {
    "decode_b8_32k_mqa": "8,32,1,1,32768,128,0",
    "decode_b1_32k": "1,32,8,1,32768,128,0",
    "decode_b1_128k": "1,32,8,1,131072,128,0",
    "decode_b8_32k": "8,32,8,1,32768,128,0",
}


exes = {k: lab.unpack(k) for k in RUNNERS}
for name, (qs, kvs, causal, split) in SAME.items():
    f = ab_kit.decode_files(lab, name, qs, kvs)
    outs = ab_kit.same_outputs(lab, exes, name, f, causal, split, PAIRS)
    if name in ACCURACY:
        ref = ab_kit.reference(f, causal)
        for k in ("mg1", f"{new}1"):
            if outs[k] is None:
                continue
            o = outs[k].astype(np.float64)
            lab.log({"step": "accuracy", "case": name, "runner": k,
                     "rel_l2": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)),
                     "max_abs_over_max_ref": float(np.abs(o - ref).max() / np.abs(ref).max())})
    if name.startswith("decode_"):
        shutil.rmtree(lab.tmp / name)
for k, cases in san_cases.items():
    for name in cases:
        qs, kvs, causal, _ = SAME[name]
        ab_kit.sanitize(lab, k, exes[k], name, ab_kit.decode_files(lab, name, qs, kvs), causal)
ab_kit.soak(lab, f"{new}1", exes[f"{new}1"], "mqa_2k", ab_kit.decode_files(lab, "mqa_2k", *SAME["mqa_2k"][:2]))
if with_timeline:
    ab_kit.timeline(lab, TIMELINE)
for name, (qs, kvs, causal) in TIMED.items():
    if not ab_kit.time_in_turn(lab, exes, ["mg1", f"{new}1"], name, ab_kit.decode_files(lab, name, qs, kvs), causal):
        break
    shutil.rmtree(lab.tmp / name)
lab.close()
