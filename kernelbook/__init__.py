"""kernelbook: GPU kernel optimizations, checked, measured and published as a book.

The package is organised by responsibility:

- ``paths``, ``errors``      where things live, and how failures explain themselves
- ``data``, ``weights``      Fashion-MNIST at 86x86 and the course's parameter file format
- ``reference``              the NumPy float64/float32 reference: convolution, pooling, the forward pass
- ``lenet``                  the LeNet-86 study: GPU network, conv variant registry, chapters, evidence
- ``kernels``                compiling ``kernels/**/*.cu`` (CuPy/NVRTC on a GPU, nvcc for reports)
- ``checks``                 float64 correctness checks on random shapes, with poisoned outputs
- ``measure``                CUDA-event timing that returns raw samples and a summary
- ``results``                the results store: run ids, manifests, atomic writes, validation
- ``report``, ``plots``      milestone tables, provenance labels and figures for the book
- ``batch``, ``cli``         the papermill batch, the Jupyter Book build and the command line
"""

__version__ = "0.1.0"
