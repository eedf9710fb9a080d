# allreduce_bench: benchmark and check the kernels_mojo allreduce family on 2, 4
# or 8 P2P-connected GPUs (upstream comm.allreduce: bin/upstream_bench.mojo).
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
from benchlib.runner import open_contexts, run_ours

comptime DTYPES = (DType.float32, DType.bfloat16, DType.float16)
comptime DTYPE_NAMES = ("float32", "bfloat16", "float16")
comptime NGPUS = (2, 4, 8)


def _dtype_bytes(name: String) -> Int:
    if name == "float32":
        return 4
    return 2


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
    if cfg.impl == "upstream":
        fail(EXIT_BAD_CONFIG, "upstream comm.allreduce has its own executable: upstream_bench (same flags)")
    var ctxs = open_contexts(cfg)
    try:
        comptime for di in range(len(DTYPES)):
            comptime dtype = DTYPES[di]
            if cfg.dtype == DTYPE_NAMES[di]:
                comptime for gi in range(len(NGPUS)):
                    comptime ngpus = NGPUS[gi]
                    if cfg.ngpus == ngpus:
                        run_ours[dtype, ngpus](cfg, ctxs)
    except e:
        print(String("error: run failed: ", e), file=stderr)
        exit(1)
