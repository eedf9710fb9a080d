"""GPU smoke test of `--serve` for allreduce_bench and upstream_bench (stdlib only; run it by hand on a GPU host).

    python3 kernels_mojo/tests/serve_smoke.py --bin-dir DIR [--lib-dir MODULAR_LIB] [--repeat 200] [--hang]
    python3 kernels_mojo/tests/serve_smoke.py --bin-dir DIR [--lib-dir MODULAR_LIB] --timing-repeat 4 [--spinner]

DIR holds allreduce_bench and upstream_bench (built as usual); MODULAR_LIB the four runtime libraries
(kernels_mojo/README.md, "Build"), put on LD_LIBRARY_PATH. Per executable, one worker serves every case below, and each case
is also run one-shot: rc, error text and the non-timing fields of every JSON line must agree. Then one case
is repeated --repeat times in the worker while nvidia-smi samples every GPU's used memory (a leak grows it),
and the wall time per case is compared with the one-shot runs'. --hang: a --debug-hang-rank case must not
answer; its process group is killed and a one-shot run afterwards must pass (the GPUs recovered).
Exit 0 when every check passed; the last line is a JSON summary.

--timing-repeat N (only this check runs): per executable, the one-shot p50 of TIMING_CASE per size, then
the same case N times through one worker; fails if any served p50 is over 1.5x the first served one or the
one-shot one. It first lists the other processes holding a context on the GPUs (nvidia-smi): a process
with a kernel spinning on a peer GPU (e.g. an idle NCCL rank waiting in a GPU broadcast) makes every
iteration wait ~2.2 ms for the GPU's time slice. --spinner starts one on purpose (allreduce_bench
--debug-hang-rank 0 --max-blocks 1: rank 1's kernel spins on GPU 1) after each one-shot run: the check
must then FAIL (2026-11-26, 2x H200: 256 KiB 6.5 -> 2266 us, 16 MiB 59 -> 2320 us, upstream 8.3 -> 2268 us).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import queue

TIMING_KEYS = {"samples_us", "hold_overruns"}
COMMON = ["--iters", "20", "--warmup", "2", "--check", "1"]


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def used_mib() -> list[int]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return [int(x) for x in out.split()]


def cases_for(exe: str, ngpus_present: int) -> list[tuple[list[str], int]]:
    """(arguments, expected rc) in the order one worker serves them."""
    c: list[tuple[list[str], int]] = []
    sizes = ["--sizes", "0,7K+4,256K,16M"]
    for dtype in ("float32", "bfloat16", "float16"):
        c.append(([*sizes, "--dtype", dtype, "--ngpus", "2", *COMMON], 0))
    c.append((["--sizes", "7", "--ngpus", "2"], 2))  # bad config: the worker goes on
    c.append((["--bogus"], 2))
    c.append((["--sizes", "256K", "--ngpus", "8" if ngpus_present < 8 else "16"], 2))  # more GPUs than present
    c.append((["--sizes", "256K,64M", "--ngpus", "2", "--timing", "host", "--batch", "4", *COMMON], 0))
    if exe == "allreduce_bench":
        c.append((["--sizes", "256K,16M", "--ngpus", "2", "--kernel", "2stage", *COMMON], 0))
        c.append((["--sizes", "1G", "--ngpus", "2", "--kernel", "1stage_push"], 2))  # refused before anything runs
        c.append((["--sizes", "8K+28,1M", "--ngpus", "2", "--check-iters", "12", "--alternate", "1", *COMMON], 0))
        c.append((["--sizes", "256K,4M", "--ngpus", "2", "--lanes", "2", "--check-iters", "4", *COMMON], 0))
        c.append((["--sizes", "16M", "--ngpus", "2", "--mem-pressure", "50", "--check-iters", "3", *COMMON], 0))
        c.append((["--sizes", "256K", "--ngpus", "2", "--kernel", "noop", "--iters", "10"], 0))
    if ngpus_present >= 4:  # grow the cache to 4 contexts, then reuse the first two
        c.append((["--sizes", "256K,16M", "--ngpus", "4", *COMMON], 0))
        c.append((["--sizes", "256K,16M", "--ngpus", "2", *COMMON], 0))
    if ngpus_present >= 8:
        c.append((["--sizes", "256K,16M", "--ngpus", "8", *COMMON], 0))
    c.append((["--help"], 0))
    return c


class Worker:
    def __init__(self, exe_path: str, env: dict[str, str]) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([exe_path, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream, put) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def next_line(self, timeout: float) -> str | None:
        return self.lines.get(timeout=timeout)

    def request(self, args: list[str], timeout: float) -> tuple[int, str, list[str], float]:
        t = time.perf_counter()
        self.proc.stdin.write("\t".join(args) + "\n")
        self.proc.stdin.flush()
        results = []
        while True:
            line = self.next_line(timeout)
            if line is None:
                raise RuntimeError(f"worker exited ({self.proc.wait()}) without an end line")
            data = json.loads(line)
            if data.get("worker_end") is True:
                return data["rc"], data["error"], results, time.perf_counter() - t
            results.append(line)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def one_shot(exe_path: str, args: list[str], env: dict[str, str]) -> tuple[int, str, list[str], float]:
    t = time.perf_counter()
    p = subprocess.run([exe_path, *args], capture_output=True, text=True, env=env, timeout=600)
    err = [l for l in p.stderr.splitlines() if l.startswith("error: ")]
    return p.returncode, (err[-1][len("error: "):] if err else ""), p.stdout.splitlines(), time.perf_counter() - t


TIMING_CASE = ["--sizes", "262144,16777216", "--dtype", "float32", "--ngpus", "2", "--iters", "100", "--warmup",
               "10", "--timing", "device", "--check", "1"]
SPINNER = ["--sizes", "262144", "--ngpus", "2", "--kernel", "1stage", "--check", "0", "--debug-hang-rank", "0",
           "--max-blocks", "1", "--iters", "1", "--warmup", "1"]


def compute_apps() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def p50s(lines: list[str]) -> dict[int, float]:
    """The median of each timed line's raw samples (a smoke ratio only; the records' p50 is the driver's,
    driver/stats.py)."""
    return {d["bytes"]: statistics.median(d["samples_us"]) for d in map(json.loads, lines)
            if d.get("timed") and d.get("samples_us")}


def timing_repeat(a, env: dict[str, str], check) -> dict:
    """Served p50s of one case, N times in one worker, against the first served one and a one-shot run."""
    summary: dict = {}
    print("other GPU processes before:", compute_apps() or "none", flush=True)
    spinner = None
    for exe in ("allreduce_bench", "upstream_bench"):
        if a.only and exe != a.only:
            continue
        path = os.path.join(a.bin_dir, exe)
        rc, err, olines, _ = one_shot(path, TIMING_CASE, env)
        shot = p50s(olines)
        check(rc == 0 and bool(shot), f"{exe} one-shot: rc {rc} p50 {shot} {err[:80]}")
        if a.spinner:  # after this executable's one-shot run, until its worker is done
            spinner = subprocess.Popen([os.path.join(a.bin_dir, "allreduce_bench"), *SPINNER], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(3)
            print("spinner started; other GPU processes:", compute_apps(), flush=True)
        w = Worker(path, env)
        w.next_line(120)
        served = []
        for i in range(a.timing_repeat):
            rc, err, lines, _ = w.request(TIMING_CASE, timeout=600)
            served.append(p50s(lines))
            print(f"   {exe} request {i + 1}: rc {rc} p50_us {served[-1]}", flush=True)
        w.proc.stdin.close()
        w.proc.wait(timeout=60)
        if spinner is not None:
            os.killpg(spinner.pid, signal.SIGKILL)
            spinner.wait(timeout=30)
            spinner = None
        for size, first in (served[0] if served else {}).items():
            worst = max(r.get(size, float("inf")) for r in served)
            check(worst <= 1.5 * first and worst <= 1.5 * shot.get(size, float("inf")),
                  f"{exe} {size} B: served p50s {[r.get(size) for r in served]} us, one-shot {shot.get(size)} us "
                  f"(limit 1.5x)")
        summary[exe] = {"one_shot_p50_us": shot, "served_p50_us": served}
    return summary


def stable(line: str) -> dict:
    return {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--lib-dir", default="")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--only", choices=["allreduce_bench", "upstream_bench"])
    ap.add_argument("--timing-repeat", type=int, default=0, help="only the served-timing check, N requests")
    ap.add_argument("--spinner", action="store_true", help="with --timing-repeat: a foreign kernel spins on GPU 1")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.lib_dir:
        env["LD_LIBRARY_PATH"] = a.lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    ngpus = gpu_count()
    print(f"{ngpus} GPU(s)")
    failures: list[str] = []
    summary: dict = {"gpus": ngpus}

    def check(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    if a.timing_repeat > 0:
        summary.update(timing_repeat(a, env, check))
        print(json.dumps({"failures": failures, **summary}))
        return 1 if failures else 0

    for exe in ("allreduce_bench", "upstream_bench"):
        if a.only and exe != a.only:
            continue
        path = os.path.join(a.bin_dir, exe)
        w = Worker(path, env)
        ready = w.next_line(120)
        check(ready == '{"worker_ready":true}', f"{exe}: ready line {ready!r} after "
              f"{(time.perf_counter() - w.t0) * 1e3:.0f} ms")
        worker_s = shot_s = 0.0
        for args, want_rc in cases_for(exe, ngpus):
            rc, err, lines, dt = w.request(args, timeout=600)
            worker_s += dt
            orc, oerr, olines, odt = one_shot(path, args, env)
            shot_s += odt
            same = (rc, err, [stable(l) for l in lines]) == (orc, oerr, [stable(l) for l in olines])
            wrong = sum(json.loads(l).get("wrong", 0) for l in lines)
            check(rc == want_rc and same and wrong == 0,
                  f"{exe} {' '.join(args)[:90]}: rc {rc} (one-shot {orc}, want {want_rc}), {len(lines)} line(s), "
                  f"wrong {wrong}, same as one-shot {same}, {dt:.2f} s vs one-shot {odt:.2f} s"
                  + (f", error {err[:80]!r}" if err else ""))
            if not same:
                print("   worker:  ", rc, err, lines, "\n   one-shot:", orc, oerr, olines)
        summary[exe] = {"worker_s": round(worker_s, 2), "one_shot_s": round(shot_s, 2)}
        # leak: one case over and over; device memory must not grow
        rep = ["--sizes", "256K,16M,64M", "--ngpus", "2", "--iters", "5", "--warmup", "1", "--check", "1"]
        if exe == "allreduce_bench":
            rep += ["--check-iters", "2"]
        before = None
        t = time.perf_counter()
        for i in range(a.repeat):
            rc, err, lines, _ = w.request(rep, timeout=600)
            if rc != 0:
                check(False, f"{exe} repeat {i}: rc {rc} {err}")
                break
            if i == 9:
                before = used_mib()
        per_case = (time.perf_counter() - t) / max(1, a.repeat)
        after = used_mib()
        grew = [x - y for x, y in zip(after, before or after)]
        check(max(grew) <= 64, f"{exe}: {a.repeat} repeats, {per_case * 1e3:.0f} ms per case, GPU memory used "
              f"{before} -> {after} MiB (growth {grew})")
        summary[exe].update({"repeat_ms_per_case": round(per_case * 1e3, 1), "mem_growth_mib": grew})
        w.proc.stdin.close()  # EOF -> exit 0
        check(w.proc.wait(timeout=60) == 0, f"{exe}: exit 0 at EOF")
    if a.hang and a.only != "upstream_bench":
        path = os.path.join(a.bin_dir, "allreduce_bench")
        w = Worker(path, env)
        w.next_line(120)
        ok = w.request(["--sizes", "256K", "--ngpus", "2", "--iters", "5"], timeout=120)[0] == 0
        try:
            w.request(["--sizes", "256K", "--ngpus", "2", "--iters", "5", "--debug-hang-rank", "1"], timeout=20)
            hung = False
        except queue.Empty:
            hung = True
        w.kill()
        rc, err, lines, _ = one_shot(path, ["--sizes", "256K,16M", "--ngpus", "2", *COMMON], env)
        check(ok and hung and rc == 0, f"hang: served before {ok}, hung {hung}, killed; one-shot afterwards rc {rc}")
    print(json.dumps({"failures": failures, **summary}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
