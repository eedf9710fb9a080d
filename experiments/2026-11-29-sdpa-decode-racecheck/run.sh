#!/usr/bin/env bash
# The racecheck A/B of the decode kernel (README.md): the same stress command on two bundles, the kernel as the
# GPU ran it on 2026-11-29 (old) and with the one-warp group sync of d88e1f0 (new). One device call, about 4 min:
#   bash experiments/2026-11-29-sdpa-decode-racecheck/run.sh OLD_BUNDLE.tgz NEW_BUNDLE.tgz "$OUT"
# Each bundle: `python -m driver bundle --out bundle --python 3.12` at its commit, then `tar czf X.tgz bundle`.
set -u
old=$1 new=$2 out=$3
export PYTHONUNBUFFERED=1
cases=san_decode_split,san_decode_rows32,san_decode_rows64_d64
for side in old new; do
  tgz=$old; [ "$side" = new ] && tgz=$new
  rm -rf "/tmp/rc_$side" && mkdir -p "/tmp/rc_$side" && tar xzf "$tgz" -C "/tmp/rc_$side" || exit 9
  ( cd "/tmp/rc_$side/bundle" &&
    timeout 240 ./run stress --suite sdpa --precision fp16,fp8 --shapes san_decode_split,san_decode_rows32 --seeds 0 \
      --distributions normal,large_logits_8 --iters 400 --no-profile --sanitizer-shapes "$cases" > "$out/$side.txt" 2>&1
    echo "rc=$?" >> "$out/$side.txt"
    tar czf "$out/runs_$side.tgz" bench_results/2026* 2>/dev/null )
  echo "== $side"; tail -2 "$out/$side.txt" | cut -c1-300
done
