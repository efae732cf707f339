"""Text from outside the code (a parameter, a file, the results store) made safe to show on a page.

A page is Markdown that MyST renders to HTML, and MyST passes raw HTML through: a device name or a
parameter value holding ``<script>`` would run in every reader's browser. Everything a page shows
that did not come from kernelbook's own source goes through one of these:

- ``md_text(value)``  plain text inside Markdown: HTML special characters become entities and every
  Markdown punctuation character is backslash-escaped, line breaks become spaces (so a value can
  neither open a tag nor start a list, a heading or a link);
- ``md_code(value)``  a code span that holds any text, backticks included (the fence is one
  backtick longer than the longest run inside it);
- ``html_text(value)`` text inside HTML (table cells, captions);
- ``shown_path(value)`` a file path as a page may show it: relative to the project, or only the
  file name for a path outside it (a reader's home folder is nobody's business).

A terminal has its own markup, escape sequences (a device name holding ``ESC ] 0 ;`` sets the
window's title, ``ESC [ 2 J`` clears the screen): ``terminal_text(value)`` writes every control
character out (``\x1b``) in what a command prints.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from . import paths

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$'\"=])")
_BACKTICKS = re.compile(r"`+")


def _one_line(value) -> str:
    return " ".join(str(value).splitlines()) if value is not None else ""


def md_text(value) -> str:
    """``value`` as literal text inside Markdown (nothing in it is markup)."""
    text = _one_line(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value) -> str:
    """``value`` as a Markdown code span, whatever backticks it holds."""
    text = _one_line(value)
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def shown_path(value) -> str:
    """A path as a page shows it: relative to the project when inside it, else its file name."""
    text = str(value)
    path = Path(text)
    if not path.is_absolute():
        return text
    try:
        return str(path.resolve().relative_to(paths.REPO_ROOT))
    except (ValueError, OSError):
        return path.name


def shown_value(value):
    """A parameter value as a page shows it: absolute paths shortened (see ``shown_path``), in
    lists and dicts too; everything else as it is."""
    if isinstance(value, str) and os.path.isabs(value):
        return shown_path(value)
    if isinstance(value, (list, tuple)):
        return type(value)(shown_value(v) for v in value)
    if isinstance(value, dict):
        return {k: shown_value(v) for k, v in value.items()}
    return value


def terminal_text(value, keep_newlines: bool = False) -> str:
    """``value`` as a terminal may show it: every character that is not printable (escape
    sequences, bells, C1 controls, direction overrides) written out as ``\x1b``, ``\u202e``;
    line breaks kept when ``keep_newlines`` (a table of many lines), else written out too."""
    text = "" if value is None else str(value)
    if keep_newlines:
        return "\n".join(terminal_text(line) for line in text.split("\n"))
    return text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def md_safe(text) -> str:
    """A line kernelbook composed (it may hold its own emphasis or code spans) with the values it
    quotes unable to open an HTML tag: ``&``, ``<`` and ``>`` become entities, line breaks spaces.
    Use ``md_text``/``md_code`` on a value where it is interpolated; this is the net under whole
    sentences built from records (verdicts, targets, statuses)."""
    return _one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
