#!/usr/bin/env bash
# Install asyncvk on a fresh Debian/Ubuntu machine: system packages (Vulkan loader, lavapipe,
# the static shaderc/glslang/SPIRV-Tools libraries the in-process compiler links, a C compiler
# and g++ for libstdc++, which those C++ libraries need at link time), then a virtual
# environment in .venv with asyncvk installed from this checkout.
# tools/fresh-debian.sh proves it on a fresh minimal Debian root.
#   tools/install.sh          runtime only
#   tools/install.sh --test   plus the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
packages="libvulkan1 mesa-vulkan-drivers libshaderc-dev glslang-dev spirv-tools gcc g++ python3-dev python3-venv"
if [ "${1:-}" = "--test" ]; then packages="$packages vulkan-validationlayers redis-server"; fi
missing=""
for p in $packages; do
  # not `dpkg -s`: that also succeeds for a package removed with its config files left
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq $missing >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extra=""
if [ "${1:-}" = "--test" ]; then extra="[test]"; fi
.venv/bin/python -m pip install -q -e ".${extra}"
# setup.py compiled every builtin shader into asyncvk/shader/packaged_spirv, and pip -q hides
# its warning when that fails: check, and on a miss build again where its errors show. Without
# the folder asyncvk still works; its shaders then compile at their first use (slower cold starts).
if ! .venv/bin/python -m asyncvk.shader._packaged_build --check; then
  .venv/bin/python -m asyncvk.shader._packaged_build \
    || echo "tools/install.sh: warning: not every builtin shader was compiled at install (above)" >&2
fi
