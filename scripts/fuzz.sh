#!/usr/bin/env bash
# Build idem's libFuzzer targets (clang, ASan + UBSan) and fuzz each one for a while.
#
#   scripts/fuzz.sh                      every target, 300 s each
#   scripts/fuzz.sh --time 60            60 s each
#   scripts/fuzz.sh --target codec       one target (repeat --target for more)
#   scripts/fuzz.sh --list               the targets, and exit
#
# Targets are tests/fuzz/<name>_fuzz.cpp; seeds are tests/fuzz/corpus/<name>/ (only read). What a
# run finds is kept in build/fuzz/tests/fuzz/work/<name>/: corpus/ grows across runs, crash-*,
# leak-* and timeout-* are inputs that broke a property or crashed. To keep such an input as a
# regression test, copy it into tests/fuzz/corpus/<name>/ (every tests build replays the seeds as
# fuzz_corpus.<name>) and add a unit test for the behaviour it showed. Exit status: non-zero if
# any target failed.
set -euo pipefail

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

seconds=300
targets=()
list=0
while (($#)); do
  case "$1" in
    --time) seconds="${2:?--time needs seconds}"; shift ;;
    --time=*) seconds="${1#--time=}" ;;
    --target) targets+=("${2:?--target needs a name}"); shift ;;
    --target=*) targets+=("${1#--target=}") ;;
    --list) list=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/fuzz.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/fuzz.sh: --time wants a positive number of seconds" >&2; exit 2; }

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
build="$root/build/fuzz"

# The targets that exist: one per tests/fuzz/*_fuzz.cpp.
available=()
for source in tests/fuzz/*_fuzz.cpp; do
  name="$(basename "$source" _fuzz.cpp)"
  available+=("$name")
done
if ((list)); then
  printf '%s\n' "${available[@]}"
  exit 0
fi
((${#targets[@]})) || targets=("${available[@]}")
for name in "${targets[@]}"; do
  [[ " ${available[*]} " == *" $name "* ]] || {
    echo "scripts/fuzz.sh: no target '$name' (have: ${available[*]})" >&2
    exit 2
  }
done

source "$root/scripts/lib/packages.sh"
configuration=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g"
  -DIDEM_BUILD_FUZZ=ON -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_BUILD_BENCH=OFF
  -DIDEM_SANITIZE=)
idem_configure_uses "${configuration[@]}"
idem_install scripts/fuzz.sh build sanitizers adapters

echo "== configure $build"
cmake -S "$root" -B "$build" -G Ninja "${configuration[@]}" $(idem_compiler_launcher) >/dev/null
echo "== build ${targets[*]}"
cmake --build "$build" -j 2 --target "${targets[@]/#/idem_fuzz_}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
failed=()
summary=()
for name in "${targets[@]}"; do
  work="$build/tests/fuzz/work/$name"
  mkdir -p "$work/corpus"
  log="$work/fuzz.log"
  echo
  echo "== $name: ${seconds} s (log: $log)"
  set +e
  "$build/tests/fuzz/idem_fuzz_$name" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/" \
    "$work/corpus" "$root/tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  set -e
  runs="$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
  coverage="$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+' || echo '?')"
  corpus="$(find "$work/corpus" -type f | wc -l)"
  if ((rc == 0)); then
    summary+=("$(printf '%-16s ok      %10s runs, coverage %5s, corpus %5d' "$name" "$runs" "$coverage" "$corpus")")
  else
    failed+=("$name")
    grep -E 'fuzz property broken|ERROR: |runtime error|Test unit written' "$log" | head -n 5 || true
    summary+=("$(printf '%-16s FAILED  (exit %d; see %s)' "$name" "$rc" "$log")")
  fi
done

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "scripts/fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "scripts/fuzz.sh: ${#targets[@]} target(s), no failure"
