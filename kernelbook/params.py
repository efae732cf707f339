"""Notebook parameters, checked in every mode before anything runs.

A reader passes values with ``papermill -p`` or ``kernelbook run -p``, where ``batch_sizes=abc``
arrives as the string ``'abc'`` and ``batch_sizes=100`` as the integer 100. Each checker here
turns such a value into what the page needs, or raises a ``ParameterError`` that names the
parameter, what it got, and an example of a good value: never a loop over letters or a
``TypeError`` from deep inside a measurement.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ParameterError
from .limits import finite_number


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value, example: str = "10", maximum: int | None = None) -> int:
    if not _is_int(value) or value < 1:
        raise ParameterError(f"{name}={value!r} must be a positive integer.", f"pass e.g. {name}={example}.")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name}={value!r} exceeds the largest allowed value, {maximum}.",
                             f"pass at most {name}={maximum}.")
    return value


def non_negative_int(name: str, value, example: str = "2") -> int:
    if not _is_int(value) or value < 0:
        raise ParameterError(f"{name}={value!r} must be an integer >= 0.", f"pass e.g. {name}={example}.")
    return value


def optional_int(name: str, value, example: str = "0") -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise ParameterError(f"{name}={value!r} must be an integer or None.", f"pass e.g. {name}={example}, or None.")
    return value


def sizes(name: str, value, example: str = "[100, 1000, 10000]", maximum: int | None = None) -> list[int]:
    """A non-empty list of positive integers (sizes, batch sizes, column counts)."""
    if isinstance(value, (str, bytes)) or _is_int(value) or not isinstance(value, (list, tuple)):
        raise ParameterError(f"{name}={value!r} is not a list of positive integers.",
                             f"pass a list, e.g. {name}={example} (with -p on the command line: -p '{name}={example.replace(' ', '')}').")
    if not value:
        raise ParameterError(f"{name} is empty.", f"pass at least one value, e.g. {name}={example}.")
    for item in value:
        if not _is_int(item) or item < 1:
            raise ParameterError(f"{name} holds {item!r}, which is not a positive integer.", f"pass e.g. {name}={example}.")
        if maximum is not None and item > maximum:
            raise ParameterError(f"{name} holds {item}, more than the largest allowed, {maximum}.",
                                 f"keep every value of {name} at most {maximum}.")
    return list(value)


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name}={value!r} must be True or False.", f"pass {name}=True or {name}=False.")
    return value


def mapping(name: str, value, example: str = "{}") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ParameterError(f"{name}={value!r} must be a dict of parameter names to values.",
                             f"pass e.g. {name}={example}.")
    return dict(value)


def choice(name: str, value, options) -> str:
    if value not in options:
        raise ParameterError(f"{name}={value!r} is not one of {', '.join(map(repr, options))}.",
                             f"pass {name} as one of: {', '.join(map(str, options))}.")
    return value


def optional_path(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value):
        raise ParameterError(f"{name}={value!r} must be a file path or None.", f"pass e.g. {name}='my/file.bin'.")
    return str(value)


def number(name: str, value, low=None, high=None, example: str = "1.0") -> float:
    return finite_number(name, value, low, high, example)
