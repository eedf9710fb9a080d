"""Call 6: which compile-time switch moves the fp8 tier's soak fault (call 5): the runner kv8 (-DSDPA_SM90_KV_FP8=1)
and the same with -DSDPA_SM90_VT_FAST=0 (the item V transpose), -DSDPA_SM90_ROWSUM_MMA=0 (row sums by FADD, V^T
without its ones rows), -DSDPA_SM90_L2_PREFETCH_NEXT=0 (no L2 prefetch of the next wave's block), each on the two
failing soaks of call 5: --split 2 at (64,32,8,16,512) and the key chunks at MQA (8,32,1,1,32768); once each (25 s limit per run).
Call 7: RUNNERS=kv8,v_tail REPS=2 (v_tail: kv8 with -DSDPA_SM90_PRODUCER_TAIL=1, the producer's issuing thread waiting
for the last NS K copies before it exits).
Prepared, not run yet: RUNNERS=v_ns4 REPS=3 COMPARE=kv8,v_ns4 (v_ns4: kv8 with four K stages in the split configuration at head dim
128, fp8_traits.cuh NS; COMPARE: one launch of each of the two runners per case, outputs compared byte for byte).
Inputs as soak_probe.py.   [RUNNERS=a,b REPS=n COMPARE=a,b] python3 probe_defines.py   (results under $OUT/defines.jsonl)
(As run, its unpack and make were written out here; they are ../ab_kit.py's since, the same code and inputs.)"""
import json, os, pathlib, subprocess, sys
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/probe_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/probe9"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "defines.jsonl", "w")
CASES = {"split2_one_chunk": (((64, 32, 16, 128), (64, 8, 512, 128)), ["--split", "2"]),
         "kv_mqa": (((8, 32, 1, 128), (8, 1, 32768, 128)), [])}
RUNNERS = tuple(os.environ.get("RUNNERS", "kv8,v_vtfast0,v_rowsum0,v_pref0").split(","))


def unpack(stem):
    return ab_kit.unpack(TMP, stem)


def make(name, qs, kvs):
    return ab_kit.code_inputs(TMP / name, qs, kvs)


files = {n: make(n, *shapes) for n, (shapes, _) in CASES.items()}
for rep in range(int(os.environ.get("REPS", "1"))):
    for runner in RUNNERS:
        exe = unpack(runner)
        for name, (_, extra) in CASES.items():
            f = files[name]
            cmd = [str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out", str(TMP / "o.npy"),
                   "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", *extra, "--iters", "1",
                   "--warmup", "0", "--soak", "300", "--streams", "4"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=25)
                line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None) or {}
                rec = {"rep": rep, "runner": runner, "case": name, "rc": p.returncode, "kv_chunks": line.get("kv_chunks"),
                       "grid": (line.get("grid") or [None])[0], "mismatched": line.get("soak_mismatched_elements"),
                       "stderr": p.stderr[-160:]}
            except subprocess.TimeoutExpired:
                rec = {"rep": rep, "runner": runner, "case": name, "rc": "timeout"}
            RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)
if os.environ.get("COMPARE"):
    a_, b_ = os.environ["COMPARE"].split(",")
    for name, (_, extra) in CASES.items():
        outs = []
        for runner in (a_, b_):
            f, out = files[name], TMP / f"cmp_{runner}.npy"
            cmd = [str(unpack(runner)), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out",
                   str(out), "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", *extra, "--iters", "1",
                   "--warmup", "0"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=25)
            outs.append(np.load(out).view(np.uint16) if p.returncode == 0 else None)
        same = outs[0] is not None and outs[1] is not None and np.array_equal(outs[0], outs[1])
        rec = {"compare": [a_, b_], "case": name, "identical": bool(same)}
        RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec), flush=True)
RES.close()
