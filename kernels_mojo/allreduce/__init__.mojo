# Peer-to-peer multi-GPU allreduce kernels (sum), written for NVLink-connected
# NVIDIA GPUs.
#
# Layout of the package:
#   signal.mojo   - per-rank signal buffer layout and the cross-GPU barrier
#   kernels.mojo  - the device kernels (1stage, 2stage, 1stage_cpasync_sS)
#   dispatch.mojo - compile-time availability + runtime selection + launch
