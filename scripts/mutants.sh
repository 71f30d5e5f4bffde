#!/usr/bin/env bash
# Mutation check: shows that the tests guarding each of idem's promises fail when the guard is
# removed.
#
#   scripts/mutants.sh                   every mutant in tests/mutants/*.patch
#   scripts/mutants.sh --mutant NAME     one (repeat for more)
#   scripts/mutants.sh --list            the mutants and what each removes, and exit
#   scripts/mutants.sh --no-baseline     skip checking that the chosen tests pass unmutated
#
# Each tests/mutants/<name>.patch removes one guard from a header and names, in its leading
# lines, the test sources that guard it ("Sources:") and the Catch2 test spec to run
# ("Tests:"). For each mutant this script copies include/ to build/mutants/tree/ (the working
# tree is never patched), applies the patch there with `patch -F0` (no fuzz: a patch that no
# longer applies exactly is stale and fails the run), compiles only those test sources against
# the patched copy into one test binary, and runs only those tests. A mutant is killed when the
# tests fail and survives when they pass. First, unless --no-baseline, each set of sources is
# compiled against the unpatched headers and its tests must pass, so a kill means the mutation
# was caught rather than that the tests fail anyway.
#
# The last line is "mutants: K killed, S survived, B broken" (broken: a stale patch, a mutant
# that does not compile, a test spec that matches nothing, a failing baseline); the exit status
# is non-zero unless every mutant was killed.
set -euo pipefail

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

chosen=()
list=0
baseline=1
while (($#)); do
  case "$1" in
    --mutant) chosen+=("${2:?--mutant needs a name}"); shift ;;
    --mutant=*) chosen+=("${1#--mutant=}") ;;
    --list) list=1 ;;
    --no-baseline) baseline=0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/mutants.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
work="$root/build/mutants"
source "$root/scripts/lib/packages.sh"
idem_ensure_packages scripts/mutants.sh g++ catch2 patch
cxx="${CXX:-g++}"
# -O1: fast to compile, still optimised enough for the concurrency tests to race. Warnings are
# off: a mutant may leave a variable unused, and that is not what is being tested.
flags=(-std=c++20 -O1 -g0 -w -pthread)
started=$SECONDS

field() {  # field FILE NAME: the value of the "NAME:" line in the patch's header
  sed -n "s/^$2: *//p" "$1" | head -n 1
}

patches=()
if ((${#chosen[@]})); then
  for name in "${chosen[@]}"; do
    [[ -f "tests/mutants/$name.patch" ]] || { echo "scripts/mutants.sh: no tests/mutants/$name.patch" >&2; exit 2; }
    patches+=("tests/mutants/$name.patch")
  done
else
  patches=(tests/mutants/*.patch)
fi

if ((list)); then
  for patch in "${patches[@]}"; do
    printf '%-28s %s\n' "$(basename "$patch" .patch)" "$(field "$patch" Mutant)"
  done
  exit 0
fi

mkdir -p "$work/bin"
# Catch2's main, compiled once and kept: the slow part of every test binary.
catch_main="$work/catch_main.o"
if [[ ! -f "$catch_main" || "$root/tests/support/catch_main.cpp" -nt "$catch_main" ]]; then
  echo "== compiling Catch2's main once ($catch_main)"
  "$cxx" "${flags[@]}" -c "$root/tests/support/catch_main.cpp" -o "$catch_main"
fi

# compile OUTPUT INCLUDE_DIR SOURCES...: one test binary against the headers in INCLUDE_DIR.
compile() {
  local output="$1" include="$2"
  shift 2
  local sources=() source
  for source in "$@"; do sources+=("$root/$source"); done
  "$cxx" "${flags[@]}" -I "$include" -I "$root/tests" -I "$root/tests/support" "${sources[@]}" \
    "$catch_main" -o "$output"
}

# up_to_date BINARY INPUTS...: the binary exists and no input (file or folder, searched whole) is
# newer, so a second run rebuilds only what changed since the first.
up_to_date() {
  local binary="$1"
  shift
  [[ -f "$binary" ]] || return 1
  [[ -z "$(find "$@" -newer "$binary" -print -quit)" ]]
}

# run_tests BINARY SPEC LOG: 0 when the tests pass. Catch2 separates alternatives with commas.
run_tests() {
  timeout 180 "$1" "$2" >"$3" 2>&1
}

matched() {  # matched BINARY SPEC: how many test cases the spec selects
  "$1" --list-test-names-only "$2" 2>/dev/null | grep -c . || true
}

killed=0
survived=0
broken=0
results=()
declare -A baseline_ok=()

for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  sources="$(field "$patch" Sources)"
  spec="$(field "$patch" Tests)"
  mutant_started=$SECONDS
  echo
  echo "== $name: $(field "$patch" Mutant)"
  if [[ -z "$sources" || -z "$spec" ]]; then
    results+=("$(printf '%-28s BROKEN   no Sources:/Tests: lines in %s' "$name" "$patch")")
    broken=$((broken + 1))
    continue
  fi
  read -r -a source_list <<<"$sources"

  if ((baseline)) && [[ -z "${baseline_ok[$sources]:-}" ]]; then
    binary="$work/bin/baseline-$(echo "$sources" | tr -c 'A-Za-z0-9_\n' '_')"
    inputs=("$root/include" "$root/tests/support" "$catch_main")
    for source in "${source_list[@]}"; do inputs+=("$root/$source"); done
    if up_to_date "$binary" "${inputs[@]}"; then
      baseline_ok[$sources]=yes
    elif echo "   baseline: compiling $sources against the unpatched headers" &&
      compile "$binary" "$root/include" "${source_list[@]}" >"$work/$name.baseline.log" 2>&1; then
      baseline_ok[$sources]=yes
    else
      baseline_ok[$sources]=no
    fi
  fi
  if ((baseline)) && [[ "${baseline_ok[$sources]}" == no ]]; then
    results+=("$(printf '%-28s BROKEN   the unpatched sources do not compile (%s)' "$name" "$work/$name.baseline.log")")
    broken=$((broken + 1))
    continue
  fi
  if ((baseline)); then
    binary="$work/bin/baseline-$(echo "$sources" | tr -c 'A-Za-z0-9_\n' '_')"
    if ((!$(matched "$binary" "$spec"))); then
      results+=("$(printf '%-28s BROKEN   the test spec matches no test: %s' "$name" "$spec")")
      broken=$((broken + 1))
      continue
    fi
    if ! run_tests "$binary" "$spec" "$work/$name.baseline.log"; then
      results+=("$(printf '%-28s BROKEN   the tests fail without the mutation (%s)' "$name" "$work/$name.baseline.log")")
      broken=$((broken + 1))
      continue
    fi
  fi

  tree="$work/tree"
  rm -rf "$tree"
  mkdir -p "$tree"
  cp -R "$root/include" "$tree/include"
  if ! patch -p1 -F0 --no-backup-if-mismatch --quiet -d "$tree" <"$patch" >"$work/$name.patch.log" 2>&1; then
    results+=("$(printf '%-28s BROKEN   the patch no longer applies (%s)' "$name" "$work/$name.patch.log")")
    broken=$((broken + 1))
    continue
  fi
  binary="$work/bin/$name"
  inputs=("$root/include" "$root/tests/support" "$catch_main" "$root/$patch")
  for source in "${source_list[@]}"; do inputs+=("$root/$source"); done
  if up_to_date "$binary" "${inputs[@]}"; then
    echo "   up to date: $binary"
  elif ! echo "   compiling $sources against the mutant" ||
    ! compile "$binary" "$tree/include" "${source_list[@]}" >"$work/$name.build.log" 2>&1; then
    rm -f "$binary"
    results+=("$(printf '%-28s BROKEN   the mutant does not compile (%s)' "$name" "$work/$name.build.log")")
    broken=$((broken + 1))
    continue
  fi
  count="$(matched "$binary" "$spec")"
  if ((count == 0)); then
    results+=("$(printf '%-28s BROKEN   the test spec matches no test: %s' "$name" "$spec")")
    broken=$((broken + 1))
    continue
  fi
  echo "   running $count test case(s): $spec"
  if run_tests "$binary" "$spec" "$work/$name.log"; then
    results+=("$(printf '%-28s SURVIVED %d test case(s) still pass (%d s)' "$name" "$count" $((SECONDS - mutant_started)))")
    survived=$((survived + 1))
  else
    failed_line="$(grep -E '^test cases:' "$work/$name.log" | tail -n 1 || true)"
    results+=("$(printf '%-28s killed   %s (%d s)' "$name" "${failed_line:-the tests crashed}" $((SECONDS - mutant_started)))")
    killed=$((killed + 1))
  fi
done
rm -rf "$work/tree"

echo
echo "== mutants (logs in $work)"
printf '%s\n' "${results[@]}"
echo "total time: $((SECONDS - started)) s"
echo "mutants: $killed killed, $survived survived, $broken broken"
((survived == 0 && broken == 0))
