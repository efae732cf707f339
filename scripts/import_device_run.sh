#!/usr/bin/env bash
# Bring a device run home: unpack the run.tar.gz that scripts/device_run.sh wrote (or the
# try.tar.gz of scripts/device_try.sh, whose development runs go to data/dev/).
#
#   scripts/import_device_run.sh TARBALL
#
# The run folder(s) go to data/results/ (an existing run folder is never overwritten: a run id
# names one measurement, so a clash means the tarball was imported already; a run folder without
# any part is skipped: nothing was measured in it), the executed
# notebooks to _build/executed/ (merged: notebooks the device did not run keep their local
# copy), the device's logs to _build/device-logs/. Then the runs are validated and listed.
set -euo pipefail
if [ $# -ne 1 ] || [ ! -e "$1" ]; then
  echo "usage: $0 TARBALL|FOLDER   (the run.tar.gz of scripts/device_try.sh, or the folder of files" \
       "scripts/device_run.sh sent back: its run.tar.gz.NN and executed.tar.gz.NN pieces)" >&2
  exit 2
fi
given=$(realpath "$1")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$given" ]; then   # pieces of at most 16 MiB each: joined in their order, runs first
  found=0
  for name in run executed; do
    if ls "$given/$name".tar.gz.[0-9]* >/dev/null 2>&1; then
      cat "$given/$name".tar.gz.[0-9]* | tar -xz -C "$tmp"
      found=1
    fi
  done
  [ -f "$given/run.tar.gz" ] && tar -xzf "$given/run.tar.gz" -C "$tmp" && found=1
  if [ "$found" = 0 ]; then
    echo "error: $given holds no run.tar.gz.NN, executed.tar.gz.NN or run.tar.gz." >&2
    exit 2
  fi
else
  tar -xzf "$given" -C "$tmp"
fi

runs=()
if [ -d "$tmp/data/results" ]; then
  for dir in "$tmp"/data/results/*/; do
    [ -d "$dir" ] || continue
    # A notebook that crashed after opening its session leaves a manifest and no part: nothing
    # was measured, so there is nothing to import (and `results --runs` stays free of noise).
    if ! ls "$dir"parts/*.json >/dev/null 2>&1; then
      echo "skipped $(basename "$dir"): it holds no measurements (no parts/*.json)" >&2
      continue
    fi
    runs+=("$(basename "$dir")")
  done
fi
for run in "${runs[@]}"; do
  if [ -e "data/results/$run" ]; then
    echo "error: data/results/$run exists already; nothing was imported. Fix: remove that folder" \
         "if it is a stale copy, or skip this tarball if it was imported before." >&2
    exit 1
  fi
done

# Development runs (kernelbook try) go to the git-ignored data/dev/ (KERNELBOOK_DEV_DIR), never
# to data/results/.
DEV=${KERNELBOOK_DEV_DIR:-data/dev}
dev_runs=()
if [ -d "$tmp/data/dev" ]; then
  for dir in "$tmp"/data/dev/*/; do
    [ -d "$dir" ] || continue
    if [ -e "$DEV/$(basename "$dir")" ]; then
      echo "error: $DEV/$(basename "$dir") exists already; nothing was imported. Fix: remove that folder" \
           "if it is a stale copy, or skip this tarball if it was imported before." >&2
      exit 1
    fi
    dev_runs+=("$(basename "$dir")")
  done
fi

mkdir -p data/results
for run in "${runs[@]}"; do
  cp -a "$tmp/data/results/$run" "data/results/$run"
  echo "imported data/results/$run"
done
for run in "${dev_runs[@]}"; do
  mkdir -p "$DEV"
  cp -a "$tmp/data/dev/$run" "$DEV/$run"
  echo "imported $DEV/$run (a development run: kernelbook compare BOOK_RUN $run; kernelbook promote $run)"
done
[ $((${#runs[@]} + ${#dev_runs[@]})) -gt 0 ] || echo "warning: the tarball holds no run folder (did the batch measure?)" >&2
if [ -d "$tmp/_build/executed" ]; then
  mkdir -p _build/executed
  cp -a "$tmp/_build/executed/." _build/executed/
  echo "imported the executed notebooks into _build/executed/"
fi
if [ -d "$tmp/logs" ]; then
  mkdir -p _build/device-logs
  cp -a "$tmp/logs/." _build/device-logs/
  echo "device logs in _build/device-logs/ (steps.txt says which steps failed)"
fi

# Reading every record validates every part file of the imported runs.
for run in "${runs[@]}"; do
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m kernelbook results --run "$run" > /dev/null
done
for run in "${dev_runs[@]}"; do
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m kernelbook results --dev --run "$run" > /dev/null
done
if [ ${#dev_runs[@]} -gt 0 ]; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m kernelbook results --runs --dev
fi
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m kernelbook results --runs
