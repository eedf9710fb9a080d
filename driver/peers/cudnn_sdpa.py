"""cuDNN FP8 peer: cuDNN's FP8 fused attention forward (`sdpa_fp8`) through the cudnn-frontend Python
package, on the cuDNN library torch already loaded.

Same inputs, flags and line as the other SDPA peers (driver/peers/sdpa_io.py), impl `cudnn_fp8`, the
peer of the fp8 tier (the line's `precision` is "fp8"). Its arithmetic, written into the line's
`arithmetic`:
- Q is FP8 too: quantized exactly as our K and V are (driver/reference/sdpa.py make_inputs): one
  per-tensor scale q_scale = float32(amax|Q| / 448), codes = encode_e4m3_sim(Q / q_scale) (round to
  nearest even, saturating), q_scale handed to cuDNN as descale_q. K and V are our E4M3 codes with
  our scales (descale_k, descale_v). The codes go to cuDNN unchanged as float8_e4m3fn (OCP E4M3:
  bias 7, subnormals, no infinities, S.1111.111 NaN), the format decode_e4m3_sim decodes;
  `decode_check` shows cuDNN reads every code as we do.
- cuDNN quantizes the softmax probabilities P to E4M3 before P.V (scale_s = 256, a power of two
  that maps P <= 1 into range; descale_s = 1/256), as our fp8 tier does (our fp16 tier keeps P in fp16).
- O: fp16 where cuDNN accepts it for FP8 inputs, else E4M3 with scale_o = 2^floor(log2(448 / amax|V|))
  (|O| <= amax|V|, a power of two so descaling is exact), decoded and divided on the host.
The error against the float64 reference (computed from fp16 Q) therefore includes Q's and P's
quantization; the driver reports it, and gates our fp8 tier against it (thresholds.toml [[sdpa.accuracy]]).

Grouped-query heads: K and V go to cuDNN with their own head count [B, Hkv, Skv, D] (it groups the query heads
itself); Sq != Skv as the files give them; the causal mask bottom-right aligned (row i sees keys
j <= i + Skv - Sq) as the frontend's preferred masking arguments ask for it, `diagonal_alignment=BOTTOM_RIGHT`
with `right_bound=0` (`use_causal_mask_bottom_right` where the installed frontend has no `diagonal_alignment`);
where Sq == Skv the same mask as TOP_LEFT (`use_causal_mask`), the one cuDNN's FP8 attention takes before Blackwell:
cudnn-frontend 1.22.1 refuses a bottom-right mask in FP8 on GPUs older than sm_100 ("only supported on Blackwell
architecture and newer"; seen on an H200: experiments/2026-11-28-sdpa-inference-peers), so there the chunked-prefill cases are a skip with those
words (`cudnn_mask`).

A case cuDNN refuses (head dim, sequence length, grouped heads, the mask, GPU older than sm_90) is one `error:`
line with cuDNN's own reason and exit 3: the driver records the peer as skipped for that case.
"""

from __future__ import annotations

import math

import numpy as np

from driver.peers import sdpa_io, serving
from driver.peers.sdpa_io import EXIT_CUDA_ERROR, fail
from driver.reference.sdpa import E4M3_MAX, decode_e4m3_sim, encode_e4m3_sim

IMPL = "cudnn_fp8"
SCALE_S = 256.0  # P in [0, 1] -> [0, 256] in E4M3 (max 448); a power of two: no rounding from the scale itself
MIN_ARCH = (9, 0)
_GRAPHS: dict[tuple, tuple[Fp8Sdpa, str]] = {}  # per case (sdpa_io.SdpaCase.key), when served: built once


def cudnn_mask(causal: bool, square: bool, has_diagonal_alignment: bool) -> dict[str, object]:
    """The sdpa_fp8 masking arguments of a case, decided without cuDNN: none; the causal mask aligned top-left
    where Sq == Skv (`square`: it is the bottom-right mask there, and the form cuDNN's FP8 attention takes on
    Hopper); else bottom-right. In the frontend's preferred form (`diagonal_alignment` names an enum member of
    `cudnn.diagonal_alignment`), or its older flags where the frontend has no `diagonal_alignment`."""
    if not causal:
        return {}
    corner = "TOP_LEFT" if square else "BOTTOM_RIGHT"
    if has_diagonal_alignment:
        return {"diagonal_alignment": corner, "right_bound": 0}
    return {"use_causal_mask": True} if square else {"use_causal_mask_bottom_right": True}


def _mask_args(cudnn, causal: bool, square: bool) -> dict[str, object]:
    alignment = getattr(cudnn, "diagonal_alignment", None)
    args = cudnn_mask(causal, square, alignment is not None)
    if "diagonal_alignment" in args:
        args["diagonal_alignment"] = getattr(alignment, str(args["diagonal_alignment"]))
    return args


def quantize_q(q: np.ndarray) -> tuple[np.ndarray, float]:
    """Q (float16) -> (E4M3 codes, per-tensor scale), exactly as make_inputs quantizes K and V."""
    amax = float(np.max(np.abs(q.astype(np.float64)))) if q.size else 0.0
    scale = float(np.float32(amax / E4M3_MAX)) if amax > 0 else 1.0
    return encode_e4m3_sim(q.astype(np.float64) / scale), scale


def output_scale(v_u8: np.ndarray, v_scale: float) -> float:
    """scale_o for an E4M3 output: the largest power of two that keeps amax|V| (a bound on |O|) <= 448."""
    amax = float(np.nanmax(np.abs(decode_e4m3_sim(v_u8)))) * v_scale
    return 2.0 ** math.floor(math.log2(E4M3_MAX / amax)) if amax > 0 else 1.0


def import_cudnn():
    """The cudnn-frontend module (after torch, so it binds the libcudnn torch loaded), or exit 3."""
    try:
        import cudnn
    except ImportError as exc:
        fail(f"nvidia-cudnn-frontend is not installed on this host ({exc})", EXIT_CUDA_ERROR)
    except Exception as exc:  # noqa: BLE001 - a broken install or a cuDNN it cannot load: the reason
        fail(f"cudnn-frontend failed to load: {type(exc).__name__}: {_one_line(exc)}", EXIT_CUDA_ERROR)
    return cudnn


def versions(torch, cudnn) -> str:
    backend = cudnn.backend_version()  # e.g. 91300 = 9.13.0
    return (f"cuDNN {backend // 10000}.{backend // 100 % 100}.{backend % 100} (torch {torch.__version__} "
            f"loaded cuDNN {torch.backends.cudnn.version()}), cudnn-frontend {cudnn.__version__}")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:400] if text else type(exc).__name__


class Fp8Sdpa:
    """One cuDNN FP8 attention graph for a case (Q [B,Hq,Sq,D], K/V [B,Hkv,Skv,D], the mask), built once;
    `run()` launches it on torch's current stream (inside a CUDA graph capture too)."""

    def __init__(self, torch, cudnn, q8, k8, v8, scales: dict[str, float], out_fp16: bool,
                 causal: bool = False) -> None:
        square = q8.shape[2] == k8.shape[2]  # Sq == Skv: the causal mask's corners agree
        self.torch, self.cudnn = torch, cudnn
        b, h, s, d = q8.shape
        dev = q8.device
        self.handle = cudnn.create_handle()
        self.out_fp16 = out_fp16
        e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)
        stride = list(q8.stride())
        tq = g.tensor(name="q", dim=[b, h, s, d], stride=stride, data_type=e4m3)
        tk, tv = (g.tensor(name=n, dim=list(t.shape), stride=list(t.stride()), data_type=e4m3)
                  for n, t in (("k", k8), ("v", v8)))
        names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
        ts = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) for n in names}
        o, _stats, amax_s, amax_o = g.sdpa_fp8(
            q=tq, k=tk, v=tv, **ts, generate_stats=False, attn_scale=1.0 / math.sqrt(d), name="sdpa_fp8",
            **_mask_args(cudnn, causal, square))
        o.set_output(True).set_dim([b, h, s, d]).set_stride(stride).set_data_type(
            cudnn.data_type.HALF if out_fp16 else e4m3)
        for amax in (amax_s, amax_o):
            amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph = g
        self.out = torch.empty((b, h, s, d), dtype=torch.float16 if out_fp16 else torch.float8_e4m3fn, device=dev)
        self.workspace = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=dev)
        self.scales = {n: torch.full((1, 1, 1, 1), scales[n], dtype=torch.float32, device=dev) for n in names}
        self.inputs = (q8, k8, v8)
        self.pack = {tq: q8, tk: k8, tv: v8, o: self.out,
                     amax_s: torch.empty((1, 1, 1, 1), dtype=torch.float32, device=dev),
                     amax_o: torch.empty((1, 1, 1, 1), dtype=torch.float32, device=dev),
                     **{ts[n]: self.scales[n] for n in names}}

    def load(self, q8, k8, v8, scales: dict[str, float]) -> None:
        """Another problem of the same shape through the same graph (a served peer builds each shape's
        graph once): its codes copied into the bound tensors, its scales into the scale tensors."""
        for mine, new in zip(self.inputs, (q8, k8, v8)):
            mine.copy_(new)
        for n, t in self.scales.items():
            t.fill_(1.0 if n == "scale_o" and self.out_fp16 else scales[n])

    def run(self) -> None:
        self.cudnn.set_stream(handle=self.handle, stream=self.torch.cuda.current_stream().cuda_stream)
        self.graph.execute(self.pack, self.workspace, handle=self.handle)

    def output(self, scale_o: float) -> np.ndarray:
        """The last run's O as float64 on the host (E4M3 decoded with our table, then descaled)."""
        self.torch.cuda.synchronize()
        if self.out_fp16:
            return self.out.cpu().numpy().astype(np.float64)
        return decode_e4m3_sim(self.out.view(self.torch.uint8).cpu().numpy()) / scale_o


def build(torch, cudnn, q8, k8, v8, scales: dict[str, float], causal: bool = False) -> tuple[Fp8Sdpa, str]:
    """The graph with an fp16 output if cuDNN accepts one, else an E4M3 output; the reason fp16 was refused."""
    try:
        return Fp8Sdpa(torch, cudnn, q8, k8, v8, {**scales, "scale_o": 1.0}, out_fp16=True, causal=causal), ""
    except Exception as exc:  # noqa: BLE001 - cuDNN says why in its exception; kept for the record
        why_fp16 = _one_line(exc)
    try:
        return Fp8Sdpa(torch, cudnn, q8, k8, v8, scales, out_fp16=False, causal=causal), why_fp16
    except Exception as exc:  # noqa: BLE001
        mask = ", causal bottom-right" if causal else ""
        fail(f"cuDNN refuses FP8 SDPA for q [B,Hq,Sq,D] {list(q8.shape)}, k/v {list(k8.shape)}{mask}: "
             f"{_one_line(exc)} (with an fp16 output: {why_fp16})", EXIT_CUDA_ERROR)


def to_device(torch, codes: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(codes)).cuda().view(torch.float8_e4m3fn)


def decode_check(torch, cudnn) -> dict[str, object]:
    """Does cuDNN read E4M3 codes as decode_e4m3_sim does? Q = 0 makes every score equal, so each
    output row is the mean of V's rows; with every row of a head equal to the same 128 codes, and
    P = 1/128 exact after its power-of-two scale, O must be exactly decode(V's row), for every
    finite code (0x00..0xFE less 0x7F; the two NaN codes are replaced by 0). Also torch's
    float8_e4m3fn decode of all 256 codes, which the E4M3 output is read back through."""
    codes = np.arange(256, dtype=np.uint8)
    as_torch = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).double().numpy()
    ours = decode_e4m3_sim(codes)
    torch_same = bool(np.array_equal(np.isnan(as_torch), np.isnan(ours))
                      and np.array_equal(as_torch[~np.isnan(ours)], ours[~np.isnan(ours)])
                      and np.array_equal(np.signbit(as_torch[~np.isnan(ours)]), np.signbit(ours[~np.isnan(ours)])))
    finite = np.where(np.isnan(ours), 0, codes).astype(np.uint8)
    b, h, s, d = 1, 2, 128, 128
    v = np.broadcast_to(finite.reshape(1, h, 1, d), (b, h, s, d)).copy()
    zeros = np.zeros((b, h, s, d), dtype=np.uint8)
    scales = {"descale_q": 1.0, "descale_k": 1.0, "descale_v": 1.0, "descale_s": 1.0 / SCALE_S,
              "scale_s": SCALE_S, "scale_o": 1.0}
    sdpa, _why = build(torch, cudnn, to_device(torch, zeros), to_device(torch, zeros), to_device(torch, v), scales)
    sdpa.run()
    got = sdpa.output(1.0)
    want = np.broadcast_to(decode_e4m3_sim(v), got.shape)
    bad = np.argwhere(got != want)
    return {
        "torch_float8_e4m3fn_matches": torch_same,
        "cudnn_codes_checked": int(np.count_nonzero(~np.isnan(ours))),
        "cudnn_mismatches": len(bad),
        "cudnn_first_mismatch": None if not len(bad) else
        {"code": int(v[tuple(bad[0])]), "ours": float(want[tuple(bad[0])]), "cudnn": float(got[tuple(bad[0])])},
        "output": "fp16" if sdpa.out_fp16 else "e4m3",
    }


def main(argv: list[str] | None = None) -> None:
    ns, case = sdpa_io.args_and_case("cudnn_sdpa", argv)
    torch = sdpa_io.import_torch()
    cc = torch.cuda.get_device_capability(0)
    if cc < MIN_ARCH:
        fail(f"cuDNN FP8 attention needs sm_90 or newer; this GPU is sm_{cc[0]}{cc[1]}", EXIT_CUDA_ERROR)
    cudnn = import_cudnn()
    q_codes, q_scale = sdpa_io.memo("q e4m3", (ns.q,), lambda: quantize_q(case.q))
    scale_o = sdpa_io.memo("scale_o", (ns.v, ns.scales), lambda: output_scale(case.v_u8, case.v_scale))
    scales = {"descale_q": q_scale, "descale_k": case.k_scale, "descale_v": case.v_scale,
              "descale_s": 1.0 / SCALE_S, "scale_s": SCALE_S, "scale_o": scale_o}
    q8, k8, v8 = (to_device(torch, a) for a in (q_codes, case.k_u8, case.v_u8))
    cached = _GRAPHS.get(case.key)
    if cached is None:
        sdpa, why_not_fp16 = _GRAPHS.setdefault(case.key, build(torch, cudnn, q8, k8, v8, scales, case.causal))
    else:
        sdpa, why_not_fp16 = cached
        sdpa.load(q8, k8, v8, scales)
    try:
        sdpa.run()
        out = sdpa.output(1.0 if sdpa.out_fp16 else scale_o)
        times, batch, flush = sdpa_io.time_mode(torch, sdpa.run, ns)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - cuDNN's execute error, as one line
        fail(f"cuDNN FP8 SDPA failed to run: {_one_line(exc)}", EXIT_CUDA_ERROR)
    sdpa_io.write_out(ns.out, out)
    o_text = ("o fp16" if sdpa.out_fp16 else
              f"o e4m3 (scale_o 2^{int(math.log2(scale_o))}; cuDNN refused an fp16 output: {why_not_fp16})")
    square = case.shape[2] == case.kv_shape[2]
    mask = (", causal: " + ", ".join(f"{k}={getattr(v, 'name', v)}"
                                     for k, v in _mask_args(cudnn, True, square).items()) if case.causal else "")
    arithmetic = (f"q e4m3 (per-tensor scale amax/448 = {q_scale:.6g}, quantized from fp16 Q), k/v e4m3 (our codes "
                 f"and scales), P e4m3 (scale_s {SCALE_S:g}), fp32 accumulate, {o_text}{mask}")
    sdpa_io.emit(IMPL, case, times, ns, batch=batch, flush_bytes=flush, arithmetic=arithmetic,
                 version=versions(torch, cudnn))


if __name__ == "__main__":
    serving.entry(main)
