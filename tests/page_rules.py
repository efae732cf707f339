"""Rules a built page must keep, read from its HTML (tests/test_book.py applies them to the real
book, tests/test_page_rules.py to fabricated pages, so each rule is shown to fail when it should).

- No image carries an inline size (``style="width:…px;height:…px"``), which would beat the
  stylesheet and draw the figure at a wrong aspect ratio.
- No table's key columns are off-screen at 1280 px, measured in headless Chromium
  (``layout_faults``, from tests/browser.py's measurements; tests/test_layout.py): no page scrolls
  sideways, no table is wider than its page's article, and every key column (the first, and those
  KEY_HEADER names: this step, its changes, speed-ups, times, % of floor, Result, Accuracy) ends
  inside its table's visible box; at 400 px a table may scroll, but its first column stays in
  view (sticky) while it does.
- Every metric a sentence cites is a row or column of a table on that page.
- No typed number in prose: a number with a unit (ms, µs, GFLOP/s, GB/s, %, ×) in a sentence must
  be one the page's outputs show, unless the paragraph quotes a write-up (tests/test_quotes.py
  checks those) or is a prediction (written before measuring).
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

KEY_HEADER = re.compile(r"^(This step|vs (previous|baseline)|speed-up|Speed-up|Time$|Its time|% of its floor|"
                        r"Op Time [12]$|Op 1 \+ Op 2|Verdict|Limit$|Value$|Total Execution Time|Accuracy$|Result$)")
SEED = re.compile(r"\d{3}_[0-9a-f]{16}\.txt")
#: What prose may call a metric, and the label its table row or column carries.
METRIC_WORDS = {
    r"bank conflicts?": "Shared bank conflicts",
    r"theoretical occupancy": "Theoretical occupancy",
    r"achieved occupancy": "Achieved occupancy",
    r"instruction counts?|warp instructions": "Warp instructions",
    r"tensor pipe": "Tensor pipe",
    r"L1 hit": "L1 hit",
    r"L2 hit": "L2 hit",
    r"DRAM bytes": "DRAM bytes",
    r"active threads per warp": "Active threads/warp",
}
UNIT = r"(ms|µs|s|GFLOP/s|TFLOP/s|GB/s|%|×)"
#: A number and its unit; "×" only as a ratio ("2.4×"), not as a dimension ("5 × 5", "2×2").
NUMBER_WITH_UNIT = re.compile(r"(?<![\w.×])(\d[\d,]*(?:\.\d+)?)\s?" + UNIT + r"(?![\w/])(?!\s?(?:\d|[A-Z]\b))")
TO_MS = {"s": 1000.0, "ms": 1.0, "µs": 1e-3}


def soup(text: str) -> BeautifulSoup:
    return BeautifulSoup(text, "html.parser")


def article(page: BeautifulSoup):
    return page.find("article") or page


def inline_image_sizes(page: BeautifulSoup) -> list[str]:
    """Every image whose inline style sets a width or height in pixels."""
    bad = []
    for img in article(page).find_all("img"):
        style = (img.get("style") or "").replace(" ", "")
        if re.search(r"(^|;)(width|height):\d", style):
            bad.append(f"{img.get('src', '')[:60]} style={img.get('style')}")
    return bad


def _prose_blocks(page: BeautifulSoup) -> list[str]:
    """The text of the page's own paragraphs and list items, outside every code cell."""
    out = []
    for node in article(page).find_all(["p", "li"]):
        if node.find_parent(class_=re.compile(r"\bcell\b")) or node.find_parent(["table", "dl", "details"]):
            continue
        out.append(node.get_text(" ", strip=True))
    return out


def _outputs_text(page: BeautifulSoup) -> str:
    return " ".join(c.get_text(" ", strip=True) for c in article(page).find_all(class_="cell_output"))


def cited_absent_metrics(page: BeautifulSoup) -> list[str]:
    """Metrics a sentence names that no table on the page shows."""
    tables = " ".join(t.get_text(" ", strip=True) for t in article(page).find_all("table")).lower()
    bad = []
    for text in _prose_blocks(page):
        for pattern, label in METRIC_WORDS.items():
            if re.search(pattern, text, re.I) and label.lower() not in tables:
                bad.append(f"cites {pattern!r} but no table shows {label!r}: {text[:100]}")
    return bad


def _values(text: str) -> list[tuple[float, str, float]]:
    """(value, unit kind, rounding half-step) of every number-with-unit in ``text``; times in ms."""
    out = []
    for number, unit in NUMBER_WITH_UNIT.findall(text):
        decimals = len(number.split(".")[1]) if "." in number else 0
        value = float(number.replace(",", ""))
        scale = TO_MS.get(unit, 1.0)
        out.append((value * scale, "time" if unit in TO_MS else unit, 0.5 * 10 ** -decimals * scale))
    return out


def typed_numbers(page: BeautifulSoup) -> list[str]:
    """Numbers with units in prose that the page's outputs do not show, to the prose's precision."""
    shown = _values(_outputs_text(page))
    bad = []
    for text in _prose_blocks(page):
        if SEED.search(text) or text.startswith(("Prediction.", "Prediction ")):
            continue
        for value, kind, half_step in _values(text):
            if not any(k == kind and abs(v - value) <= max(half_step, h, abs(value) * 1e-3) for v, k, h in shown):
                bad.append(f"{value:g} {kind} typed in prose, shown nowhere on the page: {text[:100]}")
    return bad


def key_columns(headers: list[str]) -> list[int]:
    """The columns a table's verdict rests on: its first, and those whose header KEY_HEADER names."""
    return [0] + [i for i, h in enumerate(headers) if i and KEY_HEADER.match(h)]


def scrolls(table: dict) -> bool:
    """Whether a measured table (tests/browser.py) is wider than its box, so scrolls sideways."""
    return table["scroll_width"] > table["client_width"] + 1


def layout_faults(measured: dict, narrow: bool = False) -> list[str]:
    """What a reader cannot see on a page measured by tests/browser.py at one window width.

    Wide (``narrow`` False): the page does not scroll sideways, no table reaches past the
    article, and every key column of every table ends inside the table's visible box. Narrow: the
    page does not scroll sideways and a table that scrolls keeps its first column in view."""
    bad = []
    if measured["page_width"] > measured["window"] + 1:
        bad.append(f"the page scrolls sideways: {measured['page_width']} px in a {measured['window']} px window")
    right = measured["article"]["right"]
    for t in measured["tables"]:
        name = repr(t["caption"][:70] or " | ".join(h["text"] for h in t["heads"][:4]))
        if narrow:
            if scrolls(t) and not t["sticky"]:
                bad.append(f"{name}: its first column leaves the screen when the table scrolls")
            continue
        if t["right"] > right + 1:
            bad.append(f"{name}: the table ends at {t['right']:.0f} px, past the article ({right:.0f} px)")
        visible = t["left"] + t["client_width"] + 1
        headers = [h["text"] for h in t["heads"]]
        for i in key_columns(headers):
            if t["heads"][i]["right"] > visible:
                bad.append(f"{name}: key column {headers[i]!r} ends at {t['heads'][i]['right']:.0f} px, "
                           f"past the table's visible edge ({visible:.0f} px)")
    return bad
