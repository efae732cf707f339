"""``python -m kernelbook``: the same command line as ``kernelbook`` (the device machine has no
installed entry point, only the source tree on ``PYTHONPATH``)."""

import sys

from .cli import main

# Guarded: a Dask worker process is started by spawning, which imports the main module again.
if __name__ == "__main__":
    sys.exit(main())
