#!/usr/bin/env bash
# Mutation check: shows that the tests guarding each of idem's promises fail when the guard is
# removed.
#
#   scripts/mutants.sh                   every mutant in tests/mutants/*.patch
#   scripts/mutants.sh --mutant NAME     one (repeat for more)
#   scripts/mutants.sh --list            the mutants and what each removes, and exit
#   scripts/mutants.sh --no-baseline     skip checking that the chosen tests pass unmutated
#   scripts/mutants.sh --check           only that every patch still applies to include/, and exit
#                                        (seconds; ctest runs it as mutants.apply, label unit)
#
# Each tests/mutants/<name>.patch removes one guard from a header and names, in its leading
# lines, the test sources that guard it ("Sources:") and the Catch2 test spec to run
# ("Tests:"). For each mutant this script copies include/ to build/mutants/tree/ (the working
# tree is never patched), applies the patch there with `patch -F0` (no fuzz: a patch that no
# longer applies exactly is stale and fails the run), compiles only those test sources against
# the patched copy into one test binary, and runs only those tests. A mutant is killed when the
# tests fail and survives when they pass. First, unless --no-baseline, each set of sources is
# compiled against the unpatched headers and its tests must pass, so a kill means the mutation
# was caught rather than that the tests fail anyway. Compiles and runs go IDEM_MUTANT_JOBS at a
# time (default: the number of CPUs), each mutant in a tree of its own.
#
# The last line is "mutants: K killed, S survived, B broken" (broken: a stale patch, a mutant
# that does not compile, a test spec that matches nothing, a failing baseline); the exit status
# is non-zero unless every mutant was killed.
set -euo pipefail

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

chosen=()
list=0
baseline=1
check=0
while (($#)); do
  case "$1" in
    --mutant) chosen+=("${2:?--mutant needs a name}"); shift ;;
    --mutant=*) chosen+=("${1#--mutant=}") ;;
    --list) list=1 ;;
    --no-baseline) baseline=0 ;;
    --check) check=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/mutants.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
work="$root/build/mutants"

# --check: a header edited since a patch was written can leave the patch's context stale, and the
# full run (in CI, after the builds) only then reports it broken; this dry run answers in seconds
# with the same `patch -F0` the run uses, and installs and compiles nothing.
if ((check)); then
  stale=0
  for patch in tests/mutants/*.patch; do
    if ! log="$(patch -p1 -F0 --dry-run --quiet -d "$root" <"$patch" 2>&1)"; then
      echo "$(basename "$patch" .patch): no longer applies to include/ (refresh its context):"
      echo "$log" | sed 's/^/  /'
      stale=$((stale + 1))
    fi
  done
  echo "mutants: $(ls tests/mutants/*.patch | wc -l) patches, $stale stale"
  exit $((stale > 0))
fi
source "$root/scripts/lib/packages.sh"
idem_install scripts/mutants.sh build tests adapters
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
  # SQLite is linked into every binary: the SQLite outbox reader's guards are mutants too, and
  # the library is small and embedded (no server). OpenSSL's libcrypto too: the webhook tests
  # check idem's HMAC against it.
  "$cxx" "${flags[@]}" -I "$include" -I "$root/tests" -I "$root/tests/support" "${sources[@]}" \
    "$catch_main" -o "$output" -lsqlite3 -lcrypto
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

# Two phases, each running up to $jobs at once (IDEM_MUTANT_JOBS, default: the CPUs): first
# every set of sources is compiled and its tests run unpatched (once per set, however many
# mutants share it), then every mutant. Each job writes its result line to a file of its own and
# patches a tree of its own, so jobs never share anything they write.
jobs="${IDEM_MUTANT_JOBS:-$(nproc 2>/dev/null || echo 2)}"
results_dir="$work/results"
rm -rf "$results_dir" "$work"/tree-*
mkdir -p "$results_dir"

limit_jobs() {  # waits until fewer than $jobs background jobs run
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
}

baseline_binary() {  # baseline_binary SOURCES: the unpatched test binary of that set
  echo "$work/bin/baseline-$(echo "$1" | tr -c 'A-Za-z0-9_\n' '_')"
}

# compile_baseline SOURCES STATUS LOG: compiles the set unpatched (unless up to date); writes
# "ok" or the reason to STATUS.
compile_baseline() {
  local sources="$1" status="$2" log="$3" source
  local binary
  binary="$(baseline_binary "$sources")"
  local -a source_list
  read -r -a source_list <<<"$sources"
  local inputs=("$root/include" "$root/tests/support" "$catch_main")
  for source in "${source_list[@]}"; do inputs+=("$root/$source"); done
  if ! up_to_date "$binary" "${inputs[@]}"; then
    echo "   baseline: compiling $sources against the unpatched headers"
    if ! compile "$binary" "$root/include" "${source_list[@]}" >"$log" 2>&1; then
      echo "the unpatched sources do not compile ($log)" >"$status"
      return
    fi
  fi
  echo ok >"$status"
}

# run_mutant PATCH: writes "<outcome> <line>" to $results_dir/NAME, outcome killed, survived or
# broken.
run_mutant() {
  local patch="$1" name sources spec mutant_started=$SECONDS
  name="$(basename "$patch" .patch)"
  sources="$(field "$patch" Sources)"
  spec="$(field "$patch" Tests)"
  local result="$results_dir/$name"
  broken_because() { printf 'broken %-28s BROKEN   %s\n' "$name" "$1" >"$result"; }
  if ((baseline)); then
    local status
    status="$(cat "$work/baseline-$(echo "$sources" | tr -c 'A-Za-z0-9_\n' '_').status")"
    if [[ "$status" != ok ]]; then
      broken_because "$status"
      return
    fi
    # Each mutant's own tests must pass unpatched, so that a kill means the mutation was caught.
    local unpatched
    unpatched="$(baseline_binary "$sources")"
    if ((!$(matched "$unpatched" "$spec"))); then
      broken_because "the test spec matches no test: $spec"
      return
    fi
    if ! run_tests "$unpatched" "$spec" "$work/$name.baseline.log"; then
      broken_because "the tests fail without the mutation ($work/$name.baseline.log)"
      return
    fi
  fi
  local -a source_list
  read -r -a source_list <<<"$sources"
  local tree="$work/tree-$name"
  rm -rf "$tree"
  mkdir -p "$tree"
  cp -R "$root/include" "$tree/include"
  if ! patch -p1 -F0 --no-backup-if-mismatch --quiet -d "$tree" <"$patch" >"$work/$name.patch.log" 2>&1; then
    broken_because "the patch no longer applies ($work/$name.patch.log)"
    rm -rf "$tree"
    return
  fi
  local binary="$work/bin/$name" source
  local inputs=("$root/include" "$root/tests/support" "$catch_main" "$root/$patch")
  for source in "${source_list[@]}"; do inputs+=("$root/$source"); done
  if up_to_date "$binary" "${inputs[@]}"; then
    echo "   $name: up to date: $binary"
  else
    echo "   $name: compiling $sources against the mutant"
    if ! compile "$binary" "$tree/include" "${source_list[@]}" >"$work/$name.build.log" 2>&1; then
      rm -f "$binary" && rm -rf "$tree"
      broken_because "the mutant does not compile ($work/$name.build.log)"
      return
    fi
  fi
  rm -rf "$tree"
  local count
  count="$(matched "$binary" "$spec")"
  if ((count == 0)); then
    broken_because "the test spec matches no test: $spec"
    return
  fi
  echo "   $name: running $count test case(s): $spec"
  if run_tests "$binary" "$spec" "$work/$name.log"; then
    printf 'survived %-28s SURVIVED %d test case(s) still pass (%d s)\n' "$name" "$count" \
      $((SECONDS - mutant_started)) >"$result"
  else
    local failed_line
    failed_line="$(grep -E '^test cases:' "$work/$name.log" | tail -n 1 || true)"
    printf 'killed %-28s killed   %s (%d s)\n' "$name" "${failed_line:-the tests crashed}" \
      $((SECONDS - mutant_started)) >"$result"
  fi
}

echo "== $jobs at a time"
for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  echo "== $name: $(field "$patch" Mutant)"
  if [[ -z "$(field "$patch" Sources)" || -z "$(field "$patch" Tests)" ]]; then
    printf 'broken %-28s BROKEN   no Sources:/Tests: lines in %s\n' "$name" "$patch" \
      >"$results_dir/$name"
  fi
done

if ((baseline)); then
  declare -A baseline_started=()
  for patch in "${patches[@]}"; do
    name="$(basename "$patch" .patch)"
    [[ -f "$results_dir/$name" ]] && continue
    sources="$(field "$patch" Sources)"
    [[ -n "${baseline_started[$sources]:-}" ]] && continue
    baseline_started[$sources]=yes
    id="$(echo "$sources" | tr -c 'A-Za-z0-9_\n' '_')"
    limit_jobs
    compile_baseline "$sources" "$work/baseline-$id.status" "$work/baseline-$id.log" &
  done
  wait
fi

for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  [[ -f "$results_dir/$name" ]] && continue
  limit_jobs
  run_mutant "$patch" &
done
wait

killed=0
survived=0
broken=0
results=()
for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  if [[ ! -f "$results_dir/$name" ]]; then
    printf 'broken %-28s BROKEN   the job left no result\n' "$name" >"$results_dir/$name"
  fi
  read -r outcome line <"$results_dir/$name"
  case "$outcome" in
    killed) killed=$((killed + 1)) ;;
    survived) survived=$((survived + 1)) ;;
    *) broken=$((broken + 1)) ;;
  esac
  results+=("$line")
done

echo
echo "== mutants (logs in $work)"
printf '%s\n' "${results[@]}"
echo "total time: $((SECONDS - started)) s"
echo "mutants: $killed killed, $survived survived, $broken broken"
((survived == 0 && broken == 0))
