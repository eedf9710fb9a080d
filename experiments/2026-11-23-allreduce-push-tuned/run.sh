#!/usr/bin/env bash
# 1stage_pushflag with its own shape (32 KiB chunks, 2 blocks per SM) and variants of it, forced,
# against 1stage and upstream comm.allreduce in the same call, fp32 and bf16, 2 interleaved rounds.
# Run from the repo root with the bundle at $B (variant binaries beside allreduce_bench). Logs in $OUT.
# The steps are those of ../2026-11-23-allreduce-pushflag-bounds/run.sh, which grew out of this script
# (same commands, tags and logs; it also runs GPU tests, skipped here as this call did not run them).
B=${B:-.gpu/arpush/bundle} NO_TESTS=1 VARIANTS=${VARIANTS:-u2 t256 t1024} \
  exec bash "$(dirname "$0")/../2026-11-23-allreduce-pushflag-bounds/run.sh"
