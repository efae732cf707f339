"""Started with every Python of a test batch (this folder on PYTHONPATH): when
``KERNELBOOK_FAKE_SM86`` is set, the notebook kernels see the faked sm_86 of ``tests/fake_gpu.py``
(its limits, and the recording standing in for a measurement), as the batch process does."""

import os
import sys

if os.environ.get("KERNELBOOK_FAKE_SM86") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fake_gpu  # noqa: E402

    fake_gpu.install_everywhere()
