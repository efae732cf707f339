#!/usr/bin/env bash
# Screenshots of the built book's key pages in headless Chromium, at page width (1280 px) and on
# a phone (400 px), into _build/screens/ — to look at what is published before publishing it.
#   make render            (after make book; PAGES="book/summary book/mlp/18_x" renders only those)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
html=${HTML:-_build/html}        # HTML=/elsewhere/_build/html renders another build
out=${SCREENS:-_build/screens}
[ -f "$html/index.html" ] || { echo "no $html/index.html: run make book first" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "headless Chromium is needed: apt-get install chromium" >&2; exit 2; }
mkdir -p "$out"
pages=${PAGES:-"book/intro book/lenet/00_baseline book/lenet/03_tiled book/lenet/11_index_reuse book/lenet/15_hopper_final book/lenet/90_profiles book/mlp/11_better_occupancy book/mlp/15_final book/mlp/90_profiles book/vgg/07_tf32_implicit_gemm book/vgg/09_winograd book/vgg/13_hopper_3xtf32 book/vgg/90_profiles book/mlp/17_final_full_range book/lenet/16_wgmma_final book/mlp/16_fp32_register_tiled book/mlp/18_tensor_core_fp16_tma book/summary book/glossary"}
for page in $pages; do
  for width in 1280 400; do
    name=$(echo "$page" | tr '/' '_')-$width.png
    "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="$width,2400" \
      --screenshot="$out/$name" "file://$(cd "$html" && pwd)/$page.html" >/dev/null 2>&1
    echo "$out/$name"
  done
done
