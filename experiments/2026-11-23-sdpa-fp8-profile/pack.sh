#!/usr/bin/env bash
# Pack the folder profile.sh carries (/work/main/.gpu/prof): this checkout's built runners
# (python -m driver build --arch sm_90 --targets sdpa first) and profile.sh.
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=${G:-/work/main/.gpu/prof}
rm -rf $G && mkdir -p $G/bin
cp $W/build/sm_90/sdpa_fp8_cpasync $W/build/sm_90/sdpa_fp8_baseline $G/bin/
cp $W/experiments/2026-11-23-sdpa-fp8-profile/profile.sh $G/
(cd $W && git rev-parse --short HEAD) > $G/commit.txt
du -sh $G
