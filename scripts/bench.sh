#!/usr/bin/env bash
# Build idem's benchmarks in Release (g++ -O2, NDEBUG) and run them: the README's bench command.
#
#   scripts/bench.sh                        run every benchmark, then measure compile cost
#   scripts/bench.sh --filter REGEX         only those matching REGEX (--benchmark_filter);
#                                           compile cost is skipped
#   scripts/bench.sh --json FILE            also write the results to FILE as JSON (with the
#                                           compile cost and the machine added)
#   scripts/bench.sh --no-compile-cost      skip the compile-cost step
#   scripts/bench.sh --compile-cost-only    measure compile cost alone, without building or
#                                           running a benchmark (with --json FILE, FILE holds
#                                           it and the machine: bench/results/compile_cost.json)
#   scripts/bench.sh --max-threads N        run the threaded benchmarks at 1, 2, 4, ... N threads
#                                           (default 4; IDEM_BENCH_MAX_THREADS)
#   scripts/bench.sh --interleave REGEX     run the benchmarks matching REGEX first, their
#                                           repetitions in random order, then the rest in order
#                                           (for benchmarks that fill a fresh table: what the
#                                           run before left in the allocator is then not always
#                                           the same peer's; the rest share big fixtures that a
#                                           random order would rebuild again and again). Given
#                                           more than once, each REGEX is a pass of its own, in
#                                           the order given (so that benchmarks against servers
#                                           do not share a pass with in-memory ones)
#   scripts/bench.sh --processes N          run each --interleave pass N times, each in a
#                                           process of its own, and pool the repetitions of all
#                                           N into each benchmark's median and cv
#                                           (scripts/bench_merge.py): on a shared machine one
#                                           process's ratios can sit apart from another's by
#                                           more than its repetitions vary (default 1)
#   scripts/bench.sh -- --benchmark_repetitions=5 ...   anything else goes to the binary as is
#
# At the end it prints each benchmark of ours beside its peers: the ratio of our time to theirs
# (scripts/bench_ratios.py; medians when repeated), and the compile cost
# (scripts/compile_cost.py). Works from any directory; the build tree is build/bench and is
# reused. The store adapters' benchmarks run against real servers (PostgreSQL, Redis) that this
# script starts on private ports in a temporary folder and stops when it exits, as
# scripts/test.sh does.
set -euo pipefail

usage() { sed -n '2,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

bench_args=()
compile_cost=1
compile_cost_only=0
interleave=()
processes=1
while (($#)); do
  case "$1" in
    --filter) bench_args+=("--benchmark_filter=${2:?--filter needs a regex}"); compile_cost=0; shift ;;
    --filter=*) bench_args+=("--benchmark_filter=${1#--filter=}"); compile_cost=0 ;;
    --no-compile-cost) compile_cost=0 ;;
    --compile-cost-only) compile_cost_only=1 ;;
    --max-threads) export IDEM_BENCH_MAX_THREADS="${2:?--max-threads needs a number}"; shift ;;
    --max-threads=*) export IDEM_BENCH_MAX_THREADS="${1#--max-threads=}" ;;
    --interleave) interleave+=("${2:?--interleave needs a regex}"); shift ;;
    --processes) processes="${2:?--processes needs a number}"; shift ;;
    --processes=*) processes="${1#--processes=}" ;;
    --interleave=*) interleave+=("${1#--interleave=}") ;;
    --json)
      bench_args+=("--benchmark_out=${2:?--json needs a file}" --benchmark_out_format=json)
      shift
      ;;
    --json=*) bench_args+=("--benchmark_out=${1#--json=}" --benchmark_out_format=json) ;;
    -h | --help) usage; exit 0 ;;
    --) shift; bench_args+=("$@"); break ;;
    *) bench_args+=("$1") ;;
  esac
  shift
done

if ! [[ "$processes" =~ ^[1-9][0-9]*$ ]]; then
  echo "scripts/bench.sh: --processes needs a positive whole number, not '$processes'" >&2
  exit 2
fi
if ((processes > 1 && ${#interleave[@]} == 0)); then
  echo "scripts/bench.sh: --processes repeats the --interleave passes; give at least one" >&2
  exit 2
fi
if ((${#interleave[@]})); then
  for arg in "${bench_args[@]}"; do
    if [[ "$arg" == --benchmark_filter=* ]]; then
      echo "scripts/bench.sh: --interleave chooses the benchmarks itself; leave out --filter" >&2
      exit 2
    fi
  done
fi

# A relative --json path means relative to where the user ran us, not to the repo root.
json_out=
for i in "${!bench_args[@]}"; do
  case "${bench_args[$i]}" in
    --benchmark_out=/*) json_out="${bench_args[$i]#--benchmark_out=}" ;;
    --benchmark_out=*)
      json_out="$PWD/${bench_args[$i]#--benchmark_out=}"
      bench_args[$i]="--benchmark_out=$json_out"
      ;;
  esac
done
# The ratio table is read from the JSON results: without --json, from a file of our own.
own_json=
if [[ -z "$json_out" ]]; then
  own_json="$(mktemp --suffix=.json)"
  json_out="$own_json"
  bench_args+=("--benchmark_out=$json_out" --benchmark_out_format=json)
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ((compile_cost_only)); then
  if ((!compile_cost || ${#interleave[@]} || processes > 1)); then
    echo "scripts/bench.sh: --compile-cost-only runs no benchmark; leave out --filter," \
      "--no-compile-cost, --interleave and --processes" >&2
    exit 2
  fi
  source scripts/lib/packages.sh
  idem_install scripts/bench.sh build compilers
  echo "== compile cost"
  compile_json="$(mktemp --suffix=.json)"
  status=0
  python3 scripts/compile_cost.py --json "$compile_json" || status=$?
  if ((status == 0)) && [[ -z "$own_json" ]]; then
    echo '{}' >"$json_out"
    python3 scripts/machine_info.py "$json_out" --compile-cost "$compile_json" || status=$?
  fi
  rm -f "$compile_json" ${own_json:+"$own_json"}
  exit "$status"
fi

if ! compgen -G 'bench/*.cpp' >/dev/null; then
  echo "scripts/bench.sh: no benchmarks yet (bench/*.cpp)" >&2
  exit 1
fi

source scripts/lib/packages.sh
# The store benchmarks join where their adapters are found: every adapter is installed.
configuration=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DIDEM_BUILD_BENCH=ON -DIDEM_BUILD_TESTS=OFF
  -DIDEM_BUILD_EXAMPLES=OFF -DIDEM_SANITIZE=)
idem_configure_uses "${configuration[@]}"
idem_install scripts/bench.sh build adapters servers bench

cmake -S . -B build/bench -G Ninja "${configuration[@]}" $(idem_compiler_launcher)
cmake --build build/bench --target idem_bench

root="$PWD"
source "$root/scripts/lib/servers.sh"
idem_start_servers
if ((${#idem_servers_failed[@]})); then
  echo "scripts/bench.sh: ${idem_servers_failed[*]} did not start; their benchmarks will fail" >&2
fi
# Not exec: the servers are stopped when this script exits.
status=0
if ((${#interleave[@]} == 0)); then
  build/bench/bench/idem_bench "${bench_args[@]}" || status=$?
else
  # A pass per --interleave regex, then the rest (Google Benchmark's '-' filter), their entries
  # joined into one results file in that order.
  # With several processes each keeps its repetitions in its JSON, for bench_merge.py to pool;
  # whether they stay in the results afterwards is what --benchmark_report_aggregates_only says.
  pass_args=()
  keep_repetitions=1
  for arg in "${bench_args[@]}"; do
    case "$arg" in
      --benchmark_out=* | --benchmark_out_format=*) ;;
      --benchmark_report_aggregates_only | --benchmark_report_aggregates_only=true)
        keep_repetitions=0
        if ((processes > 1)); then
          pass_args+=(--benchmark_display_aggregates_only=true)
        else
          pass_args+=("$arg")
        fi
        ;;
      *) pass_args+=("$arg") ;;
    esac
  done
  pass_jsons=()
  for regex in "${interleave[@]}"; do
    for ((process = 1; process <= processes; ++process)); do
      ((processes == 1)) || echo "== pass '$regex', process $process of $processes"
      pass_jsons+=("$(mktemp --suffix=.json)")
      build/bench/bench/idem_bench "${pass_args[@]}" "--benchmark_filter=$regex" \
        --benchmark_enable_random_interleaving=true \
        "--benchmark_out=${pass_jsons[-1]}" --benchmark_out_format=json || status=$?
    done
  done
  every="$(IFS='|'; echo "${interleave[*]}")"
  build/bench/bench/idem_bench "${bench_args[@]}" "--benchmark_filter=-($every)" || status=$?
  python3 scripts/bench_merge.py "$json_out" "$processes" "$keep_repetitions" "${pass_jsons[@]}" ||
    status=$?
  rm -f "${pass_jsons[@]}"
fi

compile_json=
if ((compile_cost)); then
  echo
  echo "== compile cost"
  compile_json="$(mktemp --suffix=.json)"
  python3 scripts/compile_cost.py --json "$compile_json" || status=$?
fi

# The machine the numbers came from goes into the results too, so a report made from them
# (scripts/performance_report.py) can say where they were measured.
if [[ -s "$json_out" ]]; then
  python3 scripts/machine_info.py "$json_out" ${compile_json:+--compile-cost "$compile_json"}
fi
[[ -z "$compile_json" ]] || rm -f "$compile_json"

if [[ -s "$json_out" ]]; then
  echo
  echo "== idem beside its peers (time per operation; ratio = idem / peer, below 1 is faster)"
  python3 scripts/bench_ratios.py "$json_out"
fi
[[ -z "$own_json" ]] || rm -f "$own_json"
exit "$status"
