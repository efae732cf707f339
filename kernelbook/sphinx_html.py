"""A Sphinx extension of the book's HTML build (named in _config.yml): each script once per page.

sphinx-thebe adds its inline configuration script (``const THEBE_JS_URL = …``) from a handler
of Sphinx's ``env-before-read-docs`` event, which a Jupyter Book build fires twice; Sphinx keeps
both copies, so every page declared the constant twice and the browser raised "Identifier
'THEBE_JS_URL' has already been declared".
This drops a script that a page would load or run a second time, keeping the first.
"""

from __future__ import annotations


def unique_scripts(scripts: list) -> list:
    """``scripts`` without repeats: two entries are the same script when they name the same file
    with the same attributes (an inline script's body is one of its attributes)."""
    seen, kept = set(), []
    for script in scripts:
        # Sphinx's _JavaScript: an inline script's file is None when added by the extension and
        # '' once the builder has copied it, so both count as "no file"
        attributes = getattr(script, "attributes", None) or {}
        key = (str(getattr(script, "filename", script) or ""), tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    return kept


def _page_context(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts:  # in place: the list is the builder's own, which later handlers may still extend
        scripts[:] = unique_scripts(list(scripts))


def setup(app):
    # Early (the default is 500): Sphinx stops calling this event's handlers at the first that
    # returns a template, and the theme's do.
    app.connect("html-page-context", _page_context, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
