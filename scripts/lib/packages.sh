# Sourced by the scripts that build or run something (test.sh, bench.sh, demo.sh,
# performance_report.sh): installs the Debian packages they need that are missing, so that each
# works on a fresh Debian 12 machine.
#
#   idem_ensure_packages NAME PACKAGE...   NAME is the calling script, for its messages
#
# Without dpkg (not Debian) it assumes the tools are there. Not root, it uses sudo; with neither,
# it stops the caller with the list of what is missing.
idem_ensure_packages() {
  local caller="$1"
  shift
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "$caller: no dpkg here; assuming $* are installed" >&2
    return 0
  fi
  local missing=() package
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || {
      echo "$caller: missing packages ${missing[*]}, and not root" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  echo "== installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}
