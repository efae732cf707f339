#!/usr/bin/env bash
# Headless Chromium for tests/test_layout.py and `make render`: nothing to do when one is on PATH,
# else Debian's/Ubuntu's package through apt-get (as root, or through sudo).
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
command -v apt-get >/dev/null 2>&1 || {
  echo "headless Chromium is needed and apt-get is not here: install chromium with this system's package manager" >&2
  exit 2
}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing chromium (apt-get) for the layout tests and make render ..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1
