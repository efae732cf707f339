"""Headless Chromium, driven over the DevTools protocol on a pipe: the real layout of built pages.

One browser serves every page: ``Browser.open(path, width)`` loads a page in a window of
``width`` CSS px, ``measure_tables()`` returns where each table of the article lies and where its
header cells end, and ``screenshot(path)`` writes a PNG. tests/test_book.py measures the whole
book with it (tests/page_rules.py judges the measurements); scripts/render_pages.sh renders every
page with it (``python tests/browser.py HTML_DIR SCREENS_DIR``).

Chromium reads commands from file descriptor 3 and answers on 4 (``--remote-debugging-pipe``),
each message JSON ended by a NUL byte: no port, no websocket library.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL = "install it: make browser (Debian: apt-get install -y chromium)"


def executable() -> str | None:
    """The headless Chromium on PATH, or None."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


# Where each table of the article lies in the window, and its header cells (the last header row):
# CSS px from the window's left edge, at the table's own sideways scroll of 0. "sticky" says
# whether the first header cell stays at the table's left edge once the table is scrolled to its
# right end (a table that does not scroll reports true).
MEASURE_JS = r"""
(() => {
  const art = document.querySelector('article.bd-article') || document.querySelector('article') ||
              document.body || document.documentElement;
  const a = art.getBoundingClientRect();
  const tables = [];
  for (const t of art.querySelectorAll('table.kernelbook-table')) {
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;   // inside a closed block: not on screen
    const head = t.tHead && t.tHead.rows.length ? t.tHead.rows[t.tHead.rows.length - 1] : t.rows[0];
    const cells = head ? [...head.cells] : [];
    const heads = cells.map(c => { const b = c.getBoundingClientRect();
                                   return {text: c.innerText.replace(/\s+/g, ' ').trim(), left: b.left, right: b.right}; });
    let sticky = true;
    if (t.scrollWidth > t.clientWidth + 1 && cells.length) {
      t.scrollLeft = t.scrollWidth;
      sticky = Math.abs(cells[0].getBoundingClientRect().left - r.left) <= 2;
      t.scrollLeft = 0;
    }
    const cap = t.querySelector('caption');
    tables.push({caption: cap ? cap.innerText.replace(/\s+/g, ' ').trim().slice(0, 100) : '',
                 left: r.left, right: r.right, client_width: t.clientWidth, scroll_width: t.scrollWidth,
                 heads: heads, sticky: sticky});
  }
  return {window: window.innerWidth, page_width: document.documentElement.scrollWidth,
          article: {left: a.left, right: a.right}, tables: tables};
})()
"""


class Browser:
    """One headless Chromium and one tab in it."""

    def __init__(self, binary: str | None = None, timeout_s: float = 60.0):
        binary = binary or executable()
        if not binary:
            raise BrowserError(f"headless Chromium is not on PATH: {INSTALL}")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds():  # the browser's fd 3 reads our commands, its fd 4 writes its answers
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--allow-file-access-from-files", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    # -- protocol
    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed its DevTools pipe (it exited)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read_message()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer)

    def call(self, method: str, params: dict | None = None) -> dict:
        return self._call(method, params, self.session)

    def _wait_event(self, method: str) -> dict:
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method:
                    return self._events.pop(i)
            self._events.append(self._read_message())

    # -- pages
    def open(self, path: Path, width: int, height: int = 1000) -> None:
        """Load ``path`` (a built HTML page) in a window ``width`` CSS px wide, fonts and images loaded."""
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self._events.clear()
        self.call("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self._wait_event("Page.loadEventFired")
        self.evaluate("document.fonts.ready.then(() => true)")
        # what the page's own scripts threw while loading ("… has already been declared")
        self.errors = [e["params"]["exceptionDetails"].get("exception", {}).get("description")
                       or e["params"]["exceptionDetails"].get("text", "")
                       for e in self._events if e["method"] == "Runtime.exceptionThrown"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"script failed: {details.get('exception', {}).get('description') or details.get('text')}")
        return result["result"].get("value")

    def measure_tables(self) -> dict:
        return self.evaluate(MEASURE_JS)

    def screenshot(self, out: Path, max_height: int = 9000) -> None:
        """The whole page (up to ``max_height`` px) as a PNG: the window made as tall as the page,
        then shot as it is (shooting "beyond the viewport" shifted the theme's layout)."""
        width = int(self.evaluate("window.innerWidth"))
        height = min(int(self.evaluate("document.documentElement.scrollHeight")), max_height)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        Path(out).write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except (BrowserError, OSError):
            pass
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def book_pages(html: Path) -> list[Path]:
    """Every page of a built book: the HTML under ``html`` but Sphinx's own (search, genindex) and
    a page that only redirects (the root index.html)."""
    skip = {"search.html", "genindex.html", "py-modindex.html"}
    return sorted(p for p in Path(html).rglob("*.html")
                  if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
                  and 'http-equiv="Refresh"' not in p.read_text(errors="replace")[:2000])


def render(html: Path, out: Path, widths=(1280, 400), only: list[str] | None = None) -> list[Path]:
    """A PNG of every page of the built book at each width, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    pages = book_pages(html)
    if only:
        pages = [p for p in pages if p.relative_to(html).with_suffix("").as_posix() in only]
    with Browser() as browser:
        for page in pages:
            name = page.relative_to(html).with_suffix("").as_posix().replace("/", "_")
            for width in widths:
                browser.open(page, width)
                target = out / f"{name}-{width}.png"
                browser.screenshot(target)
                written.append(target)
                print(target, flush=True)
    return written


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: browser.py HTML_DIR SCREENS_DIR [PAGE ...]   (PAGE as book/lenet/00_baseline)")
    render(Path(sys.argv[1]), Path(sys.argv[2]), only=sys.argv[3:] or None)
