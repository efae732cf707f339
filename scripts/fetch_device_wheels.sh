#!/usr/bin/env bash
# Fill .whl/ with the wheels the device machine lacks to run the papermill batch.
#
# The device (Python 3.12, x86_64, no network) already has numpy, cupy, pandas, matplotlib,
# pyyaml, requests, tqdm, click, pygments, psutil, packaging, python-dateutil, attrs,
# markdown-it-py, mdurl, aiohttp and pytest, and of Dask's needs jinja2, msgpack, fsspec,
# sortedcontainers, numba, cuda-core and nvidia-ml-py (pynvml), but nothing of Jupyter or Dask.
# This downloads exactly the missing closure of papermill + ipykernel + jupytext + dask +
# distributed + dask-cuda (checked with
#   unzip -p .whl/NAME-*.whl '*/METADATA' | grep ^Requires-Dist
# ), pinned, one version each, so that scripts/device_run.sh can install them offline with
# --no-deps. .whl/ is git-ignored; pass it to the device with the run tool's `carry: [".whl"]`.
#
# Usage: scripts/fetch_device_wheels.sh        (from anywhere; needs network and pip)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
DEST=.whl
LIMIT_MIB=40

WHEELS=(
  # papermill and its own needs
  papermill==2.7.0 entrypoints==0.4.2 tenacity==9.2.1
  # notebook format and execution client
  nbformat==5.11.1 fastjsonschema==2.22.3 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  referencing==0.37.0 rpds-py==2026.9.1 nbclient==0.11.0
  jupyter-core==5.9.1 platformdirs==4.14.7 traitlets==5.16.1
  jupyter-client==8.10.0 pyzmq==27.3.0 tornado==6.6.1
  # jupyter-client needs typing-extensions>=4.13; the device's (pulled in by torch) may be older,
  # and a newer typing-extensions is backward compatible, so shadowing it is safe.
  typing-extensions==4.16.0
  # the kernel
  ipykernel==7.4.0 comm==0.2.3 debugpy==1.8.22 nest-asyncio2==1.7.4 matplotlib-inline==0.2.2
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7
  pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4
  stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure-eval==0.2.4
  # MyST notebooks -> ipynb
  jupytext==1.19.6 mdit-py-plugins==0.7.0
  # the batch engine (kernelbook run --gpus 1): dask-cuda 26.10 is built against dask and
  # distributed 2026.7.1 (its rapids-dask-dependency pins them; that package itself only patches
  # imports through a .pth file, which a --target install does not run, so it is left out).
  # cloudpickle and toolz are on the device, but dask needs cloudpickle>=3 and toolz>=0.12: the
  # device's versions are not known, so these (small, backward compatible) ones shadow them.
  dask==2026.7.1 distributed==2026.7.1 dask-cuda==26.10.0
  partd==1.4.2 locket==1.0.0 tblib==3.2.2 zict==3.0.0 cloudpickle==3.1.2 toolz==1.2.0
)

# Keep the wheels out of `git status` even where .gitignore is not honoured.
if [ -d .git ] && ! grep -qxF '/.whl/' .git/info/exclude 2>/dev/null; then
  mkdir -p .git/info && echo '/.whl/' >> .git/info/exclude
fi

mkdir -p "$DEST"
rm -f "$DEST"/*.whl   # one version of each package, the pinned one
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$DEST" "${WHEELS[@]}"

count=$(ls "$DEST"/*.whl | wc -l)
if [ "$count" -ne "${#WHEELS[@]}" ]; then
  echo "error: expected ${#WHEELS[@]} wheels in $DEST, found $count." >&2
  exit 1
fi
ls -l "$DEST"/*.whl | awk '{printf "%9d  %s\n", $5, $9}'
total=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
echo "$count wheels, $(awk -v b="$total" 'BEGIN{printf "%.1f", b/1048576}') MiB in $DEST/"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "error: $DEST/ is over $LIMIT_MIB MiB; the device carry limit is 64 MiB for everything." >&2
  exit 1
fi
