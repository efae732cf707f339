"""A tiny book in a temporary folder, for the batch, CLI and build tests.

Three pages in ``_toc.yml`` order: a plain Markdown introduction (not a notebook, so never
executed), ``part/bad`` (raises on purpose) and ``part/good`` (prints its parameters). The bad
notebook comes first so that the tests can see the batch go on after a crash.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent

FRONT_MATTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

GOOD = FRONT_MATTER + """
# Good chapter

```{code-cell} ipython3
:tags: [parameters]

size = 3
label = "default"
mode = "auto"
run_id = None
```

```{code-cell} ipython3
print(f"size={size!r} label={label!r} mode={mode} run_id={run_id}")
```
"""

BAD = FRONT_MATTER + """
# Bad chapter

```{code-cell} ipython3
:tags: [parameters]

size = 3
mode = "auto"
run_id = None
```

```{code-cell} ipython3
raise ValueError("boom on purpose")
```
"""

INTRO = """# Tiny book

A plain page: no kernel, never executed.
"""

TOC = """format: jb-book
root: book/intro
parts:
  - caption: A part
    chapters:
      - file: book/part/bad
      - file: book/part/good
"""


def make_book(root: Path, *, with_bad: bool = True, real_config: bool = True) -> Path:
    """Write the tiny book under ``root`` and return ``root`` (it holds _toc.yml, _config.yml, book/)."""
    (root / "book" / "part").mkdir(parents=True)
    (root / "book" / "intro.md").write_text(INTRO)
    (root / "book" / "part" / "good.md").write_text(GOOD)
    toc = TOC
    if with_bad:
        (root / "book" / "part" / "bad.md").write_text(BAD)
    else:
        toc = toc.replace("      - file: book/part/bad\n", "")
    (root / "_toc.yml").write_text(toc)
    if real_config:  # the repository's own configuration: a strict build proves it is sound
        shutil.copy(REPO_ROOT / "_config.yml", root / "_config.yml")
        shutil.copytree(REPO_ROOT / "book" / "_static", root / "book" / "_static", dirs_exist_ok=True)
    else:
        (root / "_config.yml").write_text('title: Tiny\nexecute:\n  execute_notebooks: "off"\n')
    return root


def write_executed(path: Path, text: str, *, crashed: bool = False, status: str | None = None,
                   source: Path | None = None, record: bool = True) -> Path:
    """A fabricated executed notebook (as papermill would leave it) with one printed output, and
    its entry in the batch record ``batch.json`` beside it (``status`` ok, or failed if crashed)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["papermill"] = {"exception": True if crashed else None}
    cell = nbformat.v4.new_code_cell("print('hello')", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [nbformat.v4.new_markdown_cell("# Good chapter"), cell]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    if record:
        import json

        from kernelbook.batch_report import source_digest

        root = path.parent.parent
        batch = root / "batch.json"
        data = json.loads(batch.read_text()) if batch.is_file() else {"notebooks": []}
        name = f"{path.parent.name}/{path.stem}"
        data["notebooks"] = [nb for nb in data["notebooks"] if nb["name"] != name] + [{
            "name": name, "status": status or ("failed" if crashed else "ok"),
            "error": "RuntimeError: boom" if crashed else None,
            "source_sha256": source_digest(source) if source else None,
            "notebook_sha256": source_digest(path)}]
        batch.write_text(json.dumps(data))
    return path


def record_digest(path: Path) -> None:
    """Record in ``batch.json`` the digest of ``path`` as it is now, as the batch does when it
    writes an executed notebook (for tests that fabricate a notebook's outputs afterwards)."""
    import json

    from kernelbook.batch_report import source_digest

    batch = path.parent.parent / "batch.json"
    data = json.loads(batch.read_text())
    name = f"{path.parent.name}/{path.stem}"
    for entry in data["notebooks"]:
        if entry["name"] == name:
            entry["notebook_sha256"] = source_digest(path)
    batch.write_text(json.dumps(data))
