"""Cluster runs through Slurm, one module per stage.

`submit` (plan the matrix from Slurm's partitions, build and bundle once, one job array)
-> `watch` (task states until every task ended; Ctrl-C cancels the array) -> `collect`
(run folders moved whole into bench_results/, the index, the cross-device table, the
failures). `slurm` runs and reads Slurm's commands; `gpus` maps GPU types to archs.
"""
