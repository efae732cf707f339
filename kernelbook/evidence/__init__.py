"""Evidence, one small module per kind, each fed by any study with its own problems:

- ``compiler``   ptxas resources and the SASS instruction mix of a step's build
- ``ncu``        Nsight Compute per step (``ncu_metrics``: which metrics, how the CSV is read)
- ``ceilings``   the device's measured copy bandwidth and FP32/TF32/FP16 rates
- ``vendor``     the vendor library (cuDNN, cuBLAS through PyTorch) in the same run
- ``floor``      the least time a problem can take, and ``roofline``, every step as a point
- ``sanitizer``  compute-sanitizer over every step's launches
- ``target``     the process the profilers run; ``tools`` their plumbing

Each records through ``kernelbook.session.recorded`` (measure now, or replay the recording)
under a name from ``kernelbook.results.part_name``.
"""
