#!/usr/bin/env bash
# Instruction counts of the hot paths, version A beside version B: bench/ab/hot_path_calls.cpp
# (idempotent_first, idempotent_replay, retrying_success, 20,000 calls each) and
# bench/ab/async_hot_path_calls.cpp (async_idempotent_first, async_idempotent_replay: the same
# calls through the asynchronous wrapper; async_idempotent_first_no_heartbeat; async_floor, no
# idem, what two coroutines cost) built against each version's include/ (g++ -O2 -DNDEBUG, as
# scripts/bench.sh) and run under callgrind.
#
#   scripts/hot_path_ab.sh A B     A and B: git revisions, or . for the working tree
#
# Prints instructions per call of each phase and B/A. Counts, unlike times, do not move with the
# machine's load, so a change of 1% is visible; an A/B of a code change is reported this way.
set -euo pipefail

if (($# != 2)) || [[ "$1" == -h || "$1" == --help ]]; then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  (($# == 1)) && [[ "$1" == -h || "$1" == --help ]] && exit 0
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
source scripts/lib/packages.sh
idem_install scripts/hot_path_ab.sh ab callgrind

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# count REV NAME: builds the driver against REV's include/ and writes NAME.<phase> files with
# the instructions per call.
count() {
  local rev="$1" name="$2" dir="$work/$2"
  mkdir -p "$dir"
  if [[ "$rev" == . ]]; then
    cp -r "$root/include" "$dir/include"
  else
    git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || {
      echo "scripts/hot_path_ab.sh: '$rev' is not a revision of this repository" >&2
      exit 2
    }
    git archive "$rev" include | tar -x -C "$dir"
  fi
  g++ -std=c++20 -O2 -DNDEBUG -I "$dir/include" "$root/bench/ab/hot_path_calls.cpp" -o "$dir/calls" -pthread
  g++ -std=c++20 -O2 -DNDEBUG -I "$dir/include" "$root/bench/ab/async_hot_path_calls.cpp" \
    -o "$dir/async_calls" -pthread
  local program
  for program in calls async_calls; do
    (cd "$dir" && valgrind --tool=callgrind --callgrind-out-file="$dir/out.$program.%p" "./$program" \
      >/dev/null 2>"$dir/valgrind.$program.log")
  done
  local calls
  calls="$(grep -o "calls = [0-9']*" "$root/bench/ab/hot_path_calls.hpp" | head -n 1 | tr -dc 0-9)"
  local file phase total
  for file in "$dir"/out.*.*.[0-9]*; do
    phase="$(sed -n 's/^desc: Trigger: Client Request: //p' "$file")"
    total="$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$file")"
    [[ -n "$phase" && -n "$total" ]] || continue
    echo $((total / calls)) >"$work/$name.$phase"
  done
}

count "$1" a
count "$2" b
printf '%-36s %12s %12s %8s\n' phase "A ($1)" "B ($2)" B/A
for phase in idempotent_first idempotent_replay retrying_success async_idempotent_first \
  async_idempotent_first_no_heartbeat async_idempotent_replay async_floor; do
  a="$(cat "$work/a.$phase")"
  b="$(cat "$work/b.$phase")"
  printf '%-36s %12d %12d %8s\n' "$phase" "$a" "$b" "$(python3 -c "print(f'{$b/$a:.3f}')")"
done
