#!/usr/bin/env bash
# Capture on a GPU host: raw lines with samples from the Mojo executables, and one bench whose archived records carry
# their samples (the input of ab.py). Usage: capture.sh OUT_DIR   (from the repository root or an unpacked bundle)
set -euo pipefail
out=${1:?usage: capture.sh OUT_DIR}
mkdir -p "$out"
run=python3; [ -x ./run ] && run=./run || run="python3 -m driver"
bin=$(ls -d build/sm_90 bin/sm_90 bundle/bin/sm_90 2>/dev/null | head -1)
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
if [ "$gpus" -ge 2 ] && [ -n "$bin" ]; then  # the executables' own lines, as printed (tests/data/captured)
  for exe in allreduce_bench upstream_bench; do
    "$bin/$exe" --sizes 256K,16M --ngpus 2 --iters 20 --warmup 2 --check 1 > "$out/${exe}_samples_${gpus}gpu.jsonl"
  done
  $run bench --sizes 256K,16M --timing cold 2>&1 | tee "$out/bench_allreduce_sdpa.log" || echo "bench exited non-zero (a failed gate is 8): the run is archived all the same"
else
  $run bench --suite sdpa --timing cold,hot 2>&1 | tee "$out/bench_sdpa.log" || echo "bench exited non-zero (a failed gate is 8): the run is archived all the same"
fi
newest=$(ls -d bench_results/20*/ | sort | tail -1)
python3 "$(dirname "$0")/ab.py" "$newest" | tee "$out/ab_table.md"
