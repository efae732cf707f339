#!/usr/bin/env bash
# A development candidate measured on the device machine (GPU, no network, no Jupyter needed):
#
#   KERNELBOOK_COMMIT=<git rev-parse --short=12 HEAD here> \
#     bash scripts/device_try.sh vgg kernels/vgg/12_hopper_fp16.cu --sweep HOPPER_CLUSTER=1,2 --profile
#
# Arguments are those of `kernelbook try STUDY SOURCE ...` (-D, -P, --sweep, --step, --sizes,
# --repeats, --profile). The candidate is checked against float64, timed and recorded in the
# development store (data/dev/, git-ignored); the new run folder(s) and the log are packed into
# $OUT/try.tar.gz, which scripts/import_device_run.sh unpacks here into data/dev/. Then:
#
#   .venv/bin/kernelbook compare BOOK_RUN DEV_RUN --study vgg
#   .venv/bin/kernelbook promote DEV_RUN        # only for a run a chapter will cite
#
# Several candidates in one call: separate their argument lists with `::`, e.g.
#   bash scripts/device_try.sh vgg kernels/vgg/x.cu -D BM=128 :: vgg kernels/vgg/x.cu -D BM=64
#
# Environment: OUT (set by the device machine), KERNELBOOK_COMMIT (the device gets no .git),
# PYTHON (default python3), TRY_TIMEOUT (seconds for each candidate, default no limit).
# Files that come back: try.tar.gz and logs/{device.txt,try.log}.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:?OUT must name the folder whose files come back}
PY=${PYTHON:-python3}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export MPLCONFIGDIR=/tmp/kernelbook-mpl
if [ $# -lt 2 ]; then
  echo "usage: $0 STUDY SOURCE [kernelbook try options] [:: STUDY SOURCE ...]" | tee "$LOGS/try.log" >&2
  exit 2
fi
[ -n "${KERNELBOOK_COMMIT:-}" ] || echo "warning: KERNELBOOK_COMMIT is not set; the run's manifest will say commit 'unknown'" \
  | tee -a "$LOGS/try.log"
{
  echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${KERNELBOOK_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 || echo "(nvidia-smi failed)"
  command -v ncu >/dev/null && ncu --version | tail -1
} > "$LOGS/device.txt" 2>&1

DEV=${KERNELBOOK_DEV_DIR:-$PWD/data/dev}   # the development store (kernelbook.paths.dev_results_dir)
export KERNELBOOK_DEV_DIR=$DEV
mkdir -p "$DEV"
before=$(ls -1 "$DEV")
status=0
run_one() {
  timeout "${TRY_TIMEOUT:-100000}" "$PY" -m kernelbook try "$@" 2>&1 | tee -a "$LOGS/try.log"
  local rc=${PIPESTATUS[0]}
  echo "exit $rc: kernelbook try $*" | tee -a "$LOGS/try.log"
  [ "$rc" -eq 0 ] || status=1
}
args=()
for arg in "$@"; do
  if [ "$arg" = "::" ]; then run_one "${args[@]}"; args=(); else args+=("$arg"); fi
done
[ ${#args[@]} -gt 0 ] && run_one "${args[@]}"

new_runs=()
for run in $(ls -1 "$DEV"); do
  if [ -d "$DEV/$run" ] && ! grep -qxF "$run" <<<"$before"; then new_runs+=("$run"); fi
done
echo "new development run(s): ${new_runs[*]:-none}" | tee -a "$LOGS/try.log"
# packed as data/dev/<run_id>/ (run ids start with a digit), beside logs/
tar -czf "$OUT/try.tar.gz" --transform 's,^\([0-9]\),data/dev/\1,' -C "$DEV" "${new_runs[@]}" -C "$OUT" logs \
  || status=1
exit "$status"
