"""Build-and-verify orchestrator for GPU kernels written in Mojo and CUDA."""

__version__ = "0.1.0"
