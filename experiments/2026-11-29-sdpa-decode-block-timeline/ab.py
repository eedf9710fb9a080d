"""Call 1: main's decode kernel against two branches, and the block timeline.
  dm: the in-block merge buffer in channel order at head dim 128 (branch decmerge, e084118);
  dd: one copy of the fp16 tier's fragment code (branch decode-dedupe, 5a3127e).
Outputs byte for byte against main's at forced chunk counts (both variants), compute-sanitizer on the branches' cpasync
runners, a 4-stream soak of dm, then cold and hot p50 under --kernel auto (2 rounds, the runners alternating), then
./timeline on four cases (timeline.jsonl).
Runners in $BIN (xz): main1 main0 dm1 dm0 dd1 dd0 timeline.
  python3 ab.py     (results under $OUT/ab.jsonl)"""
import pathlib, shutil, subprocess, sys

import numpy as np

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


def files_of(name, qs, kvs):
    folder = lab.tmp / name
    if (folder / "scales.npy").exists():
        return {n: folder / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    return ab_kit.code_inputs(folder, qs, kvs)


def run(exe, f, causal, kernel, extra, out, timeout=60, pre=()):
    return ab_kit.launch(exe, f, causal, ["--precision", "fp16", "--kernel", kernel, *extra], out, timeout, pre)


exes = {k: lab.unpack(k) for k in RUNNERS}
one = ["--iters", "1", "--warmup", "0"]
for name, (qs, kvs, causal, split) in SAME.items():
    f = files_of(name, qs, kvs)
    outs = {}
    for k, exe in exes.items():
        r = run(exe, f, causal, "decode_sm89", [*one, "--split", str(split)], lab.tmp / f"o_{k}.npy")
        outs[k] = np.load(lab.tmp / f"o_{k}.npy") if r["rc"] == 0 else None
        lab.log({"step": "run", "case": name, "runner": k, "rc": r["rc"], "split": r["line"].get("split"),
                 "stderr": r.get("stderr", "")[-200:]})
    ok = {k: v is not None for k, v in outs.items()}
    eq = lambda a, b: ok[a] and ok[b] and np.array_equal(outs[a].view(np.uint16), outs[b].view(np.uint16))
    lab.log({"step": "same", "case": name, "split": split, **{f"{a}_vs_{b}": eq(a, b) for a, b in
             (("dm1", "main1"), ("dm0", "main0"), ("dd1", "main1"), ("dd0", "main0"), ("main0", "main1"))}})
    if name.startswith("decode_"):
        shutil.rmtree(lab.tmp / name)  # 64-256 MiB of inputs: made again below when timed
san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
for k, cases in (("dm1", ("san_decode_rows32", "san_decode_split")), ("dd1", ("g4_sq8_d64_causal",))):
    for name in cases:
        qs, kvs, causal, _ = SAME[name]
        for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
            r = run(exes[k], files_of(name, qs, kvs), causal, "decode_sm89", [*one, "--timing", "hot"], lab.tmp / "o_san.npy",
                    timeout=150, pre=(san, "--tool", tool, "--error-exitcode", "3"))
            lab.log({"step": "sanitizer", "case": name, "tool": tool, "runner": k, "rc": r["rc"],
                     "tail": r.get("stdout", "")[-90:]})
f = files_of("mqa_2k", *SAME["mqa_2k"][:2])
r = run(exes["dm1"], f, False, "decode_sm89", [*one, "--soak", "300", "--streams", "4"], lab.tmp / "o_s.npy", timeout=120)
lab.log({"step": "soak", "case": "mqa_2k", "runner": "dm1", "rc": r["rc"],
         "mismatched": r.get("line", {}).get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})

tl = lab.unpack("timeline")
with open(lab.out / "timeline.jsonl", "w") as fh:
    p = subprocess.run([str(tl), "30", *[f"{n}:{s}" for n, s in TIMELINE.items()]], stdout=fh, stderr=subprocess.PIPE,
                       text=True, timeout=120)
lab.log({"step": "timeline", "rc": p.returncode, "stderr": p.stderr[-300:]})

for name, (qs, kvs, causal) in TIMED.items():
    f = files_of(name, qs, kvs)
    for rnd in range(2):
        for mode in ("cold", "hot"):
            for k in ab_kit.in_turn(["main1", "dm1", "dd1"], rnd):
                if lab.over_budget():
                    lab.log({"step": "time", "skipped": "budget"}); lab.close(); raise SystemExit(0)
                r = run(exes[k], f, causal, "auto", ["--iters", "40", "--warmup", "10", "--timing", mode], lab.tmp / "o_t.npy")
                lab.log({"step": "time", "round": rnd, "case": name, "mode": mode, "runner": k, "rc": r["rc"],
                         "kernel": r.get("line", {}).get("kernel"), "split": r.get("line", {}).get("split"),
                         "p50_us": ab_kit.p50_us(r)})
    shutil.rmtree(lab.tmp / name)
lab.close()
