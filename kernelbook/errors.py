"""Errors that say what went wrong and how to fix it, one class per kind of failure.

Every error raised on purpose by kernelbook is a ``KernelbookError``; its message ends with a
``Fix:`` sentence so that a reader of a notebook traceback knows the next step. The kinds:

- ``ParameterError``   a parameter's name or value is not accepted (``batch_sizes='abc'``)
- ``ShapeError``       an array's shape or dtype is not accepted (``x`` is 3-D)
- ``LaunchLimitError`` a launch the GPU cannot make (block z > 64, too much shared memory)
- ``StepError``        an unknown step or study name
- ``DataError``        a missing or malformed data or weights file
- ``CompileError``     nvcc or NVRTC refused a kernel
- ``ResultsError``     a missing, malformed or inconsistent results file
- ``MissingValue``     a computed sentence would print with a value missing
- ``GPUUnavailable``   a CUDA GPU is needed and none can be used here
"""


class KernelbookError(Exception):
    """Base class: ``message`` says what is wrong, ``fix`` says what to do about it."""

    def __init__(self, message: str, fix: str):
        self.message = message
        self.fix = fix
        super().__init__(f"{message} Fix: {fix}")


class ParameterError(KernelbookError, ValueError):
    """A parameter name or value outside what a step (or a notebook) accepts."""


class ShapeError(KernelbookError, ValueError):
    """An array shape, dtype or layout outside what a kernel (or the network) accepts."""


class LaunchLimitError(ParameterError):
    """A launch configuration no GPU (or not this GPU) can run."""


class StepError(KernelbookError, KeyError):
    """An unknown step (variant) or study."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.args[0]


VariantError = StepError  # the name the first LeNet chapters used


class DataError(KernelbookError, FileNotFoundError):
    """A missing or malformed data or weights file."""


class CompileError(KernelbookError, RuntimeError):
    """A kernel did not compile (nvcc or NVRTC); the message holds the compiler's words."""


class ResultsError(KernelbookError, ValueError):
    """A missing, malformed or inconsistent results file."""


class MissingValue(ResultsError):
    """A sentence computed from the records lacks one of its values (it would render as a blank)."""


class GPUUnavailable(KernelbookError, RuntimeError):
    """A CUDA GPU is needed and none can be used here."""
