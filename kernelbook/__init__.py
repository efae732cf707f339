"""kernelbook: GPU kernel optimizations, checked, measured and published as a book.

The core knows no study:

- ``steps``, ``study``, ``chapter``   a study's ordered steps, what a study provides, a chapter's sections
- ``session``, ``results``            measure or replay (``recorded``), and the store of recorded runs
- ``kernels``, ``limits``, ``params`` building kernels, launch limits, notebook parameter checks
- ``checks``, ``measure``             float64 checks with poisoned outputs; CUDA-event / graph timing
- ``harness``                         the one loop that checks, times, records and builds the profilers' launch
- ``report``, ``plots``, ``summary``  tables, figures and the closing chapter, from records only
- ``evidence``                        compiler, Nsight Compute, ceilings, vendor library, floor, roofline, sanitizer
- ``toc``, ``batch``, ``build``, ``compare``, ``cli``   the papermill batch, the strict build, the command line

The studies, one sub-package each: ``lenet`` (LeNet-86 forward convolution), ``mlp`` (a fully
connected network's inference) and ``vgg`` (a VGG-style convolution layer).
"""

__version__ = "0.1.0"
