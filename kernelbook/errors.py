"""Errors that say what went wrong and how to fix it.

Every error raised on purpose by kernelbook is a ``KernelbookError``; its message ends with a
``Fix:`` sentence so that a reader of a notebook traceback knows the next step.
"""


class KernelbookError(Exception):
    """Base class: ``message`` says what is wrong, ``fix`` says what to do about it."""

    def __init__(self, message: str, fix: str):
        self.message = message
        self.fix = fix
        super().__init__(f"{message} Fix: {fix}")


class ShapeError(KernelbookError, ValueError):
    """A shape or parameter outside what a kernel (or the network) accepts."""


class VariantError(KernelbookError, KeyError):
    """An unknown kernel variant or study."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.args[0]


class DataError(KernelbookError, FileNotFoundError):
    """A missing or malformed data or weights file."""


class ResultsError(KernelbookError, ValueError):
    """A missing, malformed or inconsistent results file."""


class GPUUnavailable(KernelbookError, RuntimeError):
    """Measurement was requested but no CUDA GPU can be used here."""
