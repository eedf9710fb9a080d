#!/usr/bin/env bash
# The device command of each run (1x H100, carry [".gpu/sdpaab"] as packed by
#   REF_BIN=<runners of 94d46f2> experiments/2026-11-23-sdpa-fp8-profile/pack_ab.sh pers= np=SDPA_SM90_PERSISTENT=0
# ): the tile-plan experiment's run.sh (cold pass with float64 gate, bit comparison and torch SDPA in the
# same process; hot pass of ours, CUDA graph), with checked shapes whose grids give each persistent block
# several units, units of one, two and three warpgroups, and units of one K/V tile (ntiles < ring depth).
CHECKED=${CHECKED:-1x8x512x64,1x2x129x64,1x1x1x64,1x3x77x128,2x70x777x64,3x50x1000x128,4x64x100x128,1x40x333x128} \
  bash experiments/2026-11-23-sdpa-tile-plan/run.sh
