#!/usr/bin/env bash
# pytest once more on a machine busy with other work: the tests that wait on threads, timers,
# child processes and concurrent requests must pass under load, not only on an idle machine.
#
#   tools/ci-load.sh [pytest arguments...]
#
# With no arguments it runs the sample below: the autosave and save-after-load tests, worker
# threads and their cancellation, background pipeline builds, concurrent and single-flight
# pipeline requests, fence polling, weights read ahead on a thread, a reload under an extraction
# in flight, and the server's shutdown and body timeouts. The load is
# `stress-ng --cpu N` where stress-ng is installed, else N busy loops started here; N is twice the
# cores. The load ends whatever happens (a trap on exit and on signals), pytest is bounded by
# CI_LOAD_LIMIT_S seconds (default 600), and the exit status is pytest's (124 past the limit).
# PYTHON names the interpreter (default: .venv/bin/python, as tools/install.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-.venv/bin/python}"
limit="${CI_LOAD_LIMIT_S:-600}"
cores="$(nproc)"
hogs=$((2 * cores))
command -v "$python" >/dev/null || {
  echo "ci-load: no $python (tools/install.sh --test makes it; or set PYTHON)" >&2
  exit 2
}

if [ "$#" -gt 0 ]; then
  tests=("$@")
else
  tests=(
    tests/test_autosave.py
    tests/test_net_autosave.py
    tests/test_threads.py
    tests/test_background_pipelines.py
    tests/test_pipeline_cache.py
    tests/test_cache_requests.py
    tests/test_request_many.py
    tests/test_gpu_submit.py
    tests/test_weights_prefetch.py
    tests/test_net_reload.py::test_an_extraction_in_flight_finishes_on_the_model_it_started_with
    tests/test_serve.py::test_sigterm_during_load_exits_cleanly
    tests/test_serve_console.py::test_the_console_tells_loading_ready_saved_and_shutdown
    tests/test_serve_hostile.py::test_a_client_that_leaves_mid_body_is_no_error
    tests/test_serve_hostile.py::test_a_body_that_never_finishes_is_408_and_closed
    tests/test_serve_hostile.py::test_shutdown_does_not_wait_for_stalled_bodies
  )
fi

say() { echo "ci-load [${SECONDS} s]: $*" >&2; }

load_pids=()
pytest_pid=""
# Everything this script started ends with it: pytest (through timeout, which passes the signal
# on) and the load. pytest runs in the background and the script waits for it, so that a signal
# is handled at once rather than after pytest returns.
cleanup() {
  local pid
  if [ -n "$pytest_pid" ]; then
    kill -TERM "$pytest_pid" 2>/dev/null || true
    wait "$pytest_pid" 2>/dev/null || true
  fi
  for pid in "${load_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${load_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if command -v stress-ng >/dev/null; then
  stress-ng --cpu "$hogs" --timeout "$((limit + 60))s" --quiet &
  load_pids+=($!)
  say "load: stress-ng --cpu $hogs ($cores cores)"
else
  for _ in $(seq "$hogs"); do
    # a busy loop that ends by itself after the limit, should the trap never run
    timeout "$((limit + 60))" bash -c 'while :; do :; done' &
    load_pids+=($!)
  done
  say "load: $hogs busy loops ($cores cores; stress-ng is not installed)"
fi

timeout --kill-after=30 "$limit" \
  "$python" -m pytest -W error -p no:cacheprovider -q "${tests[@]}" &
pytest_pid=$!
status=0
wait "$pytest_pid" || status=$?
pytest_pid=""
say "pytest exit status $status under load"
exit "$status"
