#!/usr/bin/env bash
# Build idem and run every test: the README's test command, and what CI runs (.ci/run).
#
#   scripts/test.sh              full run: g++ (+ bench build), clang++ ASan+UBSan, clang++ TSan,
#                                the fuzz targets (10 s each) and the mutation check
#   scripts/test.sh --quick      g++ build and its tests only, without the benchmarks, examples
#                                (payments demo), single-header, compile-fail and consumer checks
#   scripts/test.sh --jobs N     parallel build jobs (default 2)
#   scripts/test.sh --test-jobs N  parallel test jobs of the g++ and ASan runs (default jobs + 1)
#
# Works from any directory. Build trees live in build/<name> and are reused (incremental); CI
# starts without them. Missing Debian packages are installed with apt-get first.
#
# The last line printed is the total over every ctest run and the mutants, "idem: N passed,
# M failed"; the exit status is non-zero if anything failed.
set -euo pipefail

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

quick=0
jobs=2
test_jobs=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    --jobs=*) jobs="${1#--jobs=}" ;;
    --test-jobs) test_jobs="${2:?--test-jobs needs a number}"; shift ;;
    --test-jobs=*) test_jobs="${1#--test-jobs=}" ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/test.sh: --jobs wants a positive number" >&2; exit 2; }
# The g++ and ASan test runs take one job more than there are cores: many of their tests wait
# (on a server's answer, a lease, a timer, a killed worker's restart) rather than compute, so a
# third test fills the time the other two leave the cores idle. The nemeses, whose timing is
# their own, are RUN_SERIAL; the ThreadSanitizer run, all CPU, keeps --jobs.
test_jobs="${test_jobs:-$((jobs + 1))}"
[[ "$test_jobs" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/test.sh: --test-jobs wants a positive number" >&2; exit 2; }

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

# --- the builds' configurations ----------------------------------------------------------------
# 1: g++, all targets. RelWithDebInfo for the optimiser's warnings, with its -DNDEBUG dropped so
# asserts stay on; the test executables at -Og (IDEM_TEST_OPTIMIZE, CMakeLists.txt: half the
# compiling), the examples, the benchmarks and the single-header tests at -O2. Every build here
# uses -g1, line tables only: backtraces and sanitizer reports still name the file and line,
# and compiling takes a third less time than with -g under g++ and a sixth less under clang++
# (measured on one store test: 12.3 s against 8.2 s, 15.1 s against 12.6 s). --quick leaves
# out what is slow to build or run and rarely what an edit breaks: the benchmarks, the examples
# (the payments demo and its end-to-end tests), the single-header build,
# the asynchronous tests' second build on standalone Asio, and the compile-fail and consumer
# tests (each a compiler or CMake run). The full run has them all; the sanitizer builds below
# build the asynchronous tests on Boost.Asio only.
full=ON
((quick)) && full=OFF
gcc_configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1"
  -DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_EXAMPLES=$full -DIDEM_BUILD_BENCH=$full
  -DIDEM_TEST_SINGLE_HEADER=$full -DIDEM_TEST_ASIO_STANDALONE=$full -DIDEM_SANITIZE=
  -DIDEM_REQUIRE_ADAPTERS=ON -DIDEM_UNITY_TESTS=ON -DIDEM_TEST_OPTIMIZE=-Og)
# 2: clang++, AddressSanitizer + UndefinedBehaviorSanitizer, and clang-tidy.
asan_configuration=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug
  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1"
  -DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_EXAMPLES=ON -DIDEM_BUILD_BENCH=OFF
  -DIDEM_SANITIZE=address,undefined -DIDEM_CLANG_TIDY=ON -DIDEM_REQUIRE_ADAPTERS=ON
  -DIDEM_TEST_ASIO_STANDALONE=OFF -DIDEM_TEST_SINGLE_HEADER=OFF -DIDEM_UNITY_TESTS=ON)
# 3: clang++, ThreadSanitizer, the [concurrency] test cases.
tsan_configuration=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
  -DIDEM_BUILD_TESTS=ON -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_BUILD_BENCH=OFF
  -DIDEM_SANITIZE=thread -DIDEM_REQUIRE_ADAPTERS=ON -DIDEM_TEST_ASIO_STANDALONE=OFF
  -DIDEM_UNITY_TESTS=ON)
# 4: the fuzz targets (libFuzzer with ASan + UBSan).
fuzz_configuration=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
  -DIDEM_BUILD_FUZZ=ON -DIDEM_FUZZ_SECONDS=10 -DIDEM_BUILD_TESTS=OFF -DIDEM_BUILD_EXAMPLES=OFF
  -DIDEM_BUILD_BENCH=OFF -DIDEM_SANITIZE= -DIDEM_REQUIRE_ADAPTERS=ON)

# --- packages: every purpose's, in one apt-get command ----------------------------------------
source "$root/scripts/lib/packages.sh"
idem_configure_uses "${gcc_configuration[@]}"
idem_configure_uses "${asan_configuration[@]}"
idem_configure_uses "${tsan_configuration[@]}"
idem_configure_uses "${fuzz_configuration[@]}"
idem_install scripts/test.sh build adapters servers examples tests sanitizers bench
# ccache in front of the compilers where it is installed (CCACHE_DIR says where its cache is):
# room for the four builds' objects, and the sloppiness that lets it cache what is compiled with
# a precompiled header (the Clang builds' tests: idem_test_pch in tests/CMakeLists.txt).
launcher=($(idem_compiler_launcher))
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
# Sanitizer reports with function names and lines: llvm-symbolizer (package llvm-14) is not on
# the PATH under that name on Debian, so the runtimes are told where it is.
if [[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]]; then
  export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}"
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}:external_symbolizer_path=/usr/lib/llvm-14/bin/llvm-symbolizer"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}:external_symbolizer_path=/usr/lib/llvm-14/bin/llvm-symbolizer"
fi

# --- bookkeeping -----------------------------------------------------------------------------
total_passed=0
total_failed=0
recap=()         # one line per step for the summary
ctest_prefix=()  # a command ctest runs under, e.g. setarch for ThreadSanitizer

# run_ctest NAME BUILD_DIR JOBS [ctest args...]: runs ctest, adds its counts to the totals.
run_ctest() {
  local name="$1" dir="$2" parallel="$3"
  shift 3
  local log="$dir/ctest.log" rc
  set +e
  "${ctest_prefix[@]}" ctest --test-dir "$dir" --output-on-failure -j "$parallel" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  local line passed=0 failed=0
  line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)"
  if [[ -n "$line" ]]; then
    local total
    failed="$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")"
    total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")"
    passed=$((total - failed))
  fi
  # ctest failing without a failed test (no tests found, a crash of ctest itself) still fails.
  if ((rc != 0 && failed == 0)); then failed=1; fi
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  recap+=("$(printf '%-12s %4d passed, %d failed  (%d s)' "$name:" "$passed" "$failed" \
    $((SECONDS - step_started)))")
}

finish() {
  # Where the time went: each build's most expensive targets and slowest tests.
  local builds=() dir
  for dir in build/gcc build/clang-asan build/tsan build/fuzz; do [[ -d $dir ]] && builds+=("$dir"); done
  if ((${#builds[@]})); then
    echo
    echo "== where the time went (scripts/time_table.py)"
    python3 "$root/scripts/time_table.py" --top 8 "${builds[@]}" || true
  fi
  echo
  echo "== summary"
  local line
  for line in "${recap[@]}"; do echo "$line"; done
  echo "total time: $((SECONDS - started)) s"
  echo "idem: $total_passed passed, $total_failed failed"
  ((total_failed == 0))
}

# A configure or build error ends the run: there is nothing to test.
build_failed() {
  recap+=("$(printf '%-12s build failed' "$1:")")
  total_failed=$((total_failed + 1))
  finish || exit 1
}

# configure_and_build NAME BUILD_DIR "TARGETS" [cmake args...]
configure_and_build() {
  local name="$1" dir="$2" targets="$3"
  shift 3
  step_started=$SECONDS
  echo
  echo "== $name: configure $dir"
  cmake -S "$root" -B "$dir" -G Ninja "$@" || { build_failed "$name"; return 1; }
  echo "== $name: build"
  local target_args=()
  [[ -z "$targets" ]] || target_args=(--target $targets)
  cmake --build "$dir" -j "$jobs" "${target_args[@]}" || { build_failed "$name"; return 1; }
}

# Building ahead: the next build runs while the build before it is tested, at the lowest CPU
# priority (nice 19). Most tests wait (on a server's answer, a lease, a timer, a killed worker's
# restart) rather than compute, so the build takes the time they leave the cores idle, and a
# test that wants a core still gets it first (the scheduler gives a nice-19 process about 1.5%
# of a core against a nice-0 one). Measured on the full run (2 cores): 3,270 s built in turn.
# The build's output waits in BUILD_DIR.ahead.log and is printed when it is collected, before
# its tests; the step's time in the summary counts from its build's start, so steps overlap.
ahead_pid=""
ahead_name=""
ahead_log=""
ahead_started=0

# build_ahead NAME BUILD_DIR "TARGETS" [cmake args...]: starts configure_and_build's work in the
# background, in a process group of its own (stop_ahead ends all of it).
build_ahead() {
  ahead_name="$1"
  local dir="$2" targets="$3"
  shift 3
  ahead_log="$dir.ahead.log"
  ahead_started=$SECONDS
  mkdir -p "$(dirname "$dir")"
  setsid nice -n 19 bash -c '
    set -e
    root="$1" dir="$2" jobs="$3" targets="$4"
    shift 4
    echo "== configure $dir (built ahead, at nice 19, beside the tests before it)"
    cmake -S "$root" -B "$dir" -G Ninja "$@"
    echo "== build $dir"
    if [[ -n "$targets" ]]; then
      cmake --build "$dir" -j "$jobs" --target $targets
    else
      cmake --build "$dir" -j "$jobs"
    fi' build-ahead "$root" "$dir" "$jobs" "$targets" "$@" >"$ahead_log" 2>&1 &
  ahead_pid=$!
}

# collect_ahead: waits for the build started by build_ahead and prints its output; a failed
# build ends the run as configure_and_build's does.
collect_ahead() {
  local rc=0
  echo
  echo "== $ahead_name: waiting for its build (started $((SECONDS - ahead_started)) s ago)"
  wait "$ahead_pid" || rc=$?
  ahead_pid=""
  cat "$ahead_log"
  step_started=$ahead_started
  ((rc == 0)) || { build_failed "$ahead_name"; return 1; }
}

# stop_ahead: ends a build still running ahead (the run is ending early).
stop_ahead() {
  [[ -z "$ahead_pid" ]] || kill -- "-$ahead_pid" 2>/dev/null || true
  ahead_pid=""
}

# Runs per point of the crash matrix (tests/crash; docs/development.md, "Crash matrix"): the
# tests' own default (50) in the full g++ run, 3 in --quick and in the sanitizer builds. A value
# the caller set is kept for every build.
crash_runs_given="${IDEM_CRASH_RUNS:-}"
few_crash_runs() { export IDEM_CRASH_RUNS="${crash_runs_given:-3}"; }

started=$SECONDS
step_started=$SECONDS

# --- the single header must be fresh ---------------------------------------------------------
echo "== scripts/amalgamate --check"
if python3 scripts/amalgamate --check; then
  recap+=("$(printf '%-12s %4d passed, %d failed' "amalgamate:" 1 0)")
  total_passed=$((total_passed + 1))
else
  recap+=("$(printf '%-12s %4d passed, %d failed' "amalgamate:" 0 1)")
  total_failed=$((total_failed + 1))
fi

# --- the tests' temporary folder: on a tmpfs where there is one ---------------------------
# The servers' data (PostgreSQL's, Redis's) and every file the tests make (SQLite databases,
# the crash tests' workers' files) go under TMPDIR. On a tmpfs an fsync returns once the data
# is in memory, where it survives the crash of any process, and processes are all the tests
# kill (kill -9 of servers, workers and clients; never the machine): every durability they
# check holds as on a disk, without waiting on one. Measured on the store and crash tests
# (510, ctest -j2): 254 s on the disk, 190 s on /dev/shm. Used when /dev/shm is a tmpfs with
# 4 GiB free (a container's default 64 MiB is not), else TMPDIR is left as it is; scripts/bench.sh
# keeps its servers on the disk, since fsync is part of what it measures.
test_tmp=""
shm_free_kib="$(df -k --output=avail /dev/shm 2>/dev/null | tail -n 1 | tr -dc 0-9 || true)"
if [[ "$(stat -f -c %T /dev/shm 2>/dev/null || true)" == tmpfs ]] &&
  ((${shm_free_kib:-0} > 4 * 1024 * 1024)); then
  test_tmp="$(mktemp -d /dev/shm/idem-test.XXXXXX)"
  chmod 755 "$test_tmp"  # as /tmp is: servers that drop root (PostgreSQL) must reach their data
  export TMPDIR="$test_tmp"
fi

# --- servers: PostgreSQL and Redis for the store adapters' tests, stopped when this exits ---
step_started=$SECONDS
source "$root/scripts/lib/servers.sh"
idem_start_servers
trap 'stop_ahead; idem_stop_servers; [[ -z "$test_tmp" ]] || rm -rf "$test_tmp"' EXIT
if ((${#idem_servers_failed[@]})); then
  recap+=("$(printf '%-12s %s could not start' "servers:" "${idem_servers_failed[*]}")")
  total_failed=$((total_failed + ${#idem_servers_failed[@]}))
fi

# --- 1: g++, all targets (its configuration above) ---------------------------------------------
gcc_ctest_args=()
if ((quick)); then
  gcc_ctest_args=(-LE '^(compile_fail|consumer|packages)$')
  few_crash_runs
fi
configure_and_build gcc build/gcc "" "${gcc_configuration[@]}" "${launcher[@]}" || exit 1
if ((!quick)); then
  # --- 2's build, ahead: clang++, AddressSanitizer + UndefinedBehaviorSanitizer (below) ------
  build_ahead clang-asan build/clang-asan "" "${asan_configuration[@]}" "${launcher[@]}"
fi
run_ctest gcc build/gcc "$test_jobs" "${gcc_ctest_args[@]}"

if ((!quick)); then
  # --- 2: clang++, AddressSanitizer + UndefinedBehaviorSanitizer -----------------------------
  # Everything but the single-header build, which compiles the unit tests again against the
  # amalgamation: the g++ build has it, and it finds nothing a sanitizer would. At -O0: clang
  # compiles instrumented code twice as fast as at -O1 (6.6 s against 15.2 s for one store test),
  # which saves more (about 5 minutes) than the slower tests cost (the unit tests take 73 s
  # instead of 20 s in one process; the store tests, waiting on servers, no longer).
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  few_crash_runs  # here and in the TSan build
  collect_ahead || exit 1
  # 3's build, ahead, beside these tests.
  build_ahead tsan build/tsan idem_concurrency_tests "${tsan_configuration[@]}" "${launcher[@]}"
  # The consumer tests (label consumer: a CMake install and a consumer project configured and
  # built against it, five of them) check the package, not the code: the g++ build runs them,
  # and here they took 208 s of test time for nothing a sanitizer could find.
  run_ctest clang-asan build/clang-asan "$test_jobs" -LE '^consumer$'

  # --- 3: clang++, ThreadSanitizer, the [concurrency] test cases -----------------------------
  # They carry the ctest label "concurrency" (tests/CMakeLists.txt); --no-tests=error makes an
  # empty selection a failure rather than a silent pass.
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"  # (set above with the symbolizer where there is one)
  # Clang 14's TSan cannot map its shadow memory on kernels with more than 28 bits of mmap
  # randomness ("unexpected memory mapping"); running without ASLR avoids that.
  if [[ -r /proc/sys/vm/mmap_rnd_bits ]] && (($(cat /proc/sys/vm/mmap_rnd_bits) > 28)) &&
    command -v setarch >/dev/null 2>&1; then
    ctest_prefix=(setarch "$(uname -m)" -R)
  fi
  collect_ahead || exit 1
  # 4's build, ahead, beside these tests.
  build_ahead fuzz build/fuzz idem_fuzz_targets "${fuzz_configuration[@]}" "${launcher[@]}"
  run_ctest tsan build/tsan "$jobs" -L concurrency --no-tests=error

  # --- 4: fuzz targets: libFuzzer with ASan + UBSan, each for a short bounded time -----------
  # Each target is a ctest test fuzz.<target> (label fuzz, tests/fuzz/CMakeLists.txt) that
  # fuzzes for IDEM_FUZZ_SECONDS from the seeds in tests/fuzz/corpus/; scripts/fuzz.sh runs
  # them longer. (Every build above already replayed the seeds as fuzz_corpus.<target>.)
  ctest_prefix=()
  collect_ahead || exit 1
  run_ctest fuzz build/fuzz "$jobs" -L fuzz --no-tests=error

  # --- 5: mutation check: each guard removed in turn, and the tests that guard it must fail --
  # One mutant killed counts as a passed test; one that survives, or a patch that no longer
  # applies, as a failed one.
  step_started=$SECONDS
  echo
  echo "== mutants: scripts/mutants.sh"
  mkdir -p build/mutants
  set +e
  scripts/mutants.sh 2>&1 | tee build/mutants/run.log
  mutants_rc=${PIPESTATUS[0]}
  set -e
  mutants_line="$(grep -E '^mutants: [0-9]+ killed, [0-9]+ survived, [0-9]+ broken$' build/mutants/run.log | tail -n 1 || true)"
  mutants_killed=0
  mutants_failed=0
  if [[ -n "$mutants_line" ]]; then
    read -r mutants_killed survived broken < <(sed -E 's/mutants: ([0-9]+) killed, ([0-9]+) survived, ([0-9]+) broken/\1 \2 \3/' <<<"$mutants_line")
    mutants_failed=$((survived + broken))
  fi
  if ((mutants_rc != 0 && mutants_failed == 0)); then mutants_failed=1; fi
  total_passed=$((total_passed + mutants_killed))
  total_failed=$((total_failed + mutants_failed))
  recap+=("$(printf '%-12s %4d passed, %d failed  (%d s)' "mutants:" "$mutants_killed" "$mutants_failed" \
    $((SECONDS - step_started)))")
fi

finish
