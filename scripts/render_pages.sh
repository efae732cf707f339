#!/usr/bin/env bash
# Screenshots of every page of the built book in headless Chromium, at page width (1280 px) and on
# a phone (400 px), into _build/screens/ — to look at what is published before publishing it.
#   make render            (after make book; PAGES="book/summary book/mlp/18_x" renders only those)
# One browser renders them all (tests/browser.py, the same that measures the layout in the tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
html=${HTML:-_build/html}        # HTML=/elsewhere/_build/html renders another build
out=${SCREENS:-_build/screens}
[ -f "$html/index.html" ] || { echo "no $html/index.html: run make book first" >&2; exit 2; }
bash scripts/install_browser.sh
python=${PYTHON:-.venv/bin/python}
# shellcheck disable=SC2086  # PAGES is a space-separated list of pages
exec "$python" tests/browser.py "$html" "$out" ${PAGES:-}
