#!/usr/bin/env python3
"""Call 8: a timeline of one block's two consumer warpgroups in the 256-key loop (runner `tr`: -DSDPA_SM90_TRACE=2,
tr.patch.gz). Thread 0 of each warpgroup stamps clock64 at six points of each tile of block 0's third unit; the kernel
then writes the stamps over the first bytes of O (so `tr`'s outputs are not checked). Per tile t of a warpgroup:
  k0 turn taken, k1 P_{t-1} V_{t-1} done, k2 S_t issued and the turn passed, k3 S_t done, k4 softmax done, k5 P packed
(tile 0: no P V, k1 absent; the last entry: the last P V, k0 and k1 only).
Also times `tr` against `base` (cold, 50 launches, p50, 2 rounds) to show what the stamps cost.

  python3 trace.py        (runners in bin/: base.xz, tr.xz; results under $OUT: trace.jsonl, and the log)
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import ab_peer_kit as kit

HERE = pathlib.Path(__file__).resolve().parent
OUT = pathlib.Path(os.environ.get("OUT", "/tmp/trace_out"))
TMP = pathlib.Path("/tmp/trace")
CASES = [(1, 16, 8192, 128, False), (2, 32, 4096, 128, False)]


def runner(stem: str) -> pathlib.Path:
    return kit.unpack_runner(HERE / "bin", TMP, stem)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    res = open(OUT / "trace.jsonl", "w")  # noqa: SIM115 - the whole run
    base, tr = runner("base"), runner("tr")
    for c in CASES:
        files, q, kd, vd = kit.make_case(TMP, c)
        del q, kd, vd
        o = TMP / "o_tr.npy"
        line = kit.run_runner(tr, files, c[4], ["--iters", "1", "--warmup", "0"], out=o, timeout=60.0)
        raw = np.load(o).view(np.uint8).reshape(-1)[: 2 * 65 * 6 * 8].copy().view(np.int64).reshape(2, 65, 6)
        rec = {"case": kit.case_name(c), "bn": line.get("bn"), "stamps": raw.tolist()}
        res.write(json.dumps(rec) + "\n")
        res.flush()
        for r in range(2):
            for key, exe in (("base", base), ("tr", tr)):
                line = kit.run_runner(exe, files, c[4], ["--timing", "cold", "--iters", "50", "--warmup", "5"],
                                      out=TMP / "o_t.npy", timeout=60.0)
                rec = {"case": kit.case_name(c), "impl": key, "round": r, "p50_us": kit.p50(line)}
                res.write(json.dumps(rec) + "\n")
                res.flush()
                print(json.dumps(rec), flush=True)
    res.close()


if __name__ == "__main__":
    main()
