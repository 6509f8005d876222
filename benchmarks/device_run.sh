#!/usr/bin/env bash
# Run asyncvk's benchmarks on a machine with no package registry: the Vulkan loader's .deb files
# in .gl/, wheels in .whl/ (vulkan, cffi, pycparser, ncnn), Debian's static shaderc libraries in
# .shaderc/. Each argument is a step, run in order. Results go to $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# the image's Python, whose pip a step may still need after cleanvenv's venv (no pip) is on PATH
PIP_PYTHON=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
# The image's numpy has no bytecode and the machine sets PYTHONDONTWRITEBYTECODE=1, so every
# process compiled numpy's sources (0.27-0.34 s per import, seen 2026-11-23) where a user's
# pip-installed numpy has its .pyc: compile once, into a prefix that every child reads. With a
# prefix set Python reads bytecode only there, so the standard library goes in too, and the
# image's site-packages (anyio, typing_extensions: 65 ms of typing_extensions alone was seen
# compiling in one run's -X importtime, 2026-11-23).
export PYTHONPYCACHEPREFIX=/tmp/pycache
python3 -m compileall -q -j 0 "$(python3 -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')" \
  "$(python3 -c 'import anyio, os; print(os.path.dirname(os.path.dirname(anyio.__file__)))')" \
  "$(python3 -c 'import os; print(os.path.dirname(os.__file__))')" /tmp/site >/dev/null 2>&1
export __GL_SHADER_DISK_CACHE=0 MESA_SHADER_CACHE_DISABLE=true PYTHONUNBUFFERED=1
ASYNCVK_SHADERC_PREFIX=$PWD/.shaderc python3 asyncvk/shader/_shaderc_build.py >"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; exit 1; }
# what the install does after the extension: every builtin shader compiled (shader/_packaged)
python3 -m asyncvk.shader._packaged_build >>"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
# the detection layers' host loops: gcc and the Python headers only
python3 asyncvk/layers/_detect_build.py >>"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
env | grep -E '^PYTHON' || true
# what pip install does for users: byte-compile, so no process pays for compiling our sources
python3 -m compileall -q asyncvk >/dev/null
python3 -m asyncvk info --json >"$OUT/info.json" || exit 1
head -c 600 "$OUT/info.json"; echo
for what in "$@"; do
  echo "== $what (${SECONDS}s)"
  case "$what" in
    pipelines) python3 benchmarks/pipeline_creation.py --pipelines 256 --threads 16 | tee "$OUT/pipeline_creation_256_h100.json" ;;
    pipelines64) python3 benchmarks/pipeline_creation.py --pipelines 64 --threads 16 | tee "$OUT/pipeline_creation_64_h100.json" ;;
    accuracy) python3 benchmarks/model_accuracy.py | tee "$OUT/model_accuracy_h100.json" | head -c 1500; python3 benchmarks/model_accuracy.py --fp16 > "$OUT/model_accuracy_fp16_h100.json" ;;
    latency)  # every model, tests/models and the suite's (made by the suite step if missing)
      [ -d /tmp/suite ] || python3 benchmarks/suite_models.py --out /tmp/suite >"$OUT/suite_models.log" 2>&1
      python3 benchmarks/latency.py --suite /tmp/suite --loops 20 --processes 3 --variants ncnn,asyncvk,asyncvk_fp16_arith --out "$OUT/latency_all_h100.json" 2>&1 | grep '^{"model"' | cut -c1-300 ;;
    dispatchprofile)  # GPU time per dispatch: every tests/models model and the suite's
      [ -d /tmp/suite ] || python3 benchmarks/suite_models.py --out /tmp/suite >"$OUT/suite_models.log" 2>&1
      python3 benchmarks/dispatch_profile.py --suite /tmp/suite --loops 20 --out "$OUT/dispatch_profile_h100.json" 2>&1 | grep '^{"model"' | cut -c1-200 ;;
    threads) python3 benchmarks/compile_threads.py --runs 3 --out "$OUT/compile_threads_h100.json" 2>&1 | grep '^{"model"' | cut -c1-400 ;;
    tests) python3 -m pytest -x -q -p no:cacheprovider tests/test_gpu.py tests/test_pipeline_cache.py 2>&1 | tail -5 ;;
    coldstart) python3 benchmarks/cold_start.py --runs 3 --out "$OUT/cold_start_tests_h100.json" >/dev/null; tail -c 3000 "$OUT/cold_start_tests_h100.json" ;;
    shapehints) python3 benchmarks/shape_hints.py --out "$OUT/shape_hints_h100.json" 2>&1 | tail -3 ;;
    remotecache)  # .redisdeb/: redis-server's debs (apt-get download redis-server redis-tools
      # libjemalloc2 liblzf1 libatomic1) and the redis and hiredis wheels (pip download --no-deps
      # redis hiredis, the latter for the device's Python)
      mkdir -p /tmp/redis && for f in .redisdeb/*.deb; do dpkg -x "$f" /tmp/redis; done
      "$PIP_PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site .redisdeb/*.whl
      # compiled now: PYTHONDONTWRITEBYTECODE would recompile an uncompiled wheel at every import
      python3 -m compileall -q -j 0 /tmp/site >/dev/null 2>&1
      python3 benchmarks/remote_cache.py --runs "${RUNS:-5}" --models "${MODELS:-cunet,squeezenet,mobilenetv2,resnet18}" \
        --redis-server /tmp/redis/usr/bin/redis-server --redis-lib /tmp/redis/usr/lib/x86_64-linux-gnu \
        --out "$OUT/remote_cache_h100.json" >/dev/null; tail -c 2500 "$OUT/remote_cache_h100.json" ;;
    serverthroughput)  # the server against in-process runs: MODELS, CLIENTS, SECONDS_PER_POINT,
      # SERVE_ARGS (passed to asyncvk serve), DEVICE_TAG (the results file's suffix)
      python3 benchmarks/server_throughput.py --models "${MODELS:-squeezenet,mobilenetv2,rrdb}" \
        --shape rrdb=3,64,64 --clients "${CLIENTS:-1,4,16,64}" --seconds "${SECONDS_PER_POINT:-5}" \
        --client-processes "${CLIENT_PROCESSES:-6}" --out "$OUT/server_throughput_${DEVICE_TAG:-h100}.json" \
        -- ${SERVE_ARGS:-} 2>&1 | cut -c1-400 ;;
    floor) python3 benchmarks/process_floor.py --processes "${RUNS:-9}" --out "$OUT/process_floor_h100.json" >/dev/null
      python3 -c 'import json, sys; [print(n, {k: v["median"] for k, v in c["summary"].items()}) for n, c in json.load(open(sys.argv[1]))["cases"].items()]' "$OUT/process_floor_h100.json" ;;
    gpusetup) python3 benchmarks/gpu_setup.py | tee "$OUT/gpu_setup_h100.json" ;;
    features) python3 benchmarks/gpu_setup.py --features | tee "$OUT/gpu_setup_features_h100.json" | head -8 ;;
    profile) python3 benchmarks/load_profile.py --runs 3 --glsl-opt 2 --out "$OUT/load_profile_h100.json" >/dev/null ;;
    suite) python3 benchmarks/suite_models.py --out /tmp/suite ${SUITE_MODELS:+--models "$SUITE_MODELS"} >"$OUT/suite_models.log" 2>&1 || tail -5 "$OUT/suite_models.log"
      du -sh /tmp/suite ;;
    suiteaccuracy) python3 benchmarks/suite_accuracy.py --native --out "$OUT/suite_accuracy_h100.json" 2>&1 | tail -3 ;;
    coldsuite) python3 benchmarks/cold_start.py --models '' --suite /tmp/suite --runs "${RUNS:-1}" --out "$OUT/cold_start_suite_h100.json" >/dev/null; tail -c 1500 "$OUT/cold_start_suite_h100.json" ;;
    coldcache|coldcachesuite)  # first output with the drivers' disk shader caches on, as users
      # keep NVIDIA's, each runtime started twice from an empty one; then off, as coldstart has
      # them. MODELS: tests/models names (default all); coldcachesuite: the suite step's
      # folders, SUITE_MODELS (default all; the suite step makes only those, and runs before
      # cleanvenv: it needs pytest). RUNS: repetitions (default 3).
      if [ "$what" = coldcache ]; then which=(--models "${MODELS:-$(ls tests/models | paste -sd,)}"); tag=""
      else which=(--models '' --suite /tmp/suite --suite-models "${SUITE_MODELS:-}"); tag=_suite; fi
      for mode in on off; do
        python3 benchmarks/cold_start.py "${which[@]}" --runs "${RUNS:-3}" --driver-cache "$mode" \
          --out "$OUT/first_output_driver_cache_${mode}${tag}_h100.json" 2>&1 >/dev/null | cut -c1-600
      done ;;
    coldvariants)  # .variants/NAME/asyncvk: earlier versions, compared in the same run
      args=(); for v in .variants/*/; do n=$(basename "$v"); cp asyncvk/shader/_shaderc_cffi*.so "$v/asyncvk/shader/"; [ ! -f "$v/asyncvk/layers/_detect_build.py" ] || python3 "$v/asyncvk/layers/_detect_build.py" >/dev/null 2>&1; python3 -m compileall -q "$v" >/dev/null; args+=(--variant "$n=$PWD/$v"); done
      python3 benchmarks/cold_start.py --runs "${RUNS:-3}" "${args[@]}" --variant "now=$PWD" --out "$OUT/cold_start_h100.json" >/dev/null; tail -c 1500 "$OUT/cold_start_h100.json" ;;
    cleanvenv)  # later steps in a venv as a user's: the image's site-packages, whose numba .pth
      # costs 42 ms of every interpreter start (-X importtime, 2026-11-23), left out; both
      # runtimes' processes start in it
      python3 -m venv --without-pip /tmp/venv
      sp=$(python3 -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
      for p in numpy numpy.libs anyio sniffio idna typing_extensions.py; do
        [ -e "$sp/$p" ] && cp -r "$sp/$p" /tmp/site/
      done
      python3 -m compileall -q -j 0 /tmp/site >/dev/null 2>&1
      export PATH=/tmp/venv/bin:$PATH
      python3 -c 'import sys, numpy, ncnn, vulkan; print("clean venv:", sys.prefix)' ;;
    *) echo "unknown step $what" ;;
  esac
done
