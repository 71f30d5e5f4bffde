#!/usr/bin/env bash
# Runs one command, as root, in a fresh Debian 12 root: nothing installed but apt, git and
# ca-certificates, with a clone of this repository's committed HEAD in /home/newcomer/idem. What
# a newcomer's machine has, so that a script that forgets to install a package fails here and
# not on their machine. .ci/run runs the README's two commands this way.
#
#   scripts/fresh-debian.sh [OPTIONS] 'COMMAND'
#     --keep            keep the root afterwards (its path is printed)
#     --reuse DIR       run in a root kept earlier (its clone and build trees as they were), and
#                       keep it: e.g. `scripts/test.sh --quick` on the trees a full run built
#     --no-caches       use neither the compiler cache nor the kept .deb files (a cold run)
#     --cache DIR       where the base root, the compiler cache and the .deb files are kept
#                       (default $IDEM_FRESH_CACHE, else /var/cache/idem-fresh-debian)
#     --mirror URL      the Debian mirror the base is made from (default $IDEM_DEBIAN_MIRROR, else
#                       http://deb.debian.org/debian; security updates from
#                       $IDEM_DEBIAN_SECURITY_MIRROR, else deb.debian.org's)
#
# The base root is made once with mmdebstrap (about 90 s; installed here first if missing) and
# kept as a tarball, so later runs unpack it in seconds. What may be kept between runs lives
# outside the root and is bind-mounted in: ccache's directory (CCACHE_DIR inside; the scripts
# use ccache where it is installed) and apt's archive of downloaded .deb files (every package is
# still installed afresh in each root; only the download is saved, so a slow mirror cannot fail
# a run). The root is made in /tmp with proc, sys, dev and an 8 GiB tmpfs at /dev/shm mounted;
# however the command ends, every process left in the root is killed, everything is unmounted
# and the root removed (unless --keep). Exits with the command's status; 3 when this machine
# cannot make a root (not root, mounting not allowed); 2 when the root could not be made (no
# mmdebstrap, the mirror unreachable after three tries), with a
# message that says which, and nothing of the host changed (mmdebstrap, if it had to be
# installed, stays).
set -euo pipefail

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

keep=0
reuse=""
caches=1
cache_dir="${IDEM_FRESH_CACHE:-/var/cache/idem-fresh-debian}"
mirror="${IDEM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
while (($#)); do
  case "$1" in
    --keep) keep=1 ;;
    --reuse) reuse="${2:?--reuse needs a root kept with --keep}"; shift ;;
    --no-caches) caches=0 ;;
    --cache) cache_dir="${2:?--cache needs a folder}"; shift ;;
    --mirror) mirror="${2:?--mirror needs a URL}"; shift ;;
    -h | --help) usage; exit 0 ;;
    --*) echo "fresh-debian.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
(($# == 1)) || { echo "fresh-debian.sh: one COMMAND, quoted" >&2; usage >&2; exit 2; }
command_line="$1"

say() { echo "fresh-debian: $*" >&2; }
refuse() { say "$*"; exit 2; }

# This machine must be able to make a root at all: root, and allowed to mount. Exit 3 when not
# (.ci/run tells that apart from a root that failed to be made).
((EUID == 0)) || { say "needs root (it mounts proc, sys and dev in the new root and chroots)"; exit 3; }
probe="$(mktemp -d /tmp/idem-fresh-debian-probe.XXXXXX)"
if ! mount -t tmpfs -o size=1m tmpfs "$probe" 2>/dev/null; then
  rmdir "$probe"
  say "this machine does not allow mounting (a container without CAP_SYS_ADMIN?): no root can be made here"
  exit 3
fi
umount "$probe" && rmdir "$probe"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && git rev-parse --show-toplevel)"
mirror="${mirror%/}"
security="${IDEM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
base="$cache_dir/bookworm.tar"

# --- the base root, made once -------------------------------------------------------------------
# A mirror that cannot be reached is tried three times (10 s apart, each try bounded to 10
# minutes); then the run stops with exit 2. mmdebstrap writes a temporary file, moved into place
# only when complete, so a failed try leaves no half-made base behind.
make_base() {
  if ! command -v mmdebstrap >/dev/null 2>&1; then
    say "installing mmdebstrap on this machine (once)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      mmdebstrap; } >&2 ||
      refuse "could not install mmdebstrap (is the Debian mirror reachable?); no root made"
  fi
  local made_cache=0
  [[ -d "$cache_dir" ]] || made_cache=1
  mkdir -p "$cache_dir"
  local part="$cache_dir/bookworm.part.$$.tar" attempt
  for attempt in 1 2 3; do
    say "making the base root with mmdebstrap from $mirror (try $attempt of 3)"
    if timeout 600 mmdebstrap --quiet --variant=apt --include=ca-certificates,git bookworm "$part" \
      "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
      "deb $security bookworm-security main" >&2; then
      mv "$part" "$base"
      return 0
    fi
    rm -f "$part"
    ((attempt == 3)) || sleep 10
  done
  ((made_cache)) && rmdir "$cache_dir" 2>/dev/null
  refuse "could not make a Debian 12 root: the mirror $mirror did not answer after 3 tries; nothing was run"
}
started=$SECONDS
if [[ -n "$reuse" ]]; then
  [[ -d "$reuse/home/newcomer/idem" ]] || refuse "--reuse $reuse: not a root this script kept"
  root="$(cd "$reuse" && pwd)"
  keep=1
else
  [[ -s "$base" ]] || make_base
  root="$(mktemp -d /tmp/idem-fresh-debian.XXXXXX)"
fi

# --- a new root from it ----------------------------------------------------------------------
cleanup() {
  local status=$?
  # Processes started in the root (servers a command left, a build's children) hold its mounts:
  # killed first, found by their root directory.
  local link pid
  for link in /proc/[0-9]*/root; do
    pid="${link#/proc/}"
    pid="${pid%/root}"
    [[ "$(readlink "$link" 2>/dev/null)" == "$root" ]] && kill -9 "$pid" 2>/dev/null || true
  done
  local mount_point
  for mount_point in var/cache/apt/archives var/cache/ccache dev/shm dev/pts dev sys proc; do
    mountpoint -q "$root/$mount_point" 2>/dev/null && umount -l "$root/$mount_point" 2>/dev/null || true
  done
  if ((keep)); then
    say "kept $root"
  else
    rm -rf --one-file-system "$root"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ -n "$reuse" ]] || tar -xf "$base" -C "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t devpts -o newinstance devpts "$root/dev/pts" 2>/dev/null || true
mount -t tmpfs -o size=8g tmpfs "$root/dev/shm"
if ((caches)); then
  mkdir -p "$cache_dir/ccache" "$cache_dir/apt-archives/partial" "$root/var/cache/ccache"
  mount --bind "$cache_dir/ccache" "$root/var/cache/ccache"
  mount --bind "$cache_dir/apt-archives" "$root/var/cache/apt/archives"
  # Debian's apt keeps what it downloads unless told otherwise; said here so it is certain.
  echo 'APT::Keep-Downloaded-Packages "true";' >"$root/etc/apt/apt.conf.d/10idem-keep-debs"
fi
if [[ -z "$reuse" ]]; then
  mkdir -p "$root/home/newcomer"
  git clone -q "$repo" "$root/home/newcomer/idem"
fi
say "root ready in $((SECONDS - started)) s: $root"

ccache_env=()
((caches)) && ccache_env=(CCACHE_DIR=/var/cache/ccache)
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" "${ccache_env[@]}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'echo "fresh-debian: Debian $(cat /etc/debian_version), $(dpkg-query -W -f "\${Status}\n" | grep -c " installed$") packages installed" >&2
    cd /home/newcomer/idem && eval "$1"' fresh-debian "$command_line"
