#!/usr/bin/env bash
# The runners of ab_ps.py and trace.py: the kernel sources of $BASE (default dcb3c01) with ps.patch.gz, rv.patch.gz,
# et.patch.gz, lz.patch.gz, tr.patch.gz or sp.patch.gz applied, built with experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh (the
# driver's nvcc flags, sm_90a, plus the defines named),
# xz-compressed into $PAYLOAD/bin (default .gpu/ps/bin; a call carries only the runners it times: see README.md):
#   bash build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BASE=${BASE:-dcb3c01}
b="$repo/experiments/2026-11-29-sdpa-fp8-vt-ldsm/build.sh"
export BUILD=${BUILD:-/tmp/ps_build}
PAYLOAD=${PAYLOAD:-$repo/.gpu/ps}
for p in ps rv et lz tr sp; do
  src=$(mktemp -d)
  git -C "$repo" archive "$BASE" kernels_cuda | tar -x -C "$src"
  (cd "$src" && zcat "$here/$p.patch.gz" | patch -p1 -s)
  export SRC="$src"
  if [ "$p" = ps ]; then
    bash "$b" base 1
    bash "$b" ps 1 -DSDPA_SM90_BN256_PSMEM=1
    bash "$b" ps32 1 -DSDPA_SM90_BN256_PSMEM=1 -DSDPA_SM90_BN256_PRODUCER_REGS=32
    bash "$b" p4 1 -DSDPA_SM90_EXP2_POLY_D128=4
    bash "$b" ps32p4 1 -DSDPA_SM90_BN256_PSMEM=1 -DSDPA_SM90_BN256_PRODUCER_REGS=32 -DSDPA_SM90_EXP2_POLY_D128=4
  elif [ "$p" = rv ]; then
    bash "$b" rv 1 -DSDPA_SM90_BN256_LOOP=2
    bash "$b" rvp4 1 -DSDPA_SM90_BN256_LOOP=2 -DSDPA_SM90_EXP2_POLY_D128=4
  elif [ "$p" = et ]; then
    bash "$b" et 1 -DSDPA_SM90_BN256_LOOP=3
  elif [ "$p" = lz ]; then
    bash "$b" lz5 1 -DSDPA_SM90_FP8_LAZY_RESCALE=5
    bash "$b" lz8 1 -DSDPA_SM90_FP8_LAZY_RESCALE=8
  elif [ "$p" = tr ]; then
    bash "$b" tr 1 -DSDPA_SM90_TRACE=2
  else
    bash "$b" sp5 1 -DSDPA_SM90_FP8_SPEC_EXP=5
    bash "$b" sp5nj 1 -DSDPA_SM90_FP8_SPEC_EXP=5 -DSDPA_SM90_FP8_SPEC_JUMP=0
  fi
done
mkdir -p "$PAYLOAD/bin"
for r in base ps ps32 p4 ps32p4 rv rvp4 et lz5 lz8 tr sp5 sp5nj; do xz -T2 -6 -c "$BUILD/$r" > "$PAYLOAD/bin/$r.xz"; done
(cd "$BUILD" && sha256sum base ps ps32 p4 ps32p4 rv rvp4 et lz5 lz8 tr sp5 sp5nj) > "$PAYLOAD/bin/SHA256SUMS"
cp "$here/ab_ps.py" "$here/run.sh" "$here/profile.sh" "$here/profile_cudnn_sass.sh" "$here/trace.py" "$here/run_trace.sh" "$PAYLOAD/"
cp "$repo/experiments/ab_peer_kit.py" "$PAYLOAD/../"  # ab_ps.py imports it from its folder's parent
