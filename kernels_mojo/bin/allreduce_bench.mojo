# allreduce_bench: benchmark and check the kernels_mojo allreduce family (or
# max-core's upstream comm.allreduce) on 2, 4 or 8 P2P-connected GPUs.
#
# Build (from the repo root):
#   mojo build -I kernels_mojo --target-accelerator sm_90 [-D AR_...=V ...] \
#       kernels_mojo/bin/allreduce_bench.mojo -o allreduce_bench
# stdout: exactly one JSON line per size; diagnostics go to stderr.
# Exit codes: 0 ok, 2 bad configuration, 4 no GPU.

from std.sys import exit, size_of, stderr
from max.gpu.host import DeviceContext

from benchlib.cli import (
    EXIT_BAD_CONFIG,
    EXIT_NO_GPU,
    BenchConfig,
    fail,
    parse_args,
)
from benchlib.runner import run_ours, run_upstream

comptime DTYPES = (DType.float32, DType.bfloat16, DType.float16)
comptime DTYPE_NAMES = ("float32", "bfloat16", "float16")
comptime NGPUS = (2, 4, 8)


def _dtype_bytes(name: String) -> Int:
    if name == "float32":
        return 4
    return 2


def _open_contexts(cfg: BenchConfig) -> List[DeviceContext]:
    """Open one context per rank; exits 4 without a GPU, 2 for bad configs."""
    var ndev = DeviceContext.number_of_devices()
    if ndev == 0:
        fail(EXIT_NO_GPU, "no GPU: no devices found")
    if cfg.ngpus > ndev:
        fail(EXIT_BAD_CONFIG, String("--ngpus ", cfg.ngpus, " exceeds the ", ndev, " GPU(s) present"))
    var ctxs = List[DeviceContext]()
    try:
        for i in range(cfg.ngpus):
            ctxs.append(DeviceContext(device_id=i))
    except e:
        fail(EXIT_NO_GPU, String("no GPU: ", e))
    try:
        for i in range(cfg.ngpus):
            for j in range(cfg.ngpus):
                if i != j and not ctxs[i].can_access(ctxs[j]):
                    fail(EXIT_BAD_CONFIG, String("no P2P access from GPU ", i, " to GPU ", j, " (NVLink/PCIe peer access required)"))
        DeviceContext.enable_all_peer_access()
    except e:
        fail(EXIT_BAD_CONFIG, String("enabling P2P access failed: ", e))
    return ctxs^


def main():
    var cfg: BenchConfig
    try:
        cfg = parse_args()
    except e:
        fail(EXIT_BAD_CONFIG, String(e))
        return
    var elem_bytes = _dtype_bytes(cfg.dtype)
    for s in cfg.sizes_bytes:
        if s % elem_bytes != 0:
            fail(EXIT_BAD_CONFIG, String("size ", s, " bytes is not a multiple of the ", elem_bytes, "-byte ", cfg.dtype, " element"))
    var ctxs = _open_contexts(cfg)
    try:
        comptime for di in range(len(DTYPES)):
            comptime dtype = DTYPES[di]
            if cfg.dtype == DTYPE_NAMES[di]:
                comptime for gi in range(len(NGPUS)):
                    comptime ngpus = NGPUS[gi]
                    if cfg.ngpus == ngpus:
                        if cfg.impl == "upstream":
                            run_upstream[dtype, ngpus](cfg, ctxs)
                        else:
                            run_ours[dtype, ngpus](cfg, ctxs)
    except e:
        print(String("error: run failed: ", e), file=stderr)
        exit(1)
