"""Notebook parameters, checked in every mode before anything runs.

A reader passes values with ``papermill -p`` or ``kernelbook run -p``, where ``batch_sizes=abc``
arrives as the string ``'abc'`` and ``batch_sizes=100`` as the integer 100. Each checker here
turns such a value into what the page needs, or raises a ``ParameterError`` that names the
parameter, what it got, and an example of a good value: never a loop over letters or a
``TypeError`` from deep inside a measurement.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from .errors import ParameterError
from .limits import finite_number

#: The most entries a list of sizes (or cases) may hold: each is a timed problem, and a page
#: shows one row per entry.
MAX_SIZES = 64


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` as an error quotes it: cut after ``limit`` characters, so a 100 KB value
    makes a short message, not a 100 KB line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def positive_int(name: str, value, example: str = "10", maximum: int | None = None) -> int:
    if not _is_int(value) or value < 1:
        raise ParameterError(f"{name}={shown(value)} must be a positive integer.", f"pass e.g. {name}={example}.")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name}={value!r} exceeds the largest allowed value, {maximum}.",
                             f"pass at most {name}={maximum}.")
    return value


def non_negative_int(name: str, value, example: str = "2") -> int:
    if not _is_int(value) or value < 0:
        raise ParameterError(f"{name}={shown(value)} must be an integer >= 0.", f"pass e.g. {name}={example}.")
    return value


def optional_int(name: str, value, example: str = "0") -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise ParameterError(f"{name}={shown(value)} must be an integer or None.", f"pass e.g. {name}={example}, or None.")
    return value


def how_to_pass(name: str, example: str) -> str:
    """How to pass ``name=example`` from where this code runs: ``kernelbook run`` sets the notes
    file for its notebooks; another Jupyter kernel is papermill's or a reader's; else Python."""
    compact = example.replace(", ", ",")
    if os.environ.get("KERNELBOOK_NOTES_FILE"):
        return f"with kernelbook: -p '{name}={compact}'"
    try:
        from IPython import get_ipython

        in_kernel = get_ipython() is not None and hasattr(get_ipython(), "kernel")
    except ImportError:
        in_kernel = False
    if in_kernel:
        return (f"with papermill: -y '{name}: {example}' (typed YAML), or edit the parameters cell; "
                f"with kernelbook: -p '{name}={compact}'")
    return f"in Python: {name}={example}"


def parsed_list(value):
    """A list given as text (papermill's ``-p batch_sizes '[100,500]'`` passes the string) as a
    list; any other value as it is."""
    if isinstance(value, str) and value.strip().startswith(("[", "(")):
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
        if isinstance(parsed, (list, tuple)):
            return list(parsed)
    return value


def sizes(name: str, value, example: str = "[100, 1000, 10000]", maximum: int | None = None) -> list[int]:
    """A non-empty list of at most ``MAX_SIZES`` positive integers (sizes, batch sizes, column
    counts); a list written as text (papermill's ``-p``) is read as the list it spells."""
    value = parsed_list(value)
    if isinstance(value, (str, bytes)) or _is_int(value) or not isinstance(value, (list, tuple)):
        raise ParameterError(f"{name}={shown(value)} is not a list of positive integers.",
                             f"pass a list, e.g. {name}={example} ({how_to_pass(name, example)}).")
    if not value:
        raise ParameterError(f"{name} is empty.", f"pass at least one value, e.g. {name}={example}.")
    count(name, value, example)
    for item in value:
        if not _is_int(item) or item < 1:
            raise ParameterError(f"{name} holds {shown(item)}, which is not a positive integer.",
                                 f"pass e.g. {name}={example}.")
        if maximum is not None and item > maximum:
            raise ParameterError(f"{name} holds {item}, more than the largest allowed, {maximum}.",
                                 f"keep every value of {name} at most {maximum}.")
    return list(value)


def count(name: str, value, example: str) -> None:
    """A list parameter holds at most ``MAX_SIZES`` entries."""
    if len(value) > MAX_SIZES:
        raise ParameterError(f"{name} holds {len(value):,} values; a page times at most {MAX_SIZES}.",
                             f"pass at most {MAX_SIZES} values, e.g. {name}={example}.")


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name}={shown(value)} must be True or False.", f"pass {name}=True or {name}=False.")
    return value


def mapping(name: str, value, example: str = "{}") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ParameterError(f"{name}={shown(value)} must be a dict of parameter names to values.",
                             f"pass e.g. {name}={example}.")
    return dict(value)


def choice(name: str, value, options) -> str:
    if value not in options:
        raise ParameterError(f"{name}={shown(value)} is not one of {', '.join(map(repr, options))}.",
                             f"pass {name} as one of: {', '.join(map(str, options))}.")
    return value


def optional_path(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value):
        raise ParameterError(f"{name}={shown(value)} must be a file path or None.", f"pass e.g. {name}='my/file.bin'.")
    return str(value)


def readable_file(name: str, value, *, size: int | None = None, header: bytes | None = None,
                  example: str = "'my/file.bin'") -> Path:
    """A path parameter that must name a readable file (of ``size`` bytes, starting with
    ``header``, when given). A relative path is tried from the working folder, then from the
    project. Checked whether the page measures or replays, so a bad path never passes silently."""
    text = optional_path(name, value)
    if text is None:
        raise ParameterError(f"{name} is None, but a file is needed.", f"pass e.g. {name}={example}.")
    from .escape import shown_path

    path = Path(text).expanduser()
    if not path.is_absolute() and not path.exists():
        from . import paths

        path = paths.REPO_ROOT / path
    shown = shown_path(path)
    if not path.exists():
        raise ParameterError(f"{name}: no file {shown!r}.", f"pass the path of an existing file, e.g. {name}={example}.")
    if not path.is_file():
        raise ParameterError(f"{name}: {shown!r} is not a regular file.", f"pass a file, e.g. {name}={example}.")
    try:
        with open(path, "rb") as handle:
            start = handle.read(len(header) if header else 0)
        actual = path.stat().st_size
    except OSError as exc:
        raise ParameterError(f"{name}: {shown!r} cannot be read ({exc.strerror or exc}).",
                             "make it readable, or pass another file.") from None
    if size is not None and actual != size:
        raise ParameterError(f"{name}: {shown!r} holds {actual:,} bytes; the file this page reads holds exactly "
                             f"{size:,}.", f"pass a file of the expected format, e.g. {name}={example}.")
    if header is not None and start != header:
        raise ParameterError(f"{name}: {shown!r} does not start with the expected header ({header!r}).",
                             f"pass a file of the expected format, e.g. {name}={example}.")
    return path


def number(name: str, value, low=None, high=None, example: str = "1.0") -> float:
    return finite_number(name, value, low, high, example)


def split_assignments(text: str) -> list[str]:
    """``NAME=VALUE`` items separated by spaces, where a value may itself hold spaces inside
    brackets or quotes: ``batch_sizes=[100, 500] label="a b"`` is two items (how ``make
    PARAMS='...'`` passes them; a plain split would cut the list in two)."""
    items, current, depth, quote = [], [], 0, ""
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in "[({":
            depth += 1
            current.append(ch)
        elif ch in "])}":
            depth = max(0, depth - 1)
            current.append(ch)
        elif ch.isspace() and depth == 0:
            if current:
                items.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        items.append("".join(current))
    return items
