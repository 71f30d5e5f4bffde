#!/usr/bin/env bash
# Compare two versions of idem's memory store in one process (bench/ab/store_ab.cpp): each
# fills a fresh store with new keys (the claim_new workload), alternately, round after round.
#
#   scripts/store_ab.sh A B                 A and B: git revisions (HEAD, a commit, a branch),
#                                           . for the working tree as it is, or a folder
#                                           that holds include/idem (a variant made by hand)
#   scripts/store_ab.sh A B --rounds N      fills of each version (default 16)
#   scripts/store_ab.sh A B --keys N        keys a fill claims (default 750000, as claim_new)
#   scripts/store_ab.sh A B --threads N     threads that share a fill (default 1)
#
# Prints the median time per claim of each and the median of B - A over rounds. Run A against A
# too: the version compiled second has measured 1 to 10 ns of bias on this workload.
# Full runs of scripts/bench.sh an hour apart have moved a peer's claim_new time by a quarter, so
# a change of a few nanoseconds is measured here, not across runs. g++ -O2 -DNDEBUG, as bench.sh.
set -euo pipefail

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

if (($# < 2)) || [[ "$1" == -h || "$1" == --help ]]; then
  usage
  (($# >= 1)) && [[ "$1" == -h || "$1" == --help ]] && exit 0
  exit 2
fi
rev_a="$1"
rev_b="$2"
shift 2

# Folders are named from where the user ran us.
[[ -d "$rev_a" && "$rev_a" != . ]] && rev_a="$(cd "$rev_a" && pwd)"
[[ -d "$rev_b" && "$rev_b" != . ]] && rev_b="$(cd "$rev_b" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
source scripts/lib/packages.sh
idem_install scripts/store_ab.sh ab

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# export_headers REV DIR: include/ of REV (of the working tree, for .; of a folder) into
# DIR/include.
export_headers() {
  local rev="$1" dir="$2"
  mkdir -p "$dir"
  if [[ "$rev" == . ]]; then
    cp -r "$root/include" "$dir/include"
  elif [[ -d "$rev/include/idem" ]]; then
    cp -r "$rev/include" "$dir/include"
  else
    git -C "$root" rev-parse --verify --quiet "$rev^{commit}" >/dev/null || {
      echo "scripts/store_ab.sh: '$rev' is not a revision of this repository" >&2
      exit 2
    }
    git -C "$root" archive "$rev" include | tar -x -C "$dir"
  fi
}
export_headers "$rev_a" "$work/a"
export_headers "$rev_b" "$work/b"
# B's headers reach each other by absolute path, so that A's copy on the include path is never
# taken for one of them, and are guarded by macros of their own rather than #pragma once, which
# g++ may take to mean A's copy when the two files are alike.
while IFS= read -r -d '' header; do
  guard="IDEM_AB_B_$(printf '%s' "${header#"$work/b/include/"}" | tr -c 'A-Za-z0-9' '_')"
  # Include guards (IDEM_<PATH>_HPP) get B's own names; a version from before them had
  # #pragma once, which becomes a guard of B's.
  sed -i -e "s#^\#include <idem/\(.*\)>#\#include \"$work/b/include/idem/\1\"#" \
    -e "s/\bIDEM_\([A-Z0-9_]*_HPP\)\b/IDEM_AB_B_\1/g" \
    -e "s/^#pragma once\$/#ifndef $guard\n#define $guard/" "$header"
  grep -q "^#define $guard\$" "$header" && printf '#endif\n' >>"$header"
done < <(find "$work/b/include" -name '*.hpp' -print0)

echo "== A: $rev_a   B: $rev_b"
g++ -std=c++20 -O2 -DNDEBUG -Wall -Wextra -Wpedantic -pthread -I"$work/a/include" -I"$root/bench" \
  "-DIDEM_AB_B_STORE=\"$work/b/include/idem/store/memory.hpp\"" \
  "$root/bench/ab/store_ab.cpp" -o "$work/store_ab"
"$work/store_ab" "$@"
