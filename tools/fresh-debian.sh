#!/usr/bin/env bash
# Run one of the README's two commands in a fresh minimal Debian bookworm root, as a new user
# would on a new machine: this machine has packages (g++, headers, ...) that a fresh one lacks,
# so a green run here proves nothing about tools/install.sh.
#
#   tools/fresh-debian.sh [--head] [--user] [--keep] main|test|wheel
#
#   main     the README's first ```sh block  (install, then examples/cold_warm.py)
#   test     the README's second ```sh block (install with --test, then pytest)
#   ci       the same, with tools/ci-load.sh (the timing-sensitive tests under a CPU load)
#            between the install and the suite
#   wheel    tools/build-wheel.sh in one fresh root; then, in a second one that has only
#            python3, libvulkan1 and mesa-vulkan-drivers (no compiler, no headers, no shaderc),
#            `pip install` of that wheel and examples/cold_warm.py run from it, every builtin
#            shader taken from the wheel's SPIR-V
#   --head   copy the committed HEAD, not the working tree (by default: the tracked files and
#            the untracked ones git does not ignore; never .venv, built .so files or .git)
#   --user   run the command as a normal user with passwordless sudo instead of as root
#   --keep   leave the root in place afterwards (its path is printed) to look inside
#
# Needs root and the network to Debian's archive and PyPI. The root is
# `debootstrap --variant=minbase --include=$INCLUDE bookworm`, from the mirror in this machine's
# apt sources (else deb.debian.org); that base alone is cached as a tarball in /tmp for a week,
# keyed by the include list. Everything the command installs is installed anew on every run.
# The command runs under chroot in its own mount and PID namespaces (unshare): /proc, a read-only
# /sys and a minimal /dev are mounted there and vanish with the namespace, whatever happens.
# The exit status is the command's.
set -euo pipefail

INCLUDE="python3,python3-venv,git,ca-certificates,sudo"
SUITE="bookworm"

say() { echo "fresh-debian [${SECONDS} s]: $*" >&2; }
die() { say "$*"; exit 2; }

usage() { sed -n '/^#   tools/,/^#   --keep/s/^# \{0,1\}//p' "$0" >&2; exit 2; }

source_tree="worktree"
as_user=""
keep=""
which=""
for arg in "$@"; do
  case "$arg" in
    --head) source_tree="head" ;;
    --user) as_user="dev" ;;
    --keep) keep=1 ;;
    main | test | ci | wheel) [ -z "$which" ] || usage; which="$arg" ;;
    *) usage ;;
  esac
done
[ -n "$which" ] || usage
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"

checkout="$(cd "$(dirname "$0")/.." && pwd)"
cd "$checkout"

# The README's first ```sh block is the main command, the second the test command.
readme_block() {
  awk -v n="$1" '
    /^```sh[[:space:]]*$/ { seen++; inside = (seen == n); next }
    /^```/ { inside = 0; next }
    inside { print }' README.md
}
case "$which" in
  main) command="$(readme_block 1)" ;;
  test) command="$(readme_block 2)" ;;
  ci)
    command="$(readme_block 2)"
    case "$command" in *" && "*) ;; *) die "the README's test command has no ' && ' to run the load after" ;; esac
    command="${command/ && / \&\& tools/ci-load.sh \&\& }"
    ;;
  wheel) command="tools/build-wheel.sh $([ -n "$as_user" ] && echo "/home/$as_user" || echo /root)/dist" ;;
esac
[ -n "$command" ] || die "README.md has no ${which} command (its \`\`\`sh blocks)"

need=""
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v zstd >/dev/null || need="$need zstd"
command -v unshare >/dev/null || need="$need util-linux"
if [ -n "$need" ]; then
  say "installing on this machine:$need"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq $need >/dev/null
fi

# The Debian archive this machine uses (deb822 or one-line sources), else the public one.
mirror="$(
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
  } | grep -E '/debian/?$' | head -n 1 || true
)"
mirror="${mirror:-http://deb.debian.org/debian}"
mirror="${mirror%/}"
security="${mirror%/debian}/debian-security"

work="$(mktemp -d /tmp/asyncvk-fresh-debian.XXXXXX)"
roots=()
cleanup() {
  local status=$?
  # The mounts live only in the namespace, which is gone by now; refuse to delete through one.
  if grep -qF " $work/" /proc/self/mountinfo; then
    say "something is still mounted under $work: left in place"
  elif [ -n "$keep" ]; then
    say "kept the root(s): ${roots[*]}"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# new_root ROOT: the base root (from the cache or debootstrap) at ROOT, with what any installed
# machine has but debootstrap does not write.
new_root() {
  local root=$1 key base started
  roots+=("$root")
  key="$(echo "$SUITE minbase $INCLUDE" | sha256sum | cut -c1-12)"
  base="/tmp/asyncvk-debian-$SUITE-minbase-$key.tar.zst"
  started=$SECONDS
  mkdir "$root"
  if [ -n "$(find "$base" -mtime -7 2>/dev/null)" ]; then
    tar --zstd -xpf "$base" -C "$root"
    say "base root from $base ($((SECONDS - started)) s)"
  else
    say "debootstrap --variant=minbase --include=$INCLUDE $SUITE from $mirror"
    if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$mirror" \
      >"$work/debootstrap.log" 2>&1; then
      tail -n 30 "$work/debootstrap.log" >&2
      die "debootstrap failed (log above)"
    fi
    chroot "$root" apt-get clean
    tar --zstd -cpf "$base.$$" -C "$root" . && mv "$base.$$" "$base"
    say "debootstrap done, cached as $base ($((SECONDS - started)) s)"
  fi
  # What any installed machine has but debootstrap does not write: apt sources with updates and
  # security, name resolution, and /etc/hosts with this host's name (the root shares it).
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
    "$mirror" "$SUITE" "$mirror" "$SUITE" "$security" "$SUITE" >"$root/etc/apt/sources.list"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(uname -n)" >"$root/etc/hosts"
  # The network's trust, like resolv.conf: where this machine trusts CAs beyond Debian's (an
  # intercepting proxy's), the root trusts them too, installed as an admin would, and pip (whose
  # own bundle would not have them) is pointed at the system bundle.
  mkdir -p "$root/usr/local/share/ca-certificates"
  [ ! -f /etc/ssl/certs/ca-certificates.crt ] || awk -v dir="$root/usr/local/share/ca-certificates" '
    /-----BEGIN CERTIFICATE-----/ { cert = ""; inside = 1 }
    inside { cert = cert $0 "\n" }
    /-----END CERTIFICATE-----/ {
      inside = 0
      if (FILENAME == ARGV[1]) known[cert] = 1
      else if (!(cert in known)) printf "%s", cert > (dir "/this-machine-" ++n ".crt")
    }' "$root/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt
  local extra_cas out
  extra_cas=$(find "$root/usr/local/share/ca-certificates" -name 'this-machine-*.crt' | wc -l)
  if [ "$extra_cas" -gt 0 ]; then
    out="$(chroot "$root" update-ca-certificates 2>&1)" || die "update-ca-certificates failed: $out"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
    say "carried $extra_cas CA certificate(s) this machine trusts beyond Debian's (and /etc/pip.conf)"
  fi
}

# copy_checkout ROOT USER: this checkout into the root's home (as USER, if one is given);
# prints the folder, as the root sees it.
copy_checkout() {
  local root=$1 user=$2 home dest
  if [ -n "$user" ]; then
    chroot "$root" useradd --create-home --shell /bin/bash "$user"
    echo "$user ALL=(ALL) NOPASSWD: ALL" >"$root/etc/sudoers.d/$user"
    home="/home/$user"
  else
    home="/root"
  fi
  dest="$root$home/asyncvk"
  mkdir -p "$dest"
  if [ "$source_tree" = head ]; then
    git archive HEAD | tar -x -C "$dest"
    say "copied HEAD $(git rev-parse --short HEAD) to $home/asyncvk"
  else
    git ls-files -z --cached --others --exclude-standard \
      | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
      | tar --null -T - -c | tar -x -C "$dest"
    say "copied the working tree of $(git rev-parse --short HEAD) to $home/asyncvk"
  fi
  [ -z "$user" ] || chroot "$root" chown -R "$user:$user" "$home/asyncvk"
  echo "$home/asyncvk"
}

in_namespace() {
  local root=$1 user=$2 dir=$3 command=$4
  mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
  mount -t tmpfs -o nosuid,mode=0755 tmpfs "$root/dev"
  for node in null zero full random urandom tty; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
  done
  mkdir "$root/dev/pts" "$root/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
  mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$root/dev/shm"
  ln -s pts/ptmx "$root/dev/ptmx"
  ln -s /proc/self/fd "$root/dev/fd"
  ln -s /proc/self/fd/0 "$root/dev/stdin"
  ln -s /proc/self/fd/1 "$root/dev/stdout"
  ln -s /proc/self/fd/2 "$root/dev/stderr"
  # A login's environment, nothing of this machine's, and the default SIGINT and SIGQUIT that
  # bash took away from its background job. xtrace prints each step of the command with the
  # seconds since the start, so the install and the run are timed apart.
  local -a env=(env -i --default-signal=INT,QUIT "HOME=$(dirname "$dir")"
    "USER=${user:-root}" "LOGNAME=${user:-root}" "TERM=${TERM:-dumb}"
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
  [ -z "${CI:-}" ] || env+=("CI=$CI")
  local script="PS4='+ [fresh-debian \${SECONDS} s] '; set -x; cd $dir && $command"
  if [ -n "$user" ]; then
    exec chroot --userspec="$user:$user" "$root" "${env[@]}" bash -c "$script"
  fi
  exec chroot "$root" "${env[@]}" bash -c "$script"
}

# run_in_root ROOT USER DIR COMMAND: the command's exit status.
run_in_root() {
  local root=$1 user=$2 dir=$3 command=$4 started=$SECONDS status init
  say "running as ${user:-root} in $dir: $command"
  # In the background so that a signal to this script is handled at once. unshare itself ignores
  # SIGINT and SIGTERM; killing its child, the namespace's init, ends every process in it.
  unshare --mount --propagation private --pid --fork --kill-child \
    bash -c "$(declare -f in_namespace); in_namespace \"\$@\"" in_namespace \
    "$root" "$user" "$dir" "$command" &
  child=$!
  while :; do
    wait "$child" && status=0 || status=$?
    kill -0 "$child" 2>/dev/null || break
  done
  status=${interrupted:-$status}
  say "exit status $status after $((SECONDS - started)) s"
  return "$status"
}

child=""
interrupted=""
stop() {
  interrupted=$1
  say "interrupted: ending every process in the root"
  local init
  [ -z "$child" ] || for init in $(cat /proc/"$child"/task/*/children 2>/dev/null); do
    kill -KILL "$init"
  done
}
trap 'stop 130' INT
trap 'stop 143' TERM

# What the wheel's root runs: nothing but Python, the Vulkan loader and lavapipe from Debian,
# the wheel from pip, and the main job run from the installed package, away from any source.
WHEEL_CHECK='set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends libvulkan1 mesa-vulkan-drivers >/dev/null
for tool in cc gcc g++ c++ glslc; do
  if command -v "$tool" >/dev/null; then echo "wheel check: $tool is installed" >&2; exit 1; fi
done
if ls /usr/include/python3*/Python.h /usr/include/shaderc 2>/dev/null; then
  echo "wheel check: Python or shaderc headers are installed" >&2; exit 1
fi
python3 -m venv /opt/asyncvk
/opt/asyncvk/bin/python -m pip install -q ./*.whl
cd /tmp
/opt/asyncvk/bin/python -c "import asyncvk, sys; print(asyncvk.__file__); sys.exit(not asyncvk.__file__.startswith(\"/opt/asyncvk/\"))"
/opt/asyncvk/bin/asyncvk info
m="$OLDPWD/model"
/opt/asyncvk/bin/asyncvk run "$m/model.param" "$m/model.bin" --input "in0=$m/input.npy" \
  --output out0=/tmp/out0.npy --json >/tmp/run.json
/opt/asyncvk/bin/python -c "import json; r = json.load(open(\"/tmp/run.json\"))
print(\"cold run: GLSL compiled\", r[\"spirv_compiled\"], \"SPIR-V from the wheel\", r[\"spirv_packaged\"])
assert r[\"spirv_compiled\"] == 0 and r[\"spirv_packaged\"] > 0"
/opt/asyncvk/bin/python "$OLDPWD/cold_warm.py" "$m"'

if [ "$which" != wheel ]; then
  new_root "$work/root"
  dir="$(copy_checkout "$work/root" "$as_user")"
  run_in_root "$work/root" "$as_user" "$dir" "$command" && exit 0 || exit $?
fi

new_root "$work/build"
dir="$(copy_checkout "$work/build" "$as_user")"
run_in_root "$work/build" "$as_user" "$dir" "$command" || exit $?
home="${dir%/asyncvk}"
wheels=("$work/build$home"/dist/*.whl)
[ -f "${wheels[0]}" ] || die "tools/build-wheel.sh made no wheel"
new_root "$work/install"
mkdir -p "$work/install/root/check/model"
cp "${wheels[@]}" examples/cold_warm.py "$work/install/root/check/"
cp tests/models/squeezenet/* "$work/install/root/check/model/"
say "installing $(basename "${wheels[0]}") in a root without a compiler"
run_in_root "$work/install" "" /root/check "$WHEEL_CHECK" && exit 0 || exit $?
