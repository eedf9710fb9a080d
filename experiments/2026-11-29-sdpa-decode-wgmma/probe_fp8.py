"""Where the fp8 tier's 4-stream soak fails (call 3: its key-chunk kernel, cpasync): the key-chunk kernel built with
-DSDPA_SM90_KV_FP8=1 (runner kv8) against the split configuration's per-head units forced with --split 2 (every
runner has them), at grids of one wave and of several, and memcheck on a failing case.  Inputs as soak_probe.py.
  python3 probe_fp8.py   (from the payload folder holding bin/*.xz; results under $OUT/probe.jsonl)
(As run, its unpack and make were written out here; they are ../ab_kit.py's since, the same code and inputs.)"""
import json, os, pathlib, shutil, subprocess, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ab_kit  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp/probe_out")); OUT.mkdir(parents=True, exist_ok=True)
TMP = pathlib.Path("/tmp/probe8"); TMP.mkdir(exist_ok=True)
RES = open(OUT / "probe.jsonl", "w")
ONE_CHUNK = ((64, 32, 16, 128), (64, 8, 512, 128))
MQA = ((8, 32, 1, 128), (8, 1, 32768, 128))
SMALL = ((2, 32, 16, 128), (2, 8, 512, 128))
CASES = [  # (name, runner, shapes, causal, tier, extra)
    ("kv8_one_chunk_fp8", "kv8", ONE_CHUNK, False, "fp8", []),
    ("kv8_small_fp8", "kv8", SMALL, False, "fp8", []),
    ("split2_one_chunk_fp8", "kv1", ONE_CHUNK, False, "fp8", ["--split", "2"]),
    ("split2_mqa_fp8", "kv1", MQA, False, "fp8", ["--split", "2"]),
    ("split2_one_chunk_fp16", "kv1", ONE_CHUNK, False, "fp16", ["--split", "2"]),
    ("split1_one_chunk_fp8", "kv1", ONE_CHUNK, False, "fp8", ["--split", "1"]),
    ("kv8_mqa_fp8", "kv8", MQA, False, "fp8", []),
]


def log(rec):
    RES.write(json.dumps(rec) + "\n"); RES.flush(); print(json.dumps(rec)[:500], flush=True)


def unpack(stem):
    return ab_kit.unpack(TMP, stem)


def make(name, qs, kvs):
    return ab_kit.code_inputs(TMP / name, qs, kvs)


def run(exe, f, causal, tier, extra, wrap=(), timeout=60):
    cmd = [*wrap, str(exe), *[a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(f[n]))], "--out",
           str(TMP / "o.npy"), "--precision", tier, "--kernel", "wgmma_fp8_sm90" if tier == "fp8" else "wgmma_sm90",
           *(["--causal"] if causal else []), "--split", "0", *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}, ""
    line = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None)
    return {"rc": p.returncode, "line": line, "stderr": p.stderr[-600:]}, p.stdout[-4000:] + p.stderr[-2000:]


exes = {"kv8": unpack("kv8"), "kv1": unpack("sdpa_fp8_cpasync")}
files = {}
for name, runner, (qs, kvs), causal, tier, extra in CASES:
    f = files.setdefault((qs, kvs), make(f"{len(files)}", qs, kvs))
    for soak in ("300",):
        r, _ = run(exes[runner], f, causal, tier, ["--iters", "1", "--warmup", "0", "--soak", soak, "--streams", "4", *extra])
        ln = r.get("line") or {}
        log({"case": name, "runner": runner, "rc": r["rc"], "kv_chunks": ln.get("kv_chunks"), "split": ln.get("split"),
             "grid": (ln.get("grid") or [None])[0], "mismatched": ln.get("soak_mismatched_elements"), "stderr": r.get("stderr", "")[-200:]})
cs = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
f = files[ONE_CHUNK]
for runner, extra in (("kv8", []), ("kv1", ["--split", "2"])):
    r, out = run(exes[runner], f, False, "fp8", ["--iters", "1", "--warmup", "0", "--soak", "8", "--streams", "4", *extra],
                 wrap=(cs, "--tool", "memcheck", "--error-exitcode", "9", "--print-limit", "5"), timeout=200)
    lines = [x for x in out.splitlines() if x.startswith("=========")][:40]
    log({"sanitizer": "memcheck", "runner": runner, "extra": extra, "rc": r["rc"], "out": lines})
RES.close()
