#!/usr/bin/env bash
# The one script run per call on the device machine (GPU, Python 3.12, no network):
#
#   1. install the Jupyter wheels of .whl/ (scripts/fetch_device_wheels.sh) into /tmp/site
#   2. record the device (nvidia-smi, nvcc, Python and package versions) in $OUT/logs/device.txt
#   3. run the GPU tests:            python3 -m pytest -m gpu -q
#   4. run the papermill batch:      python3 -m kernelbook run --mode measure "$@"
#      (with SEQUENTIAL_FIRST=1, first the same batch one notebook after another in this process,
#      --gpus left out, into _build/executed-sequential: two runs of one call, to compare)
#      then compute-sanitizer memcheck + racecheck over every kernel: scripts/sanitize.py
#   5. pack the new run folder(s) of data/results/ and the logs into $OUT/run.tar.gz.NN, and
#      _build/executed/ into $OUT/executed.tar.gz.NN, in pieces under the 16 MiB a file may have
#      to come back (import here with scripts/import_device_run.sh $FILES_AT)
#
# A failing step does not stop the later ones (a crashed test must not cost the measurements),
# but the script exits 1 at the end if any step failed; $OUT/logs/steps.txt lists each step's
# exit status. Files that come back: run.tar.gz.NN, executed.tar.gz.NN and logs/{steps.txt,
# batch.log} (the other logs are inside run.tar.gz), under the device's limit of 8 files.
#
# Environment:
#   OUT                 set by the device machine: the folder whose files come back
#   KERNELBOOK_COMMIT   the commit being measured. The device gets the working tree without .git,
#                       so the caller must pass it, computed on this machine, e.g. the run tool's
#                       command: KERNELBOOK_COMMIT=<output of `git rev-parse --short=12 HEAD`,
#                       plus +dirty if needed> bash scripts/device_run.sh --only 'lenet/*'
#   PYTHON              the interpreter (default python3, the device's /opt/torch venv)
#   BATCH_TIMEOUT       seconds the papermill batch may take (default: no limit)
#   SANITIZE_TIMEOUT    seconds compute-sanitizer may take over all variants (default 300)
#   GPU_TESTS_TIMEOUT   seconds the GPU tests may take (default: no limit)
#   GPU_TESTS           what pytest runs for the GPU tests (default: tests; "none" skips them)
#   GPU_TESTS_K         a pytest -k expression selecting among them (e.g. "hopper or full_range")
#   SANITIZE_STUDIES    the studies the sanitizer checks, space-separated modules
#                       (default: kernelbook.lenet; "none" skips it)
#   SANITIZE_STEPS      comma-separated steps the sanitizer checks (default: every step); an entry
#                       "vgg:hopper-tf32" is for that study only (a study none of whose steps is
#                       named while others are is skipped), an entry without a prefix for all
#   SANITIZE_LAYERS     comma-separated cases the sanitizer launches (default: every case), prefixed
#                       the same way
#   SANITIZE_JOBS       compute-sanitizer processes side by side per study (default 4; nothing is
#                       timed after the batch, so they may share a GPU)
#   DEADLINE            epoch seconds by which the sanitizer and AFTER_TESTS must end (their timeout
#                       is what is left then; packing follows)
#   AFTER_TESTS         GPU tests run after the batch, beside the sanitizer on a GPU of their own
#                       (e.g. tests/test_mlp_gpu.py; GPU_TESTS=none then skips the ones before it)
#   SEQUENTIAL_FIRST    1: before the batch, measure the same notebooks sequentially (no Dask) into
#                       their own run; steps.txt then gives both wall times, e.g. the dask-cuda check:
#                       SEQUENTIAL_FIRST=1 GPU_TESTS=none SANITIZE_STUDIES=none \
#                         bash scripts/device_run.sh --only 'vgg/*' --gpus 1
#
# The run tool must carry the git-ignored wheels: carry: [".whl"].
# Arguments are passed to `kernelbook run`, e.g. --only 'lenet/*' -p repeats=20.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:?OUT must name the folder whose files come back}
PY=${PYTHON:-python3}
SITE=/tmp/site
LOGS="$OUT/logs"
mkdir -p "$LOGS"
STEPS="$LOGS/steps.txt"
: > "$STEPS"
failed=0

note() { echo "$*" | tee -a "$STEPS"; }
# for_study MODULE LIST: the comma-separated entries of LIST for the study MODULE (kernelbook.vgg):
# an entry "vgg:hopper-tf32" belongs to that study only, an entry without a prefix to every study.
for_study() {
  tr ',' '\n' <<<"$2" | awk -F: -v s="${1##*.}" 'NF == 1 && $1 != "" { print; next } $1 == s { print $2 }' | paste -sd, -
}
finish_step() {  # NAME RC
  if [ "$2" -eq 0 ]; then note "ok     $1"; else note "FAILED $1 (exit $2)"; failed=1; fi
}

export PYTHONPATH="$SITE:$PWD"
export PYTHONUNBUFFERED=1
# Jupyter and IPython write state under $HOME by default; keep it in /tmp, and use the new
# platformdirs paths (silences jupyter_core's migration warning).
export JUPYTER_PLATFORM_DIRS=1
export JUPYTER_RUNTIME_DIR=/tmp/kernelbook-jupyter/runtime
export IPYTHONDIR=/tmp/kernelbook-ipython
export MPLCONFIGDIR=/tmp/kernelbook-mpl
if [ -z "${KERNELBOOK_COMMIT:-}" ]; then
  note "warning: KERNELBOOK_COMMIT is not set; the run's manifest will say commit 'unknown'"
fi

# Run folders present before the batch: whatever appears later is this call's measurement.
mkdir -p data/results
before=$(ls -1 data/results)

# 1. wheels ------------------------------------------------------------------------------------
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --disable-pip-version-check --target "$SITE" .whl/*.whl 2>&1 | tail -20
  finish_step "install wheels ($(ls .whl/*.whl | wc -l) from .whl/ into $SITE)" "${PIPESTATUS[0]}"
else
  note "FAILED install wheels: no .whl/*.whl here (run scripts/fetch_device_wheels.sh and carry [\".whl\"])"
  failed=1
fi

# 2. the device ---------------------------------------------------------------------------------
{
  echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "commit: ${KERNELBOOK_COMMIT:-unknown}"
  echo "python: $(command -v "$PY") $("$PY" --version 2>&1)"
  echo
  nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
  echo
  if command -v nvcc >/dev/null; then nvcc --version; else echo "(nvcc not on PATH)"; fi
  echo
  "$PY" - <<'PY' 2>&1
import importlib.metadata as md
names = ["cupy-cuda13x", "cupy-cuda12x", "numpy", "pandas", "matplotlib", "papermill", "jupytext",
         "ipykernel", "ipython", "nbclient", "jupyter-client", "pyzmq", "tornado",
         "markdown-it-py", "psutil", "pygments", "python-dateutil", "attrs", "packaging",
         "typing-extensions", "aiohttp", "pytest", "dask", "distributed", "dask-cuda",
         "cloudpickle", "toolz", "nvidia-ml-py", "cuda-core", "numba"]
for name in names:
    try:
        print(f"{name:20s} {md.version(name)}")
    except md.PackageNotFoundError:
        pass
try:
    import cupy
    print("cupy runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
except Exception as exc:
    print("cupy:", type(exc).__name__, exc)
PY
} > "$LOGS/device.txt" 2>&1
"$PY" -c "import papermill, jupytext, nbclient, ipykernel, IPython, dask, distributed, kernelbook.batch" 2>&1 | tail -5
finish_step "import check (papermill, jupytext, nbclient, ipykernel, IPython, dask, distributed, kernelbook.batch)" "${PIPESTATUS[0]}"
if [[ " $* " == *" --gpus"* ]]; then
  "$PY" -c "from dask_cuda import LocalCUDACluster" 2>&1 | tail -5
  finish_step "import check (dask_cuda, for --gpus)" "${PIPESTATUS[0]}"
fi

# 3. GPU tests ----------------------------------------------------------------------------------
if [ "${GPU_TESTS:-tests}" != "none" ]; then
  # shellcheck disable=SC2086  # GPU_TESTS is a list of test paths
  timeout "${GPU_TESTS_TIMEOUT:-100000}" "$PY" -m pytest -m gpu -q ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} ${GPU_TESTS:-tests} 2>&1 \
    | tee "$LOGS/pytest-gpu.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 5 ]; then note "ok     pytest -m gpu (no GPU tests collected)"; else finish_step "pytest -m gpu ${GPU_TESTS:-tests}" "$rc"; fi
fi

# 4. the batch ----------------------------------------------------------------------------------
# BATCH_TIMEOUT (seconds) stops a batch that would outlive the device call, so that step 5
# still packs whatever the finished notebooks recorded.
if [ "${SEQUENTIAL_FIRST:-0}" = "1" ]; then
  sequential=()  # the same arguments without --gpus: one notebook after another, in this process
  skip=0
  for arg in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$arg" in --gpus) skip=1 ;; --gpus=*) ;; *) sequential+=("$arg") ;; esac
  done
  start=$(date +%s.%N)
  timeout "${BATCH_TIMEOUT:-100000}" "$PY" -m kernelbook run --mode measure --workers 1 \
    --out _build/executed-sequential "${sequential[@]}" 2>&1 | tee "$LOGS/batch-sequential.log"
  rc=${PIPESTATUS[0]}
  note "wall time: sequential batch $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  finish_step "kernelbook run --mode measure --workers 1 ${sequential[*]}" "$rc"
fi
start=$(date +%s.%N)
timeout "${BATCH_TIMEOUT:-100000}" "$PY" -m kernelbook run --mode measure "$@" 2>&1 | tee "$LOGS/batch.log"
rc=${PIPESTATUS[0]}
note "wall time: batch $* $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
finish_step "kernelbook run --mode measure $*" "$rc"

# 4b. compute-sanitizer over every kernel, recorded into the batch's run (after the batch, so
# each variant is checked with the configuration its chapter timed). On a host of several GPUs
# the studies run side by side, one GPU each (their parts are separate files of the run); the
# GPU tests named by AFTER_TESTS run beside them on the next GPU. ---------------------------
batch_run=$("$PY" -c "import json; print(json.load(open('_build/executed/batch.json'))['run_id'])" 2>/dev/null)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -n "${DEADLINE:-}" ]; then   # the sanitizer and the tests get what is left until DEADLINE
  left=$(( DEADLINE - $(date +%s) - 15 ))
  [ "$left" -ge 10 ] || left=10
  SANITIZE_TIMEOUT=$left GPU_TESTS_TIMEOUT=$left
  note "after the batch: ${left} s left until DEADLINE for the sanitizer and the tests"
fi
[ "${gpus:-0}" -ge 1 ] || gpus=1
slot=0
pids=()
names=()
if [ "${SANITIZE_STUDIES:-kernelbook.lenet}" = "none" ]; then
  note "skipped sanitizer: SANITIZE_STUDIES=none"
elif [ -n "$batch_run" ] && [ -d "data/results/$batch_run" ]; then
  for study in ${SANITIZE_STUDIES:-kernelbook.lenet}; do
    steps=$(for_study "$study" "${SANITIZE_STEPS:-}")
    layers=$(for_study "$study" "${SANITIZE_LAYERS:-}")
    if [ -n "${SANITIZE_STEPS:-}" ] && [ -z "$steps" ]; then
      note "skipped sanitizer for $study: SANITIZE_STEPS names none of its steps"; continue
    fi
    name="scripts/sanitize.py --study $study --run-id $batch_run (GPU $((slot % gpus)))"
    CUDA_VISIBLE_DEVICES=$((slot % gpus)) timeout "${SANITIZE_TIMEOUT:-300}" \
      "$PY" scripts/sanitize.py --study "$study" --run-id "$batch_run" --jobs "${SANITIZE_JOBS:-4}" \
      ${steps:+--steps "$steps"} ${layers:+--layers "$layers"} > "$LOGS/sanitize-${study##*.}.log" 2>&1 &
    if [ "$gpus" -le 1 ]; then   # one GPU: one study after another
      wait $!
      finish_step "$name" $?
    else
      pids+=($!)
      names+=("$name")
    fi
    slot=$((slot + 1))
  done
else
  note "skipped sanitizer: the batch recorded no run"
fi
if [ -n "${AFTER_TESTS:-}" ]; then
  # shellcheck disable=SC2086  # AFTER_TESTS is a list of test paths
  CUDA_VISIBLE_DEVICES=$((slot % gpus)) timeout "${GPU_TESTS_TIMEOUT:-100000}" "$PY" -m pytest -m gpu -q \
    ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} $AFTER_TESTS > "$LOGS/pytest-gpu.log" 2>&1 &
  pids+=($!)
  names+=("pytest -m gpu $AFTER_TESTS (GPU $((slot % gpus)))")
fi
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  finish_step "${names[$i]}" $?
done
[ -f "$LOGS/pytest-gpu.log" ] && tail -3 "$LOGS/pytest-gpu.log"
for log in "$LOGS"/sanitize-*.log; do [ -f "$log" ] && tail -3 "$log"; done

# 5. pack ---------------------------------------------------------------------------------------
# What comes back from $OUT is at most 8 files of 16 MiB each: the new runs (the measurements)
# are packed on their own, with the logs, before the executed notebooks (pages with figures, the
# larger part), and each tarball is cut into pieces of PIECE_MIB (default 15) MiB, named
# NAME.tar.gz.00, .01, ...; scripts/import_device_run.sh joins them. A piece that would not come
# back then costs the pages, never the run.
new_runs=()
for run in $(ls -1 data/results); do
  if [ -d "data/results/$run" ] && ! grep -qxF "$run" <<<"$before"; then new_runs+=("data/results/$run"); fi
done
note "new run folder(s): ${new_runs[*]:-none}"
pack() {  # NAME PATH...: $OUT/NAME.tar.gz.NN, pieces of PIECE_MIB MiB
  local name=$1; shift
  tar -czf - "$@" | split -b "${PIECE_MIB:-15}m" -d - "$OUT/$name.tar.gz."
}
pack run "${new_runs[@]}" -C "$OUT" logs
finish_step "pack $OUT/run.tar.gz.* ($(ls "$OUT"/run.tar.gz.* | wc -l) piece(s))" $?
executed=()
[ -d _build/executed ] && executed+=(_build/executed)
[ -d _build/executed-sequential ] && executed+=(_build/executed-sequential)
if [ ${#executed[@]} -gt 0 ]; then
  pack executed "${executed[@]}"
  finish_step "pack $OUT/executed.tar.gz.* ($(ls "$OUT"/executed.tar.gz.* | wc -l) piece(s))" $?
fi
# Loose, only what says how the call went (the rest of logs/ is inside run.tar.gz): the files
# that come back stay under 8.
find "$LOGS" -type f ! -name steps.txt ! -name batch.log -delete

exit "$failed"
