#!/usr/bin/env bash
# The runners of ab24.py, built with experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh (the driver's nvcc flags, sm_90a,
# plus the defines named), then xz-compressed into $PAYLOAD/bin (default /work/main/.gpu/p24/bin):
#   bash build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
b="$here/../2026-11-29-sdpa-fp8-vt-ldsm/build.sh"
export BUILD=${BUILD:-/tmp/p24_build}
PAYLOAD=${PAYLOAD:-/work/main/.gpu/p24}
new=(-DSDPA_SM90_BN_D128=256 -DSDPA_SM90_VT_LDSM=1 -DSDPA_SM90_VT_LDSM_BATCH=1)
bash "$b" old 1
bash "$b" new 1 "${new[@]}" -DSDPA_SM90_BN256_PRODUCER_REGS=24
bash "$b" new40 1 "${new[@]}" -DSDPA_SM90_BN256_PRODUCER_REGS=40
bash "$b" new_base 0 "${new[@]}" -DSDPA_SM90_BN256_PRODUCER_REGS=24
mkdir -p "$PAYLOAD/bin"
for r in old new new40 new_base; do xz -T2 -6 -c "$BUILD/$r" > "$PAYLOAD/bin/$r.xz"; done
(cd "$BUILD" && sha256sum old new new40 new_base) > "$PAYLOAD/bin/SHA256SUMS"
cp "$here/ab24.py" "$here/run.sh" "$PAYLOAD/"
