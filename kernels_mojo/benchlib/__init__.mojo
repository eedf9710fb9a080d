# Host-side helpers for kernels_mojo/bin/allreduce_bench.mojo: command line,
# input generation and checking, timing statistics and JSON output.
