"""``python -m kernelbook``: the same command line as ``kernelbook`` (the device machine has no
installed entry point, only the source tree on ``PYTHONPATH``)."""

import sys

from .cli import main

sys.exit(main())
