"""What a page of the book may publish from an executed notebook.

The build (``kernelbook.build``) stages a copy of every executed notebook; before Sphinx reads it,
``clean_notebook`` makes it fit to publish:

- **Only the outputs the book makes.** Its HTML comes from two places: the tables (a pandas
  ``Styler``: ``<style>``, ``<table>`` and its parts, ``<span>``) and the kernel sources
  (``report.SourceBlock``: ``<details>``, ``<summary>``, ``<code>``, ``<div>``, ``<pre>``,
  ``<span>`` from Pygments), with the attributes ``class``, ``id`` and ``type``; and the figures
  (``plots.figure_html``: a ``<picture>`` whose ``<source>`` and ``<img>`` hold inline PNGs only). Its Markdown is
  escaped text, code spans and fences. Any other tag, attribute, raw block, directive or mime type
  (a script, an iframe, ``application/javascript``, SVG) is an output the book did not make: it is
  removed, and reported so that a strict build refuses it.
- **No stderr.** A library's warning on stderr (it names files of the machine that ran it) never
  reaches a page.
- **No absolute path of the machine.** The project's folder is written relative, the Python
  environment and the home folder by name, and a parameter given as an absolute path outside the
  project (``weights_path=/home/...``) by its file name, as the page itself shows it.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

#: The tags and attributes of the book's own HTML outputs (pandas Styler tables, kernel sources).
HTML_TAGS = frozenset({"style", "table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td", "span",
                       "div", "details", "summary", "code", "pre", "br", "picture", "source", "img"})
HTML_ATTRIBUTES = frozenset({"class", "id", "type", "colspan", "rowspan", "title", "media", "srcset", "src", "alt"})
#: A figure (``plots.figure_html``: a <picture> of two PNGs) carries its images inline, nothing else.
_IMAGE_ATTRIBUTES = {"src", "srcset"}
_INLINE_PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]*")
#: What a stylesheet of a table may not do: fetch anything, or run anything.
_CSS_FORBIDDEN = re.compile(r"@import|url\s*\(|expression\s*\(|javascript:|behavior\s*:", re.IGNORECASE)
#: Mime types a page may show (myst-nb picks text/html first, then images, Markdown, plain text).
MIME_TYPES = frozenset({"text/plain", "text/html", "text/markdown", "image/png", "image/jpeg"})

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})([^\n]*)\n.*?^\1?\2[`~]*[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
_RAW_MARKUP = re.compile(r"<(?!https?://[^\s<>]+>)[A-Za-z/!?]")  # a tag, a comment; not an autolink
_DIRECTIVE = re.compile(r"\{[A-Za-z][\w:-]*\}")  # {raw}, {include}, {eval-rst}, a role
_SCRIPT_LINK = re.compile(r"\]\(\s*<?\s*(javascript|data|vbscript):", re.IGNORECASE)


class _HtmlCheck(HTMLParser):
    """Collects what in an HTML output is not the book's own HTML."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        if tag not in HTML_TAGS:
            self.problems.append(f"the tag <{tag}>")
        for name, value in attrs:
            if name not in HTML_ATTRIBUTES:
                self.problems.append(f"the attribute {name}= on <{tag}>")
            elif name == "type" and (tag != "style" or (value or "").lower() != "text/css"):
                self.problems.append(f"type={value!r} on <{tag}>")
            elif name in _IMAGE_ATTRIBUTES and not (tag in ("img", "source") and _INLINE_PNG.fullmatch(value or "")):
                self.problems.append(f"{name}= other than an inline PNG on <{tag}>")
            elif name == "media" and tag != "source":
                self.problems.append(f"media= on <{tag}>")
        self.in_style = tag == "style"

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self.in_style = False

    def handle_data(self, data):
        if self.in_style and _CSS_FORBIDDEN.search(data):
            self.problems.append("a stylesheet that fetches or runs something")

    def handle_pi(self, data):
        self.problems.append("a processing instruction")

    def handle_decl(self, decl):
        self.problems.append(f"the declaration <!{decl[:20]}>")

    def unknown_decl(self, data):
        self.problems.append("an unknown declaration")


def html_problems(text: str) -> list[str]:
    """What in ``text`` (an output's HTML) the book's own outputs never hold; empty when it is fine."""
    check = _HtmlCheck()
    check.feed(text)
    check.close()
    return list(dict.fromkeys(check.problems))


def markdown_problems(text: str) -> list[str]:
    """Raw HTML, a directive or role, or a script link in a Markdown output (code is only shown)."""
    problems = []
    for fence in _FENCE.finditer(text):
        if _DIRECTIVE.match(fence.group(3).strip()):
            problems.append(f"the directive {fence.group(3).strip()[:30]}")
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    if _RAW_MARKUP.search(prose):
        problems.append("raw HTML")
    if re.search(r"^\s*(:{3,})\s*\{", prose, re.MULTILINE) or _DIRECTIVE.search(prose):
        problems.append("a directive or role")
    if _SCRIPT_LINK.search(prose):
        problems.append("a script link")
    return problems


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def clean_outputs(cell: dict, where: str) -> list[str]:
    """Remove from ``cell``'s outputs what a page may not show; return what was not the book's."""
    problems, kept = [], []
    for output in cell.get("outputs") or []:
        kind = output.get("output_type")
        if kind == "stream" and output.get("name") != "stdout":
            continue  # stderr: a library's warning, never the page's
        if kind in ("display_data", "execute_result"):
            data = output.get("data") or {}
            for mime in list(data):
                found = []
                if mime not in MIME_TYPES:
                    found = [f"a {mime} output"]
                elif mime == "text/html":
                    found = html_problems(_text(data[mime]))
                elif mime == "text/markdown":
                    found = markdown_problems(_text(data[mime]))
                if found:
                    problems.append(f"{where}: {', '.join(found[:3])}")
                    del data[mime]
            if not data:
                continue
        kept.append(output)
    if "outputs" in cell:
        cell["outputs"] = kept
    return problems


def _public_path(value: str, root: Path) -> str:
    """An absolute path as a page shows it: relative to the project inside it, else its file name."""
    from .paths import REPO_ROOT

    path = Path(value)
    for base in (root, REPO_ROOT):
        try:
            return path.resolve().relative_to(base).as_posix()
        except (ValueError, OSError, RuntimeError):
            continue
    return path.name


def _public_parameters(source: str, root: Path) -> str:
    """The lines ``name = '/an/absolute/path'`` of a parameters cell, with the path as a page shows it."""
    lines, changed = [], False
    for line in source.splitlines():
        name, sep, rest = line.partition(" = ")
        if sep and name.strip().isidentifier():
            value, comment = rest, ""
            if "  #" in rest:
                value, _, comment = rest.partition("  #")
                comment = "  #" + comment
            try:
                parsed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                parsed = None
            if isinstance(parsed, str) and os.path.isabs(parsed):
                line, changed = f"{name} = {_public_path(parsed, root)!r}{comment}", True
        lines.append(line)
    return "\n".join(lines) if changed else source


def machine_prefixes(root: Path) -> list[tuple[str, str]]:
    """(absolute prefix, what a page writes instead), longest first."""
    from .paths import REPO_ROOT

    found = {str(REPO_ROOT): ".", str(root): ".", sys.prefix: "<python environment>", str(Path.home()): "~"}
    return sorted(((k, v) for k, v in found.items() if k and k != "/"), key=lambda kv: -len(kv[0]))


def scrub(value, prefixes: list[tuple[str, str]]):
    """``value`` (a notebook's JSON, any depth) with every machine prefix written as a page shows it."""
    if isinstance(value, str):
        for prefix, shown in prefixes:
            if prefix in value:
                value = value.replace(prefix + "/", "" if shown == "." else shown + "/").replace(prefix, shown)
        return value
    if isinstance(value, list):
        return [scrub(item, prefixes) for item in value]
    if isinstance(value, dict):
        return {key: scrub(item, prefixes) for key, item in value.items()}
    return value


def clean_notebook(nb, root: Path) -> list[str]:
    """Make an executed notebook (an nbformat node, changed in place) fit to publish; return what
    it held that the book does not make (each: ``cell N: what``)."""
    root = Path(root).resolve()
    problems = []
    for number, cell in enumerate(nb.cells, 1):
        tags = (cell.get("metadata") or {}).get("tags") or []
        if cell.get("cell_type") == "code":
            problems += clean_outputs(cell, f"cell {number}")
            if "parameters" in tags or "injected-parameters" in tags:
                cell["source"] = _public_parameters(_text(cell.get("source", "")), root)
    papermill = nb.metadata.get("papermill") or {}
    if isinstance(papermill.get("parameters"), dict):
        papermill["parameters"] = {k: _public_path(v, root) if isinstance(v, str) and os.path.isabs(v) else v
                                   for k, v in papermill["parameters"].items()}
    from nbformat import from_dict

    prefixes = machine_prefixes(root)
    nb.cells = [from_dict(scrub(cell, prefixes)) for cell in nb.cells]
    nb.metadata = from_dict(scrub(nb.metadata, prefixes))
    return problems
