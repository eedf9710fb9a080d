#!/usr/bin/env bash
# The runners of ab3.py: the kernel sources of $BASE (default 1fafc7e, whose kernels main still has) with
# probes.patch.gz applied (three defines, each off by default: SDPA_SM90_MBAR_SUSPEND_NS, SDPA_SM90_PRODUCER24, and
# SDPA_SM90_ROWSUM_MMA, which main has), built with experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh (the driver's
# nvcc flags, sm_90a, plus the defines named), xz-compressed into $PAYLOAD/bin (default /work/main/.gpu/nx/bin):
#   bash build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BASE=${BASE:-1fafc7e}
src=$(mktemp -d)
git -C "$repo" archive "$BASE" kernels_cuda | tar -x -C "$src"
(cd "$src" && zcat "$here/probes.patch.gz" | patch -p1 -s)
b="$repo/experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh"
export BUILD=${BUILD:-/tmp/nx_build} SRC="$src"
PAYLOAD=${PAYLOAD:-/work/main/.gpu/nx}
bash "$b" base 1
bash "$b" rs0 1 -DSDPA_SM90_ROWSUM_MMA=0
bash "$b" hint 1 -DSDPA_SM90_MBAR_SUSPEND_NS=1000000
bash "$b" p24all 1 -DSDPA_SM90_PRODUCER24=1
mkdir -p "$PAYLOAD/bin"
for r in base rs0 hint p24all; do xz -T2 -6 -c "$BUILD/$r" > "$PAYLOAD/bin/$r.xz"; done
(cd "$BUILD" && sha256sum base rs0 hint p24all) > "$PAYLOAD/bin/SHA256SUMS"
cp "$here/ab3.py" "$here/run.sh" "$PAYLOAD/"
