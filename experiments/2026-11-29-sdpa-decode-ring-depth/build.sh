#!/usr/bin/env bash
# The runners of ab_ring.py (the sm_90a cpasync runner, the driver's flags via experiments/2026-11-29-sdpa-fp8-vt-ldsm/
# build.sh): d0 (default), d160 and d224 (-DSDPA_DECODE_RING_KIB=160 / 224), xz-compressed into $PAYLOAD/bin
# (default /work/main/.gpu/ring/bin).
# The sources: $BASE's kernels (default 44a46c6, whose decode kernel main still has) with ring.patch.gz applied.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
src=$(mktemp -d)
git -C "$repo" archive "${BASE:-44a46c6}" kernels_cuda | tar -x -C "$src"
(cd "$src" && zcat "$here/ring.patch.gz" | patch -p1 -s)
export SRC="$src"
b="$repo/experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh"
export BUILD=${BUILD:-/tmp/ring_build}
PAYLOAD=${PAYLOAD:-/work/main/.gpu/ring}
bash "$b" d0 1
bash "$b" d160 1 -DSDPA_DECODE_RING_KIB=160
bash "$b" d224 1 -DSDPA_DECODE_RING_KIB=224
mkdir -p "$PAYLOAD/bin"
for r in d0 d160 d224; do xz -T2 -6 -c "$BUILD/$r" > "$PAYLOAD/bin/$r.xz"; done
(cd "$BUILD" && sha256sum d0 d160 d224) > "$PAYLOAD/bin/SHA256SUMS"
cp "$here/ab_ring.py" "$PAYLOAD/"
