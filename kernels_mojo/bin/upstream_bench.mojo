# upstream_bench: the peer. Benchmarks and checks max-core 26.7's upstream
# comm.allreduce on 2, 4 or 8 P2P-connected GPUs with allreduce_bench's flags,
# timing, checking and JSON line (impl "upstream"). Its own executable: see
# benchlib/upstream.mojo for why.
#
# Build (from the repo root):
#   mojo build -I kernels_mojo --target-accelerator sm_90 \
#       kernels_mojo/bin/upstream_bench.mojo -o upstream_bench
# stdout: exactly one JSON line per size; diagnostics go to stderr.
# Exit codes: 0 ok, 2 bad configuration, 4 no GPU, 1 run failed.
# `upstream_bench --serve`: a long-lived worker taking one case per stdin
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
from benchlib.runner import ContextCache
from benchlib.serve import serve_requests, wants_serve
from benchlib.upstream import enable_upstream_p2p, run_upstream

comptime DTYPES = (DType.float32, DType.bfloat16, DType.float16)
comptime DTYPE_NAMES = ("float32", "bfloat16", "float16")
comptime NGPUS = (2, 4, 8)


def run_case(args: List[String], mut cache: ContextCache) raises:
    """One case (the one-shot command line or one --serve request): its JSON
    lines on stdout; raises coded_error (bad config 2, no GPU 4) or any other
    Error (a run failure, exit 1). Upstream's comm.sync.enable_p2p runs once
    per process, after the first contexts are open (as in the one-shot run)."""
    var cfg: BenchConfig
    try:
        cfg = parse_arg_list(args, impl="upstream")
    except e:
        raise coded_error(EXIT_BAD_INPUT, String(e))
    if cfg.help:
        print(usage(), file=stderr)
        return
    refuse_bad_sizes(cfg)
    var ctxs = cache.open(cfg.ngpus, enable_peer_access=False)
    if not cache.p2p_enabled:
        try:
            enable_upstream_p2p()
        except e:
            raise coded_error(EXIT_BAD_INPUT, String(e))
        cache.p2p_enabled = True
    comptime for di in range(len(DTYPES)):
        comptime dtype = DTYPES[di]
        if cfg.dtype == DTYPE_NAMES[di]:
            comptime for gi in range(len(NGPUS)):
                comptime ngpus = NGPUS[gi]
                if cfg.ngpus == ngpus:
                    run_upstream[dtype, ngpus](cfg, ctxs)


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
