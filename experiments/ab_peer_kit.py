"""What the A/B scripts of the fp8 tier's head-dim-128 experiments share with torch and cuDNN FP8 on the GPU host (since
2026-11-29; until then each script carried its own copy: 2026-11-29-sdpa-fp8-bn256/ab256.py, then ab24.py, ab3.py,
ab3_w192.py): square (B, H, S, D, causal) cases of N(0,1) inputs with E4M3 K/V, the float64 reference and the errors
on the GPU, one runner launch, and cuDNN FP8 through the driver's peer command line (`python -m
driver.peers.cudnn_sdpa --serve`, the bundle's driver on PYTHONPATH: a subprocess, no import of the driver).
A script imports it as `sys.path.insert(0, <experiments/>); import ab_peer_kit`; ab_kit.py is its numpy-only sibling
for the random-code inputs and the decode presets."""

import json
import lzma
import math
import pathlib
import subprocess
import sys

import numpy as np
import torch


def make_case(tmp: pathlib.Path, c, seed: int = 0):
    """Inputs on the GPU and the runner's .npy files; returns (files, q, kd, vd) with kd, vd decoded float64 * scale."""
    B, H, S, D, _ = c
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32).to(torch.float16)
    kx = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32)
    vx = torch.randn((B, H, S, D), generator=g, device="cuda", dtype=torch.float32)
    ks = float(np.float32(kx.abs().max().item() / 448.0)) or 1.0
    vs = float(np.float32(vx.abs().max().item() / 448.0)) or 1.0
    k8 = (kx / ks).to(torch.float8_e4m3fn)
    v8 = (vx / vs).to(torch.float8_e4m3fn)
    d = tmp / "case"
    d.mkdir(parents=True, exist_ok=True)
    files = {n: d / f"{n}.npy" for n in ("q", "k", "v", "scales")}
    np.save(files["q"], q.cpu().numpy())
    np.save(files["k"], k8.view(torch.uint8).cpu().numpy())
    np.save(files["v"], v8.view(torch.uint8).cpu().numpy())
    np.save(files["scales"], np.array([ks, vs], dtype=np.float32))
    return files, q, k8.to(torch.float64) * ks, v8.to(torch.float64) * vs


def reference(q, kd, vd, causal: bool):
    B, H, S, D = q.shape
    out = torch.empty((B, H, S, D), dtype=torch.float64, device="cuda")
    qf, kf, vf, of = (t.reshape(B * H, S, D) for t in (q.to(torch.float64), kd, vd, out))
    per = max(1, int(2e9 // (S * S * 8)))
    mask = None
    if causal:  # square: row i sees keys j <= i
        mask = torch.ones((S, S), dtype=torch.bool, device="cuda").triu(1)
    for i in range(0, B * H, per):
        s = torch.matmul(qf[i:i + per], kf[i:i + per].transpose(1, 2)) / math.sqrt(D)
        if mask is not None:
            s.masked_fill_(mask, -math.inf)
        of[i:i + per] = torch.matmul(torch.softmax(s, dim=-1), vf[i:i + per])
    return out


def errors(o: np.ndarray, ref) -> dict:
    ot = torch.from_numpy(o.astype(np.float64)).to("cuda")
    err = (ot - ref).abs()
    if not bool(torch.isfinite(err).all()):
        return {"finite": False}
    return {"rel_l2": float(torch.linalg.norm(err) / torch.linalg.norm(ref)),
            "max_abs_rel": float(err.max() / ref.abs().max()), "max_abs": float(err.max()), "finite": True}


def io_args(files) -> list[str]:
    return [a for n in ("q", "k", "v", "scales") for a in (f"--{n}", str(files[n]))]


def run_runner(exe, files, causal: bool, extra: list[str], out=None, timeout: float = 60.0) -> dict:
    cmd = [str(exe), *io_args(files), "--precision", "fp8", "--kernel", "wgmma_fp8_sm90", "--split", "0", *extra]
    if causal:
        cmd.append("--causal")
    if out is not None:
        cmd += ["--out", str(out)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    if p.returncode != 0:
        return {"rc": p.returncode, "stderr": p.stderr.strip()[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


class CudnnWorker:
    """cuDNN FP8 (driver/peers/cudnn_sdpa.py) as the driver runs it: one `python3 -m driver.peers.cudnn_sdpa --serve`
    worker (the bundle's driver on PYTHONPATH), a case per line of tab-separated arguments, its result line and then
    its end line ({"worker_end": true, "rc": ..., "error": ...}).  torch and cuDNN are loaded once."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.errpath = tmp / "cudnn_worker.err"
        self.err = open(self.errpath, "w")  # noqa: SIM115 - the worker's whole life
        self.p = subprocess.Popen([sys.executable, "-m", "driver.peers.cudnn_sdpa", "--serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1)
        first = self.p.stdout.readline()
        self.ready = first.startswith("{") and json.loads(first).get("worker_ready", False)

    def run(self, argv: list[str]) -> dict:
        if not self.ready or self.p.poll() is not None:
            return {"rc": "no worker", "stderr": self.errpath.read_text()[-400:]}
        self.p.stdin.write("\t".join(argv) + "\n")
        self.p.stdin.flush()
        result = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                return {"rc": "worker ended", "stderr": self.errpath.read_text()[-400:]}
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if d.get("worker_end"):
                if d.get("rc"):
                    return {"rc": d["rc"], "stderr": d.get("error", "")}
                return result or {"rc": "no line"}
            result = d

    def case(self, files, causal: bool, extra: list[str], out=None) -> dict:
        """One case, as run_runner takes it."""
        argv = [*io_args(files), *extra] + (["--causal"] if causal else []) + (["--out", str(out)] if out else [])
        return self.run(argv)


def p50(line: dict) -> float | None:
    s = line.get("samples_us")
    return float(np.median(s)) if s else None


def tflops(c, us: float) -> float:
    B, H, S, D, causal = c
    f = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    return f / us / 1e6


def case_name(c) -> str:
    """(B, H, S, D, causal) as the results name it: "BxHxSxD" and " causal"."""
    return "x".join(str(x) for x in c[:4]) + (" causal" if c[4] else "")


def unpack_runner(src_dir: pathlib.Path, dst_dir: pathlib.Path, stem: str) -> pathlib.Path:
    """Runner `stem` from src_dir/stem.xz into dst_dir, written again every time (a warm machine's /tmp may hold an
    older runner of the same name)."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / stem
    dst.write_bytes(lzma.decompress((src_dir / f"{stem}.xz").read_bytes()))
    dst.chmod(0o755)
    return dst
