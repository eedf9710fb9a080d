# allreduce_bench: benchmark and check the kernels_mojo allreduce family on 2, 4
# or 8 P2P-connected GPUs (upstream comm.allreduce: bin/upstream_bench.mojo).
#
# Build (from the repo root):
#   mojo build -I kernels_mojo --target-accelerator sm_90 [-D AR_...=V ...] \
#       kernels_mojo/bin/allreduce_bench.mojo -o allreduce_bench
# stdout: exactly one JSON line per size; diagnostics go to stderr.
# Exit codes: 0 ok, 2 bad configuration, 4 no GPU, 1 run failed.
# `allreduce_bench --serve`: a long-lived worker taking one case per stdin
# line (benchlib/serve.mojo).

from std.sys import exit, stderr
from max.gpu.host import DeviceContext

from benchlib.cli import (
    EXIT_BAD_INPUT,
    BenchConfig,
    case_status,
    coded_error,
    command_line_args,
    fail,
    parse_arg_list,
    refuse_bad_sizes,
    usage,
)
from benchlib.runner import ContextCache, run_ours
from benchlib.serve import serve_requests, wants_serve

comptime DTYPES = (DType.float32, DType.bfloat16, DType.float16)
comptime DTYPE_NAMES = ("float32", "bfloat16", "float16")
comptime NGPUS = (2, 4, 8)


def run_case(args: List[String], mut cache: ContextCache) raises:
    """One case (the one-shot command line or one --serve request): its JSON
    lines on stdout; raises coded_error (bad config 2, no GPU 4) or any other
    Error (a run failure, exit 1)."""
    var cfg: BenchConfig
    try:
        cfg = parse_arg_list(args)
    except e:
        raise coded_error(EXIT_BAD_INPUT, String(e))
    if cfg.help:
        print(usage(), file=stderr)
        return
    refuse_bad_sizes(cfg)
    if cfg.impl == "upstream":
        raise coded_error(EXIT_BAD_INPUT, "upstream comm.allreduce has its own executable: upstream_bench (same flags)")
    var ctxs = cache.open(cfg.ngpus)
    comptime for di in range(len(DTYPES)):
        comptime dtype = DTYPES[di]
        if cfg.dtype == DTYPE_NAMES[di]:
            comptime for gi in range(len(NGPUS)):
                comptime ngpus = NGPUS[gi]
                if cfg.ngpus == ngpus:
                    run_ours[dtype, ngpus](cfg, ctxs)


def main():
    var args = command_line_args()
    if wants_serve(args):
        if len(args) != 1:
            fail(EXIT_BAD_INPUT, "--serve takes no other argument (the cases come on stdin, one per line, TAB-separated)")
        exit(serve_requests[run_case]())
    var cache = ContextCache()
    try:
        run_case(args, cache)
    except e:
        var status = case_status(e)
        fail(status.code, status.message)
