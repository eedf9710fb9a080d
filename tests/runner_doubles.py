"""Test doubles for the kernel executables, so the pipeline runs end to end on a CPU.

Each double is a small Python script under a fake build folder, speaking the real executables'
command line and printing their JSON lines (the records in driver/records.py). Their numbers are
set by the test that writes them, never captured: what the tests check is what the driver does
with them (which runs happen in which order, which gates pass, fail or go unmeasured, what the
archive says). The real executables are covered by tests/gpu/ and the archived GPU runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from driver import paths
from driver.host import host_info, utc_now
from driver.records import BuildMeta, DeviceInfo, GpuInfo, Toolchain
from driver.suites import sdpa

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_90"
# The 2x H200 host as KINDS.md records it (2026-10-29): 143771 MiB each, driver 580.159.04.
H200X2 = DeviceInfo(driver_version="580.159.04",
                    gpus=[GpuInfo(index=i, name="NVIDIA H200", memory_mib=143771) for i in range(2)])

ALLREDUCE = """#!{python}
# allreduce_bench / upstream_bench double: one line per size; --debug-hang-rank hangs.
import json, sys, time
def case(argv):
  args = dict(zip(argv[::2], argv[1::2]))
  with open({log!r}, "a") as f:
    f.write(json.dumps(argv) + "\\n")
  if "--debug-hang-rank" in args:
    time.sleep(600)
  impl, p50, wrong, err = {impl!r}, {p50!r}, {wrong!r}, {err!r}
  dtype = args.get("--dtype", "float32")
  esize = {{"float32": 4, "bfloat16": 2, "float16": 2}}[dtype]
  kernel = args.get("--kernel", "auto")
  selected = "1stage" if kernel == "auto" else kernel
  if kernel == "1stage_cpasync":
    selected = "1stage_cpasync_s" + args.get("--stages", "3")
  if impl != "ours":
    kernel = selected = "upstream"
  for size in args["--sizes"].split(","):
    n = int(size.rstrip("KMG")) << {{"K": 10, "M": 20, "G": 30}}.get(size[-1], 0)
    t = p50.get(selected, p50.get("*")) if isinstance(p50, dict) else p50
    print(json.dumps({{"suite": "allreduce", "impl": impl, "kernel_requested": kernel, "kernel_selected": selected,
                      "kernel_confirmed": selected, "dtype": dtype, "ngpus": int(args.get("--ngpus", "2")),
                      "bytes": n, "elements": n // esize, "iters": int(args.get("--iters", "50")),
                      "warmup": int(args.get("--warmup", "10")), "timing": args.get("--timing", "host"),
                      "batch": int(args.get("--batch", "1")),
                      "samples_us": [t * 0.95, t, t, t * 1.05], "max_abs_err": err, "wrong": wrong,
                      "checked": args.get("--check", "0") == "1", "checked_iters": 1, **{extra!r}}}), flush=True)
""" + "{serve}"

SDPA = """#!{python}
# sdpa_fp8_<variant> double: writes the float64 reference of the case (k/v [B,Hkv,Skv,D], --causal: the bottom-right
# mask; driver/reference/sdpa.py) as float16 (optionally with noise of a given rms relative to the output's, per
# precision tier; corrupted; or of another shape) and prints one SdpaLine in the tier asked for (--precision, default
# fp16) naming the case it ran (q_shape, kv_shape, causal), and the kernel an sm_90 build runs for it.
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from driver.reference.sdpa import reference
KERNEL = {{"fp16": "wgmma_sm90", "fp8": "wgmma_fp8_sm90"}}
def case(argv):
    args, i = {{}}, 0
    while i < len(argv):  # --flag value, or a --switch alone (--no-spin)
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        args[argv[i]] = argv[i + 1] if has_value else ""
        i += 2 if has_value else 1
    with open({log!r}, "a") as f:
        f.write(json.dumps(argv) + "\\n")
    precision = args.get("--precision", "fp16")
    if precision not in KERNEL:
        print("error: --precision must be fp16 or fp8", file=sys.stderr)
        sys.exit(2)
    if precision in {refuse!r}:
        print("error: --precision " + precision + ": no FP8 warpgroup MMA in this build", file=sys.stderr)
        sys.exit(5)
    q, k, v = (np.load(args["--" + n]) for n in ("q", "k", "v"))
    causal = "--causal" in args
    if {refuse_cases} and (q.shape != k.shape or causal):
        print("error: wgmma_sm90: serves square MHA only (q " + str(list(q.shape)) + ", k/v " + str(list(k.shape)) +
              ")", file=sys.stderr)
        sys.exit(5)
    ks, vs = np.load(args["--scales"])
    out = reference(q, k, v, float(ks), float(vs), causal=causal)
    noise = {noise!r}.get(precision, 0.0)
    if noise:
        out = out + noise * np.sqrt(np.mean(out ** 2)) * np.random.default_rng(0).standard_normal(out.shape)
    out = out.astype(np.float16)
    if {corrupt}:
        out = out + np.float16(1.0)
    if {first_head_only}:
        out = out[:, :1]
    np.save(args["--out"], out)
    p50 = {p50!r}
    print(json.dumps({{"suite": "sdpa", "impl": {impl!r}, "kernel": KERNEL[precision], "precision": precision,
                      "shape": list(q.shape), "q_shape": list(q.shape), "kv_shape": list(k.shape),
                      "causal": causal != {flip_causal}, "iters": int(args.get("--iters", "100")),
                      "warmup": 0, "samples_us": [p50 * 0.95, p50, p50, p50 * 1.05], "timing": args.get("--timing", "cold"),
                      "batch": int(args.get("--batch", "1")), "soak_launches": int(args.get("--soak", "0")),
                      "soak_streams": int(args.get("--streams", "1"))}}), flush=True)
""" + "{serve}"


# Appended to every double (and usable by a test's own doubles): the body is `case(argv)`; with `--serve`
# it is a long-lived worker speaking driver/workers.py's protocol, else one case from the command line.
SERVE = """
if sys.argv[1:] == ["--serve"]:
    import io
    print(json.dumps({"worker_ready": True}), flush=True)
    for raw in sys.stdin:
        line = raw.rstrip("\\n")
        if not line:
            continue
        real, sys.stderr = sys.stderr, io.StringIO()
        rc = 0
        try:
            case(line.split("\\t"))
        except SystemExit as exc:
            rc = exc.code or 0
        text, sys.stderr = sys.stderr.getvalue(), real
        sys.stderr.write(text)
        errors = [ln[7:] for ln in text.splitlines() if ln.startswith("error: ")]
        print(json.dumps({"worker_end": True, "rc": rc, "error": errors[-1] if rc and errors else ""}), flush=True)
else:
    case(sys.argv[1:])
"""


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def allreduce_exe(exe_dir: Path, name: str, *, impl: str, p50: float | dict[str, float], wrong: int = 0,
                  err: float | None = 0.0, log: Path | None = None, extra: dict | None = None) -> Path:
    """`p50`: one time for every kernel, or a time per selected kernel name ("*": the rest). `extra`: more
    fields of every line (the check's, e.g. `rank_mismatch_first`)."""
    log = log or exe_dir / "calls.jsonl"
    return _script(exe_dir / name, ALLREDUCE.format(python=sys.executable, log=str(log), impl=impl, p50=p50,
                                                    wrong=wrong, err=err, extra=extra or {}, serve=SERVE))


def sdpa_exes(exe_dir: Path, *, p50: dict[str, float], corrupt: str = "", first_head_only: str = "",
              noise: dict[str, float] | None = None, refuse: tuple[str, ...] = (), log: Path | None = None,
              refuse_cases: bool = False, flip_causal: str = "") -> Path:
    """Both SDPA variants; `corrupt` / `first_head_only` name a variant that writes a wrong output; `noise`
    per tier: the rms of the error added to the output, relative to the output's rms (the rel_l2 it gets, to
    the fp16 rounding); `refuse`: tiers the double exits 5 for, as a runner without FP8 warpgroup MMA does;
    `refuse_cases`: every case but square MHA exits 5, as a kernel that serves only those does; `flip_causal`
    names a variant whose line says the other mask than it was asked for."""
    log = log or exe_dir / "calls.jsonl"
    for impl, exe in sdpa.VARIANTS.items():
        sdpa_exe(exe_dir / exe, impl=impl, p50=p50[impl], corrupt=impl == corrupt, noise=noise, refuse=refuse,
                 first_head_only=impl == first_head_only, log=log, refuse_cases=refuse_cases,
                 flip_causal=impl == flip_causal)
    return log


def sdpa_exe(path: Path, *, impl: str, p50: float, log: Path, corrupt: bool = False, first_head_only: bool = False,
             noise: dict[str, float] | None = None, refuse: tuple[str, ...] = (), refuse_cases: bool = False,
             flip_causal: bool = False) -> Path:
    """One SDPA runner double at `path` whose every line says `impl` (what its build told it)."""
    return _script(path, SDPA.format(python=sys.executable, root=str(ROOT), log=str(log), impl=impl, p50=p50,
                                     corrupt=corrupt, noise=noise or {}, refuse=tuple(refuse),
                                     first_head_only=first_head_only, refuse_cases=refuse_cases,
                                     flip_causal=flip_causal, serve=SERVE))


def calls(log: Path) -> list[list[str]]:
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.is_file() else []


def fake_build(tmp_path: Path, monkeypatch) -> Path:
    """A build folder with build_meta.json that the pipeline takes for the real one; returns the
    folder the executables go in (build/sm_90)."""
    build_dir = tmp_path / "build"
    (build_dir / ARCH).mkdir(parents=True)
    meta = BuildMeta(created_utc=utc_now(), git_sha="0" * 40, git_dirty=False, toolchain=Toolchain(python="test"),
                     host=host_info(), archs=[ARCH], targets=[])
    (build_dir / "build_meta.json").write_text(meta.model_dump_json())
    monkeypatch.setattr(paths, "build_dir", lambda: build_dir)
    return build_dir / ARCH
