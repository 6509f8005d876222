#!/usr/bin/env bash
# Run one of the README's two commands in a fresh minimal Debian bookworm root, as a new user
# would on a new machine: this machine has packages (g++, headers, ...) that a fresh one lacks,
# so a green run here proves nothing about tools/install.sh.
#
#   tools/fresh-debian.sh [--head] [--user] [--keep] main|test
#
#   main     the README's first ```sh block  (install, then examples/cold_warm.py)
#   test     the README's second ```sh block (install with --test, then pytest)
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
    main | test) [ -z "$which" ] || usage; which="$arg" ;;
    *) usage ;;
  esac
done
[ -n "$which" ] || usage
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"

checkout="$(cd "$(dirname "$0")/.." && pwd)"
cd "$checkout"

# The README's first ```sh block is the main command, the second the test command.
block=1
[ "$which" = test ] && block=2
command="$(awk -v n="$block" '
  /^```sh[[:space:]]*$/ { seen++; inside = (seen == n); next }
  /^```/ { inside = 0; next }
  inside { print }' README.md)"
[ -n "$command" ] || die "README.md has no ${block}. \`\`\`sh block"

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
root="$work/root"
cleanup() {
  local status=$?
  # The mounts live only in the namespace, which is gone by now; refuse to delete through one.
  if grep -qF " $work/" /proc/self/mountinfo; then
    say "something is still mounted under $work: left in place"
  elif [ -n "$keep" ]; then
    say "kept the root: $root"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- the base root, from the cache or debootstrap -------------------------------------------
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
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
deb $security $SUITE-security main
EOF
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
extra_cas=$(find "$root/usr/local/share/ca-certificates" -name 'this-machine-*.crt' | wc -l)
if [ "$extra_cas" -gt 0 ]; then
  out="$(chroot "$root" update-ca-certificates 2>&1)" || die "update-ca-certificates failed: $out"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
  say "carried $extra_cas CA certificate(s) this machine trusts beyond Debian's (and /etc/pip.conf)"
fi

# -- the checkout ---------------------------------------------------------------------------
if [ -n "$as_user" ]; then
  chroot "$root" useradd --create-home --shell /bin/bash "$as_user"
  echo "$as_user ALL=(ALL) NOPASSWD: ALL" >"$root/etc/sudoers.d/$as_user"
  home="/home/$as_user"
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
[ -z "$as_user" ] || chroot "$root" chown -R "$as_user:$as_user" "$home/asyncvk"

# -- run it ---------------------------------------------------------------------------------
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

say "running as ${as_user:-root} in $home/asyncvk: $command"
started=$SECONDS
# In the background so that a signal to this script is handled at once. unshare itself ignores
# SIGINT and SIGTERM; killing its child, the namespace's init, ends every process in it.
unshare --mount --propagation private --pid --fork --kill-child \
  bash -c "$(declare -f in_namespace); in_namespace \"\$@\"" in_namespace \
  "$root" "$as_user" "$home/asyncvk" "$command" &
child=$!
interrupted=""
stop() {
  interrupted=$1
  say "interrupted: ending every process in the root"
  local init
  for init in $(cat /proc/"$child"/task/*/children 2>/dev/null); do kill -KILL "$init"; done
}
trap 'stop 130' INT
trap 'stop 143' TERM
while :; do
  wait "$child" && status=0 || status=$?
  kill -0 "$child" 2>/dev/null || break
done
status=${interrupted:-$status}
say "exit status $status after $((SECONDS - started)) s"
exit "$status"
